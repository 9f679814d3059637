"""A process tree across sessions, whether its processes still run (a reused pid is not
them), and the ports they listen on: what `tau local stop` waits for."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Iterator

import pytest

from taugrid.host import procs
from taugrid.host.ports import listens

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="reads /proc")

PARENT = """
import socket, subprocess, sys, time
s = socket.socket()
s.bind(("127.0.0.1", 0))
s.listen()
child = subprocess.Popen(["sleep", "300"], start_new_session=True)  # another session
print(s.getsockname()[1], child.pid, flush=True)
time.sleep(300)
"""


@pytest.fixture
def parent() -> Iterator[tuple[subprocess.Popen[str], int, int]]:
    p = subprocess.Popen([sys.executable, "-c", PARENT], stdout=subprocess.PIPE, text=True)
    assert p.stdout is not None
    port, child = (int(x) for x in p.stdout.readline().split())
    yield p, port, child
    for pid in (child, p.pid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    p.wait()


def test_the_tree_holds_children_in_other_sessions_and_their_ports(
    parent: tuple[subprocess.Popen[str], int, int],
) -> None:
    p, port, child = parent
    found = procs.tree(p.pid)
    assert set(found) == {p.pid, child}
    assert procs.listening_ports(list(found)) == {port}
    assert sorted(procs.still_running(found)) == sorted([p.pid, child])
    os.kill(p.pid, signal.SIGKILL)
    p.wait()
    assert procs.still_running(found) == [child]  # the killed one is gone, its child is not
    assert not listens(port)


def test_a_pid_that_now_names_another_process_is_not_still_running(
    parent: tuple[subprocess.Popen[str], int, int],
) -> None:
    p, _, child = parent
    found = procs.tree(p.pid)
    found[child] = "1"  # as if the kernel had given the pid to a process started later
    assert procs.still_running(found) == [p.pid]


def test_the_tree_of_a_process_that_is_gone_is_empty() -> None:
    p = subprocess.Popen(["true"])
    p.wait()
    assert procs.tree(p.pid) == {}
    assert procs.listening_ports([p.pid]) == set()
