"""Status is a pure function of observations: each signal from hand-built observations, stall
detection, a lost supervisor, the configured output folder, and the summary sentence."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from taugrid.api.evidence import HistoryEvent, RunRecord
from taugrid.api.observations import Observations
from taugrid.api.vocabulary import SIGNALS, Phase, SignalState, TerminationReason
from taugrid.runs import status
from taugrid.runs.status import compute

T0 = datetime(2026, 11, 29, 10, 0, tzinfo=UTC).timestamp()


def iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).isoformat()


def rec(**kw: Any) -> RunRecord:
    base: dict[str, Any] = dict(
        run_id="r-abcde",
        name="r",
        workspace="local",
        profile="local",
        workload_kind="job",
        handle={"target": "local"},
        submitter="a",
        code_folder="/x",
        code_revision="u",
        code_digest="d",
        config_hash="h",
        image="i",
        entrypoint="t.py",
        created_at=iso(T0),
        phase="Running",
        stall_after_seconds=600,
    )
    base.update(kw)
    return RunRecord.model_validate(base)


HIST = [
    HistoryEvent(ts=iso(T0), phase=Phase.Pending),
    HistoryEvent(ts=iso(T0 + 1), phase=Phase.Starting),
    HistoryEvent(ts=iso(T0 + 2), phase=Phase.Running),
]


def obs(record: RunRecord | None = None, **kw: Any) -> Observations:
    base: dict[str, Any] = dict(
        record=record or rec(), history=HIST, now=T0 + 100, owner_alive=True
    )
    base.update(kw)
    return Observations(**base)


# --- Admitted ----------------------------------------------------------------------------------
def test_admitted_once_started_and_pending_before() -> None:
    assert status.admitted(obs()).state == SignalState.true
    assert status.admitted(obs()).since == iso(T0 + 1)
    pending = obs(rec(phase="Pending"), history=HIST[:1])
    assert status.admitted(pending).state == SignalState.pending


# --- Scheduled ---------------------------------------------------------------------------------
def test_scheduled_true_pending_and_false_when_it_ended_before_starting() -> None:
    assert status.scheduled(obs()).state == SignalState.true
    assert status.scheduled(obs(rec(phase="Starting"), history=HIST[:2])).state == "pending"
    ended = rec(phase="Failed", reason="could not submit", finished_at=iso(T0 + 3))
    s = status.scheduled(obs(ended, history=HIST[:2], owner_alive=None))
    assert s.state == SignalState.false and s.reason == "could not submit"


# --- GPUHealthy --------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("gpus", "available", "state", "words"),
    [(0, 0, "true", "no GPUs"), (2, 0, "unknown", "uses CPU"), (1, 4, "true", "4 GPU(s) visible")],
)
def test_gpu_healthy(gpus: int, available: int, state: str, words: str) -> None:
    s = status.gpu_healthy(obs(rec(gpus_per_worker=gpus, gpus_available=available)))
    assert s.state == state and words in s.reason


# --- Progressing -------------------------------------------------------------------------------
def test_progressing_from_the_newest_heartbeat() -> None:
    s = status.progressing(obs(last_metric_ts=T0 + 90, last_step=7))
    assert s.state == SignalState.true and "step 7" in s.reason


def test_stall_detected_from_metrics_and_log_heartbeat() -> None:
    stalled = status.progressing(obs(now=T0 + 2000, last_metric_ts=T0 + 100, last_log_ts=T0 + 200))
    assert stalled.state == SignalState.false and "stalled" in stalled.reason
    assert "30m" in stalled.reason  # 1800 s without a line
    fresh = status.progressing(obs(now=T0 + 2000, last_log_ts=T0 + 1900))
    assert fresh.state == SignalState.true


def test_progressing_pending_before_running_and_false_after_the_end() -> None:
    assert status.progressing(obs(rec(phase="Starting"), history=HIST[:2])).state == "pending"
    done = rec(phase="Succeeded", finished_at=iso(T0 + 50))
    s = status.progressing(obs(done, owner_alive=None, metric_rows=3, last_step=2))
    assert s.state == SignalState.false and "3 metric rows" in s.reason


# --- Completed ---------------------------------------------------------------------------------
def test_completed_true_false_pending() -> None:
    ok = rec(phase="Succeeded", finished_at=iso(T0 + 50))
    assert status.completed(obs(ok, owner_alive=None)).state == SignalState.true
    bad = rec(phase="Failed", reason="exit code 3", exit_code=3, finished_at=iso(T0 + 50))
    s = status.completed(obs(bad, owner_alive=None))
    assert s.state == SignalState.false and s.reason == "Failed: exit code 3"
    assert status.completed(obs()).state == SignalState.pending


def test_a_lost_supervisor_is_not_reported_as_running() -> None:
    st = compute(obs(owner_alive=False))
    assert st.phase == Phase.Failed and "supervisor" in st.summary
    assert st.termination_reason == TerminationReason.SupervisorLost
    assert status.completed(obs(owner_alive=False)).state == SignalState.false


# --- ArtifactSaved -----------------------------------------------------------------------------
def test_artifacts_from_checkpoints_and_the_configured_output_folder() -> None:
    done = rec(
        phase="Failed", reason="exit code 3", finished_at=iso(T0 + 50), output_subdir="results"
    )
    s = status.artifact_saved(
        obs(done, owner_alive=None, checkpoints=2, newest_checkpoint="step-00000020", sealed=True)
    )
    assert s.state == SignalState.true and "step-00000020" in s.reason and "sealed" in s.reason
    outputs = status.artifact_saved(obs(done, owner_alive=None, outputs=3))
    assert outputs.state == SignalState.true and "results/" in outputs.reason
    assert "results/" in outputs.evidence and "outputs" not in outputs.evidence
    none = status.artifact_saved(obs(done, owner_alive=None))
    assert none.state == SignalState.false
    assert status.artifact_saved(obs()).state == SignalState.pending


# --- the whole ---------------------------------------------------------------------------------
def test_summary_names_the_cause() -> None:
    failed = rec(phase="Failed", reason="exit code 3", exit_code=3, finished_at=iso(T0 + 50))
    assert compute(obs(failed, owner_alive=None)).summary == "failed: exit code 3"
    stalled = compute(obs(now=T0 + 2000, last_log_ts=T0 + 100))
    assert stalled.summary.startswith("running, but Progressing: stalled")
    assert (
        compute(obs(rec(phase="Succeeded", finished_at=iso(T0 + 9)), owner_alive=None)).summary
        == "succeeded"
    )


def test_signal_names_and_order_are_the_contract() -> None:
    st = compute(obs())
    assert [s.name for s in st.signals] == list(SIGNALS)
    assert [str(s) for s in SIGNALS] == [
        "Admitted",
        "Scheduled",
        "GPUHealthy",
        "Progressing",
        "Completed",
        "ArtifactSaved",
    ]
    assert all(s.state in ("true", "false", "pending", "unknown") for s in st.signals)


def test_status_json_uses_the_plain_words() -> None:
    doc = compute(obs()).model_dump(mode="json")
    assert doc["phase"] == "Running" and doc["target"] == "local"
    assert {s["state"] for s in doc["signals"]} <= {"true", "false", "pending", "unknown"}


def test_a_cluster_run_read_from_its_record_claims_nothing_of_this_machines_gpus() -> None:
    """A sealed kube run's status (offline) said "GPUHealthy true: 1 GPU(s) visible
    (nvidia-smi)": this machine's GPUs, not its nodes'."""
    kube = rec(
        handle={"target": "kube", "namespace": "research"},
        gpus_per_worker=1,
        gpus_available=1,
        phase="Succeeded",
    )
    s = status.gpu_healthy(obs(kube, owner_alive=None, sealed=True))
    assert s.state == SignalState.unknown and "nvidia-smi" not in s.evidence
    local = status.gpu_healthy(obs(rec(gpus_per_worker=1, gpus_available=1)))
    assert local.state == SignalState.true and local.evidence == "nvidia-smi"  # a local run's own


