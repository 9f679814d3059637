"""Run naming and workload-kind inference: pure and import-light (stdlib only).

`tau run` uses these before the full models are loaded (to submit early, see
cli/prelaunch.py) and the models use the same functions, so both always agree.
"""

from __future__ import annotations

import secrets
import string

from taugrid.api import constants as C

_ALPHABET = string.ascii_lowercase + string.digits


def run_id_stem(prefix: str | None, name: str) -> str:
    return f"{prefix}-{name}" if prefix else name


def new_run_id(stem: str) -> str:
    """`<stem>-<5 random chars>`: unique per submission, DNS-1035, within KubeRay's 47."""
    suffix = "".join(secrets.choice(_ALPHABET) for _ in range(C.RUN_ID_SUFFIX_LEN))
    run_id = f"{stem}-{suffix}"
    if len(run_id) > C.KUBERAY_NAME_LIMIT:  # guarded by manifest validation; never silently cut
        raise ValueError(f"run id {run_id!r} is longer than {C.KUBERAY_NAME_LIMIT} characters")
    return run_id


def infer_workload_kind(explicit: str | None, gpus: int, workers: int) -> str:
    """Explicit kind, else TauGrid's inference: CPU-only or multi-worker -> rayjob, else job."""
    if explicit:
        return explicit
    if gpus == 0 or workers > 1:
        return "rayjob"
    return "job"
