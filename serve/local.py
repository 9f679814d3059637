"""Local services: Ray Serve on the same local Ray head the runs use (127.0.0.1 only).

Everything goes through Ray Serve's declarative REST API on the head's dashboard
(`/api/serve/applications/`, what `serve deploy` uses): a PUT holds every application of the
head, so each change reads the current set, replaces one application and writes it back under
one lock (`$TAU_HOME/serve/lock`): applications that tau did not deploy are kept as they are.
All local services share Ray Serve's HTTP proxy (one port, chosen free on the first deploy),
each on its own route prefix.

Rollouts are Ray Serve's own updates of an application: the new revision's replicas start
before old ones stop (`max_surge_percent`), a few at a time (`rolling`) or all at once
(`blue-green`: `rolling_update_percentage: 1.0`, traffic moves when all are ready).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from taugrid.api import serve as S
from taugrid.api.errors import EXIT_PLATFORM, EXIT_USAGE, TauError
from taugrid.api.manifest import DEFAULT_REQUEST_TIMEOUT_S
from taugrid.host.ports import free_port, port_free
from taugrid.runs.backends.local import rayhead
from taugrid.runs.paths import tau_home
from taugrid.serve.status import Observed

API = "/api/serve/applications/"
HOST = rayhead.HOST
CHECK_TIMEOUT_S = 180.0
TAKEN_S = (
    10.0  # how long a PUT may take to show in Ray Serve's status (an unchanged app never does)
)
DRAIN_S = 60.0  # a canary's split finishes the requests it holds before the canary goes
# How each strategy replaces replicas (Ray Serve's deployment options).
UPDATE: dict[str, dict[str, Any]] = {
    "rolling": {"max_surge_percent": 25, "rolling_update_percentage": 0.25},
    "blue-green": {"max_surge_percent": 100, "rolling_update_percentage": 1.0},
}


@dataclass(frozen=True)
class AppShape:
    ingress: str
    deployments: list[str]


def _lock_file() -> Path:
    d = tau_home() / "serve"
    d.mkdir(parents=True, exist_ok=True)
    return d / "lock"


@contextlib.contextmanager
def serve_lock() -> Iterator[None]:
    with open(_lock_file(), "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def check_app(code_dir: Path, spec: S.ServiceSpec, env: dict[str, str]) -> AppShape:
    """Import the application in a subprocess, as Ray Serve will (its deployments' names)."""
    script = Path(__file__).with_name("appcheck.py")
    run_env = {**rayhead.loopback_env(), **env, "PYTHONDONTWRITEBYTECODE": "1"}
    try:
        proc = subprocess.run(
            [sys.executable, str(script), spec.import_path, json.dumps(spec.args)],
            cwd=code_dir,
            env=run_env,
            capture_output=True,
            text=True,
            timeout=CHECK_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired:
        raise TauError(
            f"importing {spec.import_path} took over {CHECK_TIMEOUT_S:.0f}s",
            exit_code=EXIT_USAGE,
            hint="does the module do heavy work at import?",
        ) from None
    last = (proc.stdout.strip().splitlines() or [""])[-1]
    try:
        doc = json.loads(last)
    except ValueError:
        tail = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise TauError(
            f"checking {spec.import_path} failed: {tail}", exit_code=EXIT_USAGE
        ) from None
    if "error" in doc:
        raise TauError(
            f"service.import_path: {doc['error']}",
            exit_code=EXIT_USAGE,
            hint="the application is imported from the tau.yaml folder, as `module:attribute`",
        )
    return AppShape(ingress=doc["ingress"], deployments=list(doc["deployments"]))


# A canary: the service's route belongs to a small splitting application (`split.py`), and the
# serving and canary revisions answer on hidden routes of the same proxy.
SPLIT_IMPORT = "taugrid.serve.split:app"
canary_app, split_app, hidden_route = S.canary_app, S.split_app, S.hidden_route


def split_config(
    name: str, route: str, port: int, stable: int, canary: int, percent: int, public: str
) -> dict[str, Any]:
    """The splitting application on `route`: `percent` of the requests to the canary revision.
    `public`: the service's own route (the same in every config of one canary: its args are
    part of Ray Serve's code version, and a route change alone restarts nothing)."""
    base = f"http://{HOST}:{port}"
    return {
        "name": split_app(name),
        "route_prefix": route,
        "import_path": SPLIT_IMPORT,
        "args": S.split_args(
            base + hidden_route(name, "stable"),
            base + hidden_route(name, "canary"),
            stable,
            canary,
            base + ("" if public == "/" else public),
        ),
        "runtime_env": {"env_vars": {S.SERVICE_ENV: name}},
        "deployments": [S.split_deployment(percent)],
    }


def app_config(
    name: str,
    route: str,
    rev: S.Revision,
    scale: S.Scale,
    strategy: str,
    shape: AppShape,
    code_dir: Path,
    model_dir: Path | None,
    app: str | None = None,
) -> dict[str, Any]:
    """Ray Serve's application config for one revision (deterministic: the same revision and
    scale give the same config, so re-applying it changes nothing). `app`: the application's
    name when it is not the service's (a canary)."""
    spec = rev.spec
    env = dict(spec.env)
    env[S.SERVICE_ENV] = name
    env[S.REVISION_ENV] = str(rev.number)
    if model_dir is not None and rev.model is not None:
        env[S.MODEL_ENV] = str(model_dir)
        env[S.MODEL_VERSION_ENV] = rev.model.version
    update = UPDATE.get(strategy, UPDATE["rolling"])
    deployments = []
    for d in shape.deployments:
        entry: dict[str, Any] = {"name": d, **update}
        if d == shape.ingress:
            entry["ray_actor_options"] = {"num_cpus": spec.cpus, "num_gpus": spec.gpus}
            # bounded: a burst beyond what the replicas can take is answered 503 at once
            entry["max_ongoing_requests"] = spec.max_ongoing_requests
            entry["max_queued_requests"] = spec.max_queued_requests
            a = scale.autoscaling
            if a is not None:
                auto: dict[str, Any] = {
                    "min_replicas": a.min_replicas,
                    "max_replicas": a.max_replicas,
                    "target_ongoing_requests": a.target_ongoing_requests,
                }
                if a.upscale_delay_s is not None:
                    auto["upscale_delay_s"] = a.upscale_delay_s
                if a.downscale_delay_s is not None:
                    auto["downscale_delay_s"] = a.downscale_delay_s
                entry["autoscaling_config"] = auto
            else:
                entry["num_replicas"] = 1 if scale.replicas is None else scale.replicas
        deployments.append(entry)
    return {
        "name": app or name,
        "route_prefix": route,
        "import_path": spec.import_path,
        "args": spec.args,
        "runtime_env": {"working_dir": f"local://{code_dir}", "env_vars": env},
        "deployments": deployments,
    }


class LocalServe:
    """Ray Serve on the local head (read-only unless `apply`/`remove` are called)."""

    def __init__(self, head: rayhead.Head | None, say: Any = None) -> None:
        self.head = head
        self.say = say or (lambda _m: None)

    @classmethod
    def running(cls) -> LocalServe:
        """The head if it runs (no head is started to look at services)."""
        head = rayhead.read_head()
        return cls(head if head and rayhead.healthy(head) else None)

    @classmethod
    def started(cls, num_gpus: int, say: Any) -> LocalServe:
        return cls(rayhead.ensure_head(num_gpus=num_gpus, say=say), say)

    def _url(self) -> str:
        assert self.head is not None
        return self.head.dashboard + API

    def _alive(self) -> bool:
        from taugrid.host.procs import pid_alive

        return self.head is not None and pid_alive(self.head.pid)

    def state(self) -> dict[str, Any]:
        if self.head is None:
            return {}
        try:
            doc = rayhead.patient_http(
                "GET",
                self._url(),
                try_s=15.0,
                alive=self._alive,
                say=self.say,
                what="Ray Serve's API",
            )
        except (OSError, ValueError) as e:
            raise TauError(
                f"Ray Serve on the local head did not answer: {e}",
                exit_code=EXIT_PLATFORM,
                hint="tau local status",
            ) from None
        return doc if isinstance(doc, dict) else {}

    @staticmethod
    def port_of(state: dict[str, Any]) -> int | None:
        http = state.get("http_options") or {}
        return int(http["port"]) if state.get("proxies") and http.get("port") else None

    def apply(
        self,
        name: str,
        app: dict[str, Any] | None,
        want_port: int | None = None,
        timeout_s: float | None = None,
    ) -> int:
        """Put (or, with None, remove) one application; every other one is kept. Returns the
        HTTP port of Ray Serve's proxy."""
        return self.apply_many({name: app}, want_port, timeout_s)

    def apply_many(
        self,
        changes: Mapping[str, dict[str, Any] | None],
        want_port: int | None = None,
        timeout_s: float | None = None,
    ) -> int:
        """Put or remove several applications in one change (a canary moves a route from one
        application to another at once); every other one is kept. `timeout_s`: the service's
        request timeout, which the proxy takes when this change starts it (a running proxy
        keeps its own: Ray Serve changes its HTTP options only by restarting)."""
        if self.head is None:
            raise TauError("the local Ray head is not running", exit_code=EXIT_PLATFORM)
        with serve_lock():
            state = self.state()
            port_running = self.port_of(state)
            port = self._port(port_running, want_port)
            known = state.get("applications") or {}
            before = {n: (known.get(n) or {}).get("last_deployed_time_s") for n in changes}
            doc = {
                "proxy_location": "HeadOnly",
                "http_options": {
                    "host": HOST,
                    "port": port,
                    "request_timeout_s": self._proxy_timeout(state, timeout_s),
                },
                "applications": [
                    *_kept(known, changes),
                    *(app for app in changes.values() if app is not None),
                ],
            }
            self._put(doc, starting=port_running is None)
            put = [n for n, app in changes.items() if app is not None]
            # taken once Ray Serve reports the new deploys (not the old state)
            wait_until(
                lambda: all(self._deployed_at(n) not in (None, before[n]) for n in put),
                TAKEN_S,
                0.1,
            )
        return port

    @staticmethod
    def _port(running: int | None, want: int | None) -> int:
        """The proxy's port: the running proxy's (a different --port refused), else the one
        asked for, else a free one."""
        if running is not None:
            if want is not None and want != running:
                raise TauError(
                    f"--port {want}: local services share Ray Serve's proxy, which listens "
                    f"on {HOST}:{running}",
                    exit_code=EXIT_USAGE,
                    hint="omit --port (each service has its own route prefix on that port)",
                )
            return running
        port = want or free_port()
        if not port_free(port):
            raise TauError(
                f"port {port} on {HOST} is in use",
                exit_code=EXIT_PLATFORM,
                hint="pick another --port, or omit it for a free one",
            )
        return port

    def _proxy_timeout(self, state: dict[str, Any], timeout_s: float | None) -> float:
        """The proxy's request timeout: a running proxy keeps its own (said when the service
        asks for another), a starting one takes the service's."""
        running = (state.get("http_options") or {}).get("request_timeout_s")
        if running is None:
            return timeout_s or DEFAULT_REQUEST_TIMEOUT_S
        proxy_timeout = float(running)
        if timeout_s is not None and timeout_s != proxy_timeout:
            self.say(
                f"note: local services share one Ray Serve proxy, whose request timeout "
                f"is {proxy_timeout:g}s (set when it started); this service's "
                f"request_timeout_s {timeout_s:g}s holds on a cluster; to change it here: "
                "tau local stop, then deploy again"
            )
        return proxy_timeout

    def _put(self, doc: dict[str, Any], starting: bool) -> None:
        """The whole declarative config PUT to Ray Serve; the first change starts its
        controller: slow on a busy machine, and the config is idempotent, so a try that timed
        out is made again."""
        if starting:
            self.say("the local Ray head: starting Ray Serve's controller and proxy")
        t0 = time.monotonic()
        try:
            rayhead.patient_http(
                "PUT",
                self._url(),
                doc,
                try_s=60.0,
                alive=self._alive,
                say=self.say,
                what="Ray Serve's controller",
            )
        except urllib.error.HTTPError as e:
            detail = e.read().decode(errors="replace").strip().splitlines()
            raise TauError(
                "Ray Serve refused the change: " + " ".join(detail[:6]), exit_code=EXIT_PLATFORM
            ) from None
        except OSError as e:
            raise TauError(
                f"Ray Serve did not take the change: {e}", exit_code=EXIT_PLATFORM
            ) from None
        if starting:
            self.say(
                f"the local Ray head: Ray Serve's controller up ({time.monotonic() - t0:.1f}s)"
            )

    def _deployed_at(self, name: str) -> float | None:
        app = (self.state().get("applications") or {}).get(name) or {}
        t = app.get("last_deployed_time_s")
        return float(t) if t is not None else None

    def observe(self, name: str, state: dict[str, Any] | None = None) -> Observed:
        """The service's application, with its canary and traffic split when they run."""
        if self.head is None:
            return Observed(head_up=False, exists=False)
        state = self.state() if state is None else state
        obs = self._observe_app(name, state)
        apps = state.get("applications") or {}
        if canary_app(name) in apps or split_app(name) in apps:
            split = str((apps.get(split_app(name)) or {}).get("status", "ABSENT"))
            obs = replace(obs, canary=self._observe_app(canary_app(name), state), split=split)
        return obs

    def route_back(self, name: str, own: dict[str, Any]) -> int:
        """End a canary's split: the service's application (`own`) takes the route back while
        the split moves to its hidden one (one change); then the split is removed, which lets
        the requests it holds finish, and only then the canary they may be waiting for."""
        split = ((self.state().get("applications") or {}).get(split_app(name)) or {}).get(
            "deployed_app_config"
        )
        changes: dict[str, dict[str, Any] | None] = {name: own}
        if split:
            changes[split_app(name)] = {**split, "route_prefix": hidden_route(name, "split")}
        port = self.apply_many(changes)
        self.apply(split_app(name), None)
        wait_until(
            lambda: split_app(name) not in (self.state().get("applications") or {}), DRAIN_S, 0.25
        )
        self.apply(canary_app(name), None)
        return port

    def split_of(self, name: str) -> Observed:
        """The canary's traffic split application (its status and message)."""
        if self.head is None:
            return Observed(head_up=False, exists=False)
        return self._observe_app(split_app(name), self.state())

    def _observe_app(self, name: str, state: dict[str, Any]) -> Observed:
        port = self.port_of(state)
        app = (state.get("applications") or {}).get(name)
        if not app:
            return Observed(head_up=True, exists=False, port=port)
        cfg = app.get("deployed_app_config") or {}
        env = (cfg.get("runtime_env") or {}).get("env_vars") or {}
        rev = env.get(S.REVISION_ENV)
        ingress = (app.get("deployment_topology") or {}).get("ingress_deployment")
        deps = app.get("deployments") or {}
        dep = deps.get(ingress) if ingress else next(iter(deps.values()), None)
        running = starting = wanted = 0
        started: list[float] = []
        dstatus = ""
        if dep:
            dstatus = str(dep.get("status", ""))
            wanted = int(dep.get("target_num_replicas") or 0)
            for r in dep.get("replicas") or []:
                if r.get("state") == "RUNNING":
                    running += 1
                    started.append(float(r.get("start_time_s") or 0))
                elif r.get("state") in ("STARTING", "PENDING_MIGRATION", "RECOVERING"):
                    starting += 1
        # the application's message, and the deployment's (where Ray Serve puts a replica's
        # own exception: its constructor's traceback) after it
        parts = [str(app.get("message") or ""), str((dep or {}).get("message") or "")]
        message = "\n".join(p for p in dict.fromkeys(parts) if p.strip())
        return Observed(
            head_up=True,
            exists=True,
            status=str(app.get("status", "")),
            message=message,
            revision=int(rev) if rev and str(rev).isdigit() else None,
            deployment_status=dstatus,
            wanted=wanted,
            running=running,
            starting=starting,
            started_at=started,
            port=port,
            ours=S.SERVICE_ENV in env,
        )

    def log_files(self, name: str) -> list[Path]:
        """The replicas' log files of an application, oldest first."""
        if self.head is None:
            return []
        folder = Path(self.head.temp_dir) / "session_latest" / "logs" / "serve"
        files = [
            p
            for app in (name, canary_app(name))
            for p in folder.glob(f"replica_{app}_*.log")
            if p.is_file()
        ]
        return sorted(files, key=lambda p: p.stat().st_mtime)


def probe(url: str, timeout: float = 5.0) -> tuple[bool, int | None]:
    """(answered, status): a GET answered by the application (any status below 500)."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return True, int(resp.status)
    except urllib.error.HTTPError as e:
        return e.code < 500, int(e.code)
    except (OSError, ValueError):
        return False, None


def wait_until(check: Any, timeout_s: float, poll_s: float = 0.25) -> bool:
    """Poll `check()` until true or the timeout (a service deploy's progress loop)."""
    deadline = time.monotonic() + timeout_s
    while True:
        if check():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(poll_s)


def _kept(
    known: dict[str, Any], changes: Mapping[str, dict[str, Any] | None]
) -> list[dict[str, Any]]:
    """The configs of the applications a change leaves alone (the declarative API replaces
    the whole set); one deployed from Python cannot be kept, and is said."""
    apps = []
    for other, doc in known.items():
        if other in changes:
            continue
        if doc.get("source") != "declarative" or not doc.get("deployed_app_config"):
            raise TauError(
                f"Ray Serve on the local head runs {other!r}, deployed from Python "
                "(serve.run): its declarative API cannot keep it while changing another",
                exit_code=EXIT_PLATFORM,
                hint="serve shutdown, or deploy it with a config",
            )
        apps.append(doc["deployed_app_config"])
    return apps
