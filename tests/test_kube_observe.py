"""The kube backend's status, without a cluster: API calls do not grow with the number of runs,
and the cluster facts become the right signals (a fake client records every call)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from taugrid.api import constants as C
from taugrid.api.evidence import KubeHandle, RunRecord
from taugrid.runs import status
from taugrid.runs.backends.kube.backend import KubeBackend
from taugrid.runs.evidence import RunDir


class FakeKube:
    """Answers LISTs from canned objects and counts the calls."""

    def __init__(self, objects: dict[str, list[dict[str, Any]]]) -> None:
        self.objects = objects
        self.calls: list[tuple[str, str | None]] = []

    def list(
        self, kind: str, namespace: str | None = None, labels: Any = None
    ) -> list[dict[str, Any]]:
        self.calls.append((kind, namespace))
        return self.objects.get(kind, [])


def record(run_id: str, kind: str = "rayjob") -> RunRecord:
    return RunRecord(
        run_id=run_id, name="r", workspace="research", profile="a100x1", workload_kind=kind,
        handle=KubeHandle(namespace="research"), submitter="a", code_folder="/x",
        code_revision="u", code_digest="d", config_hash="h", image="i", entrypoint="t.py",
        created_at="2026-12-01T00:00:00+00:00", gpus_per_worker=1,
    )  # fmt: skip


def cluster_objects(ids: list[str]) -> dict[str, list[dict[str, Any]]]:
    def meta(name: str, **extra: Any) -> dict[str, Any]:
        return {"name": name, "namespace": "research", **extra}

    workloads, kueue, pods = [], [], []
    for i, rid in enumerate(ids):
        workloads.append({"metadata": meta(rid), "spec": {"suspend": i % 2 == 1}, "status": {}})
        conds = ([{"type": "QuotaReserved", "status": "True"}, {"type": "Admitted", "status": "True"}]
                 if i % 2 == 0 else
                 [{"type": "QuotaReserved", "status": "False", "reason": "Pending",
                   "message": "insufficient unused quota for nvidia.com/gpu in flavor a100x1, 1 more needed"}])  # fmt: skip
        kueue.append({"metadata": meta(f"rayjob-{rid}", ownerReferences=[{"name": rid}]),
                      "spec": {"queueName": "gpu"}, "status": {"conditions": conds}})  # fmt: skip
        if i % 2 == 0:
            pods.append({"metadata": meta(f"{rid}-worker", labels={C.LABEL_RUN_ID: rid}),
                         "spec": {"nodeName": "a100x1-0"}, "status": {"phase": "Running"}})  # fmt: skip
    nodes = [{"metadata": {"name": "a100x1-0"}, "status": {"conditions": [
        {"type": C.XID_CONDITION, "status": "True", "reason": "Xid79"}]}, "spec": {}}]  # fmt: skip
    return {"TauRun": [{"metadata": meta(r)} for r in ids], "RayJob": workloads,
            "Workload": kueue, "Pod": pods, "Event": [], "Node": nodes}  # fmt: skip


def observe(tmp_path: Path, n: int) -> tuple[FakeKube, list[Any]]:
    ids = [f"run-{i:05d}" for i in range(n)]
    dirs = []
    for rid in ids:
        rd = RunDir(tmp_path / rid)
        rd.path.mkdir(parents=True)
        rd.create(record(rid))
        dirs.append(rd)
    fake = FakeKube(cluster_objects(ids))
    backend = KubeBackend()
    backend._kube = fake  # type: ignore[assignment]
    return fake, backend.observe(dirs)


def test_api_calls_do_not_grow_with_the_number_of_runs(tmp_path: Path) -> None:
    one, _ = observe(tmp_path / "one", 1)
    hundred, obs = observe(tmp_path / "hundred", 100)
    assert len(obs) == 100
    assert sorted(one.calls) == sorted(hundred.calls)  # the same LISTs, once each
    assert len(hundred.calls) == len(set(hundred.calls))


def test_cluster_facts_become_signals(tmp_path: Path) -> None:
    _, obs = observe(tmp_path, 2)
    admitted, waiting = (status.compute(o) for o in obs)
    sig = {s.name: s for s in admitted.signals}
    assert admitted.phase == "Running" and sig["Admitted"].state == "true"
    assert sig["Scheduled"].state == "true" and "a100x1-0" in sig["Scheduled"].reason
    assert (
        sig["GPUHealthy"].state == "false"
        and "GPUXidError=True (Xid79)" in sig["GPUHealthy"].reason
    )
    wsig = {s.name: s for s in waiting.signals}
    assert waiting.phase == "Queued" and wsig["Admitted"].state == "pending"
    assert "waiting for quota in queue gpu" in wsig["Admitted"].reason
    assert "1 more needed" in waiting.summary


@pytest.mark.parametrize(
    ("conds", "state", "words"),
    [
        ([{"type": "Admitted", "status": "True"}, {"type": "Evicted", "status": "True",
          "reason": "PodsReadyTimeout", "message": "pods not ready in 30m"}], "false", "Evicted: PodsReadyTimeout"),
        # the last condition is not the state: Admitted=True listed first still counts
        ([{"type": "Admitted", "status": "True"}, {"type": "QuotaReserved", "status": "True"}], "true", "admitted"),
        ([], "pending", "waiting for admission"),
    ],
)  # fmt: skip
def test_admitted_reads_conditions_by_type(
    conds: list[dict[str, str]], state: str, words: str
) -> None:
    from taugrid.runs.status import ClusterFacts

    facts = ClusterFacts(taurun=True, workload=True, kueue=conds, queue="gpu")
    s = status._admitted_cluster(facts)
    assert s.state == state and words in s.reason
