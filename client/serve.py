"""Services: deploy a model with Ray Serve, roll it out, roll it back, scale it, delete it.

    from taugrid.client import serve

    st = serve.deploy("examples/serve-model", model="iris@prod")   # revision 1, ready
    serve.invoke("iris", b'{"features": [5.1, 3.5, 1.4, 0.2]}').json()
    serve.rollout("iris", model="iris@sha256:1a2b3c")                # revision 2
    serve.rollback("iris")                                           # revision 1 again

A service's record lives in `$TAU_HOME/services/<name>/` (`taugrid.serve.records`); its status
is `taugrid.serve.status.compute` over what the target reports. Every deploy and rollout is a
revision that pins the exact model version (`NAME@ALIAS` and `from_run` are resolved once, at
deploy time) and the code it runs; a rollback runs a kept revision again.

This module checks a command's arguments, pins the model and decides the target once; the
target's backend (`taugrid.serve.backends`: Ray Serve on the local Ray head, or a RayService on a
cluster) does the rest in the order its template writes once. Nothing here prints.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from taugrid.api import serve as S
from taugrid.api.errors import EXIT_RUN_FAILED, EXIT_USAGE, TauError
from taugrid.serve.backends.base import Answer

if TYPE_CHECKING:
    from taugrid.serve.backends.base import ServiceBackend
    from taugrid.serve.records import ServiceDir

__all__ = ["Answer"]  # (what `invoke` returns)

Say = Callable[[str], None]
READY_TIMEOUT_S = 300.0


def _quiet(_: str) -> None:
    """The default `say`: the API says nothing unless the caller asks."""


# --- what a revision is made of ---------------------------------------------------------------
def _spec(
    file: str | Path | None, model: str | None, from_run: str | None, checkpoint: str | None
) -> tuple[S.ServiceSpec, str, Path]:
    spec, m, path = _spec_and_manifest(file, model, from_run, checkpoint)
    return spec, m.name, path


def _spec_and_manifest(
    file: str | Path | None, model: str | None, from_run: str | None, checkpoint: str | None
) -> tuple[S.ServiceSpec, Any, Path]:
    """The service block of a tau.yaml with the command's overrides, checked again."""
    from taugrid.api.issues import config_error
    from taugrid.runs.load import load_manifest

    loaded = load_manifest(None if file is None else str(file), purpose="service")
    spec = loaded.manifest.service
    assert spec is not None
    update: dict[str, Any] = {}
    if model is not None:
        update.update(model=model, from_run=None)
    if from_run is not None:
        update.update(from_run=from_run, model=None)
    if checkpoint is not None:
        update["checkpoint"] = checkpoint
    if update:
        spec = S.ServiceSpec.model_validate({**spec.model_dump(), **update}, strict=False)
        problems = list(S.service_issues(spec))
        if problems:
            raise config_error(str(loaded.path), loaded.text, problems)
    return spec, loaded.manifest, loaded.path


def _pin(
    spec: S.ServiceSpec,
    service: str,
    registry: Callable[[], str | None] | None = None,
    say: Say | None = None,
) -> S.ModelPin | None:
    """The exact model version: an alias or a run's checkpoint, resolved now, once. A run's
    checkpoint is registered into `registry()` when given and it names one (a cluster
    service's workspace registry: a cluster run's checkpoint is registered where the run left
    it, nothing through this machine), else into this machine's registry."""
    from taugrid.client import data

    if spec.model:
        rec = data.show("model", spec.model)
        return S.ModelPin(
            ref=spec.model,
            name=rec.name,
            version=rec.version,
            from_run=rec.lineage.run,
            checkpoint=rec.lineage.checkpoint,
        )
    if spec.from_run:
        # a local service reads a revision's model from this machine's registry; a cluster
        # service from its workspace's, where a cluster run's checkpoint already is
        into = registry() if registry is not None else None
        got = data.register_model_from_run(
            service,
            spec.from_run,
            checkpoint=spec.checkpoint,
            purpose="serving",
            registry=into,
            into_workspace=False,
            say=say,
        )
        r = got.record
        return S.ModelPin(
            ref=f"run:{spec.from_run} ({spec.checkpoint})",
            name=r.name,
            version=r.version,
            from_run=r.lineage.run,
            checkpoint=r.lineage.checkpoint,
        )
    return None


