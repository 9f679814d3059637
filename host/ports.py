"""Ports on the loopback address, where every server TauGrid starts binds."""

from __future__ import annotations

import os
import random
import socket

LOOPBACK = "127.0.0.1"
# A range of ports this process (and what it starts) picks its servers' ports from, "LO-HI":
# set when several sandboxes start at once on one machine (the e2e suite's workers, each its
# own slice), so two never pick the same port, and none picks one the kernel may hand to an
# outgoing connection meanwhile (keep the range below net.ipv4.ip_local_port_range).
PORT_RANGE_ENV = "TAUGRID_PORT_RANGE"


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


def free_port(host: str = LOOPBACK) -> int:
    """A port nothing holds now: the kernel's pick, or the next free one of `TAUGRID_PORT_RANGE`
    (from a random place in it, then onwards, so one process never hands out the same port
    twice before it is bound). Another process may take it before it is bound: a caller that
    must know checks `port_free` just before it starts its server."""
    span = port_range()
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
    raise OSError(f"no free port in {PORT_RANGE_ENV}={lo}-{hi} on {host}")


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
