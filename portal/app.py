"""The portal's web app: server-rendered pages on `taugrid.client` (the CLI's own calls).

Read-only but for two actions (cancel a run, decide a quota request: POST, a CSRF token, a
confirmation page). It acts as the user: their TAU_HOME and their kubeconfig identity, so RBAC
decides what a page shows. Every request must name a Host the portal serves (loopback names by
default, `allowed_hosts` for others: a page that rebinds its DNS name to 127.0.0.1 is refused),
every POST must come from one of those origins, and the CSRF token is tied to the browser's
session cookie. When a token is set (any address but loopback), every request must carry it too
(`?token=` once: it is kept in a cookie; or `Authorization: Bearer`).
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import io
import re
import secrets
import threading
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import (
    HTMLResponse,
    PlainTextResponse,
    RedirectResponse,
    Response,
    StreamingResponse,
)
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates

from taugrid.api.errors import EXIT_PLATFORM, EXIT_USAGE, TauError
from taugrid.api.gpuuse import describe
from taugrid.api.vocabulary import TERMINAL, RunStatus
from taugrid.portal.charts import Series, downsample, gpu_series, svg

HERE = Path(__file__).resolve().parent
_RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,252}$")
TOKEN_COOKIE = "tau_portal_token"
SESSION_COOKIE = "tau_portal_session"
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")
SAFE_METHODS = ("GET", "HEAD", "OPTIONS")
LOG_TAIL = 200  # lines of a run's log on its page
SORTS = ("created", "name", "phase")


class NotFound(TauError):
    """A page of something that is not there (404)."""


@dataclass
class Settings:
    """How the portal was started."""

    token: str | None = None  # required on every request when set
    context: str | None = None  # a kubeconfig context (default: the current one)
    page_size: int = 50
    poll_s: float = 1.0  # the live log's poll interval
    csrf: str = field(default_factory=lambda: secrets.token_urlsafe(24))  # the CSRF tokens' key
    allowed_hosts: tuple[str, ...] = LOOPBACK_HOSTS  # the Host names it answers to

    def csrf_for(self, session: str) -> str:
        """The CSRF token of one browser session (its cookie): another session's is useless."""
        return hmac.new(self.csrf.encode(), session.encode(), "sha256").hexdigest()[:40]


@dataclass
class _State:
    """What the routes share: how the portal was started, the status cache between requests,
    the templates (kept on the app: `app.state.tau`)."""

    settings: Settings
    cache: Any  # taugrid.client.runs.StatusCache
    templates: Jinja2Templates


def _state(request: Request) -> _State:
    got: _State = request.app.state.tau
    return got


def page(request: Request, template: str, status_code: int = 200, **ctx: Any) -> Response:
    """A page from its template, with the CSRF token of the browser's session."""
    st = _state(request)
    ctx.setdefault("csrf", st.settings.csrf_for(request.scope.get("tau_session", "")))
    return st.templates.TemplateResponse(request, template, ctx, status_code=status_code)


def csrf_ok(form: Any, request: Request) -> bool:
    session = request.scope.get("tau_session_sent")  # the cookie the browser sent
    if not session:
        return False
    return hmac.compare_digest(
        str(form.get("csrf") or ""), _state(request).settings.csrf_for(session)
    )


def refused(request: Request, what: str, hint: str) -> Response:
    return page(
        request,
        "error.html",
        status_code=403,
        title="Refused",
        hint=hint,
        message=f"the form's CSRF token is missing or wrong: nothing was {what}",
    )


