"""Services: deploy a model with Ray Serve, roll it out, roll it back, scale it, delete it.

    from taugrid.client import serve

    st = serve.deploy("examples/serve-model", model="iris@prod")   # revision 1, ready
    serve.invoke("iris", b'{"features": [5.1, 3.5, 1.4, 0.2]}').json()
    serve.rollout("iris", model="iris@sha256:1a2b3c")                # revision 2
    serve.rollback("iris")                                           # revision 1 again

A service's record lives in `$TAU_HOME/services/<name>/` (`taugrid.serve.records`); its status
is `taugrid.serve.status.compute` over what the target reports. Every deploy and rollout is a
revision that pins the exact model version (`NAME@ALIAS` and `from_run` are resolved once, at
deploy time) and the code it runs; a rollback runs a kept revision again. The local target is
Ray Serve on the local Ray head; nothing here prints.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from taugrid.api import serve as S
from taugrid.api.errors import EXIT_PLATFORM, EXIT_RUN_FAILED, EXIT_USAGE, TauError

if TYPE_CHECKING:
    from taugrid.serve.local import AppShape, LocalServe
    from taugrid.serve.records import ServiceDir
    from taugrid.serve.status import Observed

Say = Callable[[str], None]
READY_TIMEOUT_S = 300.0
TARGETS = ("local", "kube")


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


def _model_dir(pin: S.ModelPin) -> Path:
    """The version's files on this machine (pulled once, checked, then shared by revisions)."""
    from taugrid.client import data
    from taugrid.runs.paths import tau_home

    dest = tau_home() / "serve" / "models" / pin.name / pin.version.removeprefix("sha256:")[:16]
    if dest.is_dir():
        return dest
    tmp = dest.with_name(dest.name + f".part-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        data.pull("model", f"{pin.name}@{pin.version}", tmp)
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


def _snapshot_code(folder: Path, dest: Path) -> str:
    """The tau.yaml folder's code (the run's ignore rules) copied for one revision."""
    from taugrid.runs.codebundle import collect

    bundle = collect(folder, include_helper=False)
    tmp = dest.with_name(dest.name + ".part")
    shutil.rmtree(tmp, ignore_errors=True)
    for rel, blob in bundle.files:
        out = tmp / rel
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_bytes(blob)
    tmp.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(dest, ignore_errors=True)
    os.replace(tmp, dest)
    return bundle.digest


@dataclass(frozen=True)
class _Prepared:
    spec: S.ServiceSpec
    pin: S.ModelPin | None
    code_digest: str
    source: Path


def _local_checks(spec: S.ServiceSpec) -> None:
    from taugrid.runs.backends.local.backend import detect_gpus

    here = detect_gpus()
    if spec.gpus > here:
        raise TauError(
            f"service.gpus: {spec.gpus} GPU(s) per replica; this machine has {here}",
            exit_code=EXIT_USAGE,
            hint="local services use this machine's GPUs: service: {gpus: 0}, or --target kube",
        )


def _check_target(target: str) -> None:
    if target not in TARGETS:
        raise TauError(
            f"--target {target}: not a target",
            exit_code=EXIT_USAGE,
            hint="local (Ray Serve on the local Ray head) or kube (a RayService)",
        )


def _shape(sd: ServiceDir, rev: S.Revision, model_dir: Path | None) -> AppShape:
    from taugrid.serve.local import check_app

    env = {S.MODEL_ENV: str(model_dir)} if model_dir else {}
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
    model_dir = _model_dir(rev.model) if rev.model else None
    return app_config(
        rec.name, route, rev, scale, strategy, shape, sd.code_dir(rev.number), model_dir, app=app
    )


def _who() -> str:
    from taugrid.runs.provenance import submitter

    return submitter()


def _endpoint(port: int, route: str) -> str:
    from taugrid.serve.local import HOST

    return f"http://{HOST}:{port}{'' if route == '/' else route}"


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
    from taugrid.serve import records
    from taugrid.serve.local import LocalServe
    from taugrid.serve.records import ServiceDir

    _check_target(target)
    spec, default_name, source = _spec(file, model, from_run, checkpoint)
    name = name or default_name
    problem = S.name_problem(name)
    if problem:
        raise TauError(
            f"service name {name!r}: {problem}",
            exit_code=EXIT_USAGE,
            hint="--name iris, or the tau.yaml's name",
        )
    if port is not None and not 1024 <= port <= 65535:
        raise TauError(f"--port {port}: use 1024..65535", exit_code=EXIT_USAGE)
    if target == "kube":
        return _deploy_kube(
            file,
            name,
            model,
            from_run,
            checkpoint,
            context,
            workspace,
            profile,
            wait,
            timeout_s,
            say,
        )
    if context or workspace or profile:
        raise TauError(
            "--context, --workspace and --profile are for --target kube", exit_code=EXIT_USAGE
        )
    _local_checks(spec)
    sd = ServiceDir(name)
    with sd.lock():
        pin = _claim(sd, spec, say)
        created = records.now()
        applied = False
        try:
            digest = _snapshot_code(source.parent, sd.code_dir(1))
            route = spec.route_prefix or f"/{name}"
            rev = S.Revision(
                number=1,
                created_at=created,
                created_by=_who(),
                config_hash=S.config_hash(spec, pin, digest),
                code_digest=digest,
                model=pin,
                spec=spec,
                source=str(source.resolve()),
                reason="deploy",
            )
            model_dir = _model_dir(pin) if pin else None
            say(f"checking {spec.import_path}")
            shape = _shape(sd, rev, model_dir)
            serve = LocalServe.started(_gpus_here(), say)
            _refuse_foreign(serve, name, route)
            rec = S.ServiceRecord(
                name=name,
                target="local",
                created_at=created,
                created_by=rev.created_by,
                route_prefix=route,
                revisions=[rev],
                serving=1,
                strategy=spec.rollout.strategy,
                scale=S.scale_of(spec),
            )
            sd.write(rec)  # the record first: a deploy cut short is still a service tau knows
            sd.event(
                "deploy", f"revision 1 ({pin.short if pin else 'no model'})", 1, rev.created_by
            )
            got_port = serve.apply(
                name,
                _config(sd, rec, rev, shape, rec.scale, "rolling"),
                port,
                timeout_s=rev.spec.request_timeout_s,
            )
            applied = True
        finally:
            if not applied:  # nothing was deployed: leave no half-made service behind
                shutil.rmtree(sd.path, ignore_errors=True)
        rec = rec.model_copy(update={"endpoint": _endpoint(got_port, route)})
        sd.write(rec)
    say(f"deployed revision 1 of {name}: {rec.endpoint}")
    if not wait:
        return status(name, probe=False)
    st = _await(name, 1, timeout_s, say)
    if st.phase in S.NOT_SERVING:
        _undo_first(sd, serve, st)
    return st


def _deploy_kube(
    file: str | Path | None,
    name: str,
    model: str | None,
    from_run: str | None,
    checkpoint: str | None,
    context: str | None,
    workspace: str | None,
    profile: str | None,
    wait: bool,
    timeout_s: float,
    say: Say,
) -> S.ServiceStatus:
    from taugrid.client import servekube
    from taugrid.serve.records import ServiceDir

    spec, m, source = _spec_and_manifest(file, model, from_run, checkpoint)
    sd = ServiceDir(name)
    with sd.lock():
        pin = _claim(
            sd,
            spec,
            say,
            lambda: servekube.model_registry(
                m, spec, context=context, workspace=workspace, profile=profile
            ),
        )
        sent = False
        try:
            servekube.deploy(
                sd,
                m,
                spec,
                source,
                pin,
                spec.route_prefix or f"/{name}",
                context=context,
                workspace=workspace,
                profile=profile,
                created=_now(),
                who=_who(),
                say=say,
            )
            sent = True
        finally:
            if not sent and not _on_cluster(sd):  # nothing reached the cluster: no record
                shutil.rmtree(sd.path, ignore_errors=True)
    if not wait:
        return status(name)
    return _await(name, 1, timeout_s, say)


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


def _on_cluster(sd: ServiceDir) -> bool:
    """Whether a service whose sending failed has its TauService on the cluster (then its
    record stays: `tau serve delete` removes what was sent)."""
    if not sd.exists():
        return False
    rec = sd.read()
    try:
        from taugrid.serve.kube import KubeServe, object_name

        return (
            KubeServe(rec.context).kube.get("TauService", object_name(rec.name), rec.namespace)
            is not None
        )
    except TauError:
        return True  # unknown: keep the record, so nothing sent is forgotten


def _gpus_here() -> int:
    from taugrid.runs.backends.local.backend import detect_gpus

    return detect_gpus()


def _refuse_foreign(serve: LocalServe, name: str, route: str) -> None:
    """A name or route that an application tau did not deploy already uses."""
    state = serve.state()
    for app_name, app in (state.get("applications") or {}).items():
        env = ((app.get("deployed_app_config") or {}).get("runtime_env") or {}).get(
            "env_vars"
        ) or {}
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


def _undo_first(sd: ServiceDir, serve: LocalServe, st: S.ServiceStatus) -> None:
    """A first deploy that never served: remove it from Ray Serve, keep the evidence aside."""
    tail = _log_tail(serve, sd.name)
    with sd.lock():
        serve.apply(sd.name, None)
        sd.event("failed", st.summary + (f"; replica log: {' | '.join(tail)}" if tail else ""), 1)
        rec = sd.read().model_copy(update={"deleted_at": _now()})
        sd.write(rec)
        where = sd.retire()
    said = "".join(f"\n  replica: {line}" for line in tail)
    raise TauError(
        f"service {sd.name}: {st.summary}{said}",
        exit_code=EXIT_RUN_FAILED,
        hint=f"nothing is left deployed; its record and replica logs: {where}, "
        "and `tau serve logs` while deploying",
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


def _now() -> str:
    from taugrid.serve.records import now

    return now()


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
    (it is put back if the head lost it). `strategy="canary"`: the new revision takes `step`
    percent of the requests beside the serving one, until `promote` or `rollback`."""
    from taugrid.serve.local import LocalServe
    from taugrid.serve.records import ServiceDir

    sd = ServiceDir(name)
    rec = sd.read()
    _live(rec)
    _no_canary(rec, "a rollout")
    spec, _, source = _spec(
        file if file is not None else rec.current.source, model, from_run, checkpoint
    )
    chosen = strategy or spec.rollout.strategy
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
    percent = step if step is not None else spec.rollout.step
    route = spec.route_prefix or f"/{name}"
    if route != rec.route_prefix:
        raise TauError(
            f"service.route_prefix: {route} differs from the service's "
            f"{rec.route_prefix}; a route is fixed for a service's life",
            exit_code=EXIT_USAGE,
            hint="deploy a new service for a new route",
        )
    if rec.target == "kube":
        return _rollout_kube(sd, spec, source, chosen, percent, wait, timeout_s, say)
    _local_checks(spec)
    pin = _pin(spec, name)
    serve = LocalServe.started(_gpus_here(), say)
    if chosen == "canary":
        return _canary_local(sd, serve, spec, source, pin, percent, wait, timeout_s, say)
    with sd.lock():
        rec = sd.read()
        rev, new = _candidate(sd, rec, spec, source, pin, "rollout")
        if rev.number == rec.serving:
            obs = serve.observe(name)
            unchanged = obs.exists and obs.revision == rec.serving
            if not unchanged:
                say(f"revision {rec.serving} is not on the local Ray head: putting it back")
                shape = _shape(sd, rec.current, _model_dir(pin) if pin else None)
                port = serve.apply(
                    name,
                    _config(sd, rec, rec.current, shape, rec.scale, "rolling"),
                    timeout_s=rec.current.spec.request_timeout_s,
                )
                sd.write(rec.model_copy(update={"endpoint": _endpoint(port, rec.route_prefix)}))
                sd.event(
                    "restore", f"revision {rec.serving} put back on the local Ray head", rec.serving
                )
            same: int | None = rec.serving
            kept = None
        else:
            same = None
            kept = None if new else rev  # the same code, config and model as a kept revision
        if new:
            _new_revision(sd, serve, rec, rev, chosen)
    if same is not None:  # (outside the lock: a status may record a finished rollout)
        if unchanged:
            say(f"no change: revision {same} already runs this config and model")
            return status(name)
        return _await(name, same, timeout_s, say) if wait else status(name, probe=False)
    if kept is not None:
        say(f"revision {kept.number} has this config and model: rolling out revision {kept.number}")
        _switch(
            name,
            kept.number,
            "rollout",
            f"revision {kept.number} again (the same config "
            f"and model) over revision {rec.serving}, {chosen}",
            say,
            chosen,
        )
        return (
            _finish_rollout(name, kept.number, timeout_s, say)
            if wait
            else status(name, probe=False)
        )
    say(f"rolling out revision {rev.number} of {name} ({chosen})")
    if not wait:
        return status(name, probe=False)
    return _finish_rollout(name, rev.number, timeout_s, say)


def _rollout_kube(
    sd: ServiceDir,
    spec: S.ServiceSpec,
    source: Path,
    chosen: str,
    percent: int,
    wait: bool,
    timeout_s: float,
    say: Say,
) -> S.ServiceStatus:
    """A revision on a cluster: a new RayCluster beside the serving one (checked against the
    queue's room first), or a kept revision again, or no change."""
    from taugrid.client import servekube
    from taugrid.serve.kube import replicas_of

    if chosen == "canary":
        return _canary_kube(sd, spec, source, percent, wait, timeout_s, say)
    pin = _pin(spec, sd.name, lambda: servekube.record_registry(sd.read()), say)
    with sd.lock():
        rec = sd.read()
        rev, new = _candidate(sd, rec, spec, source, pin, "rollout")
        if rev.number == rec.serving:
            unchanged = True
        else:
            unchanged = False
            replicas = replicas_of(rec.scale)
            pending = None
            try:
                if replicas:  # (scaled to zero: the revision starts with the next scale up)
                    pending = servekube.new_generation(sd, rec, rev, replicas, chosen, say)
            except BaseException:
                if new:
                    sd.remove_revision_code(rev.number)
                raise
            revisions = [*rec.revisions, rev] if new else rec.revisions
            rec = rec.model_copy(
                update={
                    "revisions": revisions,
                    "previous": rec.serving,
                    "serving": rev.number,
                    "rollout_started_at": _now(),
                    "rollout_done": pending is None,
                    "strategy": chosen,
                    "pending_generation": pending,
                }
            )
            sd.write(rec)
            sd.event(
                "rollout",
                f"revision {rev.number} ({rev.model.short if rev.model else 'no model'}) "
                f"over revision {rec.previous}: a new RayService",
                rev.number,
                _who(),
            )
    if unchanged:
        say(f"no change: revision {rec.serving} already runs this config and model")
        return status(sd.name)
    say(
        f"rolling out revision {rec.serving} of {sd.name}: a new RayService starts beside the "
        "serving one; the service moves to it when it serves"
    )
    return _await(sd.name, rec.serving, timeout_s, say) if wait else status(sd.name)


def _new_revision(
    sd: ServiceDir, serve: LocalServe, rec: S.ServiceRecord, rev: S.Revision, strategy: str
) -> None:
    """Record revision `rev` as the one rolling out, then hand it to Ray Serve (under the lock)."""
    try:
        shape = _shape(sd, rev, _model_dir(rev.model) if rev.model else None)
    except BaseException:
        sd.remove_revision_code(rev.number)
        raise
    rec = rec.model_copy(
        update={
            "revisions": [*rec.revisions, rev],
            "previous": rec.serving,
            "serving": rev.number,
            "rollout_started_at": _now(),
            "rollout_done": False,
            "strategy": strategy,
        }
    )
    sd.write(rec)
    sd.event(
        "rollout",
        f"revision {rev.number} ({rev.model.short if rev.model else 'no model'}) "
        f"over revision {rec.previous}, {strategy}",
        rev.number,
        rev.created_by,
    )
    port = serve.apply(
        rec.name,
        _config(sd, rec, rev, shape, rec.scale, strategy),
        timeout_s=rev.spec.request_timeout_s,
    )
    sd.write(rec.model_copy(update={"endpoint": _endpoint(port, rec.route_prefix)}))


def _finish_rollout(name: str, number: int, timeout_s: float, say: Say) -> S.ServiceStatus:
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


def _sd(name: str) -> ServiceDir:
    from taugrid.serve.records import ServiceDir

    return ServiceDir(name)


def _live(rec: S.ServiceRecord) -> None:
    if rec.deleted_at:
        raise TauError(f"service {rec.name} was deleted at {rec.deleted_at}", exit_code=EXIT_USAGE)


def _switch(
    name: str, to: int, kind: str, message: str, say: Say, strategy: str = "rolling"
) -> S.ServiceRecord:
    """Put a kept revision back (a rollback): its code and its pinned model, as they were."""
    from taugrid.serve.local import LocalServe

    sd = _sd(name)
    serve = LocalServe.started(_gpus_here(), say)
    with sd.lock():
        rec = sd.read()
        rev = rec.revision(to)
        if not sd.code_dir(to).is_dir():
            raise TauError(
                f"revision {to}'s code is gone from {sd.code_dir(to)}", exit_code=EXIT_PLATFORM
            )
        shape = _shape(sd, rev, _model_dir(rev.model) if rev.model else None)
        rec = rec.model_copy(
            update={
                "previous": rec.serving,
                "serving": to,
                "rollout_started_at": _now(),
                "rollout_done": False,
                "strategy": strategy,
            }
        )
        sd.write(rec)
        sd.event(kind, message, to, _who())
        port = serve.apply(
            name,
            _config(sd, rec, rev, shape, rec.scale, strategy),
            timeout_s=rev.spec.request_timeout_s,
        )
        rec = rec.model_copy(update={"endpoint": _endpoint(port, rec.route_prefix)})
        sd.write(rec)
    return rec


def _switch_kube(name: str, to: int, message: str, say: Say) -> None:
    """A kept revision sent again (its code and pinned model), checked against the queue."""
    from taugrid.client import servekube
    from taugrid.serve.kube import replicas_of

    sd = _sd(name)
    with sd.lock():
        rec = sd.read()
        rev = rec.revision(to)
        replicas = replicas_of(rec.scale)
        pending = (
            servekube.new_generation(sd, rec, rev, replicas, rec.strategy, say)
            if replicas
            else None
        )
        sd.write(
            rec.model_copy(
                update={
                    "previous": rec.serving,
                    "serving": to,
                    "rollout_started_at": _now(),
                    "rollout_done": pending is None,
                    "pending_generation": pending,
                }
            )
        )
        sd.event("rollback", message, to, _who())


def rollback(
    name: str,
    *,
    to: int | None = None,
    wait: bool = True,
    timeout_s: float = READY_TIMEOUT_S,
    say: Say = _quiet,
) -> S.ServiceStatus:
    """Serve a kept revision again (default: the one before the last change)."""
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
    if rec.canary is not None:
        return _end_canary(sd, rec, to, wait, timeout_s, say)
    if target == rec.serving:
        raise TauError(
            f"revision {target} already serves {name}",
            exit_code=EXIT_USAGE,
            hint=f"tau serve status {name} (its revisions and which serves)",
        )
    if rec.target == "kube":
        _switch_kube(name, target, f"revision {rec.serving} -> revision {target}", say)
    else:
        _switch(name, target, "rollback", f"revision {rec.serving} -> revision {target}", say)
    say(f"rolling back {name} to revision {target}")
    return _await(name, target, timeout_s, say) if wait else status(name, probe=False)


def _end_canary(
    sd: ServiceDir, rec: S.ServiceRecord, to: int | None, wait: bool, timeout_s: float, say: Say
) -> S.ServiceStatus:
    """A rollback during a canary: the canary removed, the revision before it (or `to`) takes
    every request again."""
    c = rec.canary
    assert c is not None
    back = (
        to
        if to is not None
        else (rec.previous if c.promoting and rec.previous is not None else rec.serving)
    )
    why = f"canary of revision {c.revision} ended: revision {back} takes all requests"
    if rec.target == "kube":
        from taugrid.client import servekube

        with sd.lock():
            rec = sd.read()
            sd.write(servekube.end_canary(sd, rec, back, why, _who()))
        say(why)
        if back != rec.serving:
            _switch_kube(sd.name, back, f"revision {rec.serving} -> revision {back}", say)
    else:
        from taugrid.serve.local import LocalServe

        _end_canary_local(sd, LocalServe.started(_gpus_here(), say), why, say, keep=back)
    return _await(sd.name, back, timeout_s, say) if wait else status(sd.name, probe=False)


# --- canaries ----------------------------------------------------------------------------------
def _no_canary(rec: S.ServiceRecord, what: str) -> None:
    c = rec.canary
    if c is not None:
        raise TauError(
            f"{what} waits for the canary of revision {c.revision} "
            f"({c.percent}% of {rec.name}'s requests) to end",
            exit_code=EXIT_USAGE,
            hint=f"tau serve promote {rec.name} (it takes all), or tau serve rollback "
            f"{rec.name} (it is removed)",
        )


def _canary_scale(scale: S.Scale, percent: int) -> S.Scale:
    """A canary's replicas: its share of a fixed count (at least one); autoscaling as is."""
    if scale.autoscaling is not None:
        return scale
    n = 1 if scale.replicas is None else scale.replicas
    return S.Scale(replicas=max(1, -(-n * percent // 100)))


def _canary_revision(
    sd: ServiceDir, rec: S.ServiceRecord, spec: S.ServiceSpec, source: Path, pin: S.ModelPin | None
) -> tuple[S.Revision, bool]:
    """The revision a canary tries (a kept one with this config and model, or a new one, whose
    code is snapshotted now); refused when it is the serving one. Under the service's lock."""
    rev, new = _candidate(sd, rec, spec, source, pin, "canary")
    if rev.number == rec.serving:
        raise TauError(
            f"revision {rev.number} already serves this config and model: a "
            "canary of it would compare it with itself",
            exit_code=EXIT_USAGE,
            hint="change the code, the config or --model",
        )
    return rev, new


def _candidate(
    sd: ServiceDir,
    rec: S.ServiceRecord,
    spec: S.ServiceSpec,
    source: Path,
    pin: S.ModelPin | None,
    reason: str,
) -> tuple[S.Revision, bool]:
    """What a change would run: the kept revision with the same code, config and model version
    (the snapshot just taken is removed), else a new one numbered next, its code snapshotted
    (True). Under the service's lock."""
    number = max(r.number for r in rec.revisions) + 1
    digest = _snapshot_code(source.parent, sd.code_dir(number))
    h = S.config_hash(spec, pin, digest)
    kept = next((r for r in rec.revisions if r.config_hash == h), None)
    if kept is not None:
        sd.remove_revision_code(number)
        return kept, False
    ingress = None
    if rec.target == "kube":  # a cluster's RayService bounds requests at the ingress
        from taugrid.client.servekube import ingress_of

        ingress = ingress_of(sd.code_dir(number), spec, _quiet)
    return S.Revision(
        number=number,
        created_at=_now(),
        created_by=_who(),
        config_hash=h,
        code_digest=digest,
        model=pin,
        spec=spec,
        source=str(source.resolve()),
        reason=reason,
        ingress=ingress,
    ), True


def _canary_local(
    sd: ServiceDir,
    serve: LocalServe,
    spec: S.ServiceSpec,
    source: Path,
    pin: S.ModelPin | None,
    percent: int,
    wait: bool,
    timeout_s: float,
    say: Say,
) -> S.ServiceStatus:
    """The canary beside the serving revision: its own application on a hidden route; when it
    is ready, a split application takes the service's route and sends it `percent`% of the
    requests (in one change of Ray Serve's config: no request finds the route empty)."""
    from taugrid.serve.local import canary_app, hidden_route, split_app, split_config, wait_until

    name = sd.name
    with sd.lock():
        rec = sd.read()
        _no_canary(rec, "a canary")
        rev, new = _canary_revision(sd, rec, spec, source, pin)
        try:
            shape = _shape(sd, rev, _model_dir(rev.model) if rev.model else None)
        except BaseException:
            if new:
                sd.remove_revision_code(rev.number)
            raise
        canary = S.Canary(revision=rev.number, percent=percent, started_at=_now(), by=_who())
        rec = rec.model_copy(
            update={"revisions": [*rec.revisions, rev] if new else rec.revisions, "canary": canary}
        )
        sd.write(rec)
        sd.event(
            "canary",
            f"revision {rev.number} ({rev.model.short if rev.model else 'no model'}) "
            f"beside revision {rec.serving}, for {percent}% of the requests",
            rev.number,
            canary.by,
        )
        port = serve.apply(
            canary_app(name),
            _config(
                sd,
                rec,
                rev,
                shape,
                _canary_scale(rec.scale, percent),
                "rolling",
                route=hidden_route(name, "canary"),
                app=canary_app(name),
            ),
        )
    say(f"starting canary revision {rev.number} beside revision {rec.serving}")

    def canary_up() -> bool:
        co = serve.observe(name).canary
        return co is not None and co.status in ("RUNNING", "DEPLOY_FAILED", "UNHEALTHY")

    wait_until(canary_up, timeout_s, 0.25)
    co = serve.observe(name).canary
    if co is None or co.status != "RUNNING":
        why = (co.message.strip().splitlines() or [co.status])[-1][:300] if co else "it is gone"
        _end_canary_local(sd, serve, f"canary revision {rev.number} did not start: {why}", say)
        raise TauError(
            f"service {name}: canary revision {rev.number} did not start ({why}); "
            f"revision {rec.serving} keeps all requests",
            exit_code=EXIT_RUN_FAILED,
            hint=f"why: tau serve logs {name}",
        )
    with sd.lock():  # the split, first on its own hidden route, then given the service's
        serve.apply(
            split_app(name),
            split_config(
                name,
                hidden_route(name, "split"),
                port,
                rec.serving,
                rev.number,
                percent,
                rec.route_prefix,
            ),
        )
    settled = ("RUNNING", "DEPLOY_FAILED", "UNHEALTHY")
    wait_until(lambda: serve.observe(name).split in settled, timeout_s, 0.25)
    split = serve.split_of(name)
    if split.status != "RUNNING":
        why = (split.message.strip().splitlines() or [split.status])[-1][:300]
        _end_canary_local(sd, serve, f"the traffic split did not start: {why}", say)
        raise TauError(
            f"service {name}: the canary's traffic split did not start on the local "
            f"Ray head ({why}); revision {rec.serving} keeps all requests",
            exit_code=EXIT_PLATFORM,
        )
    with sd.lock():
        rec = sd.read()
        assert rec.canary is not None
        routed = rec.model_copy(update={"canary": rec.canary.model_copy(update={"routed": True})})
        stable_shape = _shape(
            sd, rec.current, _model_dir(rec.current.model) if rec.current.model else None
        )
        serve.apply_many(
            {
                name: _config(sd, routed, rec.current, stable_shape, rec.scale, rec.strategy),
                split_app(name): split_config(
                    name, rec.route_prefix, port, rec.serving, rev.number, percent, rec.route_prefix
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
    say(f"canary revision {rev.number} takes {percent}% of {name}'s requests")
    return _await_canary(name, timeout_s, say) if wait else status(name, probe=False)


def _canary_kube(
    sd: ServiceDir,
    spec: S.ServiceSpec,
    source: Path,
    percent: int,
    wait: bool,
    timeout_s: float,
    say: Say,
) -> S.ServiceStatus:
    """A canary on a cluster: its own RayService (its share of the replicas, and the split)
    beside the serving one, checked against the queue's room first; the stable Service moves
    to it once it runs, and the serving RayService is kept until the canary ends."""
    from taugrid.client import servekube

    pin = _pin(spec, sd.name, lambda: servekube.record_registry(sd.read()), say)
    with sd.lock():
        rec = sd.read()
        _no_canary(rec, "a canary")
        if rec.pending_generation:
            raise TauError(
                f"revision {rec.serving} of {sd.name} is still starting: a canary "
                "compares with a revision that serves",
                exit_code=EXIT_USAGE,
                hint=f"tau serve status {sd.name} --watch",
            )
        rev, new = _canary_revision(sd, rec, spec, source, pin)
        now, who = _now(), _who()
        try:
            g = servekube.canary(sd, rec, rev, percent, now, say)
        except BaseException:
            if new:
                sd.remove_revision_code(rev.number)
            raise
        canary = S.Canary(
            revision=rev.number, percent=percent, started_at=now, by=who, generation=g
        )
        rec = rec.model_copy(
            update={"revisions": [*rec.revisions, rev] if new else rec.revisions, "canary": canary}
        )
        sd.write(rec)
        sd.event(
            "canary",
            f"revision {rev.number} ({rev.model.short if rev.model else 'no model'}) "
            f"beside revision {rec.serving}, for {percent}% of the requests: RayService "
            f"{sd.name}-{g}",
            rev.number,
            who,
        )
    say(
        f"canary revision {rev.number}: a RayService of its own starts beside revision "
        f"{rec.serving}'s; it takes {percent}% of the requests once it runs"
    )
    return _await_canary(sd.name, timeout_s, say) if wait else status(sd.name)


def _await_canary(name: str, timeout_s: float, say: Say) -> S.ServiceStatus:
    """Until the canary takes its share, fails, waits in its queue, or the timeout."""
    return _poll(name, timeout_s, say, lambda st: st.phase in S.CANARY_SETTLED)


def _poll(
    name: str, timeout_s: float, say: Say, done: Callable[[S.ServiceStatus], bool]
) -> S.ServiceStatus:
    """The service's status until `done` says so or the timeout; each new summary said."""
    deadline = time.monotonic() + timeout_s
    last = ""
    while True:
        st = status(name)
        if st.summary != last:
            say(st.summary)
            last = st.summary
        if done(st) or time.monotonic() >= deadline:
            return st
        time.sleep(0.25 if st.target == "local" else 1.0)


def _end_canary_local(
    sd: ServiceDir, serve: LocalServe, why: str, say: Say, keep: int | None = None
) -> S.ServiceRecord:
    """The service's route back to its own application (revision `keep`, default the serving
    one), the canary and the split removed: one change of Ray Serve's config."""

    with sd.lock():
        rec = sd.read()
        c = rec.canary
        back = (
            keep
            if keep is not None
            else (
                rec.previous
                if c is not None and c.promoting and rec.previous is not None
                else rec.serving
            )
        )
        settled = back == rec.serving and not (c is not None and c.promoting)
        ended = rec.model_copy(
            update={
                "canary": None,
                "serving": back,
                "rollout_done": settled,
                "rollout_started_at": rec.rollout_started_at if settled else _now(),
                "previous": rec.previous if back == rec.serving else rec.serving,
            }
        )
        rev = ended.current
        shape = _shape(sd, rev, _model_dir(rev.model) if rev.model else None)
        port = serve.route_back(
            sd.name, _config(sd, ended, rev, shape, ended.scale, ended.strategy)
        )
        ended = ended.model_copy(update={"endpoint": _endpoint(port, ended.route_prefix)})
        sd.write(ended)
        sd.event("canary-ended", why, back, _who())
    say(why)
    return ended


def promote(
    name: str, *, wait: bool = True, timeout_s: float = READY_TIMEOUT_S, say: Say = _quiet
) -> S.ServiceStatus:
    """Give a canary all the requests: it becomes the serving revision (the one before it is
    kept, for a rollback)."""
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
    if rec.target == "kube":
        from taugrid.client import servekube

        with sd.lock():
            rec = sd.read()
            if rec.canary is None:
                raise TauError(f"the canary of {name} ended meanwhile", exit_code=EXIT_USAGE)
            sd.write(servekube.promote(sd, rec, _now(), _who(), say))
        say(
            f"promoting revision {c.revision}: a RayService at the service's size starts; the "
            "service moves to it when it serves"
        )
        return _await(name, c.revision, timeout_s, say) if wait else status(name)
    return _promote_local(sd, wait, timeout_s, say)


def _promote_local(sd: ServiceDir, wait: bool, timeout_s: float, say: Say) -> S.ServiceStatus:
    """All requests to the canary (its share is the split's config: no restart), the service's
    own application moved to the canary's revision behind it, then the route given back to the
    service's application and the canary and split removed. Interrupted, `promote` again
    finishes it; `rollback` returns to the revision before."""
    from taugrid.serve.local import LocalServe, split_app, wait_until

    name = sd.name
    serve = LocalServe.started(_gpus_here(), say)
    with sd.lock():
        rec = sd.read()
        c = rec.canary
        assert c is not None
        if not c.promoting:
            rec = rec.model_copy(
                update={
                    "previous": rec.serving,
                    "serving": c.revision,
                    "rollout_started_at": _now(),
                    "rollout_done": False,
                    "canary": c.model_copy(update={"promoting": True}),
                }
            )
            sd.write(rec)
            sd.event(
                "promote",
                f"revision {c.revision} takes all requests (was {c.percent}%)",
                c.revision,
                _who(),
            )
        state = serve.state()
        split = ((state.get("applications") or {}).get(split_app(name)) or {}).get(
            "deployed_app_config"
        )
        if c.routed and split:  # every request to the canary at once (a reconfigure)
            split = json.loads(json.dumps(split))
            for d in split.get("deployments") or []:
                d["user_config"] = {"canary_percent": 100}
            serve.apply(split_app(name), split)
        rev = rec.current
        shape = _shape(sd, rev, _model_dir(rev.model) if rev.model else None)
        serve.apply(name, _config(sd, rec, rev, shape, rec.scale, "rolling"))
    say(f"revision {c.revision} takes all of {name}'s requests; the service's replicas move to it")

    def moved() -> bool:
        o = serve.observe(name)
        return o.revision == c.revision and o.status in ("RUNNING", "DEPLOY_FAILED", "UNHEALTHY")

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
        port = serve.route_back(name, _config(sd, done, rec.current, shape, rec.scale, "rolling"))
        done = done.model_copy(
            update={"endpoint": _endpoint(port, rec.route_prefix), "strategy": "rolling"}
        )
        sd.write(done)
    return _await(name, c.revision, timeout_s, say) if wait else status(name, probe=False)


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
    Ray Serve adds or removes replicas of the serving one."""
    from taugrid.serve.local import LocalServe

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
    try:
        if replicas is not None:
            new = S.Scale(
                replicas=S.ServiceSpec.model_validate(
                    {"import_path": "m:a", "replicas": replicas}
                ).replicas
            )
        else:
            old = rec.scale.autoscaling
            lo = min_replicas if min_replicas is not None else (old.min_replicas if old else 1)
            hi = (
                max_replicas
                if max_replicas is not None
                else (old.max_replicas if old else max(lo, 1))
            )
            auto = S.Autoscaling.model_validate(
                {
                    **(old.model_dump(exclude_none=True) if old else {}),
                    "min_replicas": lo,
                    "max_replicas": hi,
                }
            )
            if auto.min_replicas > auto.max_replicas:
                raise TauError(f"--min {lo} is above --max {hi}", exit_code=EXIT_USAGE)
            new = S.Scale(autoscaling=auto)
    except ValueError as e:
        errors: list[Any] = list(getattr(e, "errors", list)())
        why = str(errors[0]["msg"]) if errors else str(e)
        raise TauError(
            f"scale: {why}", exit_code=EXIT_USAGE, hint=f"0..{S.MAX_REPLICAS} replicas"
        ) from None
    if rec.target == "kube":
        _no_canary(rec, "a scale on a cluster")
        return _scale_kube(sd, new, timeout_s, say)
    if new.replicas == 0:
        raise TauError(
            f"{name}: a local service cannot be scaled to a fixed 0 replicas (Ray "
            "Serve would have nothing to answer with); nothing changed",
            exit_code=EXIT_USAGE,
            hint=f"tau serve scale {name} --min 0 --max N: autoscaling down to zero "
            f"when idle, up on a request; or tau serve delete {name}",
        )
    serve = LocalServe.started(_gpus_here(), say)
    with sd.lock():
        rec = sd.read()
        rev = rec.current
        _fits_head(name, serve, rev.spec, new, rec.canary is not None)
        shape = _shape(sd, rev, _model_dir(rev.model) if rev.model else None)
        was = rec.scale.describe()
        rec = rec.model_copy(update={"scale": new})
        changes = {name: _config(sd, rec, rev, shape, new, rec.strategy)}
        c = rec.canary
        if c is not None and not c.promoting:  # the canary keeps its share of the new size
            from taugrid.serve.local import canary_app, hidden_route

            crev = rec.revision(c.revision)
            cshape = _shape(sd, crev, _model_dir(crev.model) if crev.model else None)
            changes[canary_app(name)] = _config(
                sd,
                rec,
                crev,
                cshape,
                _canary_scale(new, c.percent),
                "rolling",
                route=hidden_route(name, "canary"),
                app=canary_app(name),
            )
        serve.apply_many(changes)  # first: a size Ray Serve refuses is never recorded
        sd.write(rec)
        sd.event("scale", f"{new.describe()} (was {was})", rec.serving, _who())
    if rec.canary is not None:
        return _await_canary(name, timeout_s, say)
    return _await(name, rec.serving, timeout_s, say)


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


def _scale_kube(sd: ServiceDir, new: S.Scale, timeout_s: float, say: Say) -> S.ServiceStatus:
    """The serving revision at a new fixed size (Kueue admits fixed sizes: autoscaling bounds
    become their maximum); 0 replicas gives the queue its GPUs back."""
    from taugrid.client import servekube
    from taugrid.serve.kube import replicas_of

    n = replicas_of(new)
    if new.autoscaling is not None:
        say(f"on a cluster Kueue admits fixed sizes: {n} replica(s) (the autoscaling maximum)")
    with sd.lock():
        rec = sd.read()
        if n == 0:
            servekube.scale_to_zero(rec)
            pending = None
        else:
            pending = servekube.new_generation(sd, rec, rec.current, n, rec.strategy, say)
        was = rec.scale.describe()
        rec = rec.model_copy(update={"scale": S.Scale(replicas=n), "pending_generation": pending})
        sd.write(rec)
        sd.event("scale", f"{rec.scale.describe()} (was {was})", rec.serving, _who())
    if n and pending is not None:
        say(f"a RayService of {n} replica(s) starts; the service moves to it when it serves")
        return _await(sd.name, rec.serving, timeout_s, say)
    return status(sd.name)


def delete(name: str, *, timeout_s: float = 120.0, say: Say = _quiet) -> S.ServiceRecord:
    """Remove the service from Ray Serve (its replicas stop); its record and revisions are
    kept aside (`$TAU_HOME/services/.deleted/`), and the name is free again."""
    from taugrid.serve.local import LocalServe, wait_until

    sd = _sd(name)
    rec = sd.read()
    if rec.target == "kube":
        from taugrid.client import servekube

        with sd.lock():
            servekube.delete(rec, timeout_s, say)
            rec = rec.model_copy(update={"deleted_at": _now()})
            sd.write(rec)
            sd.event("delete", f"removed from namespace {rec.namespace}", rec.serving, _who())
            sd.retire()
        return rec
    serve = LocalServe.running()
    with sd.lock():
        obs = serve.observe(name) if serve.head is not None else None
        if obs is not None and (obs.exists or obs.canary is not None or obs.split):
            from taugrid.serve.local import canary_app, split_app

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
        rec = rec.model_copy(update={"deleted_at": _now()})
        sd.write(rec)
        sd.event("delete", "removed from Ray Serve", rec.serving, _who())
        sd.retire()
    return rec


# --- looking ------------------------------------------------------------------------------------
def status(name: str, *, probe: bool = True, events: int = 10) -> S.ServiceStatus:
    """What the service does now; a rollout that has finished is recorded as such."""
    sd = _sd(name)
    rec = sd.read()
    obs = _observe(rec)
    rec = _note_finished(sd, rec, obs)
    return _status(rec, obs, probe, sd.events(events))


def _observe(rec: S.ServiceRecord, state: dict[str, Any] | None = None) -> Observed:
    if rec.target == "kube":
        from taugrid.client import servekube

        return servekube.observe(rec)  # type: ignore[no-any-return]
    from taugrid.serve.local import LocalServe

    return LocalServe.running().observe(rec.name, state)


def _status(
    rec: S.ServiceRecord, obs: Observed, probe: bool, events: list[S.Event]
) -> S.ServiceStatus:
    from taugrid.serve.local import probe as ask
    from taugrid.serve.status import compute

    answered = code = None
    if (
        probe
        and rec.target == "local"
        and rec.endpoint
        and obs.exists
        and obs.status == "RUNNING"
        and obs.running > 0
        and not rec.deleted_at
    ):
        path = rec.current.spec.readiness_path or ""
        answered, code = ask(rec.endpoint + ("" if path in ("", "/") else path))
    return compute(rec, obs, answered, events, code)


def _note_finished(sd: ServiceDir, rec: S.ServiceRecord, obs: Observed) -> S.ServiceRecord:
    if rec.target == "kube" and (rec.pending_generation or (rec.canary and not rec.canary.routed)):
        from taugrid.client import servekube

        with sd.lock():
            rec = sd.read()
            moved = servekube.advance(sd, rec)
            if moved is not rec:
                sd.write(moved)
            return moved
    if (
        rec.rollout_done
        or rec.canary is not None
        or not obs.exists
        or obs.status != "RUNNING"
        or obs.revision != rec.serving
    ):
        return rec
    with sd.lock():
        rec = sd.read()
        if rec.rollout_done:
            return rec
        rec = rec.model_copy(update={"rollout_done": True})
        sd.write(rec)
        if rec.previous is not None:
            sd.event("rolled-out", f"revision {rec.serving} serves all traffic", rec.serving)
    return rec


def list_services() -> list[S.ServiceStatus]:
    """Every service of this machine (one look at Ray Serve for all, no requests sent)."""
    from taugrid.serve.local import LocalServe
    from taugrid.serve.records import all_services

    dirs = all_services()
    if not dirs:
        return []
    recs = [(sd, sd.read()) for sd in dirs]
    state = LocalServe.running().state() if any(r.target == "local" for _, r in recs) else {}
    out = []
    for sd, rec in recs:
        obs = _observe(rec, state)
        out.append(_status(_note_finished(sd, rec, obs), obs, False, []))
    return out


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


def _await(name: str, number: int, timeout_s: float, say: Say) -> S.ServiceStatus:
    """Until revision `number` serves (a request answered), fails, or the timeout."""

    def done(st: S.ServiceStatus) -> bool:
        settled = st.revision == number and st.rollout is None
        if st.target == "kube" and settled:  # a new generation still starting: not yet
            settled = not _sd(name).read().pending_generation
        if settled and (
            st.phase == "ScaledToZero" or (st.phase == "Ready" and st.serving is not False)
        ):
            return True
        # failed; or queued by Kueue: the status says for what, and waiting changes nothing
        return st.phase == "Failed" or (st.target == "kube" and st.phase == "Waiting")

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


@dataclass(frozen=True)
class Answer:
    status: int
    body: bytes
    seconds: float
    url: str

    def json(self) -> Any:
        return json.loads(self.body)

    @property
    def text(self) -> str:
        return self.body.decode(errors="replace")


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
    import urllib.error
    import urllib.request

    rec = _sd(name).read()
    _live(rec)
    if rec.target == "kube":
        return _invoke_kube(rec, data, path, method, content_type, timeout_s)
    if not rec.endpoint:
        raise TauError(
            f"service {name} has no endpoint yet",
            exit_code=EXIT_PLATFORM,
            hint=f"tau serve status {name}",
        )
    if path and not path.startswith("/"):
        path = "/" + path
    url = rec.endpoint + path
    verb = method or ("POST" if data is not None else "GET")
    req = urllib.request.Request(
        url,
        data=data,
        method=verb,
        headers={"Content-Type": content_type} if data is not None else {},
    )
    t0 = time.perf_counter()
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as resp:
            return Answer(int(resp.status), resp.read(), time.perf_counter() - t0, url)
    except urllib.error.HTTPError as e:
        return Answer(int(e.code), e.read(), time.perf_counter() - t0, url)
    except OSError as e:
        raise TauError(
            f"{url}: no answer ({getattr(e, 'reason', e)})",
            exit_code=EXIT_PLATFORM,
            hint=f"tau serve status {name}",
        ) from None


def _invoke_kube(
    rec: S.ServiceRecord,
    data: bytes | None,
    path: str,
    method: str | None,
    content_type: str,
    timeout_s: float,
) -> Answer:
    """Through the API server's service proxy to the service's stable Service, with the user's
    own credentials (a member of the workspace may proxy to its Services): no port-forward,
    nothing opened on this machine."""
    from urllib.parse import urlsplit

    from taugrid.serve.kube import KubeServe, object_name

    if not rec.endpoint or not rec.namespace:
        raise TauError(
            f"service {rec.name} has no endpoint yet",
            exit_code=EXIT_PLATFORM,
            hint=f"tau serve status {rec.name}",
        )
    route = urlsplit(rec.endpoint).path.rstrip("/")
    if path and not path.startswith("/"):
        path = "/" + path
    verb = method or ("POST" if data is not None else "GET")
    headers = {"Content-Type": content_type} if data is not None else {}
    ks = KubeServe(rec.context)
    if ks.observe(rec).simulated:
        raise TauError(
            f"{rec.name} runs on simulated nodes (KWOK): no container runs there, so "
            "nothing would answer",
            exit_code=EXIT_PLATFORM,
            hint="the sandbox's real nodes run it: tau sandbox up --real-nodes 1",
        )
    kube = ks.kube
    t0 = time.perf_counter()
    with kube.service_request(
        rec.namespace,
        f"{object_name(rec.name)}:serve",
        (route + path) or "/",
        headers,
        verb,
        data,
        timeout_s,
    ) as r:
        body = r.read()
    if r.status in (502, 503, 504) and b'"kind":"Status"' in body.replace(b" ", b""):
        try:  # the API server's words: it could not reach the service's pods
            said = json.loads(body).get("message") or body.decode(errors="replace")
        except ValueError:
            said = body.decode(errors="replace")
        raise TauError(
            f"{rec.name} does not answer: {said}",
            exit_code=EXIT_PLATFORM,
            hint=f"tau serve status {rec.name}",
        )
    return Answer(r.status, body, time.perf_counter() - t0, rec.endpoint + path)


def logs(
    name: str, out: TextIO, *, follow: bool = False, poll_s: float = 0.5, tail: int | None = 200
) -> None:
    """The replicas' logs (Ray Serve's replica log files), oldest first; `follow` keeps
    printing what they add until interrupted."""
    from taugrid.serve.local import LocalServe

    rec = _sd(name).read()
    if rec.target == "kube":
        from taugrid.client import servekube

        for line in servekube.logs(rec, tail):
            out.write(line + "\n")
        out.flush()
        return
    serve = LocalServe.running()
    files = serve.log_files(name)
    if not files and not follow:
        raise TauError(
            f"no replica logs of {name} on this machine yet",
            exit_code=EXIT_USAGE,
            hint=f"tau serve status {name}",
        )
    offsets: dict[Path, int] = {}
    lines: list[str] = []
    for f in files:
        try:
            blob = f.read_bytes()
        except OSError:
            continue
        offsets[f] = len(blob)
        lines += [
            f"[{f.stem.split('_')[-1]}] {ln}" for ln in blob.decode(errors="replace").splitlines()
        ]
    for ln in lines[-tail:] if tail else lines:
        out.write(ln + "\n")
    out.flush()
    while follow:
        time.sleep(poll_s)
        for f in serve.log_files(name):
            try:
                with f.open("rb") as fh:
                    fh.seek(offsets.get(f, 0))
                    chunk = fh.read()
            except OSError:
                continue
            if chunk:
                offsets[f] = offsets.get(f, 0) + len(chunk)
                for ln in chunk.decode(errors="replace").splitlines():
                    out.write(f"[{f.stem.split('_')[-1]}] {ln}\n")
                out.flush()
