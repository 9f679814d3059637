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
EXIT_INPUT = 66  # a data input is missing or changed (EX_NOINPUT): the code never ran


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


def main(argv: list[str]) -> int:
    if "--" in argv:
        argv = argv[argv.index("--") + 1 :]
    if not argv:
        print("usage: python tau_launch.py -- COMMAND [ARGS...]", file=sys.stderr)
        return 2
    run_dir = Path(os.environ.get("TAU_RUN_DIR") or "tau-run")
    for sub in ("logs", os.environ.get("TAU_CHECKPOINT_DIR"), os.environ.get("TAU_OUTPUT_DIR")):
        if sub:
            (run_dir / sub).mkdir(parents=True, exist_ok=True)
    attempt = _attempt()
    resume = os.environ.get("TAU_RESUME_FROM", "")
    if resume.endswith("/" + NEWEST):
        found = _newest(Path(resume[: -len(NEWEST) - 1]))
        if found is None:
            print(f"tau_launch: no complete checkpoint in {resume[: -len(NEWEST) - 1]} to resume "
                  "from", file=sys.stderr, flush=True)  # fmt: skip
            return 3
        os.environ["TAU_RESUME_FROM"] = str(found)
        print(f"tau_launch: resuming from {found}", flush=True)
    import tau_inputs

    try:  # data inputs by exact version, checked, before the entrypoint starts
        for line in tau_inputs.from_env():
            print(f"tau_launch: input {line}", flush=True)
    except tau_inputs.InputError as e:
        msg = f"tau_launch: a data input cannot be read: {e}; the entrypoint was not started"
        print(msg, file=sys.stderr, flush=True)
        with (run_dir / "logs" / "driver.log").open("a", encoding="utf-8") as log:
            log.write(msg + "\n")
        return EXIT_INPUT
    started = tau_evidence.now_iso()
    _record(run_dir, {"phase": "Running", "attempt": attempt, "started_at": started})
    tau_evidence.append_history(
        run_dir, {"ts": started, "phase": "Running", "reason": "pod started", "attempt": attempt}
    )
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, bufsize=0,
                            env=os.environ.copy())  # fmt: skip
    signal.signal(signal.SIGTERM, lambda *_: proc.send_signal(signal.SIGTERM))
    assert proc.stdout is not None
    with (run_dir / "logs" / "driver.log").open("ab") as log:
        fd = proc.stdout.fileno()
        for chunk in iter(lambda: os.read(fd, 1 << 16), b""):
            log.write(chunk)
            log.flush()
            sys.stdout.buffer.write(chunk)
            sys.stdout.buffer.flush()
    rc = proc.wait()
    phase = "Succeeded" if rc == 0 else "Failed"
    ended = tau_evidence.now_iso()
    reason = "exit code 0" if rc == 0 else f"exit code {rc}"
    tau_evidence.append_history(
        run_dir,
        {"ts": ended, "phase": phase, "reason": reason, "attempt": attempt,
         "termination_reason": "Completed" if rc == 0 else "Failed"},
    )  # fmt: skip
    _record(run_dir, {"phase": phase, "reason": reason, "exit_code": rc, "finished_at": ended})
    tau_evidence.seal(run_dir)
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
