"""The one way a run changes phase: terminal phases are final, times are stamped, history gets
one line per change, and the record is sealed when the run ends."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from taugrid.api.evidence import RunRecord, TerminalStateError, transition
from taugrid.api.vocabulary import (
    RETRYABLE,
    TERMINAL,
    Phase,
    RetryReason,
    TerminationReason,
)
from taugrid.runs.evidence import RunDir


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
        created_at="2026-12-01T00:00:00",
    )
    base.update(kw)
    return RunRecord.model_validate(base)


@pytest.mark.parametrize("end", sorted(TERMINAL))
@pytest.mark.parametrize("wanted", list(Phase))
def test_terminal_phases_are_final(end: Phase, wanted: Phase) -> None:
    with pytest.raises(TerminalStateError, match="already ended"):
        transition(rec(phase=end), wanted, "again", now="t")


def test_times_are_stamped_once() -> None:
    r, ev = transition(rec(), Phase.Starting, "supervisor started", now="t1")
    assert r.started_at == "t1" and ev is not None and ev.ts == "t1"
    r, _ = transition(r, Phase.Running, "process started", now="t2")
    assert r.started_at == "t1" and r.finished_at is None
    r, ev = transition(r, Phase.Failed, "exit code 3", now="t3", exit_code=3)
    assert r.finished_at == "t3" and r.exit_code == 3
    assert r.termination_reason is TerminationReason.Failed
    assert ev is not None and ev.termination_reason is TerminationReason.Failed


def test_no_change_means_no_history_line() -> None:
    r, ev = transition(rec(), Phase.Running, "started", now="t1")
    assert ev is not None
    again, ev2 = transition(r, Phase.Running, "started", now="t2")
    assert ev2 is None and again == r
    # Other fields may change without a history line.
    moved, ev3 = transition(r, Phase.Running, "started", now="t3", attempt=None, workers=4)
    assert ev3 is None and moved.workers == 4


def test_a_new_attempt_is_a_change() -> None:
    r, _ = transition(rec(), Phase.Running, "started", now="t1")
    r2, ev = transition(
        r,
        Phase.Retrying,
        "NodeFailure: head died",
        now="t2",
        attempt=1,
        termination=TerminationReason.NodeFailure,
    )
    assert ev is not None and ev.attempt == 1 and r2.attempt == 1
    assert r2.termination_reason is TerminationReason.NodeFailure and r2.finished_at is None


def test_retry_classification_is_one_vocabulary() -> None:
    from typing import get_args

    assert set(get_args(RetryReason)) == RETRYABLE
    assert {r.value for r in TerminationReason if r.retryable} == RETRYABLE
    assert TerminationReason.NodeFailure.retried_by(["NodeFailure"])
    assert not TerminationReason.Failed.retried_by(["NodeFailure"])
    assert not TerminationReason.Cancelled.retried_by([r.value for r in TerminationReason])
    assert not TerminationReason.SupervisorLost.retryable


def test_older_records_keep_their_handle() -> None:
    old = rec()
    data = old.model_dump(mode="json")
    data.pop("handle")
    data.update(target="local", supervisor_pid=42, ray_submission_id="x-a1")
    back = RunRecord.model_validate(data)
    assert back.local.supervisor_pid == 42 and back.local.ray_submission_id == "x-a1"
    assert back.target == "local"


def test_rundir_transition_appends_once_and_seals_at_the_end(tmp_path: Path) -> None:
    rd = RunDir(tmp_path / "r-abcde")
    rd.path.mkdir()
    rd.create(rec())
    rd.transition(Phase.Running, "started")
    rd.transition(Phase.Running, "started")  # no change
    assert [e.phase for e in rd.read_history()] == [Phase.Pending, Phase.Running]
    assert not rd.sealed
    rd.transition(Phase.Succeeded, "exit code 0", exit_code=0)
    assert rd.sealed and rd.verify()[1] == []
    with pytest.raises(TerminalStateError):
        rd.transition(Phase.Failed, "late")
    assert [e.phase for e in rd.read_history()][-1] == Phase.Succeeded
    assert rd.read_record().phase == Phase.Succeeded and rd.verify()[1] == []


def test_update_refuses_phase_changes(tmp_path: Path) -> None:
    rd = RunDir(tmp_path / "r-abcde")
    rd.path.mkdir()
    rd.create(rec())
    with pytest.raises(ValueError, match="transition"):
        rd.update(phase=Phase.Failed)
    rd.update_handle(supervisor_pid=7)
    assert rd.read_record().local.supervisor_pid == 7


def test_metric_rows_and_their_summary_survive_a_torn_last_line(tmp_path: Path) -> None:
    """A run killed mid-write leaves a torn last line: every complete row is still read (one
    JSON parse of the whole file, else line by line), and the status's summary (how many rows,
    the last one) agrees without parsing the rest."""
    rd = RunDir(tmp_path / "r-abcde")
    rd.path.mkdir()
    rows = [{"step": i, "loss": 1 / (i + 1)} for i in range(5)]
    text = "".join(json.dumps(r) + "\n" for r in rows)
    rd.metrics_path.write_text(text)
    assert rd.metric_rows() == rows
    assert rd.metric_summary() == (5, rows[-1])
    rd.metrics_path.write_text(text + '{"step": 5, "lo')  # torn
    assert rd.metric_rows() == rows
    assert rd.metric_summary() == (5, rows[-1])
    rd.metrics_path.write_text('{"no step": 1}\n' + text + "\n\n")
    assert rd.metric_rows() == rows  # a row without an int step is not a metric row
    assert rd.metric_summary()[1] == rows[-1]
    rd.metrics_path.unlink()
    assert rd.metric_rows() == [] and rd.metric_summary() == (0, None)