async def runs(request: Request) -> Response:
    settings = _state(request).settings
    cache = _state(request).cache
    q = request.query_params
    scope = q.get("scope", "local")
    workspace = q.get("workspace") or None
    got = await run_in_threadpool(
        _runs, scope, workspace if scope == "cluster" else None, settings.context, cache
    )
    phases = sorted({s.phase.value for s in got})
    experiments = sorted({s.experiment for s in got if s.experiment})
    workspaces = sorted({s.workspace for s in got if s.workspace})
    shown = _filtered(
        got,
        q.get("phase") or None,
        (q.get("q") or "").strip().lower(),
        q.get("experiment") or None,
        workspace if scope != "cluster" else None,
    )
    sort = q.get("sort") or "created"
    sort = sort if sort in SORTS else "created"
    desc = q.get("order", "desc") != "asc"
    shown.sort(key=_sort_key(sort), reverse=desc)
    pages = max(1, -(-len(shown) // settings.page_size))
    number = min(max(_int(q.get("page"), 1), 1), pages)
    start = (number - 1) * settings.page_size
    base = {k: v for k, v in q.items() if k != "page" and v}
    return page(
        request,
        "runs.html",
        runs=shown[start : start + settings.page_size],
        total=len(got),
        matched=len(shown),
        page=number,
        pages=pages,
        scope=scope,
        workspace=workspace or "",
        phase=q.get("phase") or "",
        text=q.get("q") or "",
        phases=phases,
        sort=sort,
        desc=desc,
        experiments=experiments,
        experiment=q.get("experiment") or "",
        workspaces=workspaces,
        link=lambda **kw: "/runs?" + urlencode({**base, **kw}),
    )


async def run(request: Request) -> Response:
    settings = _state(request).settings
    run_id = _run_id(request)
    st, rec, rows, log, made, models = await asyncio.gather(
        run_in_threadpool(_status, run_id, settings.context),
        run_in_threadpool(_record, run_id, settings.context),
        run_in_threadpool(_metric_rows, run_id, settings.context),
        run_in_threadpool(_log_tail, run_id, settings.context),
        run_in_threadpool(_artifacts, run_id, settings.context),
        run_in_threadpool(_models_from, run_id),
    )
    charts = [svg([Series(run_id, pts)], name) for name, pts in _series(rows).items()]
    use = st.gpu_use
    until = time.time() if st.phase == "Running" else None
    gpu_charts = [
        svg([Series(run_id, pts)], f"{name}, by minute (DCGM)")
        for name, pts in gpu_series(use.history if use else [], until).items()
    ]
    return page(
        request,
        "run.html",
        st=st,
        rec=rec,
        charts=charts,
        gpu_charts=gpu_charts,
        gpu_line=describe(use) if use else "",
        log=log,
        made=made,
        models=models,
        ended=st.phase in TERMINAL,
    )


async def log_stream(request: Request) -> Response:
    """Server-sent events: each new log line as it is written, until the run ends."""
    settings = _state(request).settings
    run_id = _run_id(request)
    seen = _int(request.query_params.get("from"), 0)

    async def events() -> AsyncIterator[str]:
        nonlocal seen
        while True:
            lines = await run_in_threadpool(_log_lines, run_id, settings.context)
            for line in lines[seen:]:
                yield f"data: {line}\n\n"
            seen = max(seen, len(lines))
            st = await run_in_threadpool(_status, run_id, settings.context)
            if st.phase in TERMINAL:
                yield f"event: end\ndata: {st.phase.value}\n\n"
                return
            if await request.is_disconnected():
                return
            await asyncio.sleep(settings.poll_s)

    return StreamingResponse(
        events(), media_type="text/event-stream", headers={"Cache-Control": "no-cache"}
    )


async def cancel(request: Request) -> Response:
    settings = _state(request).settings
    run_id = _run_id(request)
    if request.method == "GET":  # the confirmation step
        st = await run_in_threadpool(_status, run_id, settings.context)
        return page(request, "confirm.html", st=st, ended=st.phase in TERMINAL)
    form = await request.form()
    if not csrf_ok(form, request):
        return refused(request, "cancelled", "open the run's page and use its Cancel button")
    from taugrid.client import runs as client

    await run_in_threadpool(client.cancel, run_id, context=settings.context)
    return RedirectResponse(f"/runs/{run_id}", status_code=303)


async def compare(request: Request) -> Response:
    settings = _state(request).settings
    ids = [r for r in request.query_params.getlist("run") if r][:20]
    metric = request.query_params.get("metric") or ""
    rows = await asyncio.gather(
        *(run_in_threadpool(_metric_rows, r, settings.context) for r in ids)
    )
    per_run = {r: _series(rs) for r, rs in zip(ids, rows, strict=True)}
    names = sorted({n for s in per_run.values() for n in s})
    if not metric and names:
        metric = names[0]
    chart = svg([Series(r, s.get(metric, [])) for r, s in per_run.items()], metric)
    configs = await asyncio.gather(*(run_in_threadpool(_config, r, settings.context) for r in ids))
    return page(
        request,
        "compare.html",
        ids=ids,
        metric=metric,
        names=names,
        chart=chart,
        diff=_config_diff(dict(zip(ids, configs, strict=True))),
    )


async def queues(request: Request) -> Response:
    settings = _state(request).settings
    rows, requests, waiting, teams = await asyncio.gather(
        run_in_threadpool(_queues, settings.context),
        run_in_threadpool(_quota_requests, settings.context),
        run_in_threadpool(_pending, settings.context),
        run_in_threadpool(_teams, settings.context),
    )
    return page(
        request,
        "queues.html",
        teams=teams,
        queues=rows,
        requests=requests[0],
        admin=requests[1],
        waiting=waiting[0],
        waiting_notes=waiting[1],
    )


async def decide(request: Request) -> Response:
    """Approve or deny a quota request (platform admins; the API server decides who may)."""
    settings = _state(request).settings
    workspace, name = request.path_params["workspace"], request.path_params["name"]
    verdict = request.path_params["verdict"]
    if verdict not in ("approve", "deny") or not _RUN_ID.match(name):
        raise NotFound(f"no quota request {name!r} to {verdict}")
    if request.method == "GET":
        return page(request, "decide.html", workspace=workspace, name=name, verdict=verdict)
    form = await request.form()
    if not csrf_ok(form, request):
        return refused(request, "decided", "open the queues page and use its buttons")
    from taugrid.client import quota

    act = quota.approve if verdict == "approve" else quota.deny
    await run_in_threadpool(
        lambda: act(
            name, str(form.get("note") or ""), workspace=workspace, context=settings.context
        )
    )
    return RedirectResponse("/queues", status_code=303)


async def nodes(request: Request) -> Response:
    settings = _state(request).settings
    rows, conditions = await asyncio.gather(
        run_in_threadpool(_nodes, settings.context),
        run_in_threadpool(_health, settings.context),
    )
    pools: dict[str, list[Any]] = {}
    for r in rows:
        pools.setdefault(r.pool or "(no pool)", []).append(r)
    return page(
        request,
        "nodes.html",
        pools=pools,
        total=len(rows),
        conditions=conditions,
        quarantined=sum(r.quarantined for r in rows),
    )


async def data_index(request: Request) -> Response:
    datasets, models = await asyncio.gather(
        run_in_threadpool(_data_rows, "dataset"), run_in_threadpool(_data_rows, "model")
    )
    return page(request, "data.html", datasets=datasets, models=models)


async def data_item(request: Request) -> Response:
    kind, name = request.path_params["kind"], request.path_params["name"]
    if kind not in ("dataset", "model") or not _RUN_ID.match(name):
        raise NotFound(f"no {kind} {name!r}")
    versions, aliases, moves = await run_in_threadpool(_data_item, kind, name)
    if not versions:
        raise NotFound(f"no {kind} {name!r} in the registry")
    by_version: dict[str, list[str]] = {}
    for a, v in aliases.items():
        by_version.setdefault(v, []).append(a)
    return page(
        request,
        "data_item.html",
        kind=kind,
        name=name,
        versions=list(reversed(versions)),
        by_version=by_version,
        moves=moves,
    )


async def services(request: Request) -> Response:
    from taugrid.client import serve

    rows = await run_in_threadpool(serve.list_services)
    return page(request, "services.html", services=rows)


async def service(request: Request) -> Response:
    from taugrid.client import serve

    name = request.path_params["name"]
    if not _RUN_ID.match(name):
        raise NotFound(f"no service {name!r}")
    st = await run_in_threadpool(lambda: serve.status(name, events=50))
    return page(request, "service.html", st=st)


async def home(_: Request) -> Response:
    return RedirectResponse("/runs", status_code=307)


async def healthz(_: Request) -> Response:
    return PlainTextResponse("ok")


async def tau_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, TauError)
    return page(
        request,
        "error.html",
        status_code=_http_status(exc),
        title=_title(exc),
        message=exc.message,
        hint=exc.hint,
    )


def create_app(settings: Settings | None = None) -> Starlette:
    settings = settings or Settings()
    from taugrid.client.runs import StatusCache

    state = _State(settings, StatusCache(), Jinja2Templates(directory=str(HERE / "templates")))

    @contextlib.asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        """Warm the status cache at start (thousands of ended runs take seconds once), so the
        first visit of the runs page does not wait for all of it."""
        warm = threading.Thread(target=_warm, args=(state.cache, settings.context), daemon=True)
        warm.start()
        yield

    app = Starlette(
        lifespan=lifespan,
        routes=[
            Route("/", home),
            Route("/healthz", healthz),
            Route("/runs", runs),
            Route("/runs/{run_id}", run),
            Route("/runs/{run_id}/log/stream", log_stream),
            Route("/runs/{run_id}/cancel", cancel, methods=["GET", "POST"]),
            Route("/compare", compare),
            Route("/queues", queues),
            Route("/queues/{workspace}/{name}/{verdict}", decide, methods=["GET", "POST"]),
            Route("/nodes", nodes),
            Route("/services", services),
            Route("/services/{name}", service),
            Route("/data", data_index),
            Route("/data/{kind}/{name}", data_item),
            Mount("/static", StaticFiles(directory=str(HERE / "static")), name="static"),
        ],
        exception_handlers={TauError: tau_error},
    )
    app.state.tau = state
    if settings.token:
        app.add_middleware(_TokenGate, token=settings.token)
    app.add_middleware(_Guard, allowed=settings.allowed_hosts)  # outermost: before the token
    return app


def _hostname(value: str) -> str:
    """The name in a Host header or an origin's authority, lower-case, without port or the
    brackets of an IPv6 address."""
    value = value.strip().lower()
    if value.startswith("["):
        return value[1:].split("]", 1)[0]
    return value.rsplit(":", 1)[0] if value.count(":") == 1 else value


class _Guard:
    """Before anything else: the Host must be one the portal serves (else 421, naming it: a page
    whose DNS name was rebound to this machine reads nothing); a request that changes anything
    (not GET/HEAD/OPTIONS) must come from an allowed origin (Origin, else Referer; a browser
    always sends one of them with a form); and every browser gets a session cookie, to which
    its CSRF tokens are tied."""

    def __init__(self, app: Any, allowed: tuple[str, ...]) -> None:
        self.app, self.allowed = app, tuple(_hostname(h) for h in allowed)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request = Request(scope)
        host = request.headers.get("host", "")
        if _hostname(host) not in self.allowed:
            await self._refuse(
                scope,
                receive,
                send,
                421,
                f"refused Host {host!r}: this portal "
                f"answers to {', '.join(self.allowed)} (tau portal --allowed-hosts "
                "NAME serves another name)",
            )
            return
        if request.method not in SAFE_METHODS:
            origin = request.headers.get("origin") or request.headers.get("referer")
            if origin is not None:
                from urllib.parse import urlsplit

                name = _hostname(urlsplit(origin).netloc) if origin != "null" else "null"
                if name not in self.allowed:
                    await self._refuse(
                        scope,
                        receive,
                        send,
                        403,
                        f"refused a {request.method} from origin {origin!r}: nothing was changed",
                    )
                    return
        sent = request.cookies.get(SESSION_COOKIE, "")
        scope["tau_session_sent"] = sent
        scope["tau_session"] = sent or secrets.token_urlsafe(24)
        if sent:
            await self.app(scope, receive, send)
            return
        cookie = f"{SESSION_COOKIE}={scope['tau_session']}; Path=/; HttpOnly; SameSite=Strict"

        async def with_cookie(message: Any) -> None:
            if message["type"] == "http.response.start":
                message.setdefault("headers", [])
                message["headers"] = [*message["headers"], (b"set-cookie", cookie.encode())]
            await send(message)

        await self.app(scope, receive, with_cookie)

    @staticmethod
    async def _refuse(scope: Any, receive: Any, send: Any, code: int, why: str) -> None:
        await PlainTextResponse(why + "\n", status_code=code)(scope, receive, send)


class _TokenGate:
    """Every request carries the token: `?token=` (kept in a cookie from then on), the cookie,
    or `Authorization: Bearer`. Anything else: 401, and nothing of the portal is shown."""

    def __init__(self, app: Any, token: str) -> None:
        self.app, self.token = app, token

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request = Request(scope)
        given = request.query_params.get("token")
        if given is not None and hmac.compare_digest(given, self.token):
            rest = {k: v for k, v in request.query_params.items() if k != "token"}
            target = request.url.path + (f"?{urlencode(rest)}" if rest else "")
            response: Response = RedirectResponse(target, status_code=303)
            response.set_cookie(TOKEN_COOKIE, self.token, httponly=True, samesite="strict")
            await response(scope, receive, send)
            return
        bearer = request.headers.get("authorization", "").removeprefix("Bearer ").strip()
        cookie = request.cookies.get(TOKEN_COOKIE, "")
        if any(hmac.compare_digest(c, self.token) for c in (bearer, cookie) if c):
            await self.app(scope, receive, send)
            return
        await HTMLResponse(
            "<!doctype html><title>TauGrid portal: token needed</title><h1>Token needed</h1>"
            "<p>This portal listens beyond this machine: open the address `tau portal` printed "
            "(it carries the token).</p>",
            status_code=401,
        )(scope, receive, send)


# --- reading, through the Python API (blocking calls: run in the thread pool) ---------------
def _runs(
    scope: str, workspace: str | None, context: str | None, cache: Any = None
) -> list[RunStatus]:
    from taugrid.client import runs as client

    if scope == "cluster":
        return client.cluster_runs(workspace=workspace, context=context)
    return client.list_runs(context=context, cache=cache)


def _warm(cache: Any, context: str | None) -> None:
    from taugrid.client import runs as client

    with contextlib.suppress(TauError):
        client.list_runs(context=context, cache=cache)


def _status(run_id: str, context: str | None) -> RunStatus:
    from taugrid.client import runs as client

    return client.status(run_id, context=context)


def _record(run_id: str, context: str | None) -> Any:
    from taugrid.client import runs as client

    return client.record(run_id, context=context)


def _artifacts(run_id: str, context: str | None) -> Any:
    from taugrid.client import runs as client

    return client.artifacts(run_id, context=context)


def _data_rows(kind: Any) -> list[dict[str, Any]]:
    from taugrid.client import data

    return data.list_(kind)


def _data_item(kind: Any, name: str) -> tuple[list[Any], dict[str, str], list[Any]]:
    from taugrid.client import data

    return data.versions(kind, name), data.aliases(kind, name), data.history(kind, name)


def _models_from(run_id: str) -> list[Any]:
    """Models registered from the run (`tau data model register --from-run`); none when the
    registry cannot be read (the page says the rest)."""
    from taugrid.client import data

    try:
        return data.models_from_run(run_id)
    except TauError:
        return []


def _metric_rows(run_id: str, context: str | None) -> list[dict[str, Any]]:
    """The run's curves; none when they cannot be read (a cluster run's volume: the page's
    checkpoints section says why)."""
    from taugrid.client import runs as client

    try:
        return client.metrics(run_id, context=context)
    except TauError:
        return []


def _log_lines(run_id: str, context: str | None) -> list[str]:
    from taugrid.client import runs as client

    buf = io.StringIO()
    client.logs(run_id, buf, context=context)
    return buf.getvalue().splitlines()


def _log_tail(run_id: str, context: str | None) -> tuple[list[str], int]:
    """The last lines of the log, and how many lines it has (where the live stream goes on)."""
    try:
        lines = _log_lines(run_id, context)
    except TauError as e:
        return [f"(no log: {e.message})"], 0
    return lines[-LOG_TAIL:], len(lines)


def _queues(context: str | None) -> list[Any]:
    from taugrid.client import cluster

    return cluster.queues(context)


def _teams(context: str | None) -> list[Any]:
    """Each team's share now (`tau quota status`); none when the stack declares no teams."""
    from taugrid.client import usage

    try:
        rows = usage.quota_status(context=context)
    except TauError:  # the queues' table below says what cannot be read
        return []
    return rows if any(r.weight is not None for r in rows) else []


def _pending(context: str | None) -> tuple[list[Any], list[str]]:
    from taugrid.client import cluster

    return cluster.pending(context)


def _health(context: str | None) -> list[dict[str, Any]]:
    from taugrid.client import cluster

    try:
        return cluster.health(context)
    except TauError:  # the TauCluster may not be readable: the nodes are still shown
        return []


def _nodes(context: str | None) -> list[Any]:
    from taugrid.client import cluster

    return cluster.gpu_nodes(context)


def _quota_requests(context: str | None) -> tuple[list[dict[str, Any]], bool]:
    """Every request cluster-wide when the user may see them all (an admin, who decides),
    else those of the workspaces they use; and which of the two it is."""
    from taugrid.client import quota

    return quota.list_requests(all_namespaces=True, context=context), quota.may_decide(context)


def _config(run_id: str, context: str | None) -> dict[str, Any]:
    """The run's resolved tau.yaml as flat `key.path: value` pairs (for the config diff)."""
    from taugrid.api.documents import parse_yaml
    from taugrid.client import runs as client

    path = client.find(run_id, context=context).path / "config" / "tau.yaml"
    try:
        doc = parse_yaml(path.read_text(encoding="utf-8"), str(path))
    except (OSError, TauError):
        return {}
    return dict(_flat(doc))


# --- shaping ------------------------------------------------------------------------------
def _series(rows: list[dict[str, Any]]) -> dict[str, list[tuple[float, float]]]:
    """Metric rows -> one downsampled series per metric name, x = step (else row order)."""
    xs = [float(r["step"]) if type(r.get("step")) is int else float(i) for i, r in enumerate(rows)]
    names = sorted({k for r in rows for k in r})
    out: dict[str, list[tuple[float, float]]] = {}
    for name in names:
        if name in ("step", "ts", "run_id"):
            continue
        pts = [
            (x, float(v))
            for x, r in zip(xs, rows, strict=True)
            if type(v := r.get(name)) is float or type(v) is int
        ]
        if pts:
            out[name] = downsample(pts)
    return out


def _filtered(
    runs: list[RunStatus],
    phase: str | None,
    text: str,
    experiment: str | None = None,
    workspace: str | None = None,
) -> list[RunStatus]:
    return [
        s
        for s in runs
        if (phase is None or s.phase.value == phase)
        and (experiment is None or s.experiment == experiment)
        and (workspace is None or s.workspace == workspace)
        and (not text or text in s.run_id.lower() or text in s.name.lower())
    ]


def _sort_key(sort: str) -> Callable[[RunStatus], Any]:
    if sort == "name":
        return lambda s: (s.name, s.created_at)
    if sort == "phase":
        return lambda s: (s.phase.value, s.created_at)
    return lambda s: s.created_at


def _flat(doc: Any, prefix: str = "") -> list[tuple[str, Any]]:
    if isinstance(doc, dict):
        return [kv for k, v in doc.items() for kv in _flat(v, f"{prefix}{k}.")]
    if isinstance(doc, list) and doc and all(isinstance(x, dict) for x in doc):
        return [kv for i, v in enumerate(doc) for kv in _flat(v, f"{prefix}{i}.")]
    return [(prefix.rstrip("."), doc)]


def _config_diff(configs: dict[str, dict[str, Any]]) -> list[tuple[str, list[str]]]:
    """The keys whose values differ between the runs: (key, value per run)."""
    keys = sorted({k for c in configs.values() for k in c})
    out = []
    for k in keys:
        values = [c.get(k) for c in configs.values()]
        if len({repr(v) for v in values}) > 1:
            out.append((k, ["" if v is None else str(v) for v in values]))
    return out


def _run_id(request: Request) -> str:
    run_id = str(request.path_params["run_id"])
    if not _RUN_ID.match(run_id) or ".." in run_id:
        raise NotFound(f"no run {run_id!r}", hint="the runs page lists them")
    return run_id


def _int(text: str | None, default: int) -> int:
    try:
        return int(text) if text is not None else default
    except ValueError:
        return default


def _http_status(e: TauError) -> int:
    from taugrid.kube.client import Forbidden

    if isinstance(e, Forbidden):
        return 403
    if isinstance(e, NotFound):
        return 404
    if e.exit_code == EXIT_USAGE:
        missing = ("no run", "no service", "not found")
        return 404 if any(w in e.message for w in missing) else 400
    return 502 if e.exit_code == EXIT_PLATFORM else 500


def _title(e: TauError) -> str:
    return {403: "Forbidden", 404: "Not found", 400: "Refused", 502: "It could not be done"}.get(
        _http_status(e), "Failed"
    )
