"""Services on this machine: Ray Serve on the local Ray head (`taugrid.serve.local`).

Each revision is checked by importing its application here first (`check_app`), then applied
as Ray Serve's declarative config; a canary is an application of its own on a hidden route,
behind a split application that takes the service's route; the model's files are pulled from
the registry once per version and shared by the revisions that pin it.
"""

from __future__ import annotations

import json
import os
import shutil
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from taugrid.api import serve as S
from taugrid.api.errors import EXIT_PLATFORM, EXIT_RUN_FAILED, EXIT_USAGE, TauError
from taugrid.serve.backends.base import (
    Answer,
    NewService,
    Placement,
    Request,
    Say,
    ServiceTemplate,
    Started,
    now,
    who,
)

if TYPE_CHECKING:
    from taugrid.serve.local import AppShape, LocalServe
    from taugrid.serve.records import ServiceDir
    from taugrid.serve.status import Observed


@dataclass
class _Plan:
    serve: LocalServe
    shape: AppShape
    port: int | None = None


def model_dir(pin: S.ModelPin) -> Path:
    """The version's files on this machine (pulled once, checked, then shared by revisions)."""
    from taugrid.api.data import parse_ref
    from taugrid.data.store import default_store
    from taugrid.runs.paths import tau_home

    dest = tau_home() / "serve" / "models" / pin.name / pin.version.removeprefix("sha256:")[:16]
    if dest.is_dir():
        return dest
    tmp = dest.with_name(dest.name + f".part-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        store = default_store(None)
        store.pull(store.resolve("model", parse_ref(f"{pin.name}@{pin.version}")), tmp, None)
        os.replace(tmp, dest)
    except FileExistsError:
        shutil.rmtree(tmp, ignore_errors=True)
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)
        if not dest.is_dir():
            raise
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return dest


def _models(rev: S.Revision) -> Path | None:
    return model_dir(rev.model) if rev.model else None


def _shape(sd: ServiceDir, rev: S.Revision) -> AppShape:
    from taugrid.serve.local import check_app

    found = _models(rev)
    env = {S.MODEL_ENV: str(found)} if found else {}
    return check_app(sd.code_dir(rev.number), rev.spec, env)


def _config(
    sd: ServiceDir,
    rec: S.ServiceRecord,
    rev: S.Revision,
    shape: AppShape,
    scale: S.Scale,
    strategy: str,
    *,
    route: str | None = None,
    app: str | None = None,
) -> dict[str, Any]:
    """Ray Serve's config of one revision: by default the service's own application, on the
    service's route (or, while a canary splits the traffic, on its hidden one)."""
    from taugrid.serve.local import app_config, hidden_route

    if route is None:
        routed = rec.canary is not None and rec.canary.routed
        route = hidden_route(rec.name, "stable") if routed else rec.route_prefix
    return app_config(
        rec.name, route, rev, scale, strategy, shape, sd.code_dir(rev.number), _models(rev), app=app
    )


def _endpoint(port: int, route: str) -> str:
    from taugrid.serve.local import HOST

    return f"http://{HOST}:{port}{'' if route == '/' else route}"


