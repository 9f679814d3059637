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
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from taugrid.api.errors import EXIT_PLATFORM, EXIT_USAGE, TauError, missing_extra
from taugrid.host.ports import free_port, listens, port_free
from taugrid.host.procs import group_alive, listening_ports, pid_alive, still_running
from taugrid.host.procs import tree as process_tree
from taugrid.runs.paths import tau_home, write_atomic

HOST = "127.0.0.1"
START_TIMEOUT_ENV = "TAU_LOCAL_START_TIMEOUT"
DEFAULT_START_TIMEOUT_S = 600.0  # a cold head on a busy 2-core laptop took 61 s at load 10
STILL_WAITING_EVERY_S = 15.0  # how often a slow start says what it still waits for


def start_timeout() -> float:
    """How long tau waits for the local head (and a submission to it) before it gives up:
    TAU_LOCAL_START_TIMEOUT seconds, default 600. Slowness is waited for; a head process that
    died, or a port that is taken, fails at once whatever this says."""
    raw = os.environ.get(START_TIMEOUT_ENV)
    if not raw:
        return DEFAULT_START_TIMEOUT_S
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not 0 < value < 1e7:
        raise TauError(
            f"{START_TIMEOUT_ENV}={raw!r}: a number of seconds above 0",
            exit_code=EXIT_USAGE,
            hint=f"e.g. {START_TIMEOUT_ENV}=900",
        )
    return value


@dataclass(frozen=True)
class Head:
    pid: int
    gcs_port: int
    dashboard_port: int
    temp_dir: str
    started_at: float
    num_cpus: int
    num_gpus: int
    agent_port: int | None = None  # the dashboard agent's HTTP port (jobs are submitted there)

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


