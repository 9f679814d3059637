"""The local run supervisor: a detached process that owns one run from start to seal.

    python -m taugrid.cli.supervisor RUN_DIR

It executes attempts (a subprocess for `job`, a Ray job for `rayjob`), records every status
transition in history.jsonl and run.json as it happens, retries per `resilience`, and seals the
evidence record when the run ends. `tau` itself only follows these files, so Ctrl-C in the
terminal never stops the run, and a killed terminal loses nothing.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import traceback
import urllib.error
from pathlib import Path
from typing import Any

from taugrid.api import constants as C
from taugrid.cli import raylocal
from taugrid.cli.evidence import RunDir, now_iso
from taugrid.cli.launch import attempt_env, entrypoint, ray_runtime_env, secret_env

POLL_S = 0.2
HEAD_LOST_AFTER_S = 10.0
KILL_GRACE_S = 10.0


class Supervisor:
    def __init__(self, run_dir: Path) -> None:
        self.rd = RunDir(run_dir)
        self.plan: dict[str, Any] = self.rd.plan()
        self.cancelled = False
        signal.signal(signal.SIGTERM, self._on_term)
        signal.signal(signal.SIGINT, self._on_term)
        signal.signal(signal.SIGHUP, signal.SIG_IGN)

    def _on_term(self, signum: int, frame: Any) -> None:
        self.cancelled = True

    def log(self, msg: str) -> None:
        print(f"{now_iso()} {msg}", flush=True)

    # --- one attempt ----------------------------------------------------------------------------
    def _env(self, attempt: int, resume_from: str | None) -> dict[str, str]:
        base = {k: v for k, v in os.environ.items() if not k.startswith("TAU_") or k == "TAU_HOME"}
        return {**base, **attempt_env(self.plan, attempt, resume_from), **secret_env(self.plan)}

    def run_subprocess(self, env: dict[str, str], attempt: int) -> tuple[int, str]:
        proc = subprocess.Popen(
            ["bash", "-c", self.plan["script"]],
            cwd=self.plan["cwd"],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        self.rd.update(process_group=proc.pid)
        self._transition("Running", "process started", attempt)
        while True:
            rc = proc.poll()
            if rc is not None:
                return rc, _describe_rc(rc)
            if self.cancelled:
                _kill_group(proc.pid)
                proc.wait()
                return -15, "cancelled"
            time.sleep(POLL_S)

    def run_ray(self, env: dict[str, str], attempt: int) -> tuple[int, str]:
        dashboard = self.plan["ray_dashboard"]
        rec = self.rd.read_record()
        # Attempt 0 was submitted (or a standby claimed) by `tau run` itself.
        sub_id = (rec.ray_submission_id or "") if attempt == 0 else ""
        if not sub_id:
            sub_id = ray_submission_id(self.rd.run_id, attempt)
            head = raylocal.read_head()
            if head is None or head.dashboard != dashboard:
                return 1, "NodeFailure: the local Ray head is gone"
            try:
                raylocal.submit_job(
                    head,
                    sub_id,
                    entrypoint(self.rd.path, attempt, env.get(C.ENV_RESUME_FROM)),
                    ray_runtime_env(self.plan, secret_env(self.plan)),
                )
            except (OSError, ValueError) as e:
                return 1, f"NodeFailure: could not submit to the local Ray head: {e}"
            self.rd.update(ray_submission_id=sub_id, ray_address=dashboard)
        running = False
        lost_since: float | None = None
        stop_sent = False
        while True:
            if self.cancelled and not stop_sent:
                stop_sent = raylocal.stop_job(dashboard, sub_id) or True
            try:
                info = raylocal.job_info(dashboard, sub_id)
                lost_since = None
            except (OSError, ValueError, urllib.error.HTTPError):
                lost_since = lost_since or time.monotonic()
                if time.monotonic() - lost_since > HEAD_LOST_AFTER_S:
                    return 1, "NodeFailure: the local Ray head stopped answering (died?)"
                time.sleep(POLL_S)
                continue
            status = info.get("status")
            if status == "RUNNING" and not running:
                running = True
                self._transition("Running", "Ray job running", attempt)
                self._prepare_standby(dashboard)
            if status in ("SUCCEEDED", "FAILED", "STOPPED"):
                code = info.get("driver_exit_code")
                if status == "SUCCEEDED":
                    return 0, "exit code 0"
                if status == "STOPPED" or self.cancelled:
                    return -15, "cancelled"
                rc = int(code) if isinstance(code, int) else 1
                msg = (info.get("message") or "").strip().splitlines()
                return rc, _describe_rc(rc) + (
                    f" ({msg[-1][:200]})" if msg and code is None else ""
                )
            time.sleep(POLL_S)

    def _prepare_standby(self, dashboard: str) -> None:
        """A standby job for the next warm `tau run` (cli/prelaunch.py), best effort."""
        from taugrid.cli import prelaunch

        head = raylocal.read_head()
        if head is None or head.dashboard != dashboard:
            return
        try:
            made = prelaunch.ensure_standby(head)
        except (OSError, ValueError) as e:
            self.log(f"no standby for the next run: {e}")
            return
        if made:
            self.log(f"submitted standby {made} for the next run")

    # --- the run ------------------------------------------------------------------------------
    def _transition(self, phase: str, reason: str, attempt: int) -> None:
        self.rd.append_history(phase, reason, attempt=attempt)
        self.rd.update(phase=phase, reason=reason, attempt=attempt)
        self.log(f"{phase}: {reason}")

    def _resume_point(self, attempt: int) -> str | None:
        if attempt == 0:
            return self.plan.get("resume_from")
        if not self.plan.get("auto_resume", True):
            return self.plan.get("resume_from")
        ckpts = self.rd.complete_checkpoints(self.plan["checkpoint_subdir"])
        if ckpts:
            return str(self.rd.checkpoint_dir(self.plan["checkpoint_subdir"]) / ckpts[-1]["path"])
        return self.plan.get("resume_from")

    def run(self) -> int:
        rec = self.rd.read_record()
        attempt = rec.attempt
        self.rd.update(supervisor_pid=os.getpid(), started_at=now_iso())
        self._transition("Starting", "supervisor started", attempt)
        retry_on = set(self.plan.get("retry_on", []))
        rc, reason = 1, "not started"
        while True:
            env = self._env(attempt, self._resume_point(attempt))
            runner = self.run_ray if self.plan["kind"] == "rayjob" else self.run_subprocess
            rc, reason = runner(env, attempt)
            if self.cancelled or reason == "cancelled":
                return self._finish("Cancelled", "cancelled by the user", rc, attempt)
            if rc == 0:
                return self._finish("Succeeded", "exit code 0", rc, attempt)
            kind = _failure_kind(rc, reason)
            if attempt < rec.max_retries and kind in retry_on:
                attempt += 1
                self._transition(
                    "Retrying", f"{kind}: {reason}; attempt {attempt} of {rec.max_retries}", attempt
                )
                continue
            return self._finish("Failed", reason, rc, attempt)

    def _finish(self, phase: str, reason: str, rc: int, attempt: int) -> int:
        self.log(f"{phase}: {reason}")
        self.rd.append_history(phase, reason, attempt=attempt)
        self.rd.update(
            phase=phase, reason=reason, exit_code=rc, finished_at=now_iso(), attempt=attempt
        )
        self.rd.seal()
        return 0 if phase == "Succeeded" else 1


def ray_submission_id(run_id: str, attempt: int) -> str:
    return run_id if attempt == 0 else f"{run_id}-a{attempt}"


def _describe_rc(rc: int) -> str:
    if rc < 0:
        name = signal.Signals(-rc).name if -rc in signal.Signals._value2member_map_ else str(-rc)
        return f"killed by signal {name}"
    if rc > 128 and (rc - 128) in signal.Signals._value2member_map_:
        return f"exit code {rc} (killed by {signal.Signals(rc - 128).name})"
    return f"exit code {rc}"


def _failure_kind(rc: int, reason: str) -> str:
    """Locally a lost Ray head is NodeFailure; anything else (a SIGKILL included: the kernel's
    OOM log is not portably readable) is Failed."""
    return "NodeFailure" if reason.startswith("NodeFailure") else "Failed"


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGTERM)
    deadline = time.monotonic() + KILL_GRACE_S
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return
        time.sleep(POLL_S)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGKILL)


def main(argv: list[str]) -> int:
    run_dir = Path(argv[0])
    try:
        return Supervisor(run_dir).run()
    except Exception:
        traceback.print_exc()
        rd = RunDir(run_dir)
        with contextlib.suppress(Exception):
            rd.append_history("Failed", "the supervisor crashed (see logs/supervisor.log)")
            rd.update(
                phase="Failed",
                reason="the supervisor crashed (see logs/supervisor.log)",
                finished_at=now_iso(),
            )
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
