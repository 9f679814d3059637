"""Reading a run's evidence from its workspace volume after its pods are gone.

The in-pod launcher keeps the run's record under `/data/runs/<run-id>/` on the workspace PVC,
which tau cannot mount from a laptop. A short-lived reader Job mounts that PVC read-only, prints
one file, and is deleted as soon as its log is read. It is a Job (researchers may create Jobs in
their workspace, not bare pods) in the run's own LocalQueue, so Kueue admits it like any workload
and no quota is bypassed; it asks for 10m CPU and 32 MiB, and removes itself after 5 minutes at
the latest (`activeDeadlineSeconds`, `ttlSecondsAfterFinished`) if tau is interrupted.
"""

from __future__ import annotations

import os
import secrets
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TextIO

from taugrid.api import constants as C
from taugrid.api import naming
from taugrid.api.errors import EXIT_PLATFORM, TauError

if TYPE_CHECKING:
    from taugrid.api.evidence import RunRecord
    from taugrid.kube.client import KubeAPI

IMAGE_ENV = "TAU_READER_IMAGE"  # default: the run's own image (pullable there, has a shell)
LABEL_READS: str = f"{C.GROUP}/reads-run"
CONTAINER = "reader"
MISSING_EXIT = 3
DEADLINE_S = 300
# sh -c SCRIPT tau-read PATH: print the file, or say it is not there and exit 3
SCRIPT = (
    'if [ -f "$1" ]; then exec cat "$1"; fi; '
    f'echo "tau-read: $1 is not on the workspace volume" >&2; exit {MISSING_EXIT}'
)


def reader_job(rec: RunRecord, namespace: str, queue: str | None, path: str,
               image: str | None = None, suffix: str | None = None) -> dict[str, Any]:  # fmt: skip
    """The Job that prints `path` from the run's workspace volume (pure: no I/O)."""
    suffix = suffix or secrets.token_hex(3)
    name = f"{rec.run_id[:46].rstrip('-')}-read-{suffix}"
    labels = {LABEL_READS: rec.run_id, C.LABEL_MANAGED_BY: "tau",
              C.LABEL_WORKSPACE: rec.workspace}  # fmt: skip
    job_labels = {**labels, **({C.KUEUE_QUEUE_LABEL: queue} if queue else {})}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": namespace, "labels": job_labels},
        "spec": {
            "suspend": bool(queue),  # Kueue admits it
            "backoffLimit": 0,
            "activeDeadlineSeconds": DEADLINE_S,
            "ttlSecondsAfterFinished": DEADLINE_S,
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "restartPolicy": "Never",
                    "serviceAccountName": naming.RUN_SERVICE_ACCOUNT,
                    "automountServiceAccountToken": False,
                    "containers": [
                        {
                            "name": CONTAINER,
                            "image": image or os.environ.get(IMAGE_ENV) or rec.image,
                            "command": ["sh", "-c", SCRIPT, "tau-read", path],
                            "resources": {
                                "requests": {"cpu": "10m", "memory": "32Mi"},
                                "limits": {"memory": "128Mi"},
                            },
                            "volumeMounts": [
                                {"name": "data", "mountPath": "/data", "readOnly": True}
                            ],
                        }
                    ],
                    "volumes": [
                        {
                            "name": "data",
                            "persistentVolumeClaim": {
                                "claimName": naming.workspace_pvc(rec.workspace),
                                "readOnly": True,
                            },
                        }
                    ],
                },
            },
        },
    }


def started(pod: dict[str, Any]) -> tuple[bool, int | None, str | None]:
    """(its container started, its exit code if it ended, why it cannot start) for a pod."""
    status = pod.get("status") or {}
    for cs in status.get("containerStatuses") or []:
        state = cs.get("state") or {}
        if "terminated" in state:
            return True, int(state["terminated"].get("exitCode", 0)), None
        if "running" in state:
            return True, None, None
        waiting = (state.get("waiting") or {}).get("reason")
        if waiting in ("ErrImagePull", "ImagePullBackOff", "CreateContainerConfigError",
                       "InvalidImageName"):  # fmt: skip
            return False, None, f"its container cannot start ({waiting})"
    if status.get("phase") in ("Succeeded", "Failed"):
        return True, 0 if status["phase"] == "Succeeded" else 1, None
    return status.get("phase") == "Running", None, None


def read_file(kube: KubeAPI, rec: RunRecord, namespace: str, queue: str | None, path: str,
              out: TextIO, say: Callable[[str], None], timeout_s: float = 120.0) -> int:  # fmt: skip
    """Print `path` from the run's workspace volume through a reader Job; the number of lines.

    TauError (exit 4) when the Job cannot run here, does not start in `timeout_s`, the file is not
    on the volume, or the cluster does not serve its log. The Job is deleted in every case."""
    job = reader_job(rec, namespace, queue, path)
    name = job["metadata"]["name"]
    kube.apply(job)
    say(f"reading {path} from the workspace volume (reader job {name} in {namespace})")
    try:
        pod, code = _wait(kube, name, namespace, queue, timeout_s)
        n = 0
        try:
            for line in kube.log_lines(pod, namespace, CONTAINER, follow=code is None):
                n += 1
                out.write(line if line.endswith("\n") else line + "\n")
        except TauError as e:
            raise TauError(
                f"the reader job {name} ran, but the cluster does not serve its log ({e.message})",
                exit_code=EXIT_PLATFORM,
            ) from None
        if code is None:
            code = _exit_code(kube, pod, namespace)
        if code == MISSING_EXIT:
            raise TauError(f"{path} is not on the workspace volume of {rec.workspace}",
                           exit_code=EXIT_PLATFORM)  # fmt: skip
        out.flush()
        return n
    finally:
        kube.delete("Job", name, namespace)


def _wait(kube: KubeAPI, job: str, namespace: str, queue: str | None,
          timeout_s: float) -> tuple[str, int | None]:  # fmt: skip
    """The reader's pod once its container started (and its exit code if it already ended)."""
    deadline = time.monotonic() + timeout_s
    last: dict[str, Any] | None = None
    while time.monotonic() < deadline:
        pods = kube.list("Pod", namespace, {"job-name": job})
        if pods:
            last = pods[-1]
            ok, code, cannot = started(last)
            if cannot:
                raise TauError(f"the reader job {job} cannot run: {cannot}",
                               exit_code=EXIT_PLATFORM)  # fmt: skip
            if ok:
                return str(last["metadata"]["name"]), code
        time.sleep(0.5)
    why = "its pod was not scheduled"
    if last is None:
        why = f"Kueue did not admit it (queue {queue})" if queue else "no pod was created"
    else:
        for c in (last.get("status") or {}).get("conditions") or []:
            if c.get("type") == "PodScheduled" and c.get("message"):
                why = f"its pod was not scheduled: {c['message']}"
    raise TauError(f"the reader job {job} did not start within {timeout_s:.0f} s: {why}",
                   exit_code=EXIT_PLATFORM)  # fmt: skip


def _exit_code(kube: KubeAPI, pod: str, namespace: str) -> int | None:
    got = kube.get("Pod", pod, namespace)
    return started(got)[1] if got else None
