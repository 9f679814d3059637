"""Quota requests from the user's side: ask, list, decide (tau quota ...).

A request is a TauQuotaRequest in the workspace's namespace (researchers may create them). A
decision is written into its status subresource (field manager `tau-quota-admin`), which only
platform admins' RBAC grants: the API server refuses anybody else (403), whatever the CLI does.
The controller does the rest (grants, expiry); see taugrid.controller.quota.
"""

from __future__ import annotations

import secrets
from typing import TYPE_CHECKING, Any, Literal

from taugrid.api import constants as C
from taugrid.api.crds import TauQuotaRequestSpec, TauQuotaRequestStatus, read_status
from taugrid.api.errors import EXIT_PLATFORM, EXIT_USAGE, TauError
from taugrid.api.kubetime import k8s_time
from taugrid.api.profiles import ProfileSnapshot, WorkloadProfile, WorkspaceRef
from taugrid.api.quantity import QuantityError, duration
from taugrid.kube.client import Forbidden, KubeAPI

if TYPE_CHECKING:
    from taugrid.kube.discovery import Discovery

DECIDER = "tau-quota-admin"  # field manager of decisions (status.decision)


def whoami(kube: KubeAPI) -> str:
    return kube.whoami()


def pick_profile(snap: ProfileSnapshot, ws: WorkspaceRef, name: str | None) -> WorkloadProfile:
    gpu = [p for p in snap.profiles if p.gpusPerWorker > 0 and p.applies_to(ws.name)]
    if name is not None:
        p = snap.profile(name)
        if p is None or p not in gpu:
            raise TauError(
                f"no GPU profile {name!r} for workspace {ws.name}",
                exit_code=EXIT_USAGE,
                hint="GPU profiles: " + (", ".join(q.name for q in gpu) or "none"),
            )
        return p
    if len(gpu) == 1:
        return gpu[0]
    raise TauError(
        f"workspace {ws.name} may use {len(gpu)} GPU profiles: say which with --profile",
        exit_code=EXIT_USAGE,
        hint="GPU profiles: " + (", ".join(q.name for q in gpu) or "none"),
    )


def new_request(
    snap: ProfileSnapshot,
    ws: WorkspaceRef,
    profile: WorkloadProfile,
    gpus: int,
    for_: str,
    reason: str,
    who: str,
) -> dict[str, Any]:
    """The TauQuotaRequest object (validated like the API server would)."""
    if gpus < 1:
        raise TauError(f"--gpus {gpus}: ask for at least 1", exit_code=EXIT_USAGE)
    try:
        duration(for_)
    except QuantityError as e:
        raise TauError(f"--for: {e}", exit_code=EXIT_USAGE) from None
    if not reason.strip():
        raise TauError("--reason: say why (the platform team decides on it)", exit_code=EXIT_USAGE)
    if profile.maxWorkers is not None and gpus > profile.maxWorkers * profile.gpusPerWorker:
        raise TauError(
            f"--gpus {gpus}: the {profile.name} pool has at most "
            f"{profile.maxWorkers * profile.gpusPerWorker} GPUs",
            exit_code=EXIT_USAGE,
        )
    spec = TauQuotaRequestSpec(
        workspace=ws.name,
        flavor=profile.flavor,
        resource=profile.gpuResource,
        requested=gpus,
        reason=reason.strip(),
        duration=for_.strip(),
        profile=profile.name,
        clusterQueue=profile.clusterQueue,
        requestedBy=who,
    )
    name = f"{profile.name}-{gpus}gpu-{secrets.token_hex(3)}"[:63]
    return {
        "apiVersion": C.API_VERSION,
        "kind": "TauQuotaRequest",
        "metadata": {
            "name": name,
            "namespace": ws.namespace,
            "labels": {C.LABEL_WORKSPACE: ws.name, C.LABEL_PROFILE: profile.name},
        },
        "spec": spec.model_dump(mode="json", exclude_none=True),
    }


def submit(kube: KubeAPI, obj: dict[str, Any]) -> dict[str, Any]:
    ns = obj["metadata"]["namespace"]
    try:
        return kube.apply(obj)
    except Forbidden:
        raise TauError(
            f"forbidden: you may not ask for quota in namespace {ns}",
            exit_code=EXIT_PLATFORM,
            hint="tau workspaces lists where you may",
        ) from None


