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


def _stat_fields(pid: int | str) -> list[str] | None:
    """The fields of /proc/PID/stat after the command name (state first), or None."""
    try:
        with open(f"{PROC}/{pid}/stat", encoding="ascii", errors="replace") as f:
            return f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def tree(root: int) -> dict[int, str]:
    """`root` and every process descended from it, running now, in any session or group (Ray's
    workers are children of its raylet, not all in its group): pid -> its start time (so a pid
    the kernel gives to another process later is never taken for it). Linux; elsewhere {}."""
    parent: dict[int, int] = {}
    started: dict[int, str] = {}
    for stat in PROC.glob("[0-9]*/stat"):
        fields = _stat_fields(stat.parent.name)
        if fields is None or fields[0] in ("Z", "X") or len(fields) < 20:
            continue
        pid = int(stat.parent.name)
        parent[pid], started[pid] = int(fields[1]), fields[19]
    found: dict[int, str] = {}
    todo = [root] if root in started else []
    while todo:
        pid = todo.pop()
        found[pid] = started[pid]
        todo += [c for c, p in parent.items() if p == pid and c not in found]
    return found


def still_running(procs: dict[int, str]) -> list[int]:
    """The processes of `procs` (pid -> start time, as `tree` gives) that still run."""
    out = []
    for pid, start in procs.items():
        fields = _stat_fields(pid)
        if fields is not None and fields[0] not in ("Z", "X") and fields[19] == start:
            out.append(pid)
    return out


def listening_ports(pids: list[int]) -> set[int]:
    """The TCP ports the processes `pids` listen on (Linux /proc; elsewhere none)."""
    inodes: set[str] = set()
    for pid in pids:
        try:
            fds = os.listdir(f"{PROC}/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(f"{PROC}/{pid}/fd/{fd}")
            except OSError:
                continue
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    ports: set[int] = set()
    for table in ("tcp", "tcp6"):
        try:
            lines = (PROC / "net" / table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            f = line.split()
            if len(f) > 9 and f[3] == "0A" and f[9] in inodes:  # 0A: LISTEN
                ports.add(int(f[1].rsplit(":", 1)[1], 16))
    return ports
