"""Status is a pure function of a snapshot: each signal, stall detection, contradictions."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from taugrid.api.evidence import HistoryEvent, RunRecord
from taugrid.cli.status import Snapshot, compute

T0 = datetime(2026, 11, 29, 10, 0, tzinfo=UTC).timestamp()


def iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).isoformat()


def rec(**kw: Any) -> RunRecord:
    base: dict[str, Any] = dict(
        run_id="r-abcde", name="r", workspace="local", profile="local", workload_kind="job", target="local",
        submitter="a", code_folder="/x", code_revision="u", code_digest="d", config_hash="h", image="i",
        entrypoint="t.py", created_at=iso(T0), phase="Running", stall_after_seconds=600,
    )  # fmt: skip
    base.update(kw)
    return RunRecord.model_validate(base)


HIST = [
    HistoryEvent(ts=iso(T0), phase="Pending"),
    HistoryEvent(ts=iso(T0 + 1), phase="Starting"),
    HistoryEvent(ts=iso(T0 + 2), phase="Running"),
]


def sig(st: Any, name: str) -> Any:
    return next(s for s in st.signals if s.name == name)


def test_running_and_progressing() -> None:
    st = compute(
        Snapshot(
            record=rec(),
            history=HIST,
            now=T0 + 100,
            supervisor_alive=True,
            last_metric_ts=T0 + 90,
            last_step=7,
        )
    )
    assert st.phase == "Running"
    assert sig(st, "Progressing").state == "true" and "step 7" in sig(st, "Progressing").reason
    assert sig(st, "Scheduled").state == "true" and sig(st, "Admitted").state == "true"
    assert sig(st, "Completed").state == "pending"


def test_stall_detected_from_metrics_and_log_heartbeat() -> None:
    snap = Snapshot(
        record=rec(),
        history=HIST,
        now=T0 + 2000,
        supervisor_alive=True,
        last_metric_ts=T0 + 100,
        last_log_ts=T0 + 200,
    )
    st = compute(snap)
    prog = sig(st, "Progressing")
    assert prog.state == "false" and "stalled" in prog.reason and "30m" in prog.reason
    assert "Progressing" in st.summary
    fresh = Snapshot(
        record=rec(), history=HIST, now=T0 + 2000, supervisor_alive=True, last_log_ts=T0 + 1900
    )
    assert sig(compute(fresh), "Progressing").state == "true"


def test_dead_supervisor_is_not_reported_as_running() -> None:
    st = compute(Snapshot(record=rec(), history=HIST, now=T0 + 10, supervisor_alive=False))
    assert st.phase == "Failed" and "supervisor" in st.summary
    assert sig(st, "Completed").state == "false"


def test_gpu_signal_on_a_cpu_machine() -> None:
    st = compute(
        Snapshot(
            record=rec(gpus_per_worker=2, gpus_available=0),
            history=HIST,
            now=T0,
            supervisor_alive=True,
        )
    )
    assert sig(st, "GPUHealthy").state == "unknown" and "uses CPU" in sig(st, "GPUHealthy").reason


def test_pending_before_start() -> None:
    st = compute(
        Snapshot(record=rec(phase="Pending"), history=HIST[:1], now=T0 + 1, supervisor_alive=True)
    )
    assert sig(st, "Admitted").state == "pending" and sig(st, "Scheduled").state == "pending"
    assert sig(st, "Progressing").state == "pending"


def test_failed_run_and_artifacts() -> None:
    done = rec(phase="Failed", reason="exit code 3", exit_code=3, finished_at=iso(T0 + 50))
    hist = [*HIST, HistoryEvent(ts=iso(T0 + 50), phase="Failed", reason="exit code 3")]
    st = compute(Snapshot(record=done, history=hist, now=T0 + 60, supervisor_alive=None, checkpoints=2,
                          newest_checkpoint="step-00000020", sealed=True))  # fmt: skip
    assert st.summary == "failed: exit code 3"
    art = sig(st, "ArtifactSaved")
    assert art.state == "true" and "step-00000020" in art.reason and "sealed" in art.reason
    none = compute(Snapshot(record=done, history=hist, now=T0 + 60, supervisor_alive=None))
    assert sig(none, "ArtifactSaved").state == "false"


def test_signal_names_and_order_are_the_contract() -> None:
    st = compute(Snapshot(record=rec(), history=HIST, now=T0, supervisor_alive=True))
    assert [s.name for s in st.signals] == [
        "Admitted",
        "Scheduled",
        "GPUHealthy",
        "Progressing",
        "Completed",
        "ArtifactSaved",
    ]
    assert all(s.state in ("true", "false", "pending", "unknown") for s in st.signals)
