"""Local runs on a busy machine: a slow start is progress, never a failure. With 8 bounded busy
loops on the machine, a cold first run, a Tune sweep and a serve deploy each succeed (each stage
of the head said as it comes up); a head whose GCS dies while it starts fails at once with its
log; a port taken is named. Nothing here asserts a latency."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from localkit import EXAMPLES, Tau, have_ray, wait_for

from taugrid.api.errors import TauError

pytestmark = pytest.mark.skipif(not have_ray(), reason="Ray is not installed")

BUSY_LOOPS = 8
BUSY_AT_MOST_S = 1500  # each loop ends by itself after this, whatever happens to the test

SERVICE = """from ray import serve


@serve.deployment
class Hello:
    async def __call__(self, request):
        return {"hello": "busy world"}


app = Hello.bind()
"""


@pytest.fixture()
def busy() -> Iterator[None]:
    """8 processes spinning on the CPU (a build, a notebook, a browser), bounded in time."""
    code = (
        f"import time\nend = time.time() + {BUSY_AT_MOST_S}\nwhile time.time() < end:\n    pass\n"
    )
    loops = [subprocess.Popen([sys.executable, "-c", code]) for _ in range(BUSY_LOOPS)]
    try:
        yield
    finally:
        for p in loops:
            p.kill()
            p.wait()


@pytest.fixture()
def cold(tmp_path: Path) -> Iterator[Tau]:
    """A fresh TAU_HOME: its first run starts a Ray head of its own (cold)."""
    t = Tau(tmp_path / "home")
    yield t
    t("local", "stop", timeout=120)


def test_a_busy_machine_waits_for_the_head_instead_of_failing(
    busy: None, cold: Tau, tmp_path: Path
) -> None:
    res = cold("run", str(EXAMPLES / "quickstart"), timeout=1200)
    assert res.returncode == 0, res.stderr
    for stage in ("GCS up", "raylet up", "dashboard up", "job agent up"):
        assert f"the local Ray head: {stage}" in res.stderr, res.stderr
    sweep = tmp_path / "sweep"
    shutil.copytree(EXAMPLES / "tune-sweep", sweep)
    text = (sweep / "tau.yaml").read_text().replace("num_samples: 8", "num_samples: 2")
    (sweep / "tau.yaml").write_text(text.replace("max_t: 20", "max_t: 3"))
    res = cold("run", str(sweep), timeout=1200)
    assert res.returncode == 0, res.stderr
    svc = tmp_path / "hello"
    svc.mkdir()
    (svc / "hello_app.py").write_text(SERVICE)
    (svc / "tau.yaml").write_text(
        "schema_version: 1\nname: hello\nservice: {import_path: 'hello_app:app', cpus: 0.5}\n"
    )
    res = cold("serve", "deploy", str(svc), timeout=1200)
    assert res.returncode == 0, res.stderr
    assert "starting Ray Serve's controller and proxy" in res.stderr, res.stderr
    assert "Ray Serve's controller up" in res.stderr, res.stderr
    answer = cold("serve", "invoke", "hello", timeout=300)
    assert answer.returncode == 0 and "busy world" in answer.stdout, answer.stderr
    cold("serve", "delete", "hello", timeout=300)


def _kill_gcs_once(message: str, killed: list[int]) -> None:
    """A `say` that kills this head's GCS server as soon as it is up (once): only the one under
    this TAU_HOME's temp dir, never another test's head."""
    from taugrid.runs.backends.local import rayhead

    if "GCS up" not in message or killed:
        return
    mine = rayhead._short_temp_dir().encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        argv0 = cmdline.split(b"\0")[0]
        if argv0.endswith(b"/gcs_server") and mine in cmdline and int(entry.name) not in killed:
            os.kill(int(entry.name), signal.SIGKILL)
            killed.append(int(entry.name))


def test_a_head_whose_gcs_dies_while_it_starts_fails_at_once_with_its_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from taugrid.runs.backends.local import rayhead

    monkeypatch.setenv("TAU_HOME", str(tmp_path / "home"))
    monkeypatch.setenv(rayhead.START_TIMEOUT_ENV, "900")  # a hang would show as the test's
    killed: list[int] = []
    said: list[str] = []

    def say(m: str) -> None:
        said.append(m)
        _kill_gcs_once(m, killed)

    with pytest.raises(TauError) as e:
        rayhead.ensure_head(0, say=say)
    assert killed, said
    msg = e.value.message
    assert "the local Ray head failed" in msg and "did not come up within" not in msg, msg
    assert f"gcs_server (pid {killed[0]}) died" in msg or "exited while starting" in msg, msg
    assert "full log:" in (e.value.hint or "")
    assert not any("still waiting" in m for m in said), said  # it failed at once, not by the clock
    assert rayhead.read_head() is None  # nothing recorded as a head, and nothing of it left:
    mine = rayhead._short_temp_dir().encode()

    def left() -> list[str]:
        return [
            p.name for p in Path("/proc").iterdir() if p.name.isdigit() and _cmdline_has(p, mine)
        ]

    wait_for(lambda: not left(), 60, "the failed head's processes to be gone (SIGKILLed)")


def _cmdline_has(proc: Path, text: bytes) -> bool:
    try:
        return text in (proc / "cmdline").read_bytes()
    except OSError:
        return False


def test_a_taken_port_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import socket

    from taugrid.runs.backends.local import rayhead

    monkeypatch.setenv("TAU_HOME", str(tmp_path / "home"))
    held = socket.socket()
    held.bind(("127.0.0.1", 0))
    held.listen()
    port = held.getsockname()[1]
    real, calls = rayhead.free_port, []

    def free_port() -> int:
        calls.append(1)
        return port if len(calls) == 2 else real()  # the dashboard's, taken meanwhile

    monkeypatch.setattr(rayhead, "free_port", free_port)
    try:
        with pytest.raises(TauError) as e:
            rayhead.ensure_head(0)
    finally:
        held.close()
    assert f"dashboard port {port}" in e.value.message and "is taken" in e.value.message
    assert rayhead.read_head() is None


def test_the_start_timeout_setting_is_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    from taugrid.runs.backends.local import rayhead

    monkeypatch.setenv(rayhead.START_TIMEOUT_ENV, "120")
    assert rayhead.start_timeout() == 120.0
    monkeypatch.delenv(rayhead.START_TIMEOUT_ENV)
    assert rayhead.start_timeout() == rayhead.DEFAULT_START_TIMEOUT_S
    for bad in ("soon", "0", "-5", "nan"):
        monkeypatch.setenv(rayhead.START_TIMEOUT_ENV, bad)
        with pytest.raises(TauError, match="a number of seconds above 0") as e:
            rayhead.start_timeout()
        assert e.value.exit_code == 2


def test_a_slow_head_is_asked_again_saying_so_and_a_job_is_never_submitted_twice(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The job API timing out twice (a busy head): the submission is retried, each retry said;
    the try that timed out but got through is found by its id, not submitted again."""
    import os

    from taugrid.runs.backends.local import rayhead

    calls: list[tuple[str, str]] = []
    landed: set[str] = set()

    def slow_http(method: str, url: str, body: object = None, timeout: float = 10.0) -> object:
        calls.append((method, url))
        if method == "POST":
            landed.add("job")  # it reaches the head, but the answer is late
            raise TimeoutError("timed out")
        if "job" in landed and len(calls) < 4:
            raise TimeoutError("timed out")  # the head is slow to say it has it, once
        return {"submission_id": "r1"} if "job" in landed else {}

    monkeypatch.setattr(rayhead, "_http", slow_http)
    head = rayhead.Head(
        pid=os.getpid(),
        gcs_port=1,
        dashboard_port=2,
        temp_dir="/tmp/x",
        started_at=0,
        num_cpus=2,
        num_gpus=0,
    )
    said: list[str] = []
    rayhead.submit_job(head, "r1", "python x.py", {}, say=said.append)
    posts = [c for c in calls if c[0] == "POST"]
    assert len(posts) == 2, calls  # asked again after the first lookup timed out; then found
    assert len(said) == 2 and all("slow to answer" in m for m in said), said
    assert "TAU_LOCAL_START_TIMEOUT" in said[0]
    # a refusal is said at once, without retries
    refused: list[str] = []

    def refuse(method: str, url: str, body: object = None, timeout: float = 10.0) -> object:
        raise ConnectionRefusedError(111, "refused")

    monkeypatch.setattr(rayhead, "_http", refuse)
    with pytest.raises(OSError):
        rayhead.submit_job(head, "r2", "python x.py", {}, say=refused.append)
    assert refused == []