def test_a_multi_node_job_s_status_counts_its_nodes_and_names_the_one_that_waits() -> None:
    from taugrid.api.observations import ClusterFacts, PodFact

    why = "0/20 nodes are available: 4 Insufficient nvidia.com/gpu"
    pods = [
        PodFact(name=f"ddp-abcde-{i}-x", phase="Running", node=f"a100x1-{i}", node_rank=i)
        for i in (0, 1, 3)
    ]
    pods.append(
        PodFact(name="ddp-abcde-2-x", phase="Pending", node=None, unschedulable=why, node_rank=2)
    )
    kube = rec(handle={"target": "kube", "namespace": "research"}, workers=4, phase="Starting")
    facts = ClusterFacts(
        taurun=True,
        workload=True,
        suspended=False,
        pods=pods,
        kueue=[{"type": "Admitted", "status": "True"}],
    )
    phase, summary = status.cluster_phase(obs(kube, owner_alive=None, cluster=facts))
    assert (
        phase == Phase.Starting and summary == f"admitted; 3/4 nodes running, node 2 pending: {why}"
    )
    first_line = compute(obs(kube, owner_alive=None, cluster=facts)).summary
    assert first_line == f"starting: 3/4 nodes running, node 2 pending: {why}"
    running = [PodFact(name=f"p{i}", phase="Running", node=f"n{i}", node_rank=i) for i in range(4)]
    facts = ClusterFacts(
        taurun=True,
        workload=True,
        suspended=False,
        pods=running,
        kueue=[{"type": "Admitted", "status": "True"}],
    )
    assert status.cluster_phase(obs(kube, owner_alive=None, cluster=facts)) == (
        Phase.Running,
        "4/4 nodes running",
    )
    # only three pods of four: not "running" yet
    facts = ClusterFacts(
        taurun=True,
        workload=True,
        suspended=False,
        pods=running[:3],
        kueue=[{"type": "Admitted", "status": "True"}],
    )
    assert status.cluster_phase(obs(kube, owner_alive=None, cluster=facts)) == (
        Phase.Starting,
        "admitted; 3/4 nodes running, node 3 has no pod yet",
    )

    # the status's first line says it too
    facts = ClusterFacts(
        taurun=True,
        workload=True,
        suspended=False,
        pods=running,
        kueue=[{"type": "Admitted", "status": "True"}],
    )
    assert (
        compute(obs(kube, owner_alive=None, cluster=facts)).summary == "running: 4/4 nodes running"
    )