def namespaces(disc: Discovery, workspace: str | None, all_: bool) -> list[str] | None:
    """Where to look for requests: one workspace; cluster-wide (None) for who may list them
    there (admins; anybody else falls back to their own workspaces); else the user's."""
    if workspace is not None:
        return [disc.workspace(workspace).namespace]
    if all_ and disc.kube.can("list", "TauQuotaRequest", ""):
        return None
    return [w.namespace for w in disc.usable_workspaces()]


def list_requests(kube: KubeAPI, namespaces: list[str] | None) -> list[dict[str, Any]]:
    """All requests (namespaces None: cluster-wide), newest first."""
    items: list[dict[str, Any]] = []
    for ns in namespaces if namespaces is not None else [None]:
        items += kube.list("TauQuotaRequest", ns)
    items.sort(key=lambda o: str(o["metadata"].get("creationTimestamp")), reverse=True)
    return items


def row(obj: dict[str, Any]) -> dict[str, Any]:
    spec = TauQuotaRequestSpec.model_validate(obj.get("spec") or {})
    st = read_status(TauQuotaRequestStatus, obj.get("status"))[0] or TauQuotaRequestStatus()
    d = st.decision
    return {
        "name": obj["metadata"]["name"],
        "namespace": obj["metadata"]["namespace"],
        "workspace": spec.workspace,
        "requested": spec.requested,
        "resource": spec.resource,
        "flavor": spec.flavor,
        "for": spec.duration,
        "reason": spec.reason,
        "requestedBy": spec.requestedBy,
        "phase": st.phase or "Pending",
        "granted": st.granted,
        "decidedBy": d.by if d else None,
        "expiresAt": st.expiresAt,
        "message": st.message or ("not seen by the controller yet" if st.phase is None else ""),
        "created": obj["metadata"].get("creationTimestamp"),
    }


def find(kube: KubeAPI, ref: str, namespaces: list[str] | None) -> dict[str, Any]:
    """A request by `namespace/name` or by name (unique among those listed)."""
    if "/" in ref:
        ns, name = ref.split("/", 1)
        got = kube.get("TauQuotaRequest", name, ns)
        if got is None:
            raise TauError(f"no quota request {ref}", exit_code=EXIT_USAGE)
        return got
    hits = [o for o in list_requests(kube, namespaces) if o["metadata"]["name"] == ref]
    if not hits:
        raise TauError(f"no quota request {ref!r}", exit_code=EXIT_USAGE, hint="tau quota list")
    if len(hits) > 1:
        where = ", ".join(o["metadata"]["namespace"] for o in hits)
        raise TauError(
            f"{ref!r} is in several namespaces ({where}): write namespace/name",
            exit_code=EXIT_USAGE,
        )
    return hits[0]


def decide(
    kube: KubeAPI, obj: dict[str, Any], verdict: Literal["Approved", "Denied"], note: str, who: str
) -> dict[str, Any]:
    """Write the decision into the request's status (RBAC: quotarequests/status)."""
    meta = obj["metadata"]
    st = obj.get("status") or {}
    if st.get("phase") in ("Expired", "Denied"):
        raise TauError(
            f"quota request {meta['name']} is {st['phase']}: nothing to decide",
            exit_code=EXIT_USAGE,
        )
    body = {
        "apiVersion": C.API_VERSION,
        "kind": "TauQuotaRequest",
        "metadata": {"name": meta["name"], "namespace": meta["namespace"]},
        "status": {
            "decision": {
                "verdict": verdict,
                "by": who,
                "note": note,
                "at": k8s_time(),
                "generation": int(meta.get("generation") or 1),
            }
        },
    }
    try:
        return kube.apply_status(body, DECIDER)
    except Forbidden:
        raise TauError(
            f"forbidden: only platform admins may {'approve' if verdict == 'Approved' else 'deny'} "
            "quota requests (RBAC on quotarequests/status)",
            exit_code=EXIT_PLATFORM,
        ) from None
