"""The active tier of GPU node validation (#41): each check a Job pinned to its node in the
validation queue (valid against Kubernetes' and Kueue's schemas), its result read from the pod's
termination message (a bandwidth under the floor, a failed diagnostic, no result), a check never
admitted named with Kueue's reason and its Job deleted, a busy node left alone, and the
controller's turn: Jobs first, findings once they end, a failed node not retried at every pass."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from k8s_schemas import crd_errors, k8s_errors

from taugrid.api import constants as C
from taugrid.api import gpuactive as A
from taugrid.api import gpuhealth as G
from taugrid.client import activecheck
from taugrid.controller.activetier import RETRY_S, ActiveTier
from taugrid.kube.fake import FakeKube
from taugrid.sandbox import dcgmsim as SIM

NOT_ADMITTED = (
    "couldn't assign flavors to pod set main: insufficient unused quota for nvidia.com/gpu in "
    "flavor a100x2, 2 more needed"
)
T0 = datetime(2026, 12, 1, 12, 0, 0, tzinfo=UTC)
POOL2 = G.PoolDeclaration(
    name="a100x2", vmSize="Standard_NC48ads_A100_v4", gpusPerNode=2, ncclFloorGBps=10.0
)
POOL1 = G.PoolDeclaration(name="a100x1", vmSize="Standard_NC24ads_A100_v4", gpusPerNode=1)


def test_a_checks_job_is_pinned_to_its_node_in_the_validation_queue(upstream_crds: Path) -> None:
    job = A.check_job("nccl", "a100x2-0", "a100x2", 2, "abc123")
    assert k8s_errors(job) == []
    pod = job["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"kubernetes.io/hostname": "a100x2-0", C.LABEL_POOL: "a100x2"}
    assert {"key": C.VALIDATING_TAINT, "operator": "Exists", "effect": "NoSchedule"} in pod[
        "tolerations"
    ]
    assert pod["containers"][0]["resources"]["limits"][C.GPU_RESOURCE] == 2
    assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == A.VALIDATION_QUEUE
    assert job["metadata"]["namespace"] == A.VALIDATION_NAMESPACE
    long = A.check_job("dcgm-diag", "n" * 70, "p", 8, "abc123")["metadata"]["name"]
    assert len(long) <= 63 and long.endswith("-abc123")
    assert (
        "dcgmi diag -r 3"
        in A.check_job("dcgm-diag", "n", "p", 8, "s", diag_level=3)["spec"]["template"]["spec"][
            "containers"
        ][0]["command"][2]
    )


def test_the_validation_queue_borrows_only_and_validates_against_kueue(upstream_crds: Path) -> None:
    pytest.importorskip("pulumi", reason="the platform extra (pulumi) is not installed")
    from conftest import ROOT

    from taugrid.components import controller_manifests as CM
    from taugrid.infra.stackfile import validated

    objs = CM.validation_objects(validated("prod", ROOT / "stacks"))
    kinds = [o["kind"] for o in objs]
    assert kinds == ["Namespace", "ClusterQueue", "LocalQueue", "Role", "RoleBinding"]
    cq, lq = objs[1], objs[2]
    assert (
        crd_errors(cq, upstream_crds / "kueue" / "kueue.x-k8s.io_clusterqueues.yaml", "v1beta2")
        == []
    )
    assert (
        crd_errors(lq, upstream_crds / "kueue" / "kueue.x-k8s.io_localqueues.yaml", "v1beta2") == []
    )
    quotas = {
        r["nominalQuota"]
        for f in cq["spec"]["resourceGroups"][0]["flavors"]
        for r in f["resources"]
    }
    assert quotas == {"0"}  # nothing of its own: it borrows what the cohort leaves unused
    assert cq["spec"]["preemption"]["withinClusterQueue"] == "Never"
    assert objs[0]["metadata"]["labels"][C.LABEL_WORKSPACE] == A.VALIDATION_NAMESPACE  # Kueue's
    for o in (objs[0], objs[3], objs[4]):
        assert k8s_errors(o) == []


# --- reading a check's end ----------------------------------------------------------------------
def job(done: str | None = None, started: bool = True, suspend: bool = False) -> dict[str, Any]:
    st: dict[str, Any] = {"startTime": "2026-12-01T12:00:05Z"} if started else {}
    if done:
        st["conditions"] = [{"type": done, "status": "True", "message": "BackoffLimitExceeded"}]
    return {"metadata": {"name": "tau-nccl-n-abc"}, "spec": {"suspend": suspend}, "status": st}


def pod(message: str, reason: str = "Completed") -> dict[str, Any]:
    term = {"exitCode": 0, "reason": reason, "message": message}
    return {"status": {"containerStatuses": [{"name": "c", "state": {"terminated": term}}]}}


@pytest.mark.parametrize(
    ("check", "message", "done", "floor", "state", "said"),
    [
        ("nccl", '{"busbw_gbps": 150.2}', "Complete", 10.0, "ok", "150.2 GB/s (floor 10.0 GB/s)"),
        ("nccl", '{"busbw_gbps": 4.0}', "Complete", 10.0, "failed", "under the pool's floor"),
        ("nccl", '{"busbw_gbps": 4.0}', "Complete", None, "ok", "no floor for this size"),
        ("nccl", "Segmentation fault", "Failed", 10.0, "failed", "left no bandwidth"),
        ("nccl", '{"busbw_gbps": true}', "Complete", 10.0, "failed", "left no bandwidth"),
        (
            "dcgm-diag",
            '{"passed": true, "detail": ""}',
            "Complete",
            None,
            "ok",
            "diagnostics passed",
        ),
        (
            "dcgm-diag",
            '{"passed": false, "detail": "Memory: Fail"}',
            "Failed",
            None,
            "failed",
            "Memory: Fail",
        ),
        ("dcgm-diag", "", "Failed", None, "failed", "left no result (BackoffLimitExceeded)"),
    ],
)
def test_a_checks_result_is_read_from_its_termination_message(
    check: Any, message: str, done: str, floor: float | None, state: str, said: str
) -> None:
    got_state, got, ev = A.outcome(check, job(done), [pod(message)], None, floor)
    assert got_state == state and said in got and ev["job"] == "tau-nccl-n-abc"


def test_a_check_not_admitted_says_kueues_reason_and_one_running_says_nothing_yet() -> None:
    wl = {
        "status": {
            "conditions": [
                {
                    "type": "QuotaReserved",
                    "status": "False",
                    "message": "couldn't assign flavors to pod set main: insufficient unused quota "
                    "for nvidia.com/gpu in flavor a100x2, 2 more needed",
                }
            ]
        }
    }
    state, why, _ = A.outcome("nccl", job(started=False, suspend=True), [], wl, 10.0)
    assert state == "waiting" and "insufficient unused quota" in why
    late = A.late("nccl", state, why, 900, {}, "try later")
    assert late.state == "failed" and late.message.startswith(
        "not admitted within 900 s: waiting for quota"
    )
    assert late.fix and "borrows only what the teams leave unused: try later" in late.fix
    assert A.outcome("nccl", job(started=False, suspend=True), [], None, 1.0)[0] == "waiting"
    admitted = {"status": {"conditions": [{"type": "Admitted", "status": "True"}]}}
    assert A.outcome("nccl", job(started=False, suspend=True), [], admitted, 1.0)[0] == "running"
    assert A.outcome("nccl", job(), [], None, 1.0)[0] == "running"


@pytest.mark.skipif(shutil.which("sh") is None, reason="no sh")
@pytest.mark.parametrize(
    ("rc", "out", "passed"), [(0, "Pass", True), (226, 'Memory: Fail "x"', False)]
)
def test_the_diagnostics_script_writes_json_whatever_dcgmi_prints(
    tmp_path: Path, rc: int, out: str, passed: bool
) -> None:
    fake = tmp_path / "dcgmi"
    fake.write_text(f"#!/bin/sh\necho '{out}'\necho 'Error: something \\\\ odd'\nexit {rc}\n")
    fake.chmod(0o755)
    script = A.check_job("dcgm-diag", "n", "p", 1, "s")["spec"]["template"]["spec"]["containers"][
        0
    ]["command"][2]
    script = script.replace("/dev/termination-log", str(tmp_path / "msg"))
    res = subprocess.run(
        ["sh", "-c", script], env={"PATH": f"{tmp_path}:/usr/bin:/bin"}, check=False
    )
    doc = json.loads((tmp_path / "msg").read_text())
    assert res.returncode == rc and doc["passed"] is passed
    assert passed or "Memory: Fail" in doc["detail"]


# --- `tau cluster validate nodes --active` ------------------------------------------------------
def gpu_node(
    name: str, pool: str, gpus: int, knobs: dict[str, Any] | None = None
) -> dict[str, Any]:
    ann = {SIM.SIM_ANNOTATION: json.dumps(knobs)} if knobs else {}
    return {
        "metadata": {"name": name, "labels": {C.LABEL_POOL: pool}, "annotations": ann},
        "status": {"capacity": {C.GPU_RESOURCE: str(gpus)}},
    }


class Cluster:
    """The fake cluster's Job controller, Kueue and node agent, one step per poll."""

    def __init__(self, kube: FakeKube, admit: bool = True) -> None:
        self.kube, self.admit, self.polls = kube, admit, 0

    def step(self, _s: float) -> None:
        self.polls += 1
        for j in self.kube.list("Job", A.VALIDATION_NAMESPACE):
            name = j["metadata"]["name"]
            if not self.admit:
                self.kube.put(
                    "Workload",
                    {
                        "metadata": {
                            "name": f"job-{name}",
                            "namespace": A.VALIDATION_NAMESPACE,
                            "ownerReferences": [{"kind": "Job", "name": name}],
                        },
                        "status": {
                            "conditions": [
                                {
                                    "type": "QuotaReserved",
                                    "status": "False",
                                    "message": NOT_ADMITTED,
                                }
                            ]
                        },
                    },
                )
                j.setdefault("spec", {})["suspend"] = True
                self.kube.put("Job", j)
                continue
            node = j["spec"]["template"]["spec"]["nodeSelector"]["kubernetes.io/hostname"]
            p = {
                "metadata": {
                    "name": f"{name}-p",
                    "namespace": A.VALIDATION_NAMESPACE,
                    "labels": {**j["spec"]["template"]["metadata"]["labels"], "job-name": name},
                },
                "spec": {
                    "nodeName": node,
                    "containers": j["spec"]["template"]["spec"]["containers"],
                },
            }
            code, msg = SIM.check_result(p, self.kube.get("Node", node))
            p["status"] = {
                "containerStatuses": [
                    {"name": "c", "state": {"terminated": {"exitCode": code, "message": msg}}}
                ]
            }
            self.kube.put("Pod", p)
            j["status"] = {
                "startTime": "t",
                "conditions": [{"type": "Complete" if code == 0 else "Failed", "status": "True"}],
            }
            self.kube.put("Job", j)