def test_a_job_whose_pods_ended_before_the_workload_says_so_is_not_starting_again() -> None:
    """Found on real nodes: a 2-node torchrun job went running -> starting -> succeeded, because
    its pods had ended (Succeeded) a moment before the Job said it completed."""
    from taugrid.api.observations import ClusterFacts, PodFact

    kube = rec(handle={"target": "kube", "namespace": "research"}, workers=2, phase="Running")
    ended = [PodFact(name=f"p{i}", phase="Succeeded", node=f"n{i}", node_rank=i) for i in range(2)]
    facts = ClusterFacts(
        taurun=True,
        workload=True,
        suspended=False,
        pods=ended,
        kueue=[{"type": "Admitted", "status": "True"}],
    )
    assert status.cluster_phase(obs(kube, owner_alive=None, cluster=facts)) == (
        Phase.Running,
        "pods ended; the workload is finishing",
    )
    one_failed = [ended[0], PodFact(name="p1", phase="Failed", node="n1", node_rank=1)]
    facts = ClusterFacts(
        taurun=True,
        workload=True,
        suspended=False,
        pods=one_failed,
        kueue=[{"type": "Admitted", "status": "True"}],
    )
    assert status.cluster_phase(obs(kube, owner_alive=None, cluster=facts))[0] == Phase.Starting


def test_a_cluster_run_the_cluster_says_failed_is_failed_not_a_lost_supervisor() -> None:
    """Found on the sandbox's real nodes: a Job whose pod exited non-zero was said to have lost
    its supervisor (the local runs' correction), and OOM could not replace it."""
    from taugrid.api.observations import ClusterFacts, PodFact

    kube = rec(handle={"target": "kube", "namespace": "research"}, phase="Running")
    facts = ClusterFacts(
        taurun=True,
        workload=True,
        suspended=False,
        finished="Failed",
        pods=[PodFact(name="p", phase="Failed", node="cpu-0")],
    )
    st = compute(obs(kube, owner_alive=None, cluster=facts))
    assert st.phase == Phase.Failed and st.termination_reason == TerminationReason.Failed
    # ... and a local run whose supervisor died is still said so
    local = compute(obs(rec(phase="Running"), owner_alive=False))
    assert local.termination_reason == TerminationReason.SupervisorLost


def _failed_pod(**status: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "train-x"},
        "spec": {
            "nodeName": "cpu-0",
            "containers": [{"name": "main", "resources": {"limits": {"memory": "256Mi"}}}],
        },
        "status": {"phase": "Failed", **status},
    }


_OOM = {"containerStatuses": [{"name": "main", "state": {"terminated": {"reason": "OOMKilled"}}}]}


