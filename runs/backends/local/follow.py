"""Following a run: stream its log and status transitions until it ends (or the user detaches)."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import TextIO

from taugrid.api.vocabulary import TERMINAL, Phase
from taugrid.host.procs import pid_alive
from taugrid.runs.backends.local import procs
from taugrid.runs.evidence import RunDir

LOG_POLL_S = 0.02  # new log bytes show within this (a stat and a read of one file)
STATE_POLL_S = 0.1  # history and record (parsed and validated) this often


def follow(
    rd: RunDir,
    *,
    out: TextIO = sys.stdout,
    err: TextIO = sys.stderr,
    logs: bool = True,
    transitions: bool = True,
    from_start: bool = True,
    on_tick: Callable[[], None] | None = None,
) -> Phase:
    """Print new log bytes and history events until the run is terminal; return its phase."""
    offset = 0 if from_start else (rd.driver_log.stat().st_size if rd.driver_log.exists() else 0)
    seen = 0
    pending = b""
    next_state = 0.0

    def drain() -> None:
        nonlocal offset, pending
        if not (logs and rd.driver_log.exists()):
            return
        with rd.driver_log.open("rb") as f:
            f.seek(offset)
            chunk = f.read()
        if chunk:
            offset += len(chunk)
            complete, _, pending = (pending + chunk).rpartition(b"\n")
            if complete:
                out.write(complete.decode("utf-8", "replace") + "\n")
                out.flush()

    while True:
        drain()
        if time.monotonic() < next_state:
            time.sleep(LOG_POLL_S)
            continue
        next_state = time.monotonic() + STATE_POLL_S
        if transitions:
            seen = _transitions(rd, seen, err)
        rec = rd.read_record()
        if rec.phase in TERMINAL:
            drain()  # what the driver wrote between the last read and its end
            if pending:
                out.write(pending.decode("utf-8", "replace") + "\n")
            if transitions:
                _transitions(rd, seen, err)
            return rec.phase
        if rec.local.supervisor_pid and not pid_alive(rec.local.supervisor_pid):
            gone = _supervisor_gone(rd, err, drain)
            if gone is not None:
                return gone
        if on_tick:
            on_tick()
        time.sleep(LOG_POLL_S)


def _transitions(rd: RunDir, seen: int, err: TextIO) -> int:
    """The history's events after the first `seen`, one line each; how many there are now."""
    hist = rd.read_history()
    for ev in hist[seen:]:
        note = f" ({ev.reason})" if ev.reason else ""
        err.write(f"[{ev.phase.lower()}]{note}\n")
        err.flush()
    return len(hist)


def _supervisor_gone(rd: RunDir, err: TextIO, drain: Callable[[], None]) -> Phase | None:
    """The run's supervisor died: the run's phase if it still runs unwatched (said, with how
    to re-attach), Failed if it ended without a record; None if it recorded an end meanwhile."""
    rec = rd.read_record()
    if rec.phase not in TERMINAL:
        drain()
        left = procs.run_processes(rd.run_id, rec.local.process_group)
        if left:  # the truth: it still runs, unwatched
            err.write(
                f"the run's supervisor is gone (killed?), but {len(left)} process(es) of "
                f"the run still run: `tau run attach {rd.run_id}` re-attaches it, "
                f"`tau run cancel {rd.run_id}` stops it\n"
            )
            return rec.phase
        err.write("the run's supervisor is gone without recording an end (killed?)\n")
        return Phase.Failed
    return None
