"""A cluster answered by the shared fake (`taugrid.kube.fake.FakeKube`) for the kube backend's
unit tests: the TauCluster of the example profiles, a prepared run of the batch-job example,
the local record of a cluster run, and a set of runs' objects observed through the backend."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import yaml
from conftest import EXAMPLES, PROFILES

from taugrid.api import constants as C
from taugrid.api.evidence import KubeHandle, RunRecord
from taugrid.kube.fake import FakeKube
from taugrid.runs import load
from taugrid.runs.backends.kube.backend import KubeBackend
from taugrid.runs.evidence import RunDir
from taugrid.runs.prepare import PreparedRun, RunRequest


def tau_cluster() -> dict[str, Any]:
    snap = yaml.safe_load(PROFILES.read_text())
    return {
        "metadata": {"name": "cluster"},
        "spec": {
            "stack": snap["cluster"],
            "defaultWorkspace": snap["defaultWorkspace"],
            "workspaces": snap["workspaces"],
            "workloadProfiles": snap["profiles"],
        },
    }


def prepared(backend: KubeBackend, tmp_path: Path, **kw: Any) -> PreparedRun:
    project = tmp_path / "project"
    if not project.exists():
        shutil.copytree(EXAMPLES / "batch-job", project)
    loaded = load.load_manifest(str(project))
    return backend.prepare(RunRequest(loaded, workspace="research", **kw))


def record(run_id: str, kind: str = "rayjob", queue: str | None = None) -> RunRecord:
    return RunRecord(
        run_id=run_id,
        name="r",
        workspace="research",
        profile="a100x1",
        workload_kind=kind,
        handle=KubeHandle(namespace="research", queue=queue),
        submitter="a",
        code_folder="/x",
        code_revision="u",
        code_digest="d",
        config_hash="h",
        image="i",
        entrypoint="t.py",
        created_at="2026-12-01T00:00:00+00:00",
        gpus_per_worker=1,
    )


def taurun_spec(rid: str, **kw: Any) -> dict[str, Any]:
    """A TauRun's spec as the API server keeps it (written from its model, as tau writes it)."""
    from taugrid.api.crds import TauRunSpec

    base: dict[str, Any] = {
        "runId": rid,
        "runName": rid,
        "workspace": "research",
        "profile": "a100x1",
        "workloadKind": "rayjob",
        "configHash": "h",
    }
    return TauRunSpec.model_validate({**base, **kw}).model_dump(mode="json", exclude_none=True)


def cluster_objects(ids: list[str], first_waits: bool = False) -> dict[str, list[dict[str, Any]]]:
    """Every other run admitted and running (from the first, or from the second)."""
    flip = 1 if first_waits else 0

    def meta(name: str, **extra: Any) -> dict[str, Any]:
        return {"name": name, "namespace": "research", **extra}

    workloads, kueue, pods = [], [], []
    for i, rid in enumerate(ids):
        admitted = (i + flip) % 2 == 0
        workloads.append({"metadata": meta(rid), "spec": {"suspend": not admitted}, "status": {}})
        conds = (
            [{"type": "QuotaReserved", "status": "True"}, {"type": "Admitted", "status": "True"}]
            if admitted
            else [
                {
                    "type": "QuotaReserved",
                    "status": "False",
                    "reason": "Pending",
                    "message": "insufficient unused quota for nvidia.com/gpu in flavor a100x1, 1 "
                    "more needed",
                }
            ]
        )
        kueue.append(
            {
                "metadata": meta(f"rayjob-{rid}", ownerReferences=[{"name": rid}]),
                "spec": {"queueName": "gpu"},
                "status": {"conditions": conds},
            }
        )
        if admitted:
            pods.append(
                {
                    "metadata": meta(f"{rid}-worker", labels={C.LABEL_RUN_ID: rid}),
                    "spec": {"nodeName": "a100x1-0"},
                    "status": {"phase": "Running"},
                }
            )
    nodes = [
        {
            "metadata": {"name": "a100x1-0"},
            "status": {
                "conditions": [{"type": C.XID_CONDITION, "status": "True", "reason": "Xid79"}]
            },
            "spec": {},
        }
    ]
    return {
        "TauRun": [{"metadata": meta(r), "spec": taurun_spec(r)} for r in ids],
        "RayJob": workloads,
        "Workload": kueue,
        "Pod": pods,
        "Event": [],
        "Node": nodes,
    }


def observe_with(
    tmp_path: Path, ids: list[str], objects: dict[str, Any], queue: str | None = None
) -> tuple[FakeKube, list[Any]]:
    """Local records of `ids` (naming `queue`) and a kube backend whose client answers from
    `objects`."""
    dirs = []
    for rid in ids:
        rd = RunDir(tmp_path / rid)
        rd.path.mkdir(parents=True)
        rd.create(record(rid, queue=queue))
        dirs.append(rd)
    pending = objects.pop("Pending", None)
    fake = FakeKube(objects)
    if pending is not None:
        fake.pending_items = {("research", "gpu"): pending}
    return fake, KubeBackend(kube=fake).observe(dirs)


def cluster_api(monkeypatch: Any) -> Any:
    """`taugrid.client.cluster` answered by a fake: returns `make(objects) -> FakeKube`, each
    call the cluster the next call of the API reads."""
    from taugrid.client import cluster
    from taugrid.kube.discovery import Discovery

    box: dict[str, FakeKube] = {}

    def make(objs: Any) -> FakeKube:
        box["kube"] = FakeKube(objs)
        return box["kube"]

    monkeypatch.setattr(cluster, "discovery", lambda context=None: Discovery(box["kube"]))
    return make
