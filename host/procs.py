"""Whether a process, or any process of a group, still runs (zombies do not count: they only
wait for their parent to reap them). Read from /proc where there is one; elsewhere (macOS) from
signal 0 alone."""

from __future__ import annotations

import os
from pathlib import Path

PROC = Path("/proc")


def pid_alive(pid: int | None) -> bool:
    """Running (not a zombie)."""
    return bool(pid) and _alive(int(pid or 0))


def group_alive(pgid: int) -> bool:
    """Whether any process of the group still runs."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return bool(group_members(pgid)) if PROC.is_dir() else True


def group_members(pgid: int) -> list[int]:
    """The running processes of a process group (from /proc)."""
    out = []
    for stat in PROC.glob("[0-9]*/stat"):
        try:
            fields = stat.read_text(errors="replace").rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[2]) == pgid and fields[0] not in ("Z", "X"):
            out.append(int(stat.parent.name))
    return out


def _alive(pid: int) -> bool:
    try:
        with open(f"{PROC}/{pid}/stat", encoding="ascii", errors="replace") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except (OSError, IndexError):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