def _who() -> str:
    from taugrid.runs.provenance import submitter

    return submitter()


def _now() -> str:
    from taugrid.serve.records import now

    return now()


def _sd(name: str) -> ServiceDir:
    from taugrid.serve.records import ServiceDir

    return ServiceDir(name)


def _live(rec: S.ServiceRecord) -> None:
    if rec.deleted_at:
        raise TauError(f"service {rec.name} was deleted at {rec.deleted_at}", exit_code=EXIT_USAGE)


def _claim(
    sd: ServiceDir,
    spec: S.ServiceSpec,
    say: Say,
    registry: Callable[[], str | None] | None = None,
) -> S.ModelPin | None:
    """A new service's name (refused when one of that name exists here) and its model,
    pinned to the exact version (under the service's lock)."""
    if sd.exists():
        old = sd.read()
        raise TauError(
            f"service {sd.name!r} exists (revision {old.serving}, {old.target}, from "
            f"{old.current.source})",
            exit_code=EXIT_USAGE,
            hint=f"update it: tau serve rollout {sd.name} [--model REF]; or remove it "
            f"first: tau serve delete {sd.name}",
        )
    pin = _pin(spec, sd.name, registry, say)
    say(f"model: {pin.short} ({pin.ref})" if pin else "model: none (service.model unset)")
    return pin


# --- deploy -------------------------------------------------------------------------------------
def deploy(
    file: str | Path | None = None,
    *,
    name: str | None = None,
    model: str | None = None,
    from_run: str | None = None,
    checkpoint: str | None = None,
    target: str = "local",
    port: int | None = None,
    context: str | None = None,
    workspace: str | None = None,
    profile: str | None = None,
    wait: bool = True,
    timeout_s: float = READY_TIMEOUT_S,
    say: Say = _quiet,
) -> S.ServiceStatus:
    """Revision 1 of a new service: checked, then deployed; with `wait`, until a request is
    answered (a failure removes what was deployed and says why). `target="kube"`: a RayService
    in the workspace (`context`, `workspace`, `profile` as for runs), admitted by Kueue."""
    from taugrid.serve import backends
    from taugrid.serve.backends.base import NewService, Placement
    from taugrid.serve.records import ServiceDir

    backend = backends.get(target)  # the target, decided once
    spec, m, source = _spec_and_manifest(file, model, from_run, checkpoint)
    name = name or m.name
    problem = S.name_problem(name)
    if problem:
        raise TauError(
            f"service name {name!r}: {problem}",
            exit_code=EXIT_USAGE,
            hint="--name iris, or the tau.yaml's name",
        )
    if port is not None and not 1024 <= port <= 65535:
        raise TauError(f"--port {port}: use 1024..65535", exit_code=EXIT_USAGE)
    placement = Placement(context=context, workspace=workspace, profile=profile, port=port)
    backend.check(spec, placement)
    sd = ServiceDir(name)
    with sd.lock():
        pin = _claim(sd, spec, say, lambda: backend.new_registry(m, spec, placement))
        new = NewService(
            name=name,
            spec=spec,
            manifest=m,
            source=source,
            pin=pin,
            route=spec.route_prefix or f"/{name}",
            placement=placement,
            created=_now(),
            who=_who(),
        )
        backend.deploy(sd, new, say)
    if not wait:
        return status(name, probe=False)
    st = _await(name, 1, timeout_s, say)
    if st.phase in S.NOT_SERVING:
        backend.undo_first(sd, st)
    return st