def test_active_checks_run_on_idle_nodes_and_say_what_they_found() -> None:
    kube = FakeKube(
        {
            "Node": [
                gpu_node("a100x2-0", "a100x2", 2),
                gpu_node("a100x2-1", "a100x2", 2, {"nccl_gbps": 4.0, "diag_fail": True}),
                gpu_node("a100x2-2", "a100x2", 2),
                gpu_node("a100x1-0", "a100x1", 1),
            ]
        }
    )
    kube.put(
        "Pod",
        {
            "metadata": {"name": "r-worker", "namespace": "research"},
            "spec": {
                "nodeName": "a100x2-2",
                "containers": [{"name": "w", "resources": {"limits": {C.GPU_RESOURCE: 2}}}],
            },
            "status": {"phase": "Running"},
        },
    )
    said: list[str] = []
    fake = Cluster(kube)
    targets = [("a100x2-0", POOL2), ("a100x2-1", POOL2), ("a100x2-2", POOL2), ("a100x1-0", POOL1)]
    got = activecheck.run(kube, targets, 60, said.append, clock=lambda: fake.polls, sleep=fake.step)
    states = {n: {f.check: f.state for f in fs} for n, fs in got.items()}
    assert states == {
        "a100x2-0": {"dcgm-diag": "ok", "nccl": "ok"},
        "a100x2-1": {"dcgm-diag": "failed", "nccl": "failed"},
        "a100x2-2": {"dcgm-diag": "skipped", "nccl": "skipped"},  # busy: left alone
        "a100x1-0": {"dcgm-diag": "ok", "nccl": "skipped"},  # one GPU
    }
    bad = {f.check: f for f in got["a100x2-1"]}
    assert "4.0 GB/s, under the pool's floor 10.0" in bad["nccl"].message and bad["nccl"].fix
    assert "held by research/r-worker" in got["a100x2-2"][0].message
    assert said and said[0].startswith("active checks: 5 Job(s)")
    assert kube.list("Job", A.VALIDATION_NAMESPACE) == []  # each deleted once read