@pytest.mark.parametrize(
    ("pod_status", "problems", "reason", "words"),
    [
        (
            _OOM,
            {},
            TerminationReason.OOMKilled,
            "out of memory: container main of pod train-x went over its memory limit 256Mi",
        ),
        (
            {
                "containerStatuses": [
                    {
                        "name": "main",
                        "state": {"running": {}},
                        "lastState": {"terminated": {"reason": "OOMKilled"}},
                    }
                ]
            },
            {},
            TerminationReason.OOMKilled,
            "out of memory",
        ),
        ({"reason": "NodeLost"}, {}, TerminationReason.NodeFailure, "failed on a faulty GPU node"),
        (_OOM, {"cpu-0": ["XidErrors=True"]}, TerminationReason.NodeFailure, "faulty GPU node"),
        (
            {
                "conditions": [
                    {
                        "type": "DisruptionTarget",
                        "status": "True",
                        "reason": "EvictionByEvictionAPI",
                    }
                ]
            },
            {},
            TerminationReason.Evicted,
            "evicted from",
        ),
        (
            {
                "conditions": [
                    {
                        "type": "DisruptionTarget",
                        "status": "True",
                        "reason": "PreemptionByScheduler",
                    }
                ]
            },
            {},
            TerminationReason.Preempted,
            "preempted (",
        ),
        (
            {"containerStatuses": [{"name": "main", "state": {"terminated": {"reason": "Error"}}}]},
            {},
            TerminationReason.Failed,
            "failed: ",
        ),
    ],
)
def test_a_cluster_run_s_end_is_told_the_same_by_a_client_s_look_and_the_controller(
    pod_status: dict[str, Any],
    problems: dict[str, list[str]],
    reason: TerminationReason,
    words: str,
) -> None:
    """A run that fails before anyone recorded it running (an OOM at start) is computed from its
    objects by the client: its end is narrowed there exactly as the controller's record does,
    so a watch that stops at the end it saw never says plain "failed" for an OOM."""
    from taugrid.controller.recorder import RunObjects, compute_status
    from taugrid.kube.facts import run_facts

    kube = rec(handle={"target": "kube", "namespace": "research"}, phase="Starting")
    pod = _failed_pod(**pod_status)
    job = {
        "status": {
            "conditions": [{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded"}]
        }
    }
    facts = run_facts(kube, True, job, None, [pod], {}, problems, True, "research")
    live = compute(obs(kube, owner_alive=None, cluster=facts))
    assert live.phase == Phase.Failed and live.termination_reason == reason
    assert words in live.summary, live.summary
    taurun = {
        "metadata": {"name": "r", "namespace": "research"},
        "spec": {
            "runId": "r",
            "runName": "r",
            "workspace": "w",
            "profile": "p",
            "workloadKind": "job",
            "configHash": "h",
            "manifest": {},
        },
    }
    recorded = compute_status(
        RunObjects(taurun=taurun, workload=job, pods=[pod]), problems, datetime.now(UTC)
    )
    assert recorded.phase == Phase.Failed and recorded.terminationReason == reason
    assert words in (recorded.summary or ""), recorded.summary


def test_a_failed_cluster_run_names_the_program_s_own_error_first() -> None:
    """As a local run does: the exception the program died of, then the cluster's words."""
    from taugrid.kube.facts import run_facts

    kube = rec(handle={"target": "kube", "namespace": "research"}, phase="Running")
    pod = _failed_pod(
        containerStatuses=[{"name": "main", "state": {"terminated": {"reason": "Error"}}}]
    )
    job = {
        "status": {
            "conditions": [
                {
                    "type": "Failed",
                    "status": "True",
                    "reason": "BackoffLimitExceeded",
                    "message": "Job has reached the specified backoff limit",
                }
            ]
        }
    }
    facts = run_facts(kube, True, job, None, [pod], {}, {}, True, "research")
    err = "ZeroDivisionError: division by zero"
    st = compute(obs(kube, owner_alive=None, cluster=facts, last_error=err))
    assert st.phase == Phase.Failed and st.last_error == err
    assert st.summary.startswith(f"failed: {err} ("), st.summary
    assert "backoff limit" in st.summary
    # an out-of-memory end is still said as what it was, not as the program's last line
    oom = _failed_pod(
        containerStatuses=[{"name": "main", "state": {"terminated": {"reason": "OOMKilled"}}}]
    )
    facts = run_facts(kube, True, job, None, [oom], {}, {}, True, "research")
    st = compute(obs(kube, owner_alive=None, cluster=facts, last_error="Killed"))
    assert st.summary.startswith("out of memory"), st.summary