# --- rollouts -----------------------------------------------------------------------------------
def rollout(
    name: str,
    file: str | Path | None = None,
    *,
    model: str | None = None,
    from_run: str | None = None,
    checkpoint: str | None = None,
    strategy: str | None = None,
    step: int | None = None,
    wait: bool = True,
    timeout_s: float = READY_TIMEOUT_S,
    say: Say = _quiet,
) -> S.ServiceStatus:
    """A new revision (the tau.yaml again, or a new model), rolled out without dropping a
    request; one that fails to start is rolled back. The same config again is no new revision
    (it is put back if the target lost it). `strategy="canary"`: the new revision takes `step`
    percent of the requests beside the serving one, until `promote` or `rollback`."""
    from taugrid.serve import backends
    from taugrid.serve.backends.base import Placement, no_canary

    sd = _sd(name)
    rec = sd.read()
    _live(rec)
    no_canary(rec, "a rollout")
    backend = backends.for_record(rec)
    spec, _, source = _spec(
        file if file is not None else rec.current.source, model, from_run, checkpoint
    )
    chosen = strategy or spec.rollout.strategy
    percent = _percent(chosen, step, spec)
    route = spec.route_prefix or f"/{name}"
    if route != rec.route_prefix:
        raise TauError(
            f"service.route_prefix: {route} differs from the service's "
            f"{rec.route_prefix}; a route is fixed for a service's life",
            exit_code=EXIT_USAGE,
            hint="deploy a new service for a new route",
        )
    backend.check(spec, Placement())
    pin = _pin(spec, name, lambda: backend.registry(sd.read()), say)
    if chosen == "canary":
        backend.canary(sd, spec, source, pin, percent, timeout_s, say)
        return _await_canary(name, timeout_s, say) if wait else status(name, probe=False)
    rec, rev, unchanged = _change(sd, backend, spec, source, pin, chosen, say)
    if unchanged:
        say(f"no change: revision {rec.serving} already runs this config and model")
        return status(name)
    if unchanged is not None:  # put back
        return _await(name, rec.serving, timeout_s, say) if wait else status(name, probe=False)
    say(f"rolling out revision {rev.number} of {name} ({chosen})")
    if not wait:
        return status(name, probe=False)
    if backend.undo_failed_rollout:
        return _finish_rollout(name, rev.number, timeout_s, say)
    return _await(name, rev.number, timeout_s, say)


def _change(
    sd: ServiceDir,
    backend: ServiceBackend,
    spec: S.ServiceSpec,
    source: Path,
    pin: S.ModelPin | None,
    chosen: str,
    say: Say,
) -> tuple[S.ServiceRecord, S.Revision, bool | None]:
    """A rollout's change, under the service's lock: (the record before, the revision, and
    whether the serving revision was already there (True) or put back (False); None: a new
    revision rolls out over the serving one)."""
    with sd.lock():
        rec = sd.read()
        rev, new = backend.revision(sd, rec, spec, source, pin, "rollout")
        if rev.number == rec.serving:
            return rec, rev, backend.restore(sd, rec, say)
        if not new:
            say(
                f"revision {rev.number} has this config and model: rolling out "
                f"revision {rev.number}"
            )
        again = " again (the same config and model)" if not new else ""
        short = rev.model.short if rev.model else "no model"
        backend.change(
            sd,
            rec,
            rev,
            new=new,
            kind="rollout",
            message=f"revision {rev.number}{again} ({short}) over revision {rec.serving}",
            strategy=chosen,
            say=say,
        )
        return rec, rev, None


def _percent(chosen: str, step: int | None, spec: S.ServiceSpec) -> int:
    """A rollout's strategy checked; a canary's share of the requests (%)."""
    if chosen not in S.STRATEGIES:
        raise TauError(
            f"--strategy {chosen}: not a strategy",
            exit_code=EXIT_USAGE,
            hint="rolling, blue-green or canary",
        )
    if step is not None and chosen != "canary":
        raise TauError(
            f"--step is a canary's traffic share; this rollout is {chosen}",
            exit_code=EXIT_USAGE,
            hint="--strategy canary --step 20",
        )
    if step is not None and not 1 <= step <= 99:
        raise TauError(
            f"--step {step}: a canary's share is 1..99 (%)",
            exit_code=EXIT_USAGE,
            hint="100% is `tau serve promote` after the canary",
        )
    return step if step is not None else spec.rollout.step