def test_a_check_never_admitted_fails_with_kueues_reason_and_its_job_is_deleted() -> None:
    kube = FakeKube({"Node": [gpu_node("a100x2-0", "a100x2", 2)]})
    fake = Cluster(kube, admit=False)
    got = activecheck.run(
        kube,
        [("a100x2-0", POOL2)],
        30,
        lambda _: None,
        clock=lambda: fake.polls * activecheck.POLL_S,
        sleep=fake.step,
    )
    assert [f.state for f in got["a100x2-0"]] == ["failed", "failed"]
    assert got["a100x2-0"][0].message.startswith("not admitted within 30 s: waiting for quota")
    assert kube.list("Job", A.VALIDATION_NAMESPACE) == []  # nothing left behind


# --- the controller's turn ----------------------------------------------------------------------
def _step(tier: ActiveTier, node: dict[str, Any], pool: G.PoolDeclaration, now: datetime) -> Any:
    return asyncio.run(tier.step(node, pool, now))


async def _io(fn: Any, *args: Any) -> Any:
    return fn(*args)


def test_the_controller_starts_the_checks_then_reads_them_once_they_end() -> None:
    node = gpu_node("a100x2-0", "a100x2", 2)
    kube = FakeKube({"Node": [node]})
    tier = ActiveTier(kube, _io, timeout_s=900)
    assert _step(tier, node, POOL2, T0) is None  # Jobs made
    assert sorted(
        j["metadata"]["labels"][A.LABEL_CHECK] for j in kube.list("Job", A.VALIDATION_NAMESPACE)
    ) == ["dcgm-diag", "nccl"]
    assert _step(tier, node, POOL2, T0) is None  # still running: nothing yet, nothing new
    assert len(kube.list("Job", A.VALIDATION_NAMESPACE)) == 2
    Cluster(kube).step(0)
    found = _step(tier, node, POOL2, T0 + timedelta(seconds=30))
    assert found is not None and [f.state for f in found] == ["ok", "ok"]
    assert kube.list("Job", A.VALIDATION_NAMESPACE) == []  # the next validation starts afresh


