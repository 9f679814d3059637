"""Standby jobs: the next warm `tau run` finds a Ray job already past Ray's start-up.

Ray's job supervisor is a fresh Python worker that takes 1.2-1.8 s to start on a small machine.
So once a rayjob run is Running, its supervisor submits one *standby* job for the next run: the
launcher (launch.py) in `--standby` mode, which announces itself and waits. `tau run` claims it
(an atomic rename) after validating the run, and the launcher goes on to wait for the run's
plan, which tau writes last. The run's Ray submission id is then the standby's
(`tau-standby-xxxxx`, in run.json). Runs with secrets do not use standbys: their values reach
Ray only in a job's runtime_env. TAU_LOCAL_STANDBY=0 turns standbys off.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

from taugrid.api import naming
from taugrid.host.procs import pid_alive
from taugrid.runs import paths
from taugrid.runs.backends.local import rayhead

STANDBY_PREFIX = "tau-standby"
STANDBY_START_S = 120.0  # a submitted standby that has not announced itself by then is lost


@dataclass
class Claim:
    """A claimed standby, until the run's plan is written (then `done`)."""

    submission_id: str
    head: rayhead.Head
    done: bool = False

    def abort(self) -> None:
        """Stop the job: tau refused the run, or was interrupted, before writing its plan."""
        if self.done:
            return
        self.done = True
        with contextlib.suppress(OSError, ValueError):
            rayhead.stop_job(self.head.dashboard, self.submission_id)
        for suffix in ("taken", "claim"):
            (standby_dir(self.head) / f"{self.submission_id}.{suffix}").unlink(missing_ok=True)


def standby_enabled() -> bool:
    return os.environ.get("TAU_LOCAL_STANDBY", "1") not in ("0", "false", "no")


def standby_dir(head: rayhead.Head) -> Path:
    """Standbys of one head (a restarted head starts with none)."""
    return rayhead.ray_dir() / "standby" / str(head.pid)


def _pid_of(ready: Path) -> int | None:
    try:
        pid = json.loads(ready.read_bytes())["pid"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return pid if isinstance(pid, int) else None


def standby_count(head: rayhead.Head) -> int:
    """Live standbys of the head (ready to be claimed)."""
    d = standby_dir(head)
    return sum(pid_alive(_pid_of(r)) for r in d.glob("*.ready")) if d.is_dir() else 0


def claim_standby(head: rayhead.Head, run_dir: Path) -> Claim | None:
    """Claim a live standby for `run_dir`, or None if there is none."""
    if not standby_enabled():
        return None
    d = standby_dir(head)
    for ready in sorted(d.glob("*.ready")) if d.is_dir() else []:
        if not pid_alive(_pid_of(ready)):
            ready.unlink(missing_ok=True)  # its job is gone (stopped, or the head was)
            continue
        sub_id = ready.name.removesuffix(".ready")
        try:
            os.rename(ready, d / f"{sub_id}.taken")  # atomic: one claimant wins
        except FileNotFoundError:
            continue
        paths.write_atomic(d / f"{sub_id}.claim", json.dumps({"run_dir": str(run_dir)}).encode())
        return Claim(sub_id, head)
    return None


def ensure_standby(head: rayhead.Head) -> str | None:
    """Submit a standby unless one is ready or starting; its id, or None."""
    if not standby_enabled():
        return None
    d = standby_dir(head)
    d.mkdir(parents=True, exist_ok=True)
    if any(pid_alive(_pid_of(r)) for r in d.glob("*.ready")):
        return None
    now = time.time()
    for sub in d.glob("*.submitted"):
        with contextlib.suppress(OSError):
            if now - sub.stat().st_mtime < STANDBY_START_S:
                return None
            sub.unlink()
    from taugrid.runs.backends.local import launch

    sub_id = naming.new_run_id(STANDBY_PREFIX)
    (d / f"{sub_id}.submitted").touch()
    rayhead.submit_job(
        head,
        sub_id,
        launch.standby_entrypoint(d / sub_id),
        {},
        metadata={"tau_standby": "true"},
    )
    return sub_id