def _switch(name: str, to: int, kind: str, message: str, say: Say) -> S.ServiceRecord:
    """Serve a kept revision again (its code and its pinned model, as they were)."""
    from taugrid.serve import backends

    sd = _sd(name)
    with sd.lock():
        rec = sd.read()
        backend = backends.for_record(rec)
        return backend.change(
            sd,
            rec,
            rec.revision(to),
            new=False,
            kind=kind,
            message=message,
            strategy=backend.rollback_strategy,
            say=say,
        )


def _finish_rollout(name: str, number: int, timeout_s: float, say: Say) -> S.ServiceStatus:
    """Until revision `number` serves; one that does not is rolled back (and said so)."""
    st = _await(name, number, timeout_s, say)
    if st.phase in S.NOT_SERVING:
        rec = _sd(name).read()
        back = rec.previous
        if back is None:
            return st
        say(f"revision {number} did not start ({st.summary}); rolling back to revision {back}")
        _switch(name, back, "rollback", f"revision {number} failed: back to revision {back}", say)
        _await(name, back, timeout_s, say)
        raise TauError(
            f"service {name}: revision {number} failed; revision {back} serves again",
            exit_code=EXIT_RUN_FAILED,
            hint=f"why: tau serve logs {name}; tau serve status {name}",
        )
    return st


def rollback(
    name: str,
    *,
    to: int | None = None,
    wait: bool = True,
    timeout_s: float = READY_TIMEOUT_S,
    say: Say = _quiet,
) -> S.ServiceStatus:
    """Serve a kept revision again (default: the one before the last change)."""
    from taugrid.serve import backends

    sd = _sd(name)
    rec = sd.read()
    _live(rec)
    target = to if to is not None else rec.previous
    if target is None and rec.canary is not None:
        target = rec.serving
    if target is None:
        earlier = [r.number for r in rec.revisions if r.number < rec.serving]
        if not earlier:
            raise TauError(
                f"service {name} has only revision {rec.serving}: nothing to roll back to",
                exit_code=EXIT_USAGE,
            )
        target = earlier[-1]
    rec.revision(target)  # exists?
    c = rec.canary
    if c is not None:  # the canary removed; the revision before it (or `to`) takes every request
        if to is None:
            to = rec.previous if c.promoting and rec.previous is not None else rec.serving
        why = f"canary of revision {c.revision} ended: revision {to} takes all requests"
        backends.for_record(rec).end_canary(sd, to, why, say)
        return _await(name, to, timeout_s, say) if wait else status(name, probe=False)
    if target == rec.serving:
        raise TauError(
            f"revision {target} already serves {name}",
            exit_code=EXIT_USAGE,
            hint=f"tau serve status {name} (its revisions and which serves)",
        )
    _switch(name, target, "rollback", f"revision {rec.serving} -> revision {target}", say)
    say(f"rolling back {name} to revision {target}")
    return _await(name, target, timeout_s, say) if wait else status(name, probe=False)


# --- canaries ----------------------------------------------------------------------------------
def _await_canary(name: str, timeout_s: float, say: Say) -> S.ServiceStatus:
    """Until the canary takes its share, fails, waits in its queue, or the timeout."""
    return _poll(name, timeout_s, say, lambda st: st.phase in S.CANARY_SETTLED)


def promote(
    name: str, *, wait: bool = True, timeout_s: float = READY_TIMEOUT_S, say: Say = _quiet
) -> S.ServiceStatus:
    """Give a canary all the requests: it becomes the serving revision (the one before it is
    kept, for a rollback)."""
    from taugrid.serve import backends

    sd = _sd(name)
    rec = sd.read()
    _live(rec)
    c = rec.canary
    if c is None:
        raise TauError(
            f"nothing to promote: revision {rec.serving} takes all of {name}'s requests",
            exit_code=EXIT_USAGE,
            hint=f"a canary first: tau serve rollout {name} --strategy canary --step 20",
        )
    backends.for_record(rec).promote(sd, timeout_s, say)
    return _await(name, c.revision, timeout_s, say) if wait else status(name, probe=False)


