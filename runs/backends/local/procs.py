"""The processes of a local run, found and stopped as one tree.

A run's processes can outlive the wrapper the supervisor started: a killed shell leaves its
Python child behind, reparented to init, in no process group the supervisor knows. Every
process of a run has `TAU_RUN_ID=<run id>` in its environment (the env contract, inherited by
children, and given to the run's Ray tasks through the job config), so they are found by
reading `/proc/<pid>/environ`, whatever their group or session. Where there is no /proc, the
run's process group (jobs) is all there is.

Nothing is reported terminal while one of them lives: the supervisor and `tau run cancel` stop
them (SIGTERM, a grace period, SIGKILL) and wait until none is left before sealing the record.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Iterable

from taugrid.api import constants as C
from taugrid.host.procs import PROC, group_members, pid_alive

POLL_S = 0.05


def run_processes(run_id: str, pgid: int | None = None, exclude: Iterable[int] = ()) -> list[int]:
    """Live processes of the run (never this process nor `exclude`)."""
    skip = {os.getpid(), *exclude}
    if not PROC.is_dir():  # no /proc (macOS): the process group only
        if pgid is None:
            return []
        try:
            os.killpg(pgid, 0)
        except (ProcessLookupError, PermissionError):
            return []
        return [pgid]
    marker = f"{C.ENV_RUN_ID}={run_id}".encode()
    found: set[int] = set()
    for entry in PROC.iterdir():
        if not entry.name.isdigit():
            continue
        pid = int(entry.name)
        if pid in skip:
            continue
        try:
            env = (entry / "environ").read_bytes()
        except OSError:  # gone, or not ours to read
            continue
        if marker in env.split(b"\0") and pid_alive(pid):
            found.add(pid)
    if pgid is not None:
        found.update(p for p in group_members(pgid) if p not in skip)
    return sorted(found)


def stop_run_processes(
    run_id: str, pgid: int | None = None, grace_s: float = 5.0, exclude: Iterable[int] = ()
) -> list[int]:
    """SIGTERM every process of the run, SIGKILL what is left after `grace_s`, and wait until
    none lives. Returns the pids it had to signal."""
    excluded = list(exclude)
    first = run_processes(run_id, pgid, excluded)
    if not first:
        return []
    for pid in first:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    left = first
    while left and time.monotonic() < deadline:
        time.sleep(POLL_S)
        left = run_processes(run_id, pgid, excluded)
    while left:  # what ignored SIGTERM, and anything it started meanwhile
        for pid in left:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(POLL_S)
        left = run_processes(run_id, pgid, excluded)
    return first
