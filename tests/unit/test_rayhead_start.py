"""The local Ray head's start: a server of the head that dies while it starts fails the start
at once, saying which and why from that server's own log."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from taugrid.runs.backends.local import rayhead

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="reads /proc")


@pytest.fixture
def fake_head(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], Path]]:
    """A `ray start` stand-in in its own session whose child is named `raylet` (its comm)."""
    raylet = tmp_path / "raylet"
    shutil.copy(shutil.which("sleep") or "/bin/sleep", raylet)
    proc = subprocess.Popen(
        ["sh", "-c", f"{raylet} 300 & exec sleep 300"],
        start_new_session=True,
        stdout=subprocess.DEVNULL,
    )
    yield proc, tmp_path
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def _raylet_pid(pgid: int) -> int:
    deadline = time.monotonic() + 60  # a bound, not a latency: a busy machine may be slow
    while time.monotonic() < deadline:
        found = rayhead._group_processes(pgid)
        if "raylet" in found:
            return found["raylet"]
        time.sleep(0.01)
    raise AssertionError("the stand-in raylet never showed up")


def _kill(pid: int) -> None:
    """SIGKILL `pid` and wait until it is gone (a zombie counts as gone)."""
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        stat = Path(f"/proc/{pid}/stat")
        if not stat.exists() or stat.read_text().rsplit(")", 1)[1].split()[0] == "Z":
            return
        time.sleep(0.01)
    raise AssertionError(f"{pid} outlived SIGKILL")


def test_a_server_that_dies_while_the_head_starts_is_named_with_its_own_logs_last_lines(
    fake_head: tuple[subprocess.Popen[bytes], Path],
) -> None:
    proc, tmp = fake_head
    temp_dir = tmp / "ray"
    logs = temp_dir / "session_latest" / "logs"
    logs.mkdir(parents=True)
    (logs / "raylet.out").write_text(
        "starting\n" + "\n".join(f"line {i}" for i in range(10)) + "\nThe raylet exited "
        "immediately because one Ray agent failed, agent_name = dashboard_agent\n"
    )
    head_log = tmp / "head.log"
    head_log.write_text("Local node IP: 127.0.0.1\n")
    died = rayhead._death_watch(proc, head_log, 0, {"GCS": 1}, str(temp_dir))
    pid = _raylet_pid(proc.pid)
    assert died() is None  # all up: nothing to say
    _kill(pid)
    err = died()
    assert err is not None
    assert f"raylet (pid {pid}) died while it started" in err.message
    assert "one Ray agent failed, agent_name = dashboard_agent" in err.message
    assert "starting" not in err.message  # its last lines, not all of them
    assert "Local node IP" not in err.message  # the head's log says nothing of why


def test_without_the_servers_own_log_the_heads_log_is_shown(
    fake_head: tuple[subprocess.Popen[bytes], Path],
) -> None:
    proc, tmp = fake_head
    head_log = tmp / "head.log"
    head_log.write_text("old start\n")
    at = head_log.stat().st_size
    with head_log.open("a") as f:
        f.write("this start's line\n")
    died = rayhead._death_watch(proc, head_log, at, {"GCS": 1}, str(tmp / "none"))
    pid = _raylet_pid(proc.pid)
    assert died() is None
    _kill(pid)
    err = died()
    assert err is not None
    assert "this start's line" in err.message
    assert "old start" not in err.message


def test_a_head_whose_start_exited_names_the_server_ray_says_exited_with_its_last_lines(
    tmp_path: Path,
) -> None:
    logs = tmp_path / "ray" / "session_latest" / "logs"
    logs.mkdir(parents=True)
    (logs / "raylet.out").write_text("The raylet exited immediately because one Ray agent failed\n")
    (logs / "gcs_server.out").write_text("gcs was fine\n")
    head_log = tmp_path / "head.log"
    head_log.write_text("Some Ray subprocesses exited unexpectedly:\n  raylet [exit code=1]\n")
    proc = subprocess.Popen(["sh", "-c", "exit 1"])
    proc.wait()
    err = rayhead._died(proc, head_log, 0, {"GCS": 1}, str(tmp_path / "ray"))
    assert err is not None
    assert "exit code 1" in err.message
    assert "raylet's last lines" in err.message
    assert "one Ray agent failed" in err.message
    assert "gcs was fine" not in err.message
