"""Names: run ids, workload-kind inference, Kubernetes name rules and the names the platform
gives per-workspace objects. Each is spelled here once. Pure and import-light (stdlib only):
the run launcher and the models use the same functions, so both always agree.
"""

from __future__ import annotations

import re
import secrets
import string

from taugrid.api import constants as C

_ALPHABET = string.ascii_lowercase + string.digits
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")  # RFC 1123 label
DNS_1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")  # RFC 1035: starts with a letter
RUN_ID_LIMIT = C.KUBERAY_NAME_LIMIT  # RayJob names (KubeRay validation)


def is_dns_label(value: str, limit: int = C.K8S_NAME_LIMIT) -> bool:
    return bool(DNS_LABEL.match(value)) and len(value) <= limit


def dns_label(v: str) -> str:
    """A pydantic field validator: `v` when it is a DNS label, else why not."""
    if not is_dns_label(v):
        raise ValueError("must be a DNS label: lowercase alphanumerics and '-', at most 63")
    return v


def is_run_id(value: str) -> bool:
    return bool(DNS_1035.match(value)) and len(value) <= RUN_ID_LIMIT


RUN_REF = re.compile(r"^[a-z0-9][-a-z0-9]*$")  # an id, the start of one, or a run's name


def run_ref_problem(ref: str) -> str | None:
    """Why `ref` (what a user typed for a run: its id, a unique prefix of one, or a run name)
    cannot name a run, or None. Refused before any lookup: a path (`../x`) would reach outside
    the runs, and an empty one would match every run."""
    if not ref:
        return "is empty"
    if len(ref) > C.K8S_NAME_LIMIT:
        return f"is longer than any run id ({len(ref)} characters; at most {RUN_ID_LIMIT})"
    if not RUN_REF.match(ref):
        return (
            "is not a run id, a prefix of one or a run name (lowercase letters, digits and '-', "
            "a letter or digit first)"
        )
    return None


def run_id_stem(prefix: str | None, name: str) -> str:
    return f"{prefix}-{name}" if prefix else name


def new_run_id(stem: str) -> str:
    """`<stem>-<5 random chars>`: unique per submission, DNS-1035, within KubeRay's limit."""
    n = secrets.randbelow(len(_ALPHABET) ** C.RUN_ID_SUFFIX_LEN)  # one draw, uniform
    chars = []
    for _ in range(C.RUN_ID_SUFFIX_LEN):
        n, i = divmod(n, len(_ALPHABET))
        chars.append(_ALPHABET[i])
    suffix = "".join(chars)
    run_id = f"{stem}-{suffix}"
    if len(run_id) > RUN_ID_LIMIT:  # guarded by manifest validation; never silently cut
        raise ValueError(f"run id {run_id!r} is longer than {RUN_ID_LIMIT} characters")
    return run_id


def max_name_length(prefix: str | None) -> int:
    """The longest tau.yaml `name` whose run ids stay within the limit."""
    used = (len(prefix) + 1) if prefix else 0
    return RUN_ID_LIMIT - C.RUN_ID_SUFFIX_LEN - 1 - used


def infer_workload_kind(explicit: str | None, gpus: int, workers: int) -> str:
    """Explicit kind, else TauGrid's inference: CPU-only or multi-worker -> rayjob, else job."""
    if explicit:
        return explicit
    if gpus == 0 or workers > 1:
        return "rayjob"
    return "job"


# --- per-workspace objects the platform creates (components/) and runs use (runs/) ----------
RUN_SERVICE_ACCOUNT = "tau-run"  # the identity of a run's pods in its workspace namespace
FILES_SERVICE = "tau-files"  # the workspace volume's read-only file server (runlib/tau_files.py)
FILES_PORT = 8080
FILES_MODULES = ("tau_files", "tau_evidence", "tau_run")  # its code, carried in its ConfigMap


def workspace_pvc(workspace: str) -> str:
    """The workspace's /data PersistentVolumeClaim."""
    return f"{workspace}-data"


GRANT_COHORT_PREFIX = "tau-grants-"


def grant_cohort(cluster_queue: str) -> str:
    """The Kueue Cohort that holds a ClusterQueue's quota grants. Pulumi declares it (its parent
    is the queue's declared cohort) and puts the queue in it; the controller owns its quota
    (`spec.resourceGroups`), so a grant and `pulumi up` never write the same field."""
    return f"{GRANT_COHORT_PREFIX}{cluster_queue}"


def ranks_service(run_id: str) -> str:
    """A torchrun job's headless Service (a Service name must start with a letter)."""
    return run_id if run_id[:1].isalpha() else f"r{run_id}"


def code_configmap(run_id: str) -> str:
    """The immutable ConfigMap that carries a run's code."""
    return f"{run_id}-code"


def helpers_configmap(digest: str) -> str:
    """The immutable ConfigMap that holds TauGrid's helper modules once per namespace, named by
    their content (`codebundle.helpers_digest`): every run of the same TauGrid shares it."""
    return f"tau-helpers-{digest}"


def name_problem(
    value: str, *, first_letter: bool = True, limit: int = C.K8S_NAME_LIMIT
) -> str | None:
    """What is wrong with a Kubernetes-style name, in words (None: nothing), with a fixed name."""
    rule = DNS_1035 if first_letter else DNS_LABEL
    if rule.match(value) and len(value) <= limit:
        return None
    wrong: list[str] = []
    upper = sorted({c for c in value if c.isupper()})
    if upper:
        wrong.append(f"uppercase letters ({', '.join(upper)})")
    others = sorted(
        {c for c in value if not (c.islower() or c.isdigit() or c == "-") and not c.isupper()}
    )
    if others:
        shown = ", ".join(repr(c) for c in others)
        wrong.append(f"the character{'s' if len(others) > 1 else ''} {shown}")
    if value[:1] == "-" or value[-1:] == "-":
        wrong.append("a '-' at the start or end")
    if first_letter and value[:1].isdigit():
        wrong.append("a digit first")
    if len(value) > limit:
        wrong.append(f"{len(value)} characters (at most {limit})")
    if not value:
        wrong.append("nothing in it")
    allowed = "lowercase letters, digits and '-'" + (
        ", starting with a letter" if first_letter else ""
    )
    fixed = suggest_name(value, first_letter=first_letter, limit=limit)
    hint = f"; try {fixed!r}" if fixed and fixed != value else ""
    return f"has {' and '.join(wrong) or 'a bad shape'}: use {allowed}{hint}"


def suggest_name(value: str, *, first_letter: bool = True, limit: int = C.K8S_NAME_LIMIT) -> str:
    """The closest valid name: lowercase, other characters to '-', no edge or double '-'."""
    out = "".join(c if (c.isascii() and c.isalnum()) else "-" for c in value.lower())
    while "--" in out:
        out = out.replace("--", "-")
    out = out.strip("-")
    if first_letter and out[:1].isdigit():
        out = f"run-{out}"
    return out[:limit].rstrip("-")


def owner_reference(
    kind: str, name: str, uid: object, api_version: str = C.API_VERSION
) -> dict[str, object]:
    """What a TauGrid object (a TauRun, a TauService) writes into the objects it owns, so the
    garbage collector takes them with it (and a foreground delete waits for them). `uid`: the
    owner's, as the API server gave it (a Pulumi output in a run's stack)."""
    return {
        "apiVersion": api_version,
        "kind": kind,
        "name": name,
        "uid": uid,
        "blockOwnerDeletion": True,
    }
