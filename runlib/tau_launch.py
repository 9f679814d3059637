"""tau_launch: runs a cluster run's entrypoint in its pod and keeps its evidence record on the
workspace PVC (stdlib only; carried in the run's code ConfigMap with tau_evidence and tau_run).

    python tau_launch.py -- python train.py --epochs 3

Under $TAU_RUN_DIR (/data/runs/<run-id>/): logs/driver.log (everything the entrypoint prints,
also on stdout for `kubectl logs`-style readers), history.jsonl (Running, then Succeeded or Failed
with the exit code), run.json (what the pod knows of the run), and MANIFEST.sha256 sealed at
the end with the same code as a local run's record (tau_evidence.py). Checkpoints and metrics
are the entrypoint's, through tau_run. The exit code is the entrypoint's.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import tau_evidence

NEWEST = "@newest"  # taugrid.api.constants.NEWEST_CHECKPOINT
CONTAINER_LOG = "/proc/1/fd/1"  # a container's log: its first process's stdout


def _newest(folder: Path) -> Path | None:
    """The newest complete checkpoint of a folder (its index), as `tau run resume` picks."""
    import tau_run

    done = tau_run.complete_checkpoints(folder)
    return folder / done[-1]["path"] if done else None


def _attempt() -> int:
    try:
        return int(os.environ.get("TAU_ATTEMPT", "0"))
    except ValueError:
        return 0


def _record(run_dir: Path, updates: dict[str, Any]) -> None:
    path = run_dir / "run.json"
    try:
        rec = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        rec = {
            "schema_version": 1,
            "run_id": os.environ.get("TAU_RUN_ID", run_dir.name),
            "name": os.environ.get("TAU_RUN_NAME", ""),
            "workspace": os.environ.get("TAU_WORKSPACE", ""),
            "created_at": tau_evidence.now_iso(),
            "written_by": "tau_launch (in the run's pod)",
        }
    rec.update(updates)
    tmp = run_dir / ".run.json.tmp"
    tmp.write_text(json.dumps(rec, indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, path)


NODE_WAIT_S = 120.0  # torchrun: how long node 0 waits for the other nodes' ends before sealing


def torchrun_argv(script: list[str], env: dict[str, str]) -> list[str]:
    """torchrun for this node: standalone on one node; else the c10d rendezvous on node 0's
    stable name (MASTER_ADDR, from the run's headless Service), the run id as its id."""
    nodes = int(env.get("TAU_NODES") or 1)
    nproc = int(env.get("TAU_NPROC_PER_NODE") or 1)
    cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={nproc}"]
    if nodes <= 1:
        return [*cmd, "--standalone", *script]
    endpoint = f"{env.get('MASTER_ADDR', '127.0.0.1')}:{env.get('MASTER_PORT', '29500')}"
    return [
        *cmd,
        f"--nnodes={nodes}",
        "--rdzv-backend=c10d",
        f"--rdzv-endpoint={endpoint}",
        f"--rdzv-id={env.get('TAU_RUN_ID', 'tau')}",
        *script,
    ]


def node_index(env: dict[str, str]) -> int | None:
    """This pod's node of a multi-node run (an Indexed Job's index); None: a one-node run."""
    if int(env.get("TAU_NODES") or 1) <= 1:
        return None
    raw = env.get("JOB_COMPLETION_INDEX") or env.get("TAU_NODE_RANK") or "0"
    return int(raw) if raw.isdigit() else 0


def _wait_for_nodes(run_dir: Path, nodes: int) -> list[int]:
    """Node 0, before sealing: the other nodes' exit codes (bounded: a node that never ends is
    reported as missing, -1, not waited for forever)."""
    import time

    deadline = time.monotonic() + NODE_WAIT_S
    codes = {}
    while True:
        for i in range(1, nodes):
            f = run_dir / "nodes" / str(i) / "exit.json"
            if i not in codes and f.exists():
                try:
                    codes[i] = int(json.loads(f.read_text(encoding="utf-8"))["exit_code"])
                except (OSError, ValueError, KeyError):
                    continue
        if len(codes) == nodes - 1 or time.monotonic() >= deadline:
            return [codes.get(i, -1) for i in range(1, nodes)]
        time.sleep(0.5)


def container_stdout() -> Any:
    """The container's own log (its PID 1's stdout), opened for a Ray job's driver: KubeRay runs
    the entrypoint under the head's Ray, whose job log is not the head container's, so without
    this copy the pod's log shows Ray starting and nothing the entrypoint prints. None when this
    process already writes there, or the container's stdout cannot be opened."""
    try:
        if os.fstat(1).st_ino == os.stat(CONTAINER_LOG).st_ino:
            return None
        return open(CONTAINER_LOG, "ab", buffering=0)  # kept open for the run's life
    except OSError:
        return None


def main(argv: list[str]) -> int:
    opts = argv[: argv.index("--")] if "--" in argv else argv[:1]
    torchrun = "--torchrun" in opts
    echo = container_stdout() if "--container-log" in opts else None
    if "--" in argv:
        argv = argv[argv.index("--") + 1 :]
    if not argv:
        print(
            "usage: python tau_launch.py [--torchrun] [--container-log] -- COMMAND [ARGS...]",
            file=sys.stderr,
        )
        return 2
    env = dict(os.environ)
    if torchrun:
        argv = torchrun_argv(argv, env)
    node = node_index(env) if torchrun else None
    run_dir = Path(os.environ.get("TAU_RUN_DIR") or "tau-run")
    if node is not None and node > 0:  # a node other than 0: its own evidence under the run's
        return _other_node(argv, run_dir / "nodes" / str(node))
    for sub in ("logs", os.environ.get("TAU_CHECKPOINT_DIR"), os.environ.get("TAU_OUTPUT_DIR")):
        if sub:
            (run_dir / sub).mkdir(parents=True, exist_ok=True)
    attempt = _attempt()
    if not _resume_from_newest():
        return 3
    import tau_inputs

    failed = tau_inputs.lay_out(dict(os.environ), run_dir / "logs" / "driver.log", "tau_launch")
    if failed is not None:  # data inputs by exact version, checked, before the entrypoint starts
        return failed
    started = tau_evidence.now_iso()
    _record(run_dir, {"phase": "Running", "attempt": attempt, "started_at": started})
    tau_evidence.append_history(
        run_dir, {"ts": started, "phase": "Running", "reason": "pod started", "attempt": attempt}
    )
    rc = _run_teed(argv, run_dir / "logs" / "driver.log", echo)
    if node is not None:  # node 0 of several: the run ends when every node has
        rc = _with_other_nodes(run_dir, rc, int(env.get("TAU_NODES") or 1))
    phase = "Succeeded" if rc == 0 else "Failed"
    ended = tau_evidence.now_iso()
    reason = "exit code 0" if rc == 0 else f"exit code {rc}"
    tau_evidence.append_history(
        run_dir,
        {
            "ts": ended,
            "phase": phase,
            "reason": reason,
            "attempt": attempt,
            "termination_reason": "Completed" if rc == 0 else "Failed",
        },
    )
    _record(run_dir, {"phase": phase, "reason": reason, "exit_code": rc, "finished_at": ended})
    tau_evidence.seal(run_dir)
    return rc


def _resume_from_newest() -> bool:
    """TAU_RESUME_FROM ending in /NEWEST: the newest complete checkpoint of that folder
    (False, said, when it has none)."""
    resume = os.environ.get("TAU_RESUME_FROM", "")
    if resume.endswith("/" + NEWEST):
        found = _newest(Path(resume[: -len(NEWEST) - 1]))
        if found is None:
            print(
                f"tau_launch: no complete checkpoint in {resume[: -len(NEWEST) - 1]} to resume "
                "from",
                file=sys.stderr,
                flush=True,
            )
            return False
        os.environ["TAU_RESUME_FROM"] = str(found)
        print(f"tau_launch: resuming from {found}", flush=True)
    return True


def _with_other_nodes(run_dir: Path, rc: int, nodes: int) -> int:
    """Node 0's exit code once every other node has ended: 1 when one failed or never ended
    (each named)."""
    (run_dir / "nodes" / "0").mkdir(parents=True, exist_ok=True)
    _write_exit(run_dir / "nodes" / "0", rc)
    others = _wait_for_nodes(run_dir, nodes)
    failed = [(i + 1, c) for i, c in enumerate(others) if c != 0]
    if failed and rc == 0:
        rc = 1
    if failed:
        print(
            "tau_launch: "
            + ", ".join(
                f"node {i} {'never ended' if c == -1 else f'exit code {c}'}" for i, c in failed
            ),
            flush=True,
        )
    return rc


def _write_exit(folder: Path, rc: int) -> None:
    tmp = folder / ".exit.json.tmp"
    tmp.write_text(
        json.dumps({"exit_code": rc, "ended_at": tau_evidence.now_iso()}) + "\n", encoding="utf-8"
    )
    os.replace(tmp, folder / "exit.json")


def _other_node(argv: list[str], folder: Path) -> int:
    """A node other than 0 of a torchrun job: its data inputs laid out and checked as node 0's
    are (its own copy, nodes/<i>/inputs: node 0 lays out its own at the same time), then its
    log and exit code under the run's record (nodes/<i>/), which node 0 waits for and seals
    with the rest."""
    folder.mkdir(parents=True, exist_ok=True)
    import tau_inputs

    if os.environ.get(tau_inputs.INPUTS_ENV):  # its own layout: node 0's is laid out meanwhile
        os.environ[tau_inputs.INPUT_DIR_ENV] = str(folder / "inputs")
    failed = tau_inputs.lay_out(dict(os.environ), folder / "driver.log", "tau_launch")
    if failed is not None:
        _write_exit(folder, failed)
        return failed
    rc = _run_teed(argv, folder / "driver.log")
    _write_exit(folder, rc)
    return rc


def _run_teed(argv: list[str], log_path: Path, echo: Any = None) -> int:
    """Run `argv`, its output appended to `log_path` and echoed on stdout (and `echo`, the
    container's log, where given) as it comes; a SIGTERM to the launcher is passed on. Returns
    its exit code."""
    proc = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, bufsize=0, env=os.environ.copy()
    )
    signal.signal(signal.SIGTERM, lambda *_: proc.send_signal(signal.SIGTERM))
    assert proc.stdout is not None
    with log_path.open("ab") as log:
        fd = proc.stdout.fileno()
        for chunk in iter(lambda: os.read(fd, 1 << 16), b""):
            log.write(chunk)
            log.flush()
            sys.stdout.buffer.write(chunk)
            sys.stdout.buffer.flush()
            if echo is not None:
                try:
                    echo.write(chunk)
                except OSError:  # the container's log went away: the other two copies stay
                    echo = None
    return proc.wait()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