# --- scale --------------------------------------------------------------------------------------
def scale(
    name: str,
    *,
    replicas: int | None = None,
    min_replicas: int | None = None,
    max_replicas: int | None = None,
    timeout_s: float = READY_TIMEOUT_S,
    say: Say = _quiet,
) -> S.ServiceStatus:
    """A fixed replica count, or autoscaling bounds (min 0: scale to zero). No new revision:
    the serving one gets more or fewer replicas."""
    from taugrid.serve import backends

    if replicas is None and min_replicas is None and max_replicas is None:
        raise TauError("say how: --replicas N, or --min N and/or --max N", exit_code=EXIT_USAGE)
    if replicas is not None and (min_replicas is not None or max_replicas is not None):
        raise TauError(
            "--replicas is a fixed count; --min/--max are autoscaling bounds: "
            "give one or the other",
            exit_code=EXIT_USAGE,
        )
    sd = _sd(name)
    rec = sd.read()
    _live(rec)
    new = _new_scale(rec, replicas, min_replicas, max_replicas)
    rec, starting = backends.for_record(rec).scale(sd, new, say)
    if not starting:
        return status(name)
    if rec.canary is not None:
        return _await_canary(name, timeout_s, say)
    return _await(name, rec.serving, timeout_s, say)


def _new_scale(
    rec: S.ServiceRecord, replicas: int | None, lo: int | None, hi: int | None
) -> S.Scale:
    """The scale asked for, checked (an autoscaling bound not given keeps the service's)."""
    try:
        if replicas is not None:
            spec = S.ServiceSpec.model_validate({"import_path": "m:a", "replicas": replicas})
            return S.Scale(replicas=spec.replicas)
        old = rec.scale.autoscaling
        lo = lo if lo is not None else (old.min_replicas if old else 1)
        hi = hi if hi is not None else (old.max_replicas if old else max(lo, 1))
        auto = S.Autoscaling.model_validate(
            {
                **(old.model_dump(exclude_none=True) if old else {}),
                "min_replicas": lo,
                "max_replicas": hi,
            }
        )
    except ValueError as e:
        errors: list[Any] = list(getattr(e, "errors", list)())
        why = str(errors[0]["msg"]) if errors else str(e)
        raise TauError(
            f"scale: {why}", exit_code=EXIT_USAGE, hint=f"0..{S.MAX_REPLICAS} replicas"
        ) from None
    if auto.min_replicas > auto.max_replicas:
        raise TauError(f"--min {lo} is above --max {hi}", exit_code=EXIT_USAGE)
    return S.Scale(autoscaling=auto)


def delete(name: str, *, timeout_s: float = 120.0, say: Say = _quiet) -> S.ServiceRecord:
    """Remove the service from its target (its replicas stop); its record and revisions are
    kept aside (`$TAU_HOME/services/.deleted/`), and the name is free again."""
    from taugrid.serve import backends

    sd = _sd(name)
    return backends.for_record(sd.read()).delete(sd, timeout_s, say)


# --- looking ------------------------------------------------------------------------------------
def status(name: str, *, probe: bool = True, events: int = 10) -> S.ServiceStatus:
    """What the service does now; a rollout that has finished is recorded as such."""
    from taugrid.serve import backends
    from taugrid.serve.status import compute

    sd = _sd(name)
    rec = sd.read()
    backend = backends.for_record(rec)
    [obs] = backend.observe([rec])
    rec = backend.settle(sd, rec, obs)
    answered, code = backend.probe(rec, obs) if probe else (None, None)
    return compute(rec, obs, answered, sd.events(events), code)