def canary_scale(scale: S.Scale, percent: int) -> S.Scale:
    """A canary's replicas: its share of a fixed count (at least one); autoscaling as is."""
    if scale.autoscaling is not None:
        return scale
    n = 1 if scale.replicas is None else scale.replicas
    return S.Scale(replicas=max(1, -(-n * percent // 100)))


class LocalServiceBackend(ServiceTemplate):
    name = "local"
    poll_s = 0.25

    def _serve(self, say: Say) -> LocalServe:
        from taugrid.runs.backends.local.backend import detect_gpus
        from taugrid.serve.local import LocalServe

        return LocalServe.started(detect_gpus(), say)

    # --- checks -------------------------------------------------------------------------------
    def check(self, spec: S.ServiceSpec, placement: Placement) -> None:
        from taugrid.runs.backends.local.backend import detect_gpus

        if placement.context or placement.workspace or placement.profile:
            raise TauError(
                "--context, --workspace and --profile are for --target kube", exit_code=EXIT_USAGE
            )
        here = detect_gpus()
        if spec.gpus > here:
            raise TauError(
                f"service.gpus: {spec.gpus} GPU(s) per replica; this machine has {here}",
                exit_code=EXIT_USAGE,
                hint="local services use this machine's GPUs: service: {gpus: 0}, or --target kube",
            )

    def new_registry(self, manifest: Any, spec: S.ServiceSpec, placement: Placement) -> None:
        return None  # this machine's registry

    def registry(self, rec: S.ServiceRecord) -> None:
        return None

    # --- deploy -------------------------------------------------------------------------------
    def prepare_first(self, sd: ServiceDir, new: NewService, rev: S.Revision, say: Say) -> Started:
        say(f"checking {new.spec.import_path}")
        shape = _shape(sd, rev)
        serve = self._serve(say)
        _refuse_foreign(serve, new.name, new.route)
        return Started(fields={}, plan=_Plan(serve, shape, new.placement.port))

    def send_first(
        self, sd: ServiceDir, rec: S.ServiceRecord, plan: Any, say: Say
    ) -> S.ServiceRecord:
        assert isinstance(plan, _Plan)
        rev = rec.current
        port = plan.serve.apply(
            rec.name,
            _config(sd, rec, rev, plan.shape, rec.scale, "rolling"),
            plan.port,
            timeout_s=rev.spec.request_timeout_s,
        )
        rec = rec.model_copy(update={"endpoint": _endpoint(port, rec.route_prefix)})
        say(f"deployed revision 1 of {rec.name}: {rec.endpoint}")
        return rec

    def undo_first(self, sd: ServiceDir, st: S.ServiceStatus) -> None:
        """A first deploy that never served: removed from Ray Serve, its evidence kept aside."""
        from taugrid.serve.local import LocalServe

        serve = LocalServe.running()
        tail = _log_tail(serve, sd.name)
        with sd.lock():
            if serve.head is not None:
                serve.apply(sd.name, None)
            sd.event(
                "failed", st.summary + (f"; replica log: {' | '.join(tail)}" if tail else ""), 1
            )
            rec = sd.read().model_copy(update={"deleted_at": now()})
            sd.write(rec)
            where = sd.retire()
        said = "".join(f"\n  replica: {line}" for line in tail)
        raise TauError(
            f"service {sd.name}: {st.summary}{said}",
            exit_code=EXIT_RUN_FAILED,
            hint=f"nothing is left deployed; its record and replica logs: {where}, "
            "and `tau serve logs` while deploying",
        )

    # --- changes ------------------------------------------------------------------------------
    def prepare_change(
        self, sd: ServiceDir, rec: S.ServiceRecord, rev: S.Revision, strategy: str, say: Say
    ) -> Started:
        if not sd.code_dir(rev.number).is_dir():
            raise TauError(
                f"revision {rev.number}'s code is gone from {sd.code_dir(rev.number)}",
                exit_code=EXIT_PLATFORM,
            )
        serve = self._serve(say)
        return Started(fields={}, where=f", {strategy}", plan=_Plan(serve, _shape(sd, rev)))

    def send_change(
        self, sd: ServiceDir, rec: S.ServiceRecord, rev: S.Revision, plan: Any, say: Say
    ) -> S.ServiceRecord:
        assert isinstance(plan, _Plan)
        port = plan.serve.apply(
            rec.name,
            _config(sd, rec, rev, plan.shape, rec.scale, rec.strategy),
            timeout_s=rev.spec.request_timeout_s,
        )
        return rec.model_copy(update={"endpoint": _endpoint(port, rec.route_prefix)})

    def restore(self, sd: ServiceDir, rec: S.ServiceRecord, say: Say) -> bool:
        serve = self._serve(say)
        obs = serve.observe(rec.name)
        if obs.exists and obs.revision == rec.serving:
            return True
        say(f"revision {rec.serving} is not on the local Ray head: putting it back")
        port = serve.apply(
            rec.name,
            _config(sd, rec, rec.current, _shape(sd, rec.current), rec.scale, "rolling"),
            timeout_s=rec.current.spec.request_timeout_s,
        )
        sd.write(rec.model_copy(update={"endpoint": _endpoint(port, rec.route_prefix)}))
        sd.event("restore", f"revision {rec.serving} put back on the local Ray head", rec.serving)
        return False

    # --- canaries -----------------------------------------------------------------------------
    def prepare_canary(
        self, sd: ServiceDir, rec: S.ServiceRecord, rev: S.Revision, percent: int, say: Say
    ) -> Started:
        return Started(fields={}, plan=_Plan(self._serve(say), _shape(sd, rev)))

    def send_canary(
        self, sd: ServiceDir, rec: S.ServiceRecord, rev: S.Revision, plan: Any, say: Say
    ) -> None:
        """The canary's own application, on its hidden route (no request reaches it yet)."""
        from taugrid.serve.local import canary_app, hidden_route

        assert isinstance(plan, _Plan) and rec.canary is not None
        plan.port = plan.serve.apply(
            canary_app(rec.name),
            _config(
                sd,
                rec,
                rev,
                plan.shape,
                canary_scale(rec.scale, rec.canary.percent),
                "rolling",
                route=hidden_route(rec.name, "canary"),
                app=canary_app(rec.name),
            ),
        )

    def route_canary(
        self,
        sd: ServiceDir,
        rec: S.ServiceRecord,
        rev: S.Revision,
        plan: Any,
        timeout_s: float,
        say: Say,
    ) -> None:
        """When the canary is ready, a split application takes the service's route and sends
        it its share of the requests (in one change of Ray Serve's config: no request finds the
        route empty). A canary or split that does not start is removed, and says why."""
        from taugrid.serve.local import wait_until

        assert isinstance(plan, _Plan) and rec.canary is not None and plan.port is not None
        serve, name = plan.serve, rec.name
        say(f"starting canary revision {rev.number} beside revision {rec.serving}")
        settled = ("RUNNING", "DEPLOY_FAILED", "UNHEALTHY")

        def canary_up() -> bool:
            co = serve.observe(name).canary
            return co is not None and co.status in settled

        wait_until(canary_up, timeout_s, 0.25)
        co = serve.observe(name).canary
        if co is None or co.status != "RUNNING":
            why = (co.message.strip().splitlines() or [co.status])[-1][:300] if co else "it is gone"
            self._end_canary(sd, serve, f"canary revision {rev.number} did not start: {why}", say)
            raise TauError(
                f"service {name}: canary revision {rev.number} did not start ({why}); "
                f"revision {rec.serving} keeps all requests",
                exit_code=EXIT_RUN_FAILED,
                hint=f"why: tau serve logs {name}",
            )
        self._start_split(sd, rec, rev, plan, timeout_s, say)
        self._give_route(sd, rev, plan)
        say(f"canary revision {rev.number} takes {rec.canary.percent}% of {name}'s requests")

    def _start_split(
        self,
        sd: ServiceDir,
        rec: S.ServiceRecord,
        rev: S.Revision,
        plan: _Plan,
        timeout_s: float,
        say: Say,
    ) -> None:
        """The split application, on its own hidden route until it runs; one that does not
        start ends the canary and says why."""
        from taugrid.serve.local import hidden_route, split_app, split_config, wait_until

        assert rec.canary is not None and plan.port is not None
        serve, name = plan.serve, rec.name
        with sd.lock():
            serve.apply(
                split_app(name),
                split_config(
                    name,
                    hidden_route(name, "split"),
                    plan.port,
                    rec.serving,
                    rev.number,
                    rec.canary.percent,
                    rec.route_prefix,
                ),
            )
        settled = ("RUNNING", "DEPLOY_FAILED", "UNHEALTHY")
        wait_until(lambda: serve.observe(name).split in settled, timeout_s, 0.25)
        split = serve.split_of(name)
        if split.status != "RUNNING":
            why = (split.message.strip().splitlines() or [split.status])[-1][:300]
            self._end_canary(sd, serve, f"the traffic split did not start: {why}", say)
            raise TauError(
                f"service {name}: the canary's traffic split did not start on the local "
                f"Ray head ({why}); revision {rec.serving} keeps all requests",
                exit_code=EXIT_PLATFORM,
            )

    def _give_route(self, sd: ServiceDir, rev: S.Revision, plan: _Plan) -> None:
        """The service's route to the split, and its own application off it, in one change of
        Ray Serve's config (no request finds the route empty); recorded as routed."""
        from taugrid.serve.local import split_app, split_config

        assert plan.port is not None
        with sd.lock():
            rec = sd.read()
            assert rec.canary is not None
            percent, name = rec.canary.percent, rec.name
            routed = rec.model_copy(
                update={"canary": rec.canary.model_copy(update={"routed": True})}
            )
            plan.serve.apply_many(
                {
                    name: _config(
                        sd, routed, rec.current, _shape(sd, rec.current), rec.scale, rec.strategy
                    ),
                    split_app(name): split_config(
                        name,
                        rec.route_prefix,
                        plan.port,
                        rec.serving,
                        rev.number,
                        percent,
                        rec.route_prefix,
                    ),
                }
            )
            sd.write(routed)
            sd.event(
                "canary-routed",
                f"revision {rev.number} takes {percent}% of the requests, "
                f"revision {rec.serving} {100 - percent}%",
                rev.number,
            )

    def end_canary(self, sd: ServiceDir, back: int, why: str, say: Say) -> None:
        self._end_canary(sd, self._serve(say), why, say, keep=back)

    def _end_canary(
        self, sd: ServiceDir, serve: LocalServe, why: str, say: Say, keep: int | None = None
    ) -> S.ServiceRecord:
        """The service's route back to its own application (revision `keep`, default the
        serving one), the canary and the split removed: one change of Ray Serve's config."""
        with sd.lock():
            rec = sd.read()
            c = rec.canary
            promoting = c is not None and c.promoting
            if keep is not None:
                back = keep
            else:
                back = rec.previous if promoting and rec.previous is not None else rec.serving
            settled = back == rec.serving and not promoting
            ended = rec.model_copy(
                update={
                    "canary": None,
                    "serving": back,
                    "rollout_done": settled,
                    "rollout_started_at": rec.rollout_started_at if settled else now(),
                    "previous": rec.previous if back == rec.serving else rec.serving,
                }
            )
            rev = ended.current
            port = serve.route_back(
                sd.name, _config(sd, ended, rev, _shape(sd, rev), ended.scale, ended.strategy)
            )
            ended = ended.model_copy(update={"endpoint": _endpoint(port, ended.route_prefix)})
            sd.write(ended)
            sd.event("canary-ended", why, back, who())
        say(why)
        return ended

    def promote(self, sd: ServiceDir, timeout_s: float, say: Say) -> None:
        """All requests to the canary (its share is the split's config: no restart), the
        service's own application moved to the canary's revision behind it, then the route
        given back to the service's application and the canary and split removed. Interrupted,
        `promote` again finishes it; `rollback` returns to the revision before."""
        from taugrid.serve.local import wait_until

        name = sd.name
        serve = self._serve(say)
        with sd.lock():
            rec = self._promoting(sd)
            c = rec.canary
            assert c is not None
            if c.routed:  # every request to the canary at once (a reconfigure)
                _split_all(serve, name)
            rev = rec.current
            shape = _shape(sd, rev)
            serve.apply(name, _config(sd, rec, rev, shape, rec.scale, "rolling"))
        say(
            f"revision {c.revision} takes all of {name}'s requests; the service's replicas move "
            "to it"
        )

        def moved() -> bool:
            o = serve.observe(name)
            return o.revision == c.revision and o.status in (
                "RUNNING",
                "DEPLOY_FAILED",
                "UNHEALTHY",
            )

        wait_until(moved, timeout_s, 0.25)
        o = serve.observe(name)
        if o.revision != c.revision or o.status != "RUNNING":
            raise TauError(
                f"service {name}: its own replicas did not move to revision {c.revision} "
                f"({o.status}); the canary still takes every request",
                exit_code=EXIT_RUN_FAILED,
                hint=f"tau serve promote {name} again, or tau "
                f"serve rollback {name} (back to revision {rec.previous})",
            )
        with sd.lock():
            rec = sd.read()
            done = rec.model_copy(update={"canary": None})
            port = serve.route_back(
                name, _config(sd, done, rec.current, shape, rec.scale, "rolling")
            )
            done = done.model_copy(
                update={"endpoint": _endpoint(port, rec.route_prefix), "strategy": "rolling"}
            )
            sd.write(done)

    @staticmethod
    def _promoting(sd: ServiceDir) -> S.ServiceRecord:
        """The record with its canary promoting (the canary's revision serving, the one before
        it previous); recorded once, so a promote again finds it as it was left."""
        rec = sd.read()
        c = rec.canary
        if c is None:
            raise TauError(f"the canary of {sd.name} ended meanwhile", exit_code=EXIT_USAGE)
        if c.promoting:
            return rec
        rec = rec.model_copy(
            update={
                "previous": rec.serving,
                "serving": c.revision,
                "rollout_started_at": now(),
                "rollout_done": False,
                "canary": c.model_copy(update={"promoting": True}),
            }
        )
        sd.write(rec)
        sd.event(
            "promote",
            f"revision {c.revision} takes all requests (was {c.percent}%)",
            c.revision,
            who(),
        )
        return rec

    # --- scale --------------------------------------------------------------------------------
    def scale(self, sd: ServiceDir, new: S.Scale, say: Say) -> tuple[S.ServiceRecord, bool]:
        """The serving revision (and a canary, at its share) at a new size: Ray Serve adds or
        removes replicas; a size the head can never place is refused first."""
        from taugrid.serve.local import canary_app, hidden_route

        name = sd.name
        if new.replicas == 0:
            raise TauError(
                f"{name}: a local service cannot be scaled to a fixed 0 replicas (Ray "
                "Serve would have nothing to answer with); nothing changed",
                exit_code=EXIT_USAGE,
                hint=f"tau serve scale {name} --min 0 --max N: autoscaling down to zero "
                f"when idle, up on a request; or tau serve delete {name}",
            )
        serve = self._serve(say)
        with sd.lock():
            rec = sd.read()
            rev = rec.current
            _fits_head(name, serve, rev.spec, new, rec.canary is not None)
            was = rec.scale.describe()
            rec = rec.model_copy(update={"scale": new})
            changes = {name: _config(sd, rec, rev, _shape(sd, rev), new, rec.strategy)}
            c = rec.canary
            if c is not None and not c.promoting:  # the canary keeps its share of the new size
                crev = rec.revision(c.revision)
                changes[canary_app(name)] = _config(
                    sd,
                    rec,
                    crev,
                    _shape(sd, crev),
                    canary_scale(new, c.percent),
                    "rolling",
                    route=hidden_route(name, "canary"),
                    app=canary_app(name),
                )
            serve.apply_many(changes)  # first: a size Ray Serve refuses is never recorded
            sd.write(rec)
            sd.event("scale", f"{new.describe()} (was {was})", rec.serving, who())
        return rec, True

    # --- delete -------------------------------------------------------------------------------
    def remove(self, rec: S.ServiceRecord, timeout_s: float, say: Say) -> str:
        from taugrid.serve.local import LocalServe, canary_app, split_app, wait_until

        name = rec.name
        serve = LocalServe.running()
        obs = serve.observe(name) if serve.head is not None else None
        if obs is not None and (obs.exists or obs.canary is not None or obs.split):
            serve.apply_many({name: None, canary_app(name): None, split_app(name): None})

            def removed() -> bool:
                o = serve.observe(name)
                return not o.exists and o.canary is None and not o.split

            if not wait_until(removed, timeout_s, 0.5):
                raise TauError(
                    f"Ray Serve still lists {name} after {timeout_s:.0f}s",
                    exit_code=EXIT_PLATFORM,
                    hint=f"tau serve status {name}",
                )
        return "removed from Ray Serve"

    # --- looking ------------------------------------------------------------------------------
    def observe(self, recs: Sequence[S.ServiceRecord]) -> list[Observed]:
        """One look at Ray Serve for all of them."""
        from taugrid.serve.local import LocalServe

        serve = LocalServe.running()
        state = serve.state()
        return [serve.observe(r.name, state) for r in recs]

    def probe(self, rec: S.ServiceRecord, obs: Observed) -> tuple[bool | None, int | None]:
        from taugrid.serve.local import probe

        if not (
            rec.endpoint
            and obs.exists
            and obs.status == "RUNNING"
            and obs.running > 0
            and not rec.deleted_at
        ):
            return None, None
        path = rec.current.spec.readiness_path or ""
        return probe(rec.endpoint + ("" if path in ("", "/") else path))

    def invoke(self, rec: S.ServiceRecord, request: Request) -> Answer:
        if not rec.endpoint:
            raise TauError(
                f"service {rec.name} has no endpoint yet",
                exit_code=EXIT_PLATFORM,
                hint=f"tau serve status {rec.name}",
            )
        url = rec.endpoint + request.suffix
        req = urllib.request.Request(
            url, data=request.data, method=request.verb, headers=request.headers
        )
        t0 = time.perf_counter()
        try:
            with urllib.request.urlopen(req, timeout=request.timeout_s) as resp:
                return Answer(int(resp.status), resp.read(), time.perf_counter() - t0, url)
        except urllib.error.HTTPError as e:
            return Answer(int(e.code), e.read(), time.perf_counter() - t0, url)
        except OSError as e:
            raise TauError(
                f"{url}: no answer ({getattr(e, 'reason', e)})",
                exit_code=EXIT_PLATFORM,
                hint=f"tau serve status {rec.name}",
            ) from None

    def logs(
        self, rec: S.ServiceRecord, out: TextIO, *, follow: bool, poll_s: float, tail: int | None
    ) -> None:
        """Ray Serve's replica log files, oldest first; `follow` prints what they add until
        interrupted."""
        from taugrid.serve.local import LocalServe

        serve = LocalServe.running()
        files = serve.log_files(rec.name)
        if not files and not follow:
            raise TauError(
                f"no replica logs of {rec.name} on this machine yet",
                exit_code=EXIT_USAGE,
                hint=f"tau serve status {rec.name}",
            )
        offsets: dict[Path, int] = {}
        lines: list[str] = []
        for f in files:
            try:
                blob = f.read_bytes()
            except OSError:
                continue
            offsets[f] = len(blob)
            lines += [f"[{_replica(f)}] {ln}" for ln in blob.decode(errors="replace").splitlines()]
        for ln in lines[-tail:] if tail else lines:
            out.write(ln + "\n")
        out.flush()
        while follow:
            time.sleep(poll_s)
            for f in serve.log_files(rec.name):
                try:
                    with f.open("rb") as fh:
                        fh.seek(offsets.get(f, 0))
                        chunk = fh.read()
                except OSError:
                    continue
                if chunk:
                    offsets[f] = offsets.get(f, 0) + len(chunk)
                    for ln in chunk.decode(errors="replace").splitlines():
                        out.write(f"[{_replica(f)}] {ln}\n")
                    out.flush()


def _replica(f: Path) -> str:
    return f.stem.split("_")[-1]


def _refuse_foreign(serve: LocalServe, name: str, route: str) -> None:
    """A name or route that an application tau did not deploy already uses."""
    state = serve.state()
    for app_name, app in (state.get("applications") or {}).items():
        cfg = app.get("deployed_app_config") or {}
        env = (cfg.get("runtime_env") or {}).get("env_vars") or {}
        if S.SERVICE_ENV in env and env[S.SERVICE_ENV] == app_name and app_name == name:
            continue
        if app_name == name:
            raise TauError(
                f"a Ray Serve application named {name!r} runs on the local head and "
                "tau did not deploy it",
                exit_code=EXIT_USAGE,
                hint="--name another-name",
            )
        if app.get("route_prefix") == route:
            raise TauError(
                f"route {route} is taken by the application {app_name!r}",
                exit_code=EXIT_USAGE,
                hint="service: {route_prefix: /another}",
            )


def _log_tail(serve: LocalServe, name: str, n: int = 5) -> list[str]:
    """The last lines the service's replicas wrote that say an error (a load error's
    traceback ends there), else their last lines; best effort."""
    lines: list[str] = []
    for f in serve.log_files(name):
        try:
            lines += f.read_text(errors="replace").splitlines()
        except OSError:
            continue
    lines = [ln.rstrip() for ln in lines if ln.strip()]
    errors = [ln for ln in lines if " ERROR " in ln or "Error" in ln or "Exception" in ln]
    return [ln[:300] for ln in (errors or lines)[-n:]]


def _fits_head(
    name: str, serve: LocalServe, spec: S.ServiceSpec, scale: S.Scale, canary: bool
) -> None:
    """Refuse a size the local Ray head can never place (its replicas would wait forever):
    the most replicas the scale asks for, times each one's CPUs and GPUs, against the head's."""
    head = serve.head
    if head is None:
        return
    most = scale.autoscaling.max_replicas if scale.autoscaling else (scale.replicas or 1)
    if canary:
        most += 1  # the canary's share takes at least one more
    for what, each, have in (
        ("CPU", float(spec.cpus), float(head.num_cpus)),
        ("GPU", float(spec.gpus), float(head.num_gpus)),
    ):
        if each and most * each > have:
            fit = int(have // each)
            raise TauError(
                f"{name}: {most} replica(s) x {each:g} {what} = {most * each:g} {what}s, "
                f"but the local Ray head has {have:g}: they would wait forever; nothing "
                "changed",
                exit_code=EXIT_USAGE,
                hint=f"at most {fit} replica(s) here (or fewer {what}s per replica: "
                f"service.{what.lower()}s)",
            )


if TYPE_CHECKING:  # the template's steps make a whole backend
    from taugrid.serve.backends.base import ServiceBackend

    _whole: ServiceBackend = LocalServiceBackend()


def _split_all(serve: LocalServe, name: str) -> None:
    """The running split's share set to 100% for the canary (its user config: no restart)."""
    from taugrid.serve.local import split_app

    state = serve.state()
    split = ((state.get("applications") or {}).get(split_app(name)) or {}).get(
        "deployed_app_config"
    )
    if not split:
        return
    split = json.loads(json.dumps(split))
    for d in split.get("deployments") or []:
        d["user_config"] = {"canary_percent": 100}
    serve.apply(split_app(name), split)
