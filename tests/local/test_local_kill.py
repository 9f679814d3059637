"""kill -9 at several points of a local run: nothing of a run outlives its sealed record, status
tells the truth when the supervisor is gone, and a NodeFailure retry gets a new Ray head."""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from localkit import Tau, have_ray, text, wait_for

pytestmark = pytest.mark.local

# The training script records its own pid, its parent (the shell wrapper) and a child's.
PIDS_SCRIPT = (
    "import os, pathlib, subprocess, sys, time, tau_run\n"
    "child = subprocess.Popen(['sleep', '300'])\n"
    "pathlib.Path(os.environ['TAU_RUN_DIR'], 'pids.json').write_text(\n"
    '    \'{"me": %d, "parent": %d, "child": %d}\' % (os.getpid(), os.getppid(), child.pid))\n'
    "print('up', flush=True)\n"
    "for i in range(3000):\n"
    "    tau_run.log(i, x=float(i))\n"
    "    print('tick', i, flush=True)\n"
    "    time.sleep(0.05)\n"
)


def gone(pid: int) -> bool:
    """Dead, or a zombie waiting to be reaped (it runs nothing)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True
    return state in ("Z", "X")


def pids(tau: Tau, run_id: str) -> dict[str, int]:
    path = tau.run_dir(run_id) / "pids.json"
    wait_for(lambda: path.exists() and path.read_text().endswith("}"), what="the script's pids")
    return dict(json.loads(path.read_text()))


def assert_record_final(tau: Tau, run_id: str) -> None:
    """Sealed, verified, and nothing writes to it any more."""
    log = tau.run_dir(run_id) / "logs" / "driver.log"
    before = text(log)
    time.sleep(0.5)  # a writer left alive would add ticks every 50 ms
    assert text(log) == before
    res = tau("run", "verify", run_id)
    assert res.returncode == 0, res.stderr


@pytest.mark.parametrize("kind", ["job", "rayjob"])
def test_kill_9_of_the_shell_wrapper_stops_the_whole_run_before_it_is_sealed(
    tau: Tau, project: Callable[[str, str, str], Path], kind: str
) -> None:
    if kind == "rayjob" and not have_ray():
        pytest.skip("Ray is not installed")
    folder = project(
        f"schema_version: 1\nname: wrapper-{kind}\nrun: {{entrypoint: s.py, workload_kind: "
        f"{kind}}}\n",
        "s.py",
        PIDS_SCRIPT,
    )
    run_id = tau("run", str(folder), "-d").stdout.strip()
    p = pids(tau, run_id)
    os.kill(p["parent"], signal.SIGKILL)  # the shell that runs `python s.py | tee ...`
    wait_for(
        lambda: tau.record(run_id)["phase"] == "Failed",
        timeout=90,
        what="the run to fail",
        explain=lambda: tau.explain(run_id),
    )
    # By the time the record says Failed, the script and its child are gone.
    assert gone(p["me"]) and gone(p["child"]), p
    assert_record_final(tau, run_id)
    cancelled = tau("run", "cancel", run_id)
    assert cancelled.returncode == 0 and "already ended" in cancelled.stdout


def test_kill_9_of_the_supervisor_status_tells_the_truth_and_cancel_stops_the_rest(
    tau: Tau, project: Callable[[str, str, str], Path]
) -> None:
    folder = project(
        "schema_version: 1\nname: orphaned\nrun: {entrypoint: s.py, workload_kind: job}\n",
        "s.py",
        PIDS_SCRIPT,
    )
    run_id = tau("run", str(folder), "-d").stdout.strip()
    p = pids(tau, run_id)
    sup = tau.record(run_id)["handle"]["supervisor_pid"]
    os.kill(sup, signal.SIGKILL)
    wait_for(lambda: gone(sup), what="the supervisor to die")
    st = json.loads(tau("run", "status", run_id, "-o", "json").stdout)
    assert st["phase"] == "Running", st
    assert "supervisor is gone" in st["summary"] and "still run" in st["summary"]
    assert (
        f"tau run cancel {run_id}" in st["summary"] and f"tau run attach {run_id}" in st["summary"]
    )
    assert not gone(p["me"])  # truly still running
    res = tau("run", "cancel", run_id)
    assert res.returncode == 0, res.stderr
    assert gone(p["me"]) and gone(p["child"]) and gone(p["parent"])
    assert tau.record(run_id)["phase"] == "Cancelled"
    assert_record_final(tau, run_id)


def test_attach_adopts_a_run_whose_supervisor_died_and_follows_it_to_its_end(
    tau: Tau, project: Callable[[str, str, str], Path], tmp_path: Path
) -> None:
    go = tmp_path / "go"
    folder = project(
        "schema_version: 1\nname: adopted\nrun: {entrypoint: s.py, workload_kind: job}\n",
        "s.py",
        "import pathlib, sys, time\nprint('waiting', flush=True)\n"
        f"while not pathlib.Path({str(go)!r}).exists():\n    time.sleep(0.05)\n"
        "print('done', flush=True)\nsys.exit(3)\n",
    )
    run_id = tau("run", str(folder), "-d").stdout.strip()
    log = tau.run_dir(run_id) / "logs" / "driver.log"
    wait_for(lambda: "waiting" in text(log), what="the script")
    sup = tau.record(run_id)["handle"]["supervisor_pid"]
    os.kill(sup, signal.SIGKILL)
    wait_for(lambda: gone(sup), what="the supervisor to die")
    proc = tau.spawn("run", "attach", run_id)
    wait_for(
        lambda: tau.record(run_id)["handle"]["supervisor_pid"] != sup,
        what="a new supervisor",
        explain=lambda: tau.explain(run_id),
    )
    go.touch()
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 1, err  # the script's own exit code 3 is a failed run
    rec = tau.record(run_id)
    assert rec["phase"] == "Failed" and rec["exit_code"] == 3, rec
    assert "done" in out
    assert_record_final(tau, run_id)


def test_attach_closes_the_record_when_nothing_is_left(
    tau: Tau, project: Callable[[str, str, str], Path]
) -> None:
    folder = project(
        "schema_version: 1\nname: vanished\nrun: {entrypoint: s.py, workload_kind: job}\n",
        "s.py",
        PIDS_SCRIPT,
    )
    run_id = tau("run", str(folder), "-d").stdout.strip()
    p = pids(tau, run_id)
    rec = tau.record(run_id)
    os.kill(rec["handle"]["supervisor_pid"], signal.SIGKILL)
    os.killpg(rec["handle"]["process_group"], signal.SIGKILL)
    os.kill(p["child"], signal.SIGKILL)
    wait_for(lambda: gone(p["me"]) and gone(rec["handle"]["supervisor_pid"]), what="the kills")
    res = tau("run", "attach", run_id)
    assert res.returncode == 1 and "nothing of the run is left" in res.stdout
    after = tau.record(run_id)
    assert after["phase"] == "Failed" and after["termination_reason"] == "SupervisorLost"
    assert_record_final(tau, run_id)


@pytest.mark.skipif(not have_ray(), reason="Ray is not installed")
def test_a_node_failure_retry_starts_a_new_ray_head(
    tau: Tau, project: Callable[[str, str, str], Path]
) -> None:
    folder = project(
        "schema_version: 1\nname: headloss\nrun: {entrypoint: s.py, workload_kind: rayjob}\n"
        "resilience: {max_retries: 1, retry_on: [NodeFailure]}\n",
        "s.py",
        "import os, time\nattempt = int(os.environ['TAU_ATTEMPT'])\n"
        "print('attempt', attempt, flush=True)\n"
        "if attempt == 0:\n    time.sleep(300)\n",
    )
    run_id = tau("run", str(folder), "-d").stdout.strip()
    log = tau.run_dir(run_id) / "logs" / "driver.log"
    wait_for(lambda: "attempt 0" in text(log), timeout=120, what="attempt 0")
    head = json.loads((tau.home / "ray" / "head.json").read_text())
    os.killpg(head["pid"], signal.SIGKILL)
    wait_for(
        lambda: tau.record(run_id)["phase"] in ("Succeeded", "Failed"),
        timeout=180,
        what="the retry to finish",
    )
    rec = tau.record(run_id)
    assert rec["phase"] == "Succeeded" and rec["attempt"] == 1, rec
    assert "attempt 1" in text(log)
    hist = [json.loads(line) for line in text(tau.run_dir(run_id) / "history.jsonl").splitlines()]
    retry = next(h for h in hist if h["phase"] == "Retrying")
    assert retry["termination_reason"] == "NodeFailure"
    new_head = json.loads((tau.home / "ray" / "head.json").read_text())
    assert new_head["pid"] != head["pid"]
    assert_record_final(tau, run_id)


def test_status_and_list_show_duration_metrics_and_the_last_error_when_piped(
    tau: Tau, project: Callable[[str, str, str], Path]
) -> None:
    long_error = "ValueError: " + "the learning rate schedule diverged at warmup " * 4
    folder = project(
        "schema_version: 1\nname: fails-loudly\nrun: {entrypoint: s.py, workload_kind: job}\n",
        "s.py",
        "import sys, tau_run\ntau_run.log(1, loss=2.5)\ntau_run.log(2, loss=1.25)\n"
        f"print('working', flush=True)\nprint({long_error!r}, file=sys.stderr)\n"
        "print('done printing', flush=True)\nsys.exit(2)\n",
    )
    res = tau("run", str(folder))
    assert res.returncode == 1
    run_id = next(w for w in res.stderr.split() if w.startswith("fails-loudly-"))
    st = json.loads(tau("run", "status", run_id, "-o", "json").stdout)
    assert st["latest_metrics"] == {"loss": 1.25} and st["last_step"] == 2
    assert st["last_error"] == long_error.strip() and st["duration_s"] is not None
    assert st["evidence"] == str(tau.run_dir(run_id))
    text_status = tau("run", "status", run_id).stdout
    assert "\x1b[" not in text_status  # piped: no colour codes
    assert "loss=1.25" in text_status and f"last error: {long_error.strip()}" in text_status
    listed = tau("run", "list")
    assert "\x1b[" not in listed.stdout
    row = next(line for line in listed.stdout.splitlines() if line.startswith(run_id))
    assert long_error.strip() in row  # not truncated to the terminal's width
    doc = next(
        r for r in json.loads(tau("run", "list", "-o", "json").stdout) if r["run_id"] == run_id
    )
    for key in (
        "run_id",
        "name",
        "kind",
        "target",
        "phase",
        "attempt",
        "created_at",
        "started_at",
        "finished_at",
        "duration_s",
        "last_step",
        "latest_metrics",
        "exit_code",
        "termination_reason",
        "summary",
        "last_error",
        "evidence",
    ):
        assert key in doc, key
    assert doc["exit_code"] == 2 and doc["termination_reason"] == "Failed"


@pytest.mark.skipif(not have_ray(), reason="Ray is not installed")
def test_back_to_back_short_runs_each_leave_a_standby(
    tau: Tau, project: Callable[[str, str, str], Path]
) -> None:
    folder = project(
        "schema_version: 1\nname: blink\nrun: {entrypoint: s.py, workload_kind: rayjob}\n",
        "s.py",
        "print('blink', flush=True)\n",
    )

    def ready() -> set[str]:
        return {p.name for p in (tau.home / "ray").glob("standby/*/*.ready")}

    for _ in range(3):
        res = tau("run", str(folder))
        assert res.returncode == 0, res.stderr
        wait_for(lambda: bool(ready()), timeout=60, what="a standby after a short run")
    res = tau("run", str(folder))
    run_id = next(w for w in res.stderr.split() if w.startswith("blink-"))
    assert tau.record(run_id)["handle"]["ray_submission_id"].startswith("tau-standby-")
