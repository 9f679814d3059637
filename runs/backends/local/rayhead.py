"""The local Ray head that tau starts on first use (127.0.0.1 only) and reuses.

The head runs as `ray start --head --block` in its own session; its pid and ports are kept in
$TAU_HOME/ray/head.json. Jobs go through Ray's documented Jobs REST API (`/api/jobs/`) with
urllib: the Python SDK costs ~1.3 s to import, which would eat the warm-start budget.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from taugrid.api.errors import EXIT_PLATFORM, TauError, missing_extra
from taugrid.runs.backends.local.procs import group_alive, pid_alive
from taugrid.runs.paths import tau_home, write_atomic

HOST = "127.0.0.1"
START_TIMEOUT_S = 90.0


@dataclass(frozen=True)
class Head:
    pid: int
    gcs_port: int
    dashboard_port: int
    temp_dir: str
    started_at: float
    num_cpus: int
    num_gpus: int

    @property
    def address(self) -> str:
        return f"{HOST}:{self.gcs_port}"

    @property
    def dashboard(self) -> str:
        return f"http://{HOST}:{self.dashboard_port}"


def loopback_env() -> dict[str, str]:
    """Environment for Ray processes that keeps every Ray server on 127.0.0.1.

    On Linux Ray takes the machine's routable IP as the node IP (even when given
    --node-ip-address=127.0.0.1) and binds servers there or on 0.0.0.0. With clusters
    "disabled" (Ray's single-machine mode, the default on macOS) the node IP is loopback.
    """
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env.update({"RAY_USAGE_STATS_ENABLED": "0", "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"})
    return env


def ray_dir() -> Path:
    return tau_home() / "ray"


def _state_file() -> Path:
    return ray_dir() / "head.json"


def _short_temp_dir() -> str:
    # Ray puts unix sockets under its temp dir: keep the path short (sockets max out at 107).
    key = hashlib.sha256(str(tau_home().resolve()).encode()).hexdigest()[:10]
    return f"/tmp/tau-ray-{os.getuid()}-{key}"


def ray_cli() -> str:
    exe = Path(sys.executable).parent / "ray"
    found = str(exe) if exe.exists() else shutil.which("ray")
    if not found:
        raise missing_extra("local", "Ray (the local backend runs rayjobs on it)")
    return found


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


def _http(method: str, url: str, body: dict[str, Any] | None = None, timeout: float = 10.0) -> Any:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(
        url, data=data, method=method, headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        raw = resp.read()
    return json.loads(raw) if raw else None


def read_head() -> Head | None:
    try:
        return Head(**json.loads(_state_file().read_text()))
    except (FileNotFoundError, ValueError, TypeError):
        return None


def healthy(head: Head, timeout: float = 2.0) -> bool:
    if not pid_alive(head.pid):
        return False
    try:
        _http("GET", f"{head.dashboard}/api/version", timeout=timeout)
        return True
    except (OSError, ValueError):
        return False


@contextlib.contextmanager
def _lock() -> Iterator[None]:
    ray_dir().mkdir(parents=True, exist_ok=True)
    with open(ray_dir() / "lock", "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def ensure_head(num_gpus: int, say: Callable[[str], None] = lambda _m: None) -> Head:
    """The running head, or a new one (serialised: two `tau run`s never start two heads)."""
    head = read_head()
    if head and healthy(head):
        return head
    with _lock():
        head = read_head()
        if head and healthy(head):
            return head
        if head and pid_alive(head.pid):
            _terminate(head.pid)
        return _start(num_gpus, say)


def _start(num_gpus: int, say: Callable[[str], None]) -> Head:
    cpus = max(2, os.cpu_count() or 2)
    gcs, dash = _free_port(), _free_port()
    temp_dir = _short_temp_dir()
    log = ray_dir() / "head.log"
    cmd = [
        ray_cli(), "start", "--head", "--block",
        f"--node-ip-address={HOST}", f"--port={gcs}",
        "--include-dashboard=true", f"--dashboard-host={HOST}", f"--dashboard-port={dash}",
        f"--num-cpus={cpus}", f"--num-gpus={num_gpus}", f"--temp-dir={temp_dir}",
        "--disable-usage-stats",
        # Ray's fixed default ports (10001, 52365, ...) would collide between two TAU_HOMEs.
        f"--ray-client-server-port={_free_port()}", f"--dashboard-agent-listen-port={_free_port()}",
        f"--dashboard-agent-grpc-port={_free_port()}", f"--runtime-env-agent-port={_free_port()}",
        f"--metrics-export-port={_free_port()}",
    ]  # fmt: skip
    env = loopback_env()
    say(f"starting a local Ray head on {HOST} (first run only; `tau local stop` stops it)")
    with log.open("ab") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env=env, start_new_session=True)  # fmt: skip
    head = Head(pid=proc.pid, gcs_port=gcs, dashboard_port=dash, temp_dir=temp_dir,
                started_at=time.time(), num_cpus=cpus, num_gpus=num_gpus)  # fmt: skip
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            tail = log.read_text(errors="replace").splitlines()[-8:]
            raise TauError(
                "the local Ray head exited while starting:\n  " + "\n  ".join(tail),
                exit_code=EXIT_PLATFORM,
                hint=f"full log: {log}",
            )
        if healthy(head, timeout=1.0):
            write_atomic(_state_file(), json.dumps(asdict(head)).encode())
            return head
        time.sleep(0.25)
    _terminate(proc.pid)
    raise TauError(
        f"the local Ray head did not come up within {START_TIMEOUT_S:.0f}s",
        exit_code=EXIT_PLATFORM,
        hint=f"log: {log}",
    )


def _terminate(pid: int, grace: float = 5.0) -> None:
    """SIGTERM the head's process group, SIGKILL whatever is left after `grace` seconds.

    (`ray start --block` itself can take most of a minute to exit on SIGTERM; its servers are
    gone within a second or two, and they are what matters.)
    """
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and group_alive(pid):
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)
        time.sleep(0.1)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)


def _stop_active_jobs(head: Head, wait_s: float = 10.0) -> None:
    """Stop the jobs still running on the head, so that their drivers end cleanly."""
    try:
        active = [
            j["submission_id"]
            for j in list_jobs(head.dashboard)
            if j.get("status") in ("PENDING", "RUNNING") and j.get("submission_id")
        ]
        for sub_id in active:
            stop_job(head.dashboard, sub_id)
        deadline = time.monotonic() + wait_s
        while active and time.monotonic() < deadline:
            active = [
                a
                for a in active
                if job_info(head.dashboard, a).get("status") in ("PENDING", "RUNNING")
            ]
            time.sleep(0.2)
    except (OSError, ValueError):
        return  # the head does not answer: the signals below are all there is


def stop_head() -> Head | None:
    with _lock():
        head = read_head()
        if head is None:
            return None
        if healthy(head):
            _stop_active_jobs(head)  # runs and standbys
        _terminate(head.pid)
        shutil.rmtree(ray_dir() / "standby", ignore_errors=True)
        with contextlib.suppress(FileNotFoundError):
            _state_file().unlink()
        return head


# --- Jobs REST API ------------------------------------------------------------------------
def submit_job(
    head: Head,
    submission_id: str,
    entrypoint: str,
    runtime_env: dict[str, Any],
    metadata: dict[str, str] | None = None,
) -> None:
    _http(
        "POST",
        f"{head.dashboard}/api/jobs/",
        {"entrypoint": entrypoint, "submission_id": submission_id, "runtime_env": runtime_env,
         "metadata": metadata if metadata is not None else {"tau_run_id": submission_id}},
    )  # fmt: skip


def list_jobs(dashboard: str) -> list[dict[str, Any]]:
    return _http("GET", f"{dashboard}/api/jobs/")  # type: ignore[no-any-return]


def job_logs(dashboard: str, submission_id: str) -> str:
    return str(_http("GET", f"{dashboard}/api/jobs/{submission_id}/logs").get("logs", ""))


def job_info(dashboard: str, submission_id: str) -> dict[str, Any]:
    return _http("GET", f"{dashboard}/api/jobs/{submission_id}")  # type: ignore[no-any-return]


def stop_job(dashboard: str, submission_id: str) -> bool:
    try:
        res = _http("POST", f"{dashboard}/api/jobs/{submission_id}/stop")
    except urllib.error.HTTPError:
        return False
    return bool(res and res.get("stopped"))
