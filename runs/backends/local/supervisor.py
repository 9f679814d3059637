"""The local run supervisor: a detached process that owns one run from start to seal.

    python -m taugrid.runs.backends.local.supervisor RUN_DIR

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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from taugrid.api import constants as C
from taugrid.api.errors import TauError
from taugrid.api.evidence import TerminalStateError
from taugrid.api.vocabulary import Phase, TerminationReason
from taugrid.runs.backends.local import procs, rayhead
from taugrid.runs.backends.local.launch import attempt_env, entrypoint, ray_runtime_env, secret_env
from taugrid.runs.backends.local.plan import LocalPlan
from taugrid.runs.evidence import RunDir, now_iso

POLL_S = 0.2
HEAD_LOST_AFTER_S = 10.0


class Supervisor:
    def __init__(self, run_dir: Path, adopt: bool = False) -> None:
        self.rd = RunDir(run_dir)
        self.plan = LocalPlan.read(run_dir)
        self.cancelled = False
        # Adopting: a previous supervisor died while an attempt ran; watch that attempt first.
        self.adopt = adopt
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

    def run_subprocess(self, env: dict[str, str], attempt: int) -> Outcome:
        """A job (or a local torchrun job's nodes): its data inputs laid out and checked as
        every launcher does (tau_inputs.lay_out), then its shell."""
        import tau_inputs

        failed = tau_inputs.lay_out(env, self.rd.logs / "driver.log", "tau")
        if failed is not None:
            return Outcome(
                failed,
                f"exit code {failed}: a data input cannot be read (see the "
                "log); the entrypoint was not started",
                TerminationReason.Failed,
            )
        proc = subprocess.Popen(
            ["bash", "-c", self.plan.script],
            cwd=self.plan.cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        self.rd.update_handle(process_group=proc.pid)
        self._transition(Phase.Running, "process started", attempt)
        while True:
            rc = proc.poll()
            if rc is not None:
                return Outcome.of_exit(rc)
            if self.cancelled:
                self._stop_tree()
                proc.wait()
                return Outcome.cancelled()
            time.sleep(POLL_S)

    def watch_adopted_job(self, attempt: int) -> Outcome:
        """A job attempt started by a supervisor that died: its processes are not our children,
        so wait for them to end, then read the exit code the run's shell left."""
        exit_file = self.rd.logs / f".exit-{attempt}"
        pgid = self.rd.read_record().local.process_group
        while procs.run_processes(self.rd.run_id, pgid, exclude=[os.getpid()]):
            if self.cancelled:
                self._stop_tree()
                return Outcome.cancelled()
            time.sleep(POLL_S)
        try:
            return Outcome.of_exit(int(exit_file.read_text().strip()))
        except (OSError, ValueError):
            why = "the run's processes ended while no supervisor watched; exit status unknown"
            return Outcome(1, why, TerminationReason.SupervisorLost)

    def _stop_tree(self) -> list[int]:
        """Stop every process of the run (the shell, its children, anything they started)."""
        pgid = self.rd.read_record().local.process_group
        return procs.stop_run_processes(self.rd.run_id, pgid, exclude=[os.getpid()])

    def _head_for(self, attempt: int) -> rayhead.Head:
        """The Ray head for a new attempt: the running one, or a new one when it died (a
        NodeFailure retry must not fail at once with 'connection refused')."""
        head = rayhead.read_head()
        if head is not None and rayhead.healthy(head):
            return head
        self.log(f"attempt {attempt}: the local Ray head is gone; starting a new one")
        return rayhead.ensure_head(num_gpus=self.rd.read_record().gpus_available, say=self.log)

    def run_ray(self, env: dict[str, str], attempt: int) -> Outcome:
        rec = self.rd.read_record()
        dashboard = rec.local.ray_address or self.plan.ray_dashboard or ""
        # Attempt 0 was submitted (or a standby claimed) by `tau run` itself; an adopted attempt
        # is already in Ray.
        sub_id = (rec.local.ray_submission_id or "") if attempt == 0 or self.adopt else ""
        if not sub_id:
            sub_id = ray_submission_id(self.rd.run_id, attempt)
            try:
                head = self._head_for(attempt)
            except TauError as e:
                return Outcome.node_failure(f"no local Ray head: {e.message}")
            dashboard = head.dashboard
            try:
                rayhead.submit_job(
                    head,
                    sub_id,
                    entrypoint(self.rd.path, attempt, env.get(C.ENV_RESUME_FROM), self.plan.python),
                    ray_runtime_env(self.plan, secret_env(self.plan)),
                    say=self.log,
                )
            except (OSError, ValueError) as e:
                return Outcome.node_failure(f"could not submit to the local Ray head: {e}")
            self.rd.update_handle(ray_submission_id=sub_id, ray_address=dashboard)
        running = standby_prepared = False
        lost_since: float | None = None
        stop_sent = False
        while True:
            if self.cancelled and not stop_sent:
                stop_sent = rayhead.stop_job(dashboard, sub_id) or True
            try:
                info = rayhead.job_info(dashboard, sub_id)
                lost_since = None
            except (OSError, ValueError, urllib.error.HTTPError):
                lost_since = lost_since or time.monotonic()
                if time.monotonic() - lost_since > HEAD_LOST_AFTER_S:
                    return Outcome.node_failure("the local Ray head stopped answering (died?)")
                time.sleep(POLL_S)
                continue
            status = info.get("status")
            if status == "RUNNING" and not running:
                running = True
                self._transition(Phase.Running, "Ray job running", attempt)
            if status in ("RUNNING", "SUCCEEDED", "FAILED") and not standby_prepared:
                # Also for a run that ended between two polls: back-to-back short runs each
                # leave a standby for the next.
                standby_prepared = True
                self._prepare_standby(dashboard)
            if status in ("SUCCEEDED", "FAILED", "STOPPED"):
                code = info.get("driver_exit_code")
                if status == "SUCCEEDED":
                    return Outcome.of_exit(0)
                if status == "STOPPED" or self.cancelled:
                    return Outcome.cancelled()
                rc = int(code) if isinstance(code, int) else 1
                msg = (info.get("message") or "").strip().splitlines()
                detail = f" ({msg[-1][:200]})" if msg and code is None else ""
                return Outcome(rc, _describe_rc(rc) + detail, TerminationReason.Failed)
            time.sleep(POLL_S)

    def _prepare_standby(self, dashboard: str) -> None:
        """A standby job for the next warm `tau run` (cli/prelaunch.py), best effort."""
        from taugrid.runs.backends.local import standby

        head = rayhead.read_head()
        if head is None or head.dashboard != dashboard:
            return
        try:
            made = standby.ensure_standby(head)
        except (OSError, ValueError) as e:
            self.log(f"no standby for the next run: {e}")
            return
        if made:
            self.log(f"submitted standby {made} for the next run")

    # --- the run ------------------------------------------------------------------------------
    def _transition(self, phase: Phase, reason: str, attempt: int) -> None:
        self.rd.transition(phase, reason, attempt=attempt)
        self.log(f"{phase}: {reason}")

    def _resume_point(self, attempt: int) -> str | None:
        if attempt == 0 or not self.plan.auto_resume:
            return self.plan.resume_from
        return self.rd.newest_checkpoint(self.plan.checkpoint_subdir) or self.plan.resume_from

    def run(self) -> int:
        rec = self.rd.read_record()
        attempt = rec.attempt
        self.rd.update_handle(supervisor_pid=os.getpid())
        if self.adopt:
            self.log(f"adopted the run at attempt {attempt} ({rec.phase})")
        else:
            self._transition(Phase.Starting, "supervisor started", attempt)
        while True:
            env = self._env(attempt, self._resume_point(attempt))
            if self.adopt and self.plan.kind == "job":
                out = self.watch_adopted_job(attempt)
            elif self.plan.kind == "rayjob":
                out = self.run_ray(env, attempt)
            else:
                out = self.run_subprocess(env, attempt)
            self.adopt = False
            self._end_attempt(attempt)
            if self.cancelled or out.reason is TerminationReason.Cancelled:
                out = Outcome(out.exit_code, "cancelled", TerminationReason.Cancelled)
                return self._finish(Phase.Cancelled, "cancelled by the user", out, attempt)
            if out.reason is TerminationReason.Completed:
                return self._finish(Phase.Succeeded, out.message, out, attempt)
            if attempt < rec.max_retries and out.reason.retried_by(self.plan.retry_on):
                attempt += 1
                why = f"{out.reason}: {out.message}; attempt {attempt} of {rec.max_retries}"
                self.rd.transition(Phase.Retrying, why, attempt=attempt, termination=out.reason)
                self.log(f"Retrying: {why}")
                continue
            return self._finish(Phase.Failed, out.message, out, attempt)

    def _end_attempt(self, attempt: int) -> None:
        """Nothing of an attempt outlives it: the Ray job is stopped if it still runs, and
        every process of the run is stopped and waited for."""
        h = self.rd.read_record().local
        if self.plan.kind == "rayjob" and h.ray_address and h.ray_submission_id:
            with contextlib.suppress(OSError, ValueError, urllib.error.HTTPError):
                info = rayhead.job_info(h.ray_address, h.ray_submission_id)
                if info.get("status") in ("PENDING", "RUNNING"):
                    rayhead.stop_job(h.ray_address, h.ray_submission_id)
        stopped = self._stop_tree()
        if stopped:
            self.log(f"attempt {attempt}: stopped {len(stopped)} leftover process(es): {stopped}")

    def _finish(self, phase: Phase, reason: str, out: Outcome, attempt: int) -> int:
        self.log(f"{phase}: {reason}")
        self.rd.transition(
            phase, reason, attempt=attempt, termination=out.reason, exit_code=out.exit_code
        )
        return 0 if phase == Phase.Succeeded else 1


@dataclass(frozen=True)
class Outcome:
    """How one attempt ended."""

    exit_code: int
    message: str
    reason: TerminationReason

    @classmethod
    def of_exit(cls, rc: int) -> Outcome:
        ok = rc == 0
        return cls(
            rc, _describe_rc(rc), TerminationReason.Completed if ok else TerminationReason.Failed
        )

    @classmethod
    def cancelled(cls) -> Outcome:
        return cls(-15, "cancelled", TerminationReason.Cancelled)

    @classmethod
    def node_failure(cls, message: str) -> Outcome:
        # Locally a lost Ray head is NodeFailure; anything else (a SIGKILL included: the
        # kernel's OOM log is not portably readable) is Failed.
        return cls(1, message, TerminationReason.NodeFailure)


def ray_submission_id(run_id: str, attempt: int) -> str:
    return run_id if attempt == 0 else f"{run_id}-a{attempt}"


def _describe_rc(rc: int) -> str:
    if rc < 0:
        name = signal.Signals(-rc).name if -rc in signal.Signals._value2member_map_ else str(-rc)
        return f"killed by signal {name}"
    if rc > 128 and (rc - 128) in signal.Signals._value2member_map_:
        return f"exit code {rc} (killed by {signal.Signals(rc - 128).name})"
    return f"exit code {rc}"


def main(argv: list[str]) -> int:
    run_dir = Path(argv[0])
    try:
        return Supervisor(run_dir, adopt="--adopt" in argv[1:]).run()
    except Exception:
        traceback.print_exc()
        why = "the supervisor crashed (see logs/supervisor.log)"
        with contextlib.suppress(TerminalStateError, OSError, ValueError):
            RunDir(run_dir).transition(
                Phase.Failed, why, termination=TerminationReason.SupervisorLost
            )
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