def test_the_controller_gives_up_on_a_check_never_admitted_and_waits_before_trying_again() -> None:
    node = gpu_node("a100x1-0", "a100x1", 1)
    kube = FakeKube({"Node": [node]})
    tier = ActiveTier(kube, _io, timeout_s=60)
    assert _step(tier, node, POOL1, T0) is None
    Cluster(kube, admit=False).step(0)
    for j in kube.list("Job", A.VALIDATION_NAMESPACE):  # made at T0
        j["metadata"]["creationTimestamp"] = "2026-12-01T12:00:00Z"
        kube.put("Job", j)
    assert _step(tier, node, POOL1, T0 + timedelta(seconds=30)) is None  # within its time
    found = _step(tier, node, POOL1, T0 + timedelta(seconds=61))
    assert found is not None and [(f.check, f.state) for f in found] == [
        ("dcgm-diag", "failed"),
        ("nccl", "skipped"),
    ]
    assert "tries again in 10 minutes" in (found[0].fix or "")
    # its failed verdict kept: no new Jobs until RETRY_S after it
    at = "2026-12-01T12:01:01Z"
    passive = G.NodeVerdict(node="a100x1-0", pool="a100x1", checkedAt=at, findings=found)
    node["metadata"]["annotations"][G.VALIDATION_ANNOTATION] = G.with_verdict(node, passive)
    assert tier.retry_in(node, T0 + timedelta(seconds=120)) is None  # a passive failure: no wait
    verdict = passive.model_copy(update={"tier": "active"})
    node["metadata"]["annotations"][G.VALIDATION_ANNOTATION] = G.with_verdict(node, verdict)
    assert tier.retry_in(node, T0 + timedelta(seconds=120)) == pytest.approx(RETRY_S - 59)
    assert _step(tier, node, POOL1, T0 + timedelta(seconds=120)) is None
    assert kube.list("Job", A.VALIDATION_NAMESPACE) == []
    assert _step(tier, node, POOL1, T0 + timedelta(seconds=61 + RETRY_S + 1)) is None
    assert len(kube.list("Job", A.VALIDATION_NAMESPACE)) == 1  # tried again


def test_the_sandbox_agent_ends_check_pods_as_their_containers_would() -> None:
    kube = FakeKube({"Node": [gpu_node("a100x2-0", "a100x2", 2, {"diag_fail": True})]})
    for check in ("dcgm-diag", "nccl"):
        kube.put(
            "Pod",
            {
                "metadata": {
                    "name": check,
                    "namespace": A.VALIDATION_NAMESPACE,
                    "labels": {A.LABEL_CHECK: check},
                },
                "spec": {"nodeName": "a100x2-0", "containers": [{"name": check, "image": "i"}]},
                "status": {"phase": "Running"},
            },
        )
    assert SIM.finish_checks(kube) == 2 and SIM.finish_checks(kube) == 0
    diag = kube.get("Pod", "dcgm-diag", A.VALIDATION_NAMESPACE)
    assert diag["status"]["phase"] == "Failed"
    assert A.outcome("dcgm-diag", job("Failed"), [diag], None, None)[0] == "failed"
    nccl = kube.get("Pod", "nccl", A.VALIDATION_NAMESPACE)
    assert A.outcome("nccl", job("Complete"), [nccl], None, 10.0)[:2] == (
        "ok",
        "NCCL all-reduce: 150.0 GB/s (floor 10.0 GB/s)",
    )