def list_services() -> list[S.ServiceStatus]:
    """Every service of this machine (one look per target for all, no requests sent)."""
    from taugrid.serve import backends
    from taugrid.serve.records import all_services
    from taugrid.serve.status import compute

    recs = [(sd, sd.read()) for sd in all_services()]
    out = []
    for target in dict.fromkeys(rec.target for _, rec in recs):
        backend = backends.get(target)
        mine = [(sd, rec) for sd, rec in recs if rec.target == target]
        looked = backend.observe([rec for _, rec in mine])
        for (sd, rec), obs in zip(mine, looked, strict=True):
            out.append(compute(backend.settle(sd, rec, obs), obs, None, [], None))
    order = {sd.name: i for i, (sd, _) in enumerate(recs)}
    return sorted(out, key=lambda st: order[st.name])


def local_services() -> list[str]:
    """The names of this machine's services on the local target (they run on the local Ray
    head: stopping the head stops them)."""
    from taugrid.serve.records import all_services

    return [sd.name for sd in all_services() if sd.read().target == "local"]


def watch(
    name: str, *, poll_s: float = 1.0, timeout_s: float | None = None
) -> Iterator[S.ServiceStatus]:
    """Each change of the service's status (phase, replicas, summary), until it settles."""
    last = None
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    while True:
        st = status(name)
        key = (st.phase, st.summary, st.replicas, st.serving)
        if key != last:
            yield st
            last = key
        if st.phase in S.SETTLED and st.serving is not False:
            return
        if deadline is not None and time.monotonic() >= deadline:
            return
        time.sleep(poll_s)


def _poll(
    name: str, timeout_s: float, say: Say, done: Callable[[S.ServiceStatus], bool]
) -> S.ServiceStatus:
    """The service's status until `done` says so or the timeout; each new summary said."""
    from taugrid.serve import backends

    poll_s = backends.for_record(_sd(name).read()).poll_s
    deadline = time.monotonic() + timeout_s
    last = ""
    while True:
        st = status(name)
        if st.summary != last:
            say(st.summary)
            last = st.summary
        if done(st) or time.monotonic() >= deadline:
            return st
        time.sleep(poll_s)


def _await(name: str, number: int, timeout_s: float, say: Say) -> S.ServiceStatus:
    """Until revision `number` serves (a request answered), fails, waits in its queue (the
    status says for what: waiting changes nothing), or the timeout."""

    def done(st: S.ServiceStatus) -> bool:
        settled = st.revision == number and st.rollout is None
        if settled:  # a new generation still starting (on a cluster): not yet
            settled = not _sd(name).read().pending_generation
        if settled and (
            st.phase == "ScaledToZero" or (st.phase == "Ready" and st.serving is not False)
        ):
            return True
        return st.phase in ("Failed", "Waiting")

    deadline = time.monotonic() + timeout_s
    st = _poll(name, timeout_s, say, done)
    if not done(st) and time.monotonic() >= deadline:
        return st.model_copy(
            update={
                "phase": "Waiting" if st.phase != "Unhealthy" else st.phase,
                "summary": f"not ready after {timeout_s:.0f}s: {st.summary}",
            }
        )
    return st


def invoke(
    name: str,
    data: bytes | None = None,
    *,
    path: str = "",
    method: str | None = None,
    content_type: str = "application/json",
    timeout_s: float = 60.0,
) -> Answer:
    """One HTTP request to the service (POST with `data`, else GET), as a client would send it."""
    from taugrid.serve import backends
    from taugrid.serve.backends.base import Request

    rec = _sd(name).read()
    _live(rec)
    request = Request(
        data=data, path=path, method=method, content_type=content_type, timeout_s=timeout_s
    )
    return backends.for_record(rec).invoke(rec, request)


def logs(
    name: str, out: TextIO, *, follow: bool = False, poll_s: float = 0.5, tail: int | None = 200
) -> None:
    """The replicas' logs, oldest first; `follow` keeps printing what they add until
    interrupted (the local target)."""
    from taugrid.serve import backends

    rec = _sd(name).read()
    backends.for_record(rec).logs(rec, out, follow=follow, poll_s=poll_s, tail=tail)
