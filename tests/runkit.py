"""One cluster run's objects as the controller's watches see them (the run kq-abc12 of
workspace research): its TauRun, Job, Kueue Workload and pod, for the recorder's and the GPU-use
tests."""

from __future__ import annotations

from typing import Any


def taurun(status: dict[str, Any] | None = None, gpus: int = 1) -> dict[str, Any]:
    return {
        "metadata": {
            "name": "kq-abc12",
            "namespace": "research",
            "creationTimestamp": "2026-12-01T12:00:00Z",
        },
        "spec": {
            "runId": "kq-abc12",
            "runName": "kq",
            "workspace": "research",
            "profile": "a100x1",
            "workloadKind": "job",
            "configHash": "h",
            "gpusPerWorker": gpus,
            "manifest": {"resilience": {"max_retries": 2, "retry_on": ["NodeFailure"]}},
        },
        **({"status": status} if status else {}),
    }


def job(failed: bool = False, done: bool = False) -> dict[str, Any]:
    conds = (
        [
            {
                "type": "Failed",
                "status": "True",
                "reason": "BackoffLimitExceeded",
                "message": "pod failed",
            }
        ]
        if failed
        else []
    )
    conds += [{"type": "Complete", "status": "True"}] if done else []
    return {
        "metadata": {"name": "kq-abc12"},
        "spec": {"suspend": False},
        "status": {"startTime": "2026-12-01T12:00:05Z", "conditions": conds},
    }


def kueue() -> dict[str, Any]:
    return {
        "metadata": {"name": "job-kq-abc12-x"},
        "spec": {"queueName": "gpu"},
        "status": {
            "admission": {"clusterQueue": "gpu"},
            "conditions": [
                {
                    "type": "QuotaReserved",
                    "status": "True",
                    "lastTransitionTime": "2026-12-01T12:00:02Z",
                    "message": "Quota reserved",
                },
                {
                    "type": "Admitted",
                    "status": "True",
                    "lastTransitionTime": "2026-12-01T12:00:03Z",
                    "message": "admitted",
                },
            ],
        },
    }


def pod(node: str = "a100x1-0", phase: str = "Running") -> dict[str, Any]:
    return {
        "metadata": {"name": "kq-abc12-p", "labels": {"tau.azure.com/run-id": "kq-abc12"}},
        "spec": {"nodeName": node},
        "status": {
            "phase": phase,
            "conditions": [
                {
                    "type": "PodScheduled",
                    "status": "True",
                    "lastTransitionTime": "2026-12-01T12:00:04Z",
                }
            ],
        },
    }


def dispatched_status(run_id: str, clusters: list[str]) -> Any:
    """A MultiKueue manager's run as `tau run list` and the portal get it: running on the last
    of `clusters` (each move an attempt), or queued before any."""
    from taugrid.api.vocabulary import Phase, RunStatus

    return RunStatus(
        run_id=run_id,
        name="r",
        phase=Phase.Running if clusters else Phase.Queued,
        target="kube",
        workload_kind="job",
        attempt=len(clusters[:-1]),
        created_at="2026-12-05T17:00:00+00:00",
        finished_at=None,
        signals=[],
        summary="running" if clusters else "waiting in the queue",
        clusters=clusters,
    )