def test_patient_http_says_each_retry_and_gives_up_at_its_limit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from taugrid.runs.backends.local import rayhead

    tries: list[int] = []

    def late(method: str, url: str, body: object = None, timeout: float = 10.0) -> object:
        tries.append(1)
        if len(tries) < 3:
            raise TimeoutError("timed out")
        return {"ok": True}

    monkeypatch.setattr(rayhead, "_http", late)
    said: list[str] = []
    got = rayhead.patient_http("GET", "http://h", say=said.append, what="Ray Serve's API")
    assert got == {"ok": True} and len(said) == 2 and said[0].startswith("Ray Serve's API is slow")
    tries.clear()
    with pytest.raises(TimeoutError):
        rayhead.patient_http("GET", "http://h", limit_s=0.0, say=said.append)  # no time left


def test_tau_local_start_starts_the_head_showing_its_stages_and_keeps_a_running_one(
    cold: Tau,
) -> None:
    import json

    first = cold("local", "start", "-o", "json", timeout=900)
    assert first.returncode == 0, first.stderr
    doc = json.loads(first.stdout)
    assert doc["started"] is True and doc["pid"] > 0, doc
    for stage in ("GCS up", "raylet up", "dashboard up", "job agent up"):
        assert f"the local Ray head: {stage}" in first.stderr, first.stderr
    again = cold("local", "start", "-o", "json", timeout=300)
    assert json.loads(again.stdout)["started"] is False
    assert json.loads(again.stdout)["pid"] == doc["pid"] and "GCS up" not in again.stderr
    status = json.loads(cold("local", "status", "-o", "json").stdout)
    assert status["running"] is True and status["pid"] == doc["pid"]
