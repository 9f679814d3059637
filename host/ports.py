"""Ports on the loopback address, where every server TauGrid starts binds."""

from __future__ import annotations

import socket

LOOPBACK = "127.0.0.1"


def free_port(host: str = LOOPBACK) -> int:
    """A port nothing holds now (the kernel's pick; another process may take it before it is
    bound: a caller that must know checks `port_free` just before it starts its server)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


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
