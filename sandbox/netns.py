"""Network namespaces the sandbox makes itself: sockets bound inside one, and `ip` commands.

A real node of the sandbox is a network namespace (like a kind node's container, without the
container): its kubelet, containerd, kube-proxy and pods live there, on the sandbox's own
bridge. A process of the host can still serve inside a node: a socket made while the calling
thread has entered the node's namespace stays in it (setns(2) is per thread), so the host's
process answers on the node's addresses while it reaches the API server on the host's loopback.
"""

from __future__ import annotations

import ctypes
import os
import socket
import subprocess
import threading
from pathlib import Path

CLONE_NEWNET = 0x40000000
NETNS_DIR = Path("/run/netns")


def _setns(fd: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.setns(fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"setns: {os.strerror(err)}")


def socket_in(netns: Path, kind: int, address: tuple[str, int]) -> socket.socket:
    """A socket of `kind` (SOCK_STREAM listening, or SOCK_DGRAM) bound to `address` inside the
    network namespace at `netns`; made on a thread of its own, which enters the namespace and
    leaves it again."""
    made: list[socket.socket] = []
    failed: list[BaseException] = []

    def make() -> None:
        own = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
        target = os.open(netns, os.O_RDONLY)
        try:
            _setns(target)
            try:
                s = socket.socket(socket.AF_INET, kind)
                s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                s.bind(address)
                if kind == socket.SOCK_STREAM:
                    s.listen(64)
                made.append(s)
            finally:
                _setns(own)
        except BaseException as e:  # (handed to the caller's thread)
            failed.append(e)
        finally:
            os.close(own)
            os.close(target)

    t = threading.Thread(target=make)
    t.start()
    t.join()
    if failed:
        raise failed[0]
    return made[0]


def ip(*args: str, netns: str | None = None, check: bool = True) -> str:
    """`ip ARGS` on the host, or inside the named namespace."""
    cmd = ["ip", *(["-n", netns] if netns else []), *args]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if check and done.returncode != 0:
        raise OSError(f"{' '.join(cmd)}: {done.stderr.strip()}")
    return done.stdout


def exists(name: str) -> bool:
    return (NETNS_DIR / name).exists()


def names() -> list[str]:
    try:
        return sorted(p.name for p in NETNS_DIR.iterdir())
    except FileNotFoundError:
        return []
