"""The stdlib helper training code imports: metrics rows and atomic, indexed checkpoints."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import tau_run


@pytest.fixture(autouse=True)
def run_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("TAU_RUN_DIR", str(tmp_path))
    monkeypatch.setenv("TAU_CHECKPOINT_DIR", str(tmp_path / "checkpoints"))
    monkeypatch.setenv("TAU_METRICS_FILE", str(tmp_path / "metrics.jsonl"))
    monkeypatch.delenv("TAU_RESUME_FROM", raising=False)
    return tmp_path


def test_log_rows(run_env: Path) -> None:
    tau_run.log(1, loss=0.5, acc=1)
    tau_run.log(2, loss=0.25)
    rows = [json.loads(x) for x in (run_env / "metrics.jsonl").read_text().splitlines()]
    assert (
        [r["step"] for r in rows] == [1, 2]
        and rows[0]["loss"] == 0.5
        and isinstance(rows[0]["ts"], float)
    )


@pytest.mark.parametrize(
    ("step", "metrics"),
    [
        (-1, {"x": 1.0}),
        (1.5, {"x": 1.0}),
        (True, {}),
        (1, {"x": float("nan")}),
        (1, {"x": "a"}),
        (1, {"ts": 1.0}),
    ],
)
def test_log_rejects_bad_rows(step: object, metrics: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        tau_run.log(step, **metrics)  # type: ignore[arg-type]


def test_checkpoint_is_indexed_only_when_complete(run_env: Path) -> None:
    with tau_run.checkpoint(10) as d:
        (d / "w.bin").write_bytes(b"abc")
    with pytest.raises(RuntimeError), tau_run.checkpoint(20) as d:
        (d / "w.bin").write_bytes(b"half")
        raise RuntimeError("killed while writing")
    done = tau_run.complete_checkpoints()
    assert [e["step"] for e in done] == [10]
    latest = tau_run.latest_checkpoint()
    assert latest is not None and (latest / "w.bin").read_bytes() == b"abc"
    assert not [p for p in (run_env / "checkpoints").iterdir() if p.name.startswith(".tmp")]


def test_unindexed_folders_are_not_checkpoints(run_env: Path) -> None:
    (run_env / "checkpoints" / "step-00000099").mkdir(parents=True)
    assert tau_run.latest_checkpoint() is None
    (run_env / "checkpoints" / "index.json").write_text("{not json")
    assert tau_run.complete_checkpoints() == []


def test_resume_step(monkeypatch: pytest.MonkeyPatch, run_env: Path) -> None:
    assert tau_run.resume_step() == 0
    monkeypatch.setenv("TAU_RESUME_FROM", str(run_env / "checkpoints" / "step-00000040"))
    assert tau_run.resume_step() == 40
