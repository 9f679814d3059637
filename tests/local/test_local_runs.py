"""The local backend end to end: examples run, evidence is complete and verifiable, faults are
clean."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
from localkit import EXAMPLES, Tau, have_ray, text, wait_for

pytestmark = [
    pytest.mark.local,
    pytest.mark.skipif(
        not have_ray(), reason="Ray is not installed (pip install 'taugrid[local]')"
    ),
]

# Every example but the torchrun ones, which need torch: tests/local/test_local_torch.py runs
# those in the test-only torch environment (make distributed).
EXAMPLE_NAMES = sorted(
    p.parent.name for p in EXAMPLES.glob("*/tau.yaml") if "launcher: torchrun" not in p.read_text()
)


def run_id_from(stderr: str) -> str:
    return next(line.split()[1] for line in stderr.splitlines() if line.startswith("run "))


def assert_not_written(run_dir: Path, secret: str) -> None:
    for f in run_dir.rglob("*"):
        if f.is_file():
            assert secret.encode() not in f.read_bytes(), (
                f"secret written to {f.relative_to(run_dir)}"
            )


def history(tau: Tau, run_id: str) -> list[dict[str, object]]:
    lines = (tau.run_dir(run_id) / "history.jsonl").read_text().splitlines()
    return [json.loads(x) for x in lines]


@pytest.mark.parametrize("name", EXAMPLE_NAMES)
def test_every_example_runs_locally_with_complete_evidence(tau: Tau, name: str) -> None:
    res = tau("run", str(EXAMPLES / name))
    assert res.returncode == 0, res.stderr + res.stdout
    run_id = run_id_from(res.stderr)
    rd = tau.run_dir(run_id)
    rec = tau.record(run_id)
    assert rec["phase"] == "Succeeded" and rec["exit_code"] == 0 and rec["target"] == "local"
    assert (rd / "config" / "tau.yaml").read_text() == (EXAMPLES / name / "tau.yaml").read_text()
    assert (rd / "config" / "resolved.yaml").is_file()
    assert list((rd / "config" / "manifests").glob("local-*.json"))
    assert (rd / "logs" / "driver.log").stat().st_size > 0
    rows = [json.loads(x) for x in (rd / "metrics.jsonl").read_text().splitlines()]
    assert rows and all(isinstance(r["step"], int) and isinstance(r["ts"], float) for r in rows)
    assert [h["phase"] for h in history(tau, run_id)] == [
        "Pending",
        "Starting",
        "Running",
        "Succeeded",
    ]
    assert (rd / "MANIFEST.sha256").is_file()
    assert tau("run", "verify", run_id).returncode == 0
    if json.loads(json.dumps(rec))["gpus_per_worker"]:
        assert "the run uses CPU" in res.stderr
    # the env contract reached the process: the run wrote into its own run dir
    assert any(rd.rglob("*.json")) and str(rd) in (rd / "config" / "resolved.yaml").read_text()


def test_verify_fails_after_one_byte_changes(tau: Tau) -> None:
    res = tau("run", str(EXAMPLES / "batch-job"))
    run_id = run_id_from(res.stderr)
    assert tau("run", "verify", run_id).returncode == 0
    target = tau.run_dir(run_id) / "outputs" / "report.json"
    data = bytearray(target.read_bytes())
    data[0] ^= 0x01
    target.write_bytes(bytes(data))
    bad = tau("run", "verify", run_id)
    assert bad.returncode == 1
    assert "changed: outputs/report.json" in bad.stderr
    data[0] ^= 0x01  # restore; now add a file instead
    target.write_bytes(bytes(data))
    assert tau("run", "verify", run_id).returncode == 0
    (tau.run_dir(run_id) / "outputs" / "extra.txt").write_text("sneaked in")
    bad = tau("run", "verify", run_id)
    assert bad.returncode == 1 and "not in the manifest: outputs/extra.txt" in bad.stderr


def test_crashing_script_fails_with_exit_1_and_sealed_evidence(
    tau: Tau, project: Callable[[str, str, str], Path]
) -> None:
    folder = project(
        "schema_version: 1\nname: crash\nrun: {entrypoint: boom.py, workload_kind: job}\n",
        "boom.py",
        "import tau_run\ntau_run.log(1, loss=1.0)\nprint('about to fail', flush=True)\nraise "
        "SystemExit(3)\n",
    )
    res = tau("run", str(folder))
    assert res.returncode == 1
    run_id = run_id_from(res.stderr)
    rec = tau.record(run_id)
    assert rec["phase"] == "Failed" and rec["exit_code"] == 3 and rec["reason"] == "exit code 3"
    assert "about to fail" in (tau.run_dir(run_id) / "logs" / "driver.log").read_text()
    assert tau("run", "verify", run_id).returncode == 0
    st = json.loads(tau("run", "status", run_id, "-o", "json").stdout)
    completed = next(s for s in st["signals"] if s["name"] == "Completed")
    assert completed["state"] == "false" and "exit code 3" in completed["reason"]


def test_missing_entrypoint_is_a_config_error(tau: Tau, tmp_path: Path) -> None:
    (tmp_path / "tau.yaml").write_text("schema_version: 1\nname: x\nrun: {entrypoint: gone.py}\n")
    res = tau("run", str(tmp_path))
    assert res.returncode == 2 and "run.entrypoint" in res.stderr and "gone.py" in res.stderr


def test_max_retries_honoured(tau: Tau, project: Callable[[str, str, str], Path]) -> None:
    folder = project(
        "schema_version: 1\nname: flaky\nrun: {entrypoint: flaky.py, workload_kind: job}\n"
        "resilience: {max_retries: 2, retry_on: [Failed]}\n",
        "flaky.py",
        "import os, sys\nattempt = int(os.environ['TAU_ATTEMPT'])\nprint('attempt', attempt, "
        "flush=True)\n"
        "sys.exit(1 if attempt < 1 else 0)\n",
    )
    res = tau("run", str(folder))
    assert res.returncode == 0, res.stderr
    run_id = run_id_from(res.stderr)
    assert tau.record(run_id)["attempt"] == 1
    phases = [h["phase"] for h in history(tau, run_id)]
    assert phases == ["Pending", "Starting", "Running", "Retrying", "Running", "Succeeded"]
    log = (tau.run_dir(run_id) / "logs" / "driver.log").read_text()
    assert "attempt 0" in log and "attempt 1" in log


def test_retries_exhausted_then_failed(tau: Tau, project: Callable[[str, str, str], Path]) -> None:
    folder = project(
        "schema_version: 1\nname: always-fails\nrun: {entrypoint: f.py, workload_kind: job}\n"
        "resilience: {max_retries: 1, retry_on: [Failed]}\n",
        "f.py",
        "raise SystemExit(2)\n",
    )
    res = tau("run", str(folder))
    assert res.returncode == 1
    run_id = run_id_from(res.stderr)
    assert [h["phase"] for h in history(tau, run_id)].count("Retrying") == 1
    assert tau.record(run_id)["phase"] == "Failed"


def test_unknown_run_id(tau: Tau) -> None:
    for cmd in ("status", "logs", "cancel", "verify", "resume", "metrics"):
        res = tau("run", cmd, "no-such-run-zzzzz")
        assert res.returncode == 2, cmd
        assert "no run 'no-such-run-zzzzz'" in res.stderr
        assert "Traceback" not in res.stderr


def test_detach_then_status_logs_list_and_cancel(
    tau: Tau, project: Callable[[str, str, str], Path]
) -> None:
    folder = project(
        "schema_version: 1\nname: sleeper\nrun: {entrypoint: s.py, workload_kind: job}\n",
        "s.py",
        "import time, tau_run\nfor i in range(1, 600):\n    tau_run.log(i, x=float(i))\n    "
        "print('tick', i, flush=True)\n"
        "    time.sleep(0.1)\n",
    )
    res = tau("run", str(folder), "-d")
    assert res.returncode == 0
    run_id = res.stdout.strip()
    wait_for(
        lambda: tau.record(run_id)["phase"] == "Running",
        what="Running",
        explain=lambda: tau.explain(run_id),
    )
    wait_for(
        lambda: "tick 3" in text(tau.run_dir(run_id) / "logs" / "driver.log"), what="log lines"
    )
    st = json.loads(tau("run", "status", run_id, "-o", "json").stdout)
    assert st["phase"] == "Running"
    assert [s["name"] for s in st["signals"]] == [
        "Admitted",
        "Scheduled",
        "GPUHealthy",
        "Progressing",
        "Completed",
        "ArtifactSaved",
    ]
    assert next(s for s in st["signals"] if s["name"] == "Progressing")["state"] == "true"
    listed = json.loads(tau("run", "list", "-o", "json").stdout)
    assert any(r["run_id"] == run_id and r["phase"] == "Running" for r in listed)
    assert "tick 1" in tau("run", "logs", run_id).stdout
    cancelled = tau("run", "cancel", run_id)
    assert cancelled.returncode == 0 and "cancelled" in cancelled.stdout
    rec = tau.record(run_id)
    assert rec["phase"] == "Cancelled"
    assert tau("run", "verify", run_id).returncode == 0
    pgid = rec["handle"]["process_group"]

    def group_gone() -> bool:  # its last zombies are reaped by init, asynchronously
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return True
        return False

    wait_for(group_gone, timeout=10, what="the run's process group to be gone")


def test_watch_json_emits_ndjson_until_the_end(
    tau: Tau, project: Callable[[str, str, str], Path]
) -> None:
    folder = project(
        "schema_version: 1\nname: short\nrun: {entrypoint: s.py, workload_kind: job}\n",
        "s.py",
        "import time\nprint('hi', flush=True)\ntime.sleep(1.5)\n",
    )
    run_id = tau("run", str(folder), "-d").stdout.strip()
    res = tau("run", "status", run_id, "--watch", "-o", "json", timeout=60)
    docs = [json.loads(line) for line in res.stdout.splitlines()]
    assert len(docs) >= 1 and docs[-1]["phase"] == "Succeeded"
    assert res.returncode == 0


def test_ctrl_c_detaches_without_cancelling(
    tau: Tau, project: Callable[[str, str, str], Path], tmp_path: Path
) -> None:
    # The script ends only once the test has seen the CLI detach (a fixed sleep would race a
    # slow CLI: the run could end before the Ctrl-C).
    folder = project(
        "schema_version: 1\nname: ctrlc\nrun: {entrypoint: s.py, workload_kind: job}\n",
        "s.py",
        "import os, time\nprint('started', flush=True)\n"
        f"while not os.path.exists({str(tmp_path / 'go')!r}):\n    time.sleep(0.05)\n"
        "print('finished', flush=True)\n",
    )
    # PYTHONFAULTHANDLER: if the CLI hangs, SIGABRT makes it print where each thread is.
    proc = tau.spawn("run", str(folder), env={"PYTHONFAULTHANDLER": "1"})
    assert proc.stdout is not None and proc.stderr is not None
    assert proc.stdout.readline().strip() == "started"
    proc.send_signal(signal.SIGINT)
    try:
        _, err = proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        alive = proc.poll() is None  # False: it exited, but something else holds its pipes
        proc.send_signal(signal.SIGABRT)
        try:
            _, late = proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            late = "(no output: the pipes stayed open after SIGABRT)"
        pytest.fail(f"tau did not end within 30 s of SIGINT (still running: {alive}):\n{late}")
    assert proc.returncode == 130, err
    (tmp_path / "go").touch()
    assert "detached" in err and "tau run status" in err and "tau run cancel" in err
    run_id = run_id_from(err)
    wait_for(
        lambda: tau.record(run_id)["phase"] == "Succeeded",
        what="the detached run to finish",
        explain=lambda: tau.explain(run_id),
    )
    assert "finished" in (tau.run_dir(run_id) / "logs" / "driver.log").read_text()


def test_kill_9_of_the_supervisor_loses_no_evidence(
    tau: Tau, project: Callable[[str, str, str], Path]
) -> None:
    folder = project(
        "schema_version: 1\nname: victim\nrun: {entrypoint: s.py, workload_kind: job}\n",
        "s.py",
        "import time, tau_run\nfor i in range(1, 1000):\n    tau_run.log(i, x=1.0)\n    "
        "print('line', i, flush=True)\n"
        "    time.sleep(0.05)\n",
    )
    run_id = tau("run", str(folder), "-d").stdout.strip()
    rd = tau.run_dir(run_id)
    wait_for(lambda: "line 5" in text(rd / "logs" / "driver.log"), what="output")
    rec = tau.record(run_id)
    os.kill(rec["handle"]["supervisor_pid"], signal.SIGKILL)
    os.killpg(rec["handle"]["process_group"], signal.SIGKILL)
    wait_for(
        lambda: (
            subprocess.run(
                ["kill", "-0", str(rec["handle"]["supervisor_pid"])], capture_output=True
            ).returncode
            != 0
        )
    )
    # Everything written so far is intact and readable.
    assert json.loads((rd / "run.json").read_text())["run_id"] == run_id
    assert [h["phase"] for h in history(tau, run_id)][:3] == ["Pending", "Starting", "Running"]
    assert (rd / "config" / "tau.yaml").read_text().startswith("schema_version: 1")
    assert "line 5" in (rd / "logs" / "driver.log").read_text()
    st = json.loads(tau("run", "status", run_id, "-o", "json").stdout)
    assert st["phase"] == "Failed" and "supervisor" in st["summary"]
    assert tau("run", "cancel", run_id).returncode == 0
    assert tau.record(run_id)["phase"] == "Cancelled"
    assert tau("run", "verify", run_id).returncode == 0


def test_concurrent_runs_share_one_head(tau: Tau) -> None:
    results: list[subprocess.CompletedProcess[str]] = []

    def go() -> None:
        results.append(tau("run", str(EXAMPLES / "quickstart")))

    threads = [threading.Thread(target=go) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert [r.returncode for r in results] == [0, 0], [r.stderr for r in results]
    ids = {run_id_from(r.stderr) for r in results}
    assert len(ids) == 2
    heads = {tau.record(i)["handle"]["ray_address"] for i in ids}
    assert len(heads) == 1


def test_strict_refuses_gpu_work_on_cpu(tau: Tau) -> None:
    res = tau("run", str(EXAMPLES / "quickstart"), "--strict")
    assert res.returncode == 4 and "--strict" in res.stderr


def test_ray_pip_only_for_rayjob(tau: Tau) -> None:
    res = tau("run", str(EXAMPLES / "batch-job"), "--ray-pip")
    assert res.returncode == 2 and "subprocess" in res.stderr


def test_missing_pip_packages_are_named(tau: Tau, project: Callable[[str, str, str], Path]) -> None:
    folder = project(
        "schema_version: 1\nname: pipcheck\nrun: {entrypoint: s.py, workload_kind: job}\n"
        "runtime: {pip: ['definitely-not-installed-pkg>=1', 'pyyaml>=5']}\n",
        "s.py",
        "print('ok')\n",
    )
    res = tau("run", str(folder))
    assert res.returncode == 0
    assert (
        "definitely-not-installed-pkg>=1" in res.stderr
        and "pyyaml" not in res.stderr.split("not installed here:")[1].split("\n")[0]
    )


def test_metrics_terminal_and_png(tau: Tau, tmp_path: Path) -> None:
    run_id = run_id_from(tau("run", str(EXAMPLES / "batch-job")).stderr)
    text = tau("run", "metrics", run_id)
    assert text.returncode == 0 and "positive_rate" in text.stdout
    png = tmp_path / "m.png"
    res = tau("run", "metrics", run_id, "--png", str(png))
    assert res.returncode == 0, res.stderr
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert tau("run", "metrics", run_id, "-m", "nope").returncode == 2


def _pids_of_run(run_id: str) -> list[int]:
    """Processes whose environment carries TAU_RUN_ID=<run_id> (the driver and its Ray workers)."""
    needle = f"TAU_RUN_ID={run_id}".encode()
    pids = []
    for env_file in Path("/proc").glob("[0-9]*/environ"):
        try:
            if needle in env_file.read_bytes().split(b"\0"):
                pids.append(int(env_file.parent.name))
        except OSError:
            continue
    return [p for p in pids if p != os.getpid()]


def test_resume_from_checkpoint_end_to_end(tau: Tau, example_copy: Callable[[str], Path]) -> None:
    folder = example_copy("multi-worker-gpu")
    cfg = (folder / "tau.yaml").read_text()
    (folder / "tau.yaml").write_text(
        cfg.replace("  pip:\n", "  env: {TRAIN_STEP_SLEEP: '0.25'}\n  pip:\n")
    )
    parent = tau("run", str(folder), "-d").stdout.strip()
    pdir = tau.run_dir(parent)
    index = pdir / "checkpoints" / "index.json"
    wait_for(lambda: '"step": 10' in text(index), timeout=120, what="checkpoint 10")
    for pid in _pids_of_run(parent):
        with contextlib.suppress(ProcessLookupError):  # one that ended since it was listed
            os.kill(pid, signal.SIGKILL)
    wait_for(
        lambda: tau.record(parent)["phase"] == "Failed", timeout=60, what="the killed run to fail"
    )
    parent_rows = [json.loads(x) for x in (pdir / "metrics.jsonl").read_text().splitlines()]
    newest = max(e["step"] for e in json.loads(index.read_text())["complete"])
    assert newest >= 10 and parent_rows[-1]["step"] < 30

    res = tau("run", "resume", parent, timeout=300)
    assert res.returncode == 0, res.stderr
    child = run_id_from(res.stderr)
    crec = tau.record(child)
    assert crec["resumed_from"]["run_id"] == parent
    assert crec["resumed_from"]["checkpoint"].endswith(f"step-{newest:08d}")
    rows = [json.loads(x) for x in (tau.run_dir(child) / "metrics.jsonl").read_text().splitlines()]
    assert rows[0]["step"] == newest + 1 and rows[-1]["step"] == 30
    assert f"resuming at step {newest}" in (tau.run_dir(child) / "logs" / "driver.log").read_text()
    lineage = [json.loads(x) for x in (pdir / "lineage.jsonl").read_text().splitlines()]
    assert lineage[-1]["resumed_by"] == child
    # the parent's record was re-sealed over the lineage entry, and both verify
    assert tau("run", "verify", parent).returncode == 0
    assert tau("run", "verify", child).returncode == 0
    # the child's metrics continue the parent's curve: the parent's rows up to the checkpoint
    across = json.loads(tau("run", "metrics", child, "-o", "json").stdout)
    steps = [(r["run_id"], r["step"]) for r in across]
    assert steps == [(parent, r["step"]) for r in parent_rows if r["step"] <= newest] + [
        (child, r["step"]) for r in rows
    ]
    plot = tau("run", "metrics", child)
    assert plot.returncode == 0 and f"resumed from {parent}" in plot.stdout


def test_resume_needs_a_checkpoint(tau: Tau) -> None:
    run_id = run_id_from(tau("run", str(EXAMPLES / "batch-job")).stderr)
    runs = tau.run_dir(run_id).parent
    before = {p.name for p in runs.iterdir()}
    res = tau("run", "resume", run_id)
    assert res.returncode == 3 and "no complete checkpoint" in res.stderr  # cannot be done as asked
    assert "nothing was submitted" in res.stderr
    assert {p.name for p in runs.iterdir()} == before


def test_secret_values_never_enter_the_record(
    tau: Tau, project: Callable[[str, str, str], Path]
) -> None:
    folder = project(
        "schema_version: 1\nname: secretive\nrun: {entrypoint: s.py, workload_kind: job}\n"
        "runtime: {env_from_secret: {HF_TOKEN: 'hf-secret:token'}}\n",
        "s.py",
        "import os\nprint('token length', len(os.environ['HF_TOKEN']), flush=True)\n",
    )
    secret = "hf_SuperSecretValue_42"
    res = tau("run", str(folder), env={"HF_TOKEN": secret})
    assert res.returncode == 0, res.stderr
    run_id = run_id_from(res.stderr)
    rd = tau.run_dir(run_id)
    assert (
        f"token length {len(secret)}" in (rd / "logs" / "driver.log").read_text()
    )  # it reached the process
    assert_not_written(rd, secret)
    assert (
        "hf-secret:token" in (rd / "config" / "resolved.yaml").read_text()
    )  # the reference is kept


# --- standbys (runs/backends/local/standby.py) and the launcher (launch.py) -------------------
def _ready_standbys(tau: Tau) -> set[str]:
    return {p.name.removesuffix(".ready") for p in (tau.home / "ray").glob("standby/*/*.ready")}


def _warm_head(tau: Tau, standby: bool = False) -> str:
    """Run the quickstart (starting the head if needed); with `standby`, also wait until the
    standby its supervisor submitted is ready to be claimed."""
    res = tau("run", str(EXAMPLES / "quickstart"))
    assert res.returncode == 0, res.stderr
    if standby:
        wait_for(lambda: bool(_ready_standbys(tau)), what="a standby to be ready")
    return str(tau.record(run_id_from(res.stderr))["handle"]["ray_address"])


def test_a_warm_run_claims_the_standby_the_previous_run_prepared(tau: Tau) -> None:
    from taugrid.runs.backends.local import rayhead as raylocal

    dashboard = _warm_head(tau, standby=True)
    res = tau("run", str(EXAMPLES / "quickstart"))
    assert res.returncode == 0, res.stderr
    run_id = run_id_from(res.stderr)
    sub_id = tau.record(run_id)["handle"]["ray_submission_id"]
    assert sub_id.startswith("tau-standby-")
    info = raylocal.job_info(dashboard, sub_id)
    assert "--standby" in info["entrypoint"] and info["status"] == "SUCCEEDED"
    assert "quickstart: fitting" in res.stdout
    assert "quickstart: fitting" in raylocal.job_logs(dashboard, sub_id)
    assert tau("run", "verify", run_id).returncode == 0


def test_without_standbys_a_warm_run_is_submitted_after_its_record(tau: Tau) -> None:
    from datetime import datetime

    from taugrid.runs.backends.local import rayhead as raylocal

    dashboard = _warm_head(tau)
    res = tau("run", str(EXAMPLES / "quickstart"), env={"TAU_LOCAL_STANDBY": "0"})
    assert res.returncode == 0, res.stderr
    run_id = run_id_from(res.stderr)
    rec = tau.record(run_id)
    assert rec["handle"]["ray_submission_id"] == run_id
    info = raylocal.job_info(dashboard, run_id)
    assert (
        "taugrid.runs.backends.local.launch" in info["entrypoint"] and info["status"] == "SUCCEEDED"
    )
    created = datetime.fromisoformat(rec["created_at"]).timestamp()
    assert info["start_time"] / 1000 >= created - 0.01, "the job was submitted before the record"
    assert "quickstart: fitting" in text(tau.run_dir(run_id) / "logs" / "driver.log")


@pytest.mark.parametrize("standby", ["1", "0"])
def test_a_refused_run_touches_neither_ray_nor_the_standby(
    tau: Tau, example_copy: Callable[[str], Path], standby: str
) -> None:
    from taugrid.runs.backends.local import rayhead as raylocal

    dashboard = _warm_head(tau, standby=standby == "1")
    folder = example_copy("quickstart")
    manifest = folder / "tau.yaml"
    manifest.write_text(manifest.read_text().replace("  workers: 1", "  workers: 1\n  gpuz: 2"))
    jobs_before = {j["submission_id"] for j in raylocal.list_jobs(dashboard)}
    ready_before = _ready_standbys(tau)
    runs_before = set(os.listdir(tau.home / "data" / "runs"))
    res = tau("run", str(folder), env={"TAU_LOCAL_STANDBY": standby})
    assert res.returncode == 2 and "gpuz" in res.stderr
    assert {j["submission_id"] for j in raylocal.list_jobs(dashboard)} == jobs_before
    assert _ready_standbys(tau) == ready_before  # still there for the next run
    assert set(os.listdir(tau.home / "data" / "runs")) == runs_before


@pytest.mark.parametrize("with_secret", [True, False])
def test_rayjob_env_and_secrets_reach_the_runs_ray_tasks(
    tau: Tau, project: Callable[[str, str, str], Path], with_secret: bool
) -> None:
    """With a secret the job is submitted with the secret in its runtime_env; without, a
    standby is claimed."""
    folder = project(
        "schema_version: 1\nname: envprobe\nrun: {entrypoint: s.py, workload_kind: rayjob}\n"
        "runtime:\n  env: {PROBE_VAR: hello}\n"
        + ("  env_from_secret: {HF_TOKEN: 'hf-secret:token'}\n" if with_secret else ""),
        "s.py",
        "import os, ray\nray.init()\n"
        "@ray.remote(num_cpus=0)\n"
        "def probe():\n"
        "    e = os.environ\n"
        "    return e.get('TAU_RUN_ID'), e.get('PROBE_VAR'), len(e.get('HF_TOKEN', ''))\n"
        "print('task sees', *ray.get(probe.remote()), flush=True)\n",
    )
    secret = "hf_AnotherSecret_7"
    _warm_head(tau, standby=not with_secret)
    res = tau("run", str(folder), env={"HF_TOKEN": secret})
    assert res.returncode == 0, res.stderr
    run_id = run_id_from(res.stderr)
    assert f"task sees {run_id} hello {len(secret) if with_secret else 0}" in res.stdout
    assert (
        tau.record(run_id)["handle"]["ray_submission_id"].startswith("tau-standby-") != with_secret
    )
    assert_not_written(tau.run_dir(run_id), secret)


def test_a_rayjob_retry_goes_through_the_launcher_with_its_attempt_and_resume_point(
    tau: Tau, project: Callable[[str, str, str], Path]
) -> None:
    folder = project(
        "schema_version: 1\nname: flaky-ray\nrun: {entrypoint: f.py, workload_kind: rayjob}\n"
        "resilience: {max_retries: 1, retry_on: [Failed], auto_resume: true}\n",
        "f.py",
        "import os, sys, ray, tau_run\n"
        "attempt = int(os.environ['TAU_ATTEMPT'])\n"
        "ray.init()\n"
        "@ray.remote(num_cpus=0)\n"
        "def seen():\n    return os.environ.get('TAU_ATTEMPT')\n"
        "print('attempt', attempt, 'task', ray.get(seen.remote()),\n"
        "      'resume', os.path.basename(os.environ.get('TAU_RESUME_FROM', '-')), flush=True)\n"
        "if attempt == 0:\n"
        "    with tau_run.checkpoint(5) as d:\n"
        "        (d / 'state').write_text('5')\n"
        "    sys.exit(1)\n",
    )
    res = tau("run", str(folder))
    assert res.returncode == 0, res.stderr
    run_id = run_id_from(res.stderr)
    log = (tau.run_dir(run_id) / "logs" / "driver.log").read_text()
    assert "attempt 0 task 0 resume -" in log
    assert "attempt 1 task 1 resume step-00000005" in log
    rec = tau.record(run_id)
    assert rec["attempt"] == 1 and rec["handle"]["ray_submission_id"] == f"{run_id}-a1"
