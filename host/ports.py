"""Ports on the loopback address, where every server TauGrid starts binds."""

from __future__ import annotations

import os
import random
import socket
from pathlib import Path

LOOPBACK = "127.0.0.1"
# A range of ports this process (and what it starts) picks its servers' ports from, "LO-HI":
# set when several sandboxes start at once on one machine (the e2e suite's workers, each its
# own slice), so two never pick the same port. Keep it below net.ipv4.ip_local_port_range.
PORT_RANGE_ENV = "TAUGRID_PORT_RANGE"
# Without it, ports are picked from here up to the kernel's ephemeral range. A port is picked
# before the server that binds it starts, often many seconds before (a local Ray head's agents
# bind theirs 10-60 s after `ray start` on a busy machine): one of the ephemeral range may be
# handed to an outgoing connection meanwhile, and the server then fails to start. Below 20000
# are Ray's worker ports (10002-19999), which its workers bind as they come.
DEFAULT_LOW = 20000
EPHEMERAL_RANGE = "/proc/sys/net/ipv4/ip_local_port_range"


def port_range() -> tuple[int, int] | None:
    """The range `TAUGRID_PORT_RANGE` names, or None (the kernel picks). A malformed value is
    an error that says what it should be, not a silent fallback."""
    raw = os.environ.get(PORT_RANGE_ENV, "").strip()
    if not raw:
        return None
    lo_s, sep, hi_s = raw.partition("-")
    try:
        lo, hi = int(lo_s), int(hi_s)
    except ValueError:
        lo, hi = 0, -1
    if not sep or not (1024 <= lo <= hi <= 65535):
        raise ValueError(f"{PORT_RANGE_ENV}={raw!r}: expected LO-HI, 1024 <= LO <= HI <= 65535")
    return lo, hi


def default_range(ephemeral: str | None = None) -> tuple[int, int] | None:
    """The ports between DEFAULT_LOW and the kernel's ephemeral range (20000-32767 with Linux's
    default 32768-60999), or None where that cannot be read or leaves fewer than 1000 ports."""
    try:
        first = int(Path(ephemeral or EPHEMERAL_RANGE).read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    hi = min(first - 1, 65535)
    return (DEFAULT_LOW, hi) if hi - DEFAULT_LOW + 1 >= 1000 else None


def free_port(host: str = LOOPBACK) -> int:
    """A port nothing holds now: the next free one of `TAUGRID_PORT_RANGE`, or else of the ports
    below the kernel's ephemeral range (`default_range`), from a random place in it, then
    onwards, so one process never hands out the same port twice before it is bound; the
    kernel's pick where neither is known. Another process may take it before it is bound: a
    caller that must know checks `port_free` just before it starts its server."""
    span = port_range() or default_range()
    if span is None:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind((host, 0))
            return int(s.getsockname()[1])
    lo, hi = span
    size = hi - lo + 1
    start = _cursor.get(span)
    if start is None:
        start = random.randrange(size)
    for i in range(size):
        offset = (start + i) % size
        if port_free(lo + offset, host):
            _cursor[span] = (offset + 1) % size
            return lo + offset
    where = f"{PORT_RANGE_ENV}={lo}-{hi}" if port_range() else f"{lo}-{hi}"
    raise OSError(f"no free port in {where} on {host}")


_cursor: dict[tuple[int, int], int] = {}  # where the next pick in a range starts (offset)


def port_free(port: int, host: str = LOOPBACK) -> bool:
    """Nothing holds `host:port` (it can be bound now)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((host, port))
        except OSError:
            return False
        return True


def listens(port: int, host: str = LOOPBACK, timeout: float = 1.0) -> bool:
    """Something accepts connections on `host:port`."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(timeout)
        return s.connect_ex((host, port)) == 0
