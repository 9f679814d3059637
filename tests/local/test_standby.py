"""The run launcher and standby jobs, without Ray: the launcher's environment and its waiting,
standbys announcing, being claimed once, expiring, and a claimed standby stopped when tau refuses
the run before writing its plan. The real-Ray behaviour is in test_local_runs.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import pytest

from taugrid.runs.backends.local import launch, standby
from taugrid.runs.backends.local.plan import LocalPlan

PLAN = LocalPlan(
    kind="rayjob",
    env={"TAU_RUN_ID": "r-1", "TAU_RESUME_FROM": "/old", "USER_VAR": "u"},
    cwd="/",
    script="true",
    checkpoint_subdir="checkpoints",
    secret_env=["HF_TOKEN"],
)


def test_attempt_env_sets_attempt_and_resume_point() -> None:
    env = launch.attempt_env(PLAN, 2, "/ckpt/3")
    assert env["TAU_ATTEMPT"] == "2" and env["TAU_RESUME_FROM"] == "/ckpt/3"
    assert "TAU_RESUME_FROM" not in launch.attempt_env(PLAN, 0, None)
    assert PLAN.env["TAU_RESUME_FROM"] == "/old"  # the plan is not modified


def test_secrets_come_from_the_environment_by_name_only() -> None:
    assert launch.secret_env(PLAN, {"HF_TOKEN": "s", "OTHER": "o"}) == {"HF_TOKEN": "s"}
    assert launch.secret_env(PLAN, {}) == {}


def test_the_run_env_also_reaches_the_jobs_tasks_through_the_job_config() -> None:
    cfg = {"runtime_env": {"env_vars": {"HF_TOKEN": "s"}}, "metadata": {"k": "v"}}
    environ = {"PATH": "/bin", launch.RAY_JOB_CONFIG_ENV: json.dumps(cfg)}
    env = launch.driver_env(environ, {"TAU_RUN_ID": "r-1"})
    assert env["TAU_RUN_ID"] == "r-1" and env["PATH"] == "/bin"
    got = json.loads(env[launch.RAY_JOB_CONFIG_ENV])
    assert got["runtime_env"]["env_vars"] == {"HF_TOKEN": "s", "TAU_RUN_ID": "r-1"}
    assert got["metadata"] == {"k": "v"}


@pytest.mark.parametrize("raw", [None, "", "not json", json.dumps({"runtime_env": None})])
def test_driver_env_without_a_usable_job_config(raw: str | None) -> None:
    environ = {} if raw is None else {launch.RAY_JOB_CONFIG_ENV: raw}
    env = launch.driver_env(environ, {"A": "1"})
    assert env["A"] == "1"
    if raw and raw.startswith("{"):
        assert json.loads(env[launch.RAY_JOB_CONFIG_ENV])["runtime_env"]["env_vars"] == {"A": "1"}


def test_entrypoint_quotes_paths(tmp_path: Path) -> None:
    odd = tmp_path / "a dir; rm -rf x"
    cmd = launch.entrypoint(odd, 1, "/ck pt/'3'")
    out = subprocess.run(
        ["bash", "-c", cmd.replace("exec ", "printf '%s\\n' ", 1)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    assert out[-5:] == [str(odd), "--attempt", "1", "--resume-from", "/ck pt/'3'"]


def test_launcher_runs_the_plan_in_its_folder_with_the_run_env(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    plan = asdict(
        replace(PLAN, cwd=str(tmp_path), script='echo "$PWD $TAU_RUN_ID $TAU_ATTEMPT $HF_TOKEN"')
    )
    launch_plan = run_dir / "config" / "manifests" / "local-rayjob.json"
    launch_plan.parent.mkdir(parents=True)
    launch_plan.write_text(json.dumps(plan))
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "taugrid.runs.backends.local.launch",
            str(run_dir),
            "--attempt",
            "1",
        ],
        capture_output=True,
        text=True,
        env={**os.environ, "HF_TOKEN": "tok"},
        timeout=60,
        check=False,
    )
    assert res.returncode == 0, res.stderr
    assert res.stdout.split() == [str(tmp_path), "r-1", "1", "tok"]


def test_launcher_gives_up_without_a_plan_and_runs_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(launch, "PLAN_WAIT_S", 0.05)
    monkeypatch.setattr(
        launch.os, "execvpe", lambda *a: pytest.fail("ran something without a plan")
    )
    assert launch.main([str(tmp_path / "never-written")]) == launch.EXIT_NO_PLAN
    assert "no plan" in capsys.readouterr().err


def test_wait_for_plan_sees_a_plan_written_while_waiting(tmp_path: Path) -> None:
    import threading

    path = tmp_path / "plan.json"

    def write() -> None:  # first a torn write, then the whole file (as tau writes it)
        path.write_text('{"kind"')
        tmp = tmp_path / "tmp.json"
        tmp.write_text(json.dumps(asdict(PLAN)))
        tmp.replace(path)

    timer = threading.Timer(0.05, write)
    timer.start()
    try:
        assert launch.wait_for_plan(path, timeout_s=30) == PLAN
    finally:
        timer.cancel()


# --- standbys ---------------------------------------------------------------------------------
def _head(pid: int = 4242) -> Any:
    from taugrid.runs.backends.local import rayhead as raylocal

    return raylocal.Head(
        pid=pid,
        gcs_port=1,
        dashboard_port=2,
        temp_dir="/tmp",
        started_at=0.0,
        num_cpus=2,
        num_gpus=0,
    )


def _later(delay: float, fn: Any) -> Any:
    import threading

    t = threading.Timer(delay, fn)
    t.start()
    return t


def test_a_standby_announces_itself_and_returns_the_run_it_is_claimed_for(tmp_path: Path) -> None:
    base = tmp_path / "tau-standby-aaaaa"
    (tmp_path / "tau-standby-aaaaa.submitted").touch()

    def claim() -> None:
        assert json.loads((tmp_path / "tau-standby-aaaaa.ready").read_text())["pid"] == os.getpid()
        (tmp_path / "tau-standby-aaaaa.ready").rename(tmp_path / "tau-standby-aaaaa.taken")
        (tmp_path / "tau-standby-aaaaa.claim").write_text(json.dumps({"run_dir": "/runs/r-1"}))

    t = _later(0.1, claim)
    try:
        assert launch.wait_for_claim(base, idle_s=30) == Path("/runs/r-1")
    finally:
        t.cancel()
    assert list(tmp_path.iterdir()) == []  # ready, submitted, taken, claim: all cleaned up


def test_an_unclaimed_standby_leaves(tmp_path: Path) -> None:
    assert launch.wait_for_claim(tmp_path / "tau-standby-bbbbb", idle_s=0.05) is None
    assert list(tmp_path.iterdir()) == []


def test_a_standby_taken_at_its_deadline_waits_for_the_claim(tmp_path: Path) -> None:
    ready = tmp_path / "tau-standby-ccccc.ready"

    def take_then_claim_late() -> None:
        ready.rename(tmp_path / "tau-standby-ccccc.taken")
        _later(0.3, lambda: (tmp_path / "tau-standby-ccccc.claim").write_text('{"run_dir": "/r"}'))

    t = _later(0.02, take_then_claim_late)  # taken before the 0.1 s deadline, claimed after it
    try:
        assert launch.wait_for_claim(tmp_path / "tau-standby-ccccc", idle_s=0.1) == Path("/r")
    finally:
        t.cancel()


def test_claim_skips_dead_standbys_and_takes_a_live_one_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TAU_HOME", str(tmp_path))
    d = standby.standby_dir(_head())
    d.mkdir(parents=True)
    (d / "tau-standby-00000.ready").write_text(json.dumps({"pid": 2**22 + 12345}))  # no such pid
    (d / "tau-standby-11111.ready").write_text("{broken")
    (d / "tau-standby-22222.ready").write_text(json.dumps({"pid": os.getpid()}))
    run_dir = tmp_path / "runs" / "r-1"
    claim = standby.claim_standby(_head(), run_dir)
    assert claim is not None and claim.submission_id == "tau-standby-22222"
    assert not (d / "tau-standby-00000.ready").exists()  # cleaned up
    assert (d / "tau-standby-22222.taken").exists()
    assert json.loads((d / "tau-standby-22222.claim").read_text()) == {"run_dir": str(run_dir)}
    assert standby.claim_standby(_head(), run_dir) is None  # nothing live is left
    monkeypatch.setenv("TAU_LOCAL_STANDBY", "0")
    (d / "tau-standby-33333.ready").write_text(json.dumps({"pid": os.getpid()}))
    assert standby.claim_standby(_head(), run_dir) is None


def test_ensure_standby_submits_one_only_when_none_is_ready_or_starting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TAU_HOME", str(tmp_path))
    submitted: list[tuple[Any, ...]] = []
    monkeypatch.setattr(standby.rayhead, "submit_job", lambda *a, **k: submitted.append((*a, k)))
    first = standby.ensure_standby(_head())
    assert first and first.startswith("tau-standby-") and len(submitted) == 1
    assert "--standby" in submitted[0][2] and submitted[0][-1]["metadata"]["tau_standby"]
    assert standby.ensure_standby(_head()) is None  # one is starting
    d = standby.standby_dir(_head())
    old = time.time() - 2 * standby.STANDBY_START_S
    os.utime(d / f"{first}.submitted", (old, old))  # ...that never started
    second = standby.ensure_standby(_head())
    assert second and second != first and len(submitted) == 2
    (d / f"{second}.submitted").unlink()
    (d / f"{second}.ready").write_text(json.dumps({"pid": os.getpid()}))
    assert standby.ensure_standby(_head()) is None  # one is ready
    assert len(submitted) == 2
    monkeypatch.setenv("TAU_LOCAL_STANDBY", "0")
    (d / f"{second}.ready").unlink()
    assert standby.ensure_standby(_head()) is None and len(submitted) == 2


def test_aborting_a_claimed_standby_stops_its_job_and_removes_its_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TAU_HOME", str(tmp_path))
    stopped: list[tuple[str, str]] = []
    monkeypatch.setattr(standby.rayhead, "stop_job", lambda d, s: stopped.append((d, s)))
    d = standby.standby_dir(_head())
    d.mkdir(parents=True)
    (d / "tau-standby-44444.ready").write_text(json.dumps({"pid": os.getpid()}))
    claim = standby.claim_standby(_head(), tmp_path / "runs" / "r-1")
    assert claim is not None
    claim.abort()
    claim.abort()  # once only
    assert stopped == [(_head().dashboard, "tau-standby-44444")]
    assert list(d.iterdir()) == []


def test_the_jobs_runtime_env_carries_secrets_and_pip_only() -> None:
    assert launch.ray_runtime_env(PLAN, {}) == {}
    assert launch.ray_runtime_env(PLAN, {"HF_TOKEN": "s"}) == {"env_vars": {"HF_TOKEN": "s"}}
    assert launch.ray_runtime_env(replace(PLAN, pip=["rich>=13"]), {}) == {"pip": ["rich>=13"]}