def _http(method: str, url: str, body: dict[str, Any] | None = None, timeout: float = 10.0) -> Any:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(
        url, data=data, method=method, headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        raw = resp.read()
    return json.loads(raw) if raw else None


def patient_http(
    method: str,
    url: str,
    body: dict[str, Any] | None = None,
    *,
    try_s: float = 30.0,
    limit_s: float | None = None,
    alive: Callable[[], bool] | None = None,
    say: Callable[[str], None] | None = None,
    what: str = "the local Ray head",
) -> Any:
    """`_http` for an idempotent request to a head that may be slow on a busy machine: a try
    that times out is made again (while `alive()`) until `limit_s` (default start_timeout()),
    each retry said through `say`; a refusal, an HTTP error or a head that is gone fails at
    once."""
    limit = start_timeout() if limit_s is None else limit_s
    t0 = time.monotonic()
    while True:
        try:
            return _http(method, url, body, timeout=try_s)
        except urllib.error.HTTPError:
            raise
        except (TimeoutError, urllib.error.URLError) as e:
            slow = isinstance(e, TimeoutError) or "timed out" in str(e)
            if not slow or time.monotonic() - t0 > limit or (alive is not None and not alive()):
                raise
            _still(say, what, t0, limit)


def _still(say: Callable[[str], None] | None, what: str, t0: float, limit: float) -> None:
    if say is not None:
        say(
            f"{what} is slow to answer ({time.monotonic() - t0:.0f}s): asking again, up to "
            f"{limit:.0f}s ({START_TIMEOUT_ENV})"
        )


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
    """`ray start --head` in its own session on loopback ports picked here, waited for stage
    by stage (GCS, raylet, dashboard, job agent); a start that fails leaves no process."""
    cpus = max(2, os.cpu_count() or 2)
    ports = {
        "GCS": free_port(),
        "dashboard": free_port(),
        "Ray client server": free_port(),
        "dashboard agent": free_port(),
        "dashboard agent gRPC": free_port(),
        "runtime env agent": free_port(),
        "metrics export": free_port(),
    }
    temp_dir = _short_temp_dir()
    log = ray_dir() / "head.log"
    cmd = _head_command(ports, cpus, num_gpus, temp_dir)
    limit = start_timeout()
    _ports_still_free(ports)
    say(f"starting a local Ray head on {HOST} (first run only; `tau local stop` stops it)")
    log.parent.mkdir(parents=True, exist_ok=True)
    at = log.stat().st_size if log.exists() else 0  # this start's lines: after here
    with log.open("ab") as out:
        proc = subprocess.Popen(
            cmd,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=loopback_env(),
            start_new_session=True,
        )
    head = Head(
        pid=proc.pid,
        gcs_port=ports["GCS"],
        dashboard_port=ports["dashboard"],
        temp_dir=temp_dir,
        started_at=time.time(),
        num_cpus=cpus,
        num_gpus=num_gpus,
        agent_port=ports["dashboard agent"],
    )
    stages: list[tuple[str, Callable[[], bool]]] = [
        ("GCS", lambda: listens(ports["GCS"])),
        (
            "raylet",
            lambda: _made_since(
                Path(temp_dir, "session_latest", "sockets", "raylet"), head.started_at
            ),
        ),
        ("dashboard", lambda: healthy(head, timeout=2.0)),
        ("job agent", lambda: listens(ports["dashboard agent"])),
    ]
    try:
        await_stages(stages, limit, say, died=_death_watch(proc, log, at, ports, temp_dir))
    except BaseException:
        _terminate(proc.pid)
        raise
    write_atomic(_state_file(), json.dumps(asdict(head)).encode())
    return head


def _ports_still_free(ports: dict[str, int]) -> None:
    """A port taken since it was picked: said now, not after Ray's retries."""
    for name, port in ports.items():
        if not port_free(port):
            raise TauError(
                f"the local Ray head cannot start: its {name} port {port} on {HOST} is "
                "taken by another process",
                exit_code=EXIT_PLATFORM,
                hint="try again (tau picks new ports each time)",
            )


def _head_command(ports: dict[str, int], cpus: int, num_gpus: int, temp_dir: str) -> list[str]:
    return [
        ray_cli(),
        "start",
        "--head",
        "--block",
        f"--node-ip-address={HOST}",
        f"--port={ports['GCS']}",
        "--include-dashboard=true",
        f"--dashboard-host={HOST}",
        f"--dashboard-port={ports['dashboard']}",
        f"--num-cpus={cpus}",
        f"--num-gpus={num_gpus}",
        f"--temp-dir={temp_dir}",
        "--disable-usage-stats",
        # the autoscaler's monitor: a one-node head of fixed size has nothing to scale (saves a
        # process, ~0.5-0.9 CPU-seconds at start and ~90 MiB; measured in docs/local.md)
        "--no-monitor",
        # Ray's fixed default ports (10001, 52365, ...) would collide between two TAU_HOMEs.
        f"--ray-client-server-port={ports['Ray client server']}",
        f"--dashboard-agent-listen-port={ports['dashboard agent']}",
        f"--dashboard-agent-grpc-port={ports['dashboard agent gRPC']}",
        f"--runtime-env-agent-port={ports['runtime env agent']}",
        f"--metrics-export-port={ports['metrics export']}",
    ]


def _death_watch(
    proc: subprocess.Popen[bytes], log: Path, at: int, ports: dict[str, int], temp_dir: str
) -> Callable[[], TauError | None]:
    """A check for the start's `died`: the head gone, or any of its servers seen up since
    gone (one that dies fails the start), as a TauError with the log's new lines."""
    watched: dict[str, int] = {}

    def died() -> TauError | None:
        gone = _died(proc, log, at, ports, temp_dir)
        if gone is not None:
            return gone
        for comm, pid in _group_processes(proc.pid).items():
            watched.setdefault(comm, pid)
        lost = [comm for comm, pid in watched.items() if not pid_alive(pid)]
        if lost:
            return TauError(
                "the local Ray head failed: "
                + ", ".join(f"{comm} (pid {watched[comm]})" for comm in lost)
                + " died while it started:\n  "
                + "\n  ".join(_servers_say(temp_dir, lost) or _tail(log, at)),
                exit_code=EXIT_PLATFORM,
                hint=f"full log: {log}; logs of each process: {temp_dir}/session_latest/logs",
            )
        return None

    return died


def await_stages(
    stages: list[tuple[str, Callable[[], bool]]],
    limit: float,
    say: Callable[[str], None],
    died: Callable[[], TauError | None],
    what: str = "the local Ray head",
) -> None:
    """Wait for each stage in turn (its check answers True), saying each as it completes and,
    every STILL_WAITING_EVERY_S, what it still waits for; `died` (a TauError when a process the
    stages wait on is gone) fails at once; `limit` seconds in all, then a TauError naming the
    stage it still waited for."""
    t0 = time.monotonic()
    note = t0 + STILL_WAITING_EVERY_S
    for name, ready in stages:
        while True:
            gone = died()
            if gone is not None:
                raise gone
            if ready():
                say(f"{what}: {name} up ({time.monotonic() - t0:.1f}s)")
                break
            now = time.monotonic()
            if now - t0 > limit:
                raise TauError(
                    f"{what} did not come up within {limit:.0f}s: it still waited for its {name}",
                    exit_code=EXIT_PLATFORM,
                    hint=f"a busy machine may need longer: {START_TIMEOUT_ENV}="
                    f"{int(limit * 2)} (seconds); `tau local stop` then try again",
                )
            if now >= note:
                say(
                    f"{what}: still waiting for its {name} ({now - t0:.0f}s; up to "
                    f"{limit:.0f}s, {START_TIMEOUT_ENV})"
                )
                note = now + STILL_WAITING_EVERY_S
            time.sleep(0.25)


_TAKEN = re.compile(
    r"(?i)already in use|failed to bind|could not bind|bind\(\) failed|port .* (taken|in use)"
)


SERVERS = ("gcs_server", "raylet")  # the head's servers whose death ends its start


def _group_processes(pgid: int) -> dict[str, int]:
    """The head's servers running now in its process group (Linux /proc; elsewhere none, and
    a dead server is found when `ray start` exits)."""
    found: dict[str, int] = {}
    with contextlib.suppress(OSError):
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            try:
                with open(f"/proc/{entry.name}/stat", "rb") as f:
                    stat = f.read().decode(errors="replace")
            except OSError:
                continue
            comm = stat[stat.find("(") + 1 : stat.rfind(")")]
            fields = stat[stat.rfind(")") + 2 :].split()
            if comm in SERVERS and len(fields) > 2 and fields[2] == str(pgid):
                found.setdefault(comm, int(entry.name))
    return found


def _log_text(log: Path, at: int) -> str:
    try:
        with log.open("rb") as f:
            f.seek(at)
            return f.read().decode(errors="replace")
    except OSError:
        return ""


def _tail(log: Path, at: int, n: int = 12) -> list[str]:
    """The last lines written to `log` after offset `at` (this start's, in the head's log)."""
    return [ln for ln in _log_text(log, at).splitlines() if ln.strip()][-n:]


def _made_since(path: Path, t: float) -> bool:
    """`path` exists and was made by this start (a stopped head's session leaves its own)."""
    try:
        return os.stat(path).st_mtime >= t - 1.0
    except OSError:
        return False


def _servers_say(temp_dir: str, servers: list[str]) -> list[str]:
    """The last lines of each server's own log, where it says why it exited (e.g. the raylet
    when an agent of its could not bind its port); the head's log only says that it did."""
    said = []
    for comm in servers:
        path = Path(temp_dir, "session_latest", "logs", f"{comm}.out")
        tail = _tail(path, 0, 6)
        if tail:
            said.append(f"{comm}'s last lines ({path}):\n    " + "\n    ".join(tail))
    return said


def _died(
    proc: subprocess.Popen[bytes], log: Path, at: int, ports: dict[str, int], temp_dir: str = ""
) -> TauError | None:
    """The head's `ray start` exited (it does when one of the head's processes dies): the
    error with the log's tail and the last lines of the server it says exited, and the port by
    name when the log says one was taken."""
    if proc.poll() is None:
        return None
    text = _log_text(log, at)
    tail = _tail(log, at)
    lines = text.splitlines()
    taken = [
        f"{name} port {port}"
        for name, port in ports.items()
        if any(re.search(rf"\b{port}\b", ln) and _TAKEN.search(ln) for ln in lines)
    ]
    first = (
        f"a port it needs is taken: {', '.join(taken)}"
        if taken
        else f"it exited while starting (exit code {proc.returncode})"
    )
    exited = [m for m in re.findall(r"(\w+) \[exit code=", text) if m in SERVERS]
    said = _servers_say(temp_dir, list(dict.fromkeys(exited))) if temp_dir else []
    return TauError(
        f"the local Ray head failed: {first}:\n  " + "\n  ".join(tail + said),
        exit_code=EXIT_PLATFORM,
        hint=f"full log: {log}"
        + ("; free that port, or try again (tau picks new ports)" if taken else ""),
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


STOP_WAIT_S = 60.0  # for every process of a stopped head to end and its ports to close


def stop_head(say: Callable[[str], None] = lambda _m: None) -> Head | None:
    """Stop the head and its runs; return once every process of it has ended (its workers
    too, which Ray starts outside its process group: Serve's proxy was one) and nothing listens
    on a port any of them listened on, within STOP_WAIT_S (said while it waits)."""
    with _lock():
        head = read_head()
        if head is None:
            return None
        if healthy(head):
            _stop_active_jobs(head)  # runs and standbys
        procs = process_tree(head.pid)
        ports = listening_ports(list(procs)) | {head.gcs_port, head.dashboard_port}
        _terminate(head.pid)
        _end_all(procs, ports, say)
        shutil.rmtree(ray_dir() / "standby", ignore_errors=True)
        with contextlib.suppress(FileNotFoundError):
            _state_file().unlink()
        return head


def _end_all(procs: dict[int, str], ports: set[int], say: Callable[[str], None]) -> None:
    """SIGTERM, then SIGKILL after a grace, what is left of `procs`; wait until none runs and
    none of `ports` listens."""
    t0 = time.monotonic()
    termed = killed = False
    note = t0 + 5.0
    while True:
        left = still_running(procs)
        open_ports = sorted(p for p in ports if listens(p, timeout=0.2))
        if not left and not open_ports:
            return
        now = time.monotonic()
        if left and not termed:
            for pid in left:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGTERM)
            termed = True
        elif left and not killed and now - t0 > 5.0:
            for pid in left:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            killed = True
        if now - t0 > STOP_WAIT_S:
            raise TauError(
                f"the local Ray head's processes did not all end within {STOP_WAIT_S:.0f}s: "
                + "; ".join(
                    ([f"still running: pids {', '.join(map(str, left))}"] if left else [])
                    + (
                        [f"still listening: ports {', '.join(map(str, open_ports))}"]
                        if open_ports
                        else []
                    )
                ),
                exit_code=EXIT_PLATFORM,
            )
        if now >= note:
            say(
                f"waiting for the local Ray head to end: {len(left)} process(es) left, "
                f"{len(open_ports)} port(s) still open ({now - t0:.0f}s)"
            )
            note = now + 15.0
        time.sleep(0.1)


# --- Jobs REST API ------------------------------------------------------------------------
SUBMIT_TRY_S = 30.0  # one submission request's own timeout (tried again until start_timeout)


def submit_job(
    head: Head,
    submission_id: str,
    entrypoint: str,
    runtime_env: dict[str, Any],
    metadata: dict[str, str] | None = None,
    limit_s: float | None = None,
    say: Callable[[str], None] | None = None,
) -> None:
    """Submit a job (its submission id makes it idempotent). A head that is slow to answer
    (a busy machine) is asked again until `limit_s` (default: start_timeout()), each retry
    said through `say`; a request that timed out but reached the head is found by its id,
    never submitted twice. A head that refuses or is gone: the error at once."""
    body = {
        "entrypoint": entrypoint,
        "submission_id": submission_id,
        "runtime_env": runtime_env,
        "metadata": metadata if metadata is not None else {"tau_run_id": submission_id},
    }
    limit = start_timeout() if limit_s is None else limit_s
    t0 = time.monotonic()
    tried = False
    while True:
        try:
            _http("POST", f"{head.dashboard}/api/jobs/", body, timeout=SUBMIT_TRY_S)
            return
        except urllib.error.HTTPError as e:
            text = e.read().decode(errors="replace") if e.fp else ""
            if tried and "already exists" in text:  # the request that timed out got through
                return
            raise OSError(f"HTTP {e.code}: {text.strip()[:300] or e.reason}") from None
        except (TimeoutError, urllib.error.URLError, ConnectionError) as e:
            slow = isinstance(e, TimeoutError) or "timed out" in str(e)
            if not slow or not pid_alive(head.pid) or time.monotonic() - t0 > limit:
                raise
            tried = True
            _still(say, "the local Ray head's job API", t0, limit)
            with contextlib.suppress(OSError, ValueError):
                if job_info(head.dashboard, submission_id).get("submission_id"):
                    return  # it got through


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
