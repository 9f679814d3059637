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


def rows(run_env: Path) -> list[dict[str, object]]:
    path = run_env / "metrics.jsonl"
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


class TorchLikeScalar:
    """What a 0-d torch tensor offers: .item() (and no __float__ here, to prove .item() is used)."""

    def __init__(self, v: float) -> None:
        self.v = v

    def item(self) -> float:
        return self.v


def test_number_like_values_and_steps(run_env: Path) -> None:
    np = pytest.importorskip("numpy")
    from decimal import Decimal
    from fractions import Fraction

    tau_run.log(
        np.int64(3),
        a=np.float32(1.5),
        b=np.int32(7),
        c=TorchLikeScalar(0.25),
        d=np.array([2.0]),
        e=Decimal("0.5"),
        f=Fraction(1, 4),
    )
    tau_run.log(np.float64(4.0), a=1)
    got = rows(run_env)
    assert [r["step"] for r in got] == [3, 4]
    assert {k: got[0][k] for k in "abcdef"} == {
        "a": 1.5,
        "b": 7,
        "c": 0.25,
        "d": 2.0,
        "e": 0.5,
        "f": 0.25,
    }


def test_non_finite_values_are_recorded_faithfully_as_valid_json(
    run_env: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tau_run._warned.clear()
    tau_run.log(1, loss=float("nan"), up=float("inf"), down=float("-inf"))
    tau_run.log(2, loss=float("nan"))
    text = (run_env / "metrics.jsonl").read_text()
    assert "NaN," not in text and "Infinity," not in text.replace('"Infinity"', "")  # strict JSON
    got = [
        json.loads(line, parse_constant=lambda c: pytest.fail(f"bare {c} in JSON"))
        for line in text.splitlines()
    ]
    assert got[0]["loss"] == "NaN" and got[0]["up"] == "Infinity" and got[0]["down"] == "-Infinity"
    assert got[1]["loss"] == "NaN"
    err = capsys.readouterr().err
    assert err.count("metric loss is nan") == 1  # warned once, not every step


@pytest.mark.parametrize(
    ("step", "metrics", "kept"),
    [
        (-1, {"x": 1.0}, None),
        (1.5, {"x": 1.0}, None),
        (True, {"x": 1.0}, None),
        ("3", {"x": 1.0}, None),
        (1, {"x": "a", "y": 2.0}, {"y": 2.0}),
        (1, {"x": True, "y": 2.0}, {"y": 2.0}),
        (1, {"x": object(), "y": 2.0}, {"y": 2.0}),
        (1, {"x": [1.0, 2.0], "y": 2.0}, {"y": 2.0}),
        (1, {"ts": 1.0, "y": 2.0}, {"y": 2.0}),
    ],
)
def test_bad_rows_never_raise_and_keep_what_is_good(
    run_env: Path,
    capsys: pytest.CaptureFixture[str],
    step: object,
    metrics: dict[str, object],
    kept: dict[str, object] | None,
) -> None:
    tau_run._warned.clear()
    tau_run.log(step, **metrics)
    got = rows(run_env)
    if kept is None:
        assert got == []
    else:
        assert (
            len(got) == 1 and {k: v for k, v in got[0].items() if k not in ("step", "ts")} == kept
        )
    assert "tau_run:" in capsys.readouterr().err


def test_an_unwritable_metrics_file_does_not_stop_training(
    run_env: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    tau_run._warned.clear()
    monkeypatch.setenv("TAU_METRICS_FILE", str(run_env / "missing-dir-is-a-file" / "m.jsonl"))
    (run_env / "missing-dir-is-a-file").write_text("not a dir")
    tau_run.log(1, x=1.0)
    assert "cannot write metrics" in capsys.readouterr().err


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
