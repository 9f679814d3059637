"""`taugrid.client.serve` on a cluster (`--target kube`): the same verbs, with a RayService in
the workspace owned by a TauService (taugrid.serve.kube). Called by `client.serve`, which picks
the target from the service's record; not a public module of its own.

What differs from the local target, and why:
- every change (a revision, a new size) is a new generation: its own RayService beside the
  serving one until it serves, then the stable Service moves to it and the old one is deleted
  (taugrid.serve.kube); so a change is checked against the queue's room first and refused with
  the numbers when it does not fit; any `tau serve` command that looks moves it forward;
- replicas are fixed sizes (Kueue admits those): autoscaling bounds deploy their maximum, and
  scale to zero (`--replicas 0`) deletes the RayService: the GPUs go back to the queue;
- tau sends no request into a cluster: `invoke` says where the service answers instead.
"""

from __future__ import annotations

from collections.abc import Callable
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any

from taugrid.api import constants as C
from taugrid.api import serve as S
from taugrid.api.errors import EXIT_NOT_ADMITTED, EXIT_PLATFORM, EXIT_USAGE, TauError

if TYPE_CHECKING:
    from taugrid.runs.resolve import Resolved
    from taugrid.serve.kube import CanaryPlan, KubeServe
    from taugrid.serve.records import ServiceDir

Say = Callable[[str], None]


def _serve(context: str | None) -> KubeServe:
    from taugrid.serve.kube import KubeServe

    return KubeServe(context)


def _bundle(folder: Path) -> Any:
    from taugrid.runs.codebundle import collect

    return collect(folder)  # with tau_inputs.py: the workers' init container runs it


def model_registry(
    m: Any, spec: S.ServiceSpec, *, context: str | None, workspace: str | None, profile: str | None
) -> str | None:
    """The registry a new cluster service's model is registered into: its workspace's (made
    on first use, as a run's inputs'), or None when the workspace declares none."""
    from taugrid.serve.kube import replicas_of

    r = _serve(context).resolve(m, spec, replicas_of(S.scale_of(spec)), workspace, profile)
    return _made(r.workspace.registry)


def record_registry(rec: S.ServiceRecord) -> str | None:
    """The registry a cluster service's next revision's model is registered into."""
    return _made(_serve(rec.context).discovery.workspace(rec.workspace).registry)


def _made(url: str | None) -> str | None:
    if not url:
        return None
    from taugrid.data.store import open_store

    return open_store(url, create=True).url


def _publish(r: Resolved, pin: S.ModelPin | None, say: Say) -> None:
    """The model version into the workspace's registry, before anything is sent."""
    if pin is None:
        return
    from taugrid.api.vocabulary import ResolvedInput
    from taugrid.runs.prepare import publish

    publish(
        r.workspace,
        [
            ResolvedInput(
                kind="model", name=pin.name, version=pin.version, path=pin.name, ref=pin.ref
            )
        ],
        say,
    )


def _gpus_free(
    room: dict[tuple[str, str], Decimal] | None, flavor: str, resource: str
) -> int | None:
    """The GPUs the queue could still admit in the profile's flavor (its pods go nowhere else)."""
    if room is None:
        return None
    return int(
        sum((q for (f, res), q in room.items() if res == resource and f == flavor), Decimal(0))
    )


def ingress_of(code_dir: Path, spec: S.ServiceSpec, say: Say) -> str | None:
    """The application's ingress deployment, found by importing it here as Ray Serve will
    (its requests are bounded there on the cluster); None, said, when it cannot be imported
    here (Ray Serve missing on this machine): the cluster then uses Ray Serve's defaults."""
    from taugrid.serve.local import check_app

    try:
        return check_app(code_dir, spec, {}).ingress
    except TauError as e:
        say(
            f"note: {spec.import_path} could not be imported here ({e.message}): its requests "
            "are not bounded by max_ongoing_requests/max_queued_requests on the cluster"
        )
        return None


def endpoint(name: str, namespace: str, route: str) -> str:
    """Where the service answers inside the cluster (its stable Service)."""
    from taugrid.serve.kube import SERVE_PORT, object_name

    return f"http://{object_name(name)}.{namespace}.svc:{SERVE_PORT}{route}"


def deploy(
    sd: ServiceDir,
    m: Any,
    spec: S.ServiceSpec,
    source: Path,
    pin: S.ModelPin | None,
    route: str,
    *,
    context: str | None,
    workspace: str | None,
    profile: str | None,
    created: str,
    who: str,
    say: Say,
) -> S.ServiceRecord:
    """Revision 1 on the cluster: placed, checked against the queue, recorded, then sent."""
    from taugrid.client.serve import _snapshot_code
    from taugrid.serve.kube import render, replicas_of

    ks = _serve(context)
    replicas = replicas_of(S.scale_of(spec))
    r = ks.resolve(m, spec, replicas, workspace, profile)
    digest = _snapshot_code(source.parent, sd.code_dir(1))
    rev = S.Revision(
        number=1,
        created_at=created,
        created_by=who,
        config_hash=S.config_hash(spec, pin, digest),
        code_digest=digest,
        model=pin,
        spec=spec,
        source=str(source.resolve()),
        reason="deploy",
        ingress=ingress_of(sd.code_dir(1), spec, say),
    )
    objects = render(
        r, sd.name, route, rev, _bundle(source.parent), replicas, spec.rollout.strategy, 1
    )
    never, _, _ = ks.queue_room(r, objects)
    if never is not None:
        raise TauError(
            f"service {sd.name} is not deployed: {never}",
            exit_code=EXIT_NOT_ADMITTED,
            hint=f"tau quota request --workspace {r.workspace.name}, or fewer "
            "replicas or GPUs in service",
        )
    _publish(r, pin, say)
    rec = S.ServiceRecord(
        name=sd.name,
        target="kube",
        created_at=created,
        created_by=who,
        route_prefix=route,
        endpoint=endpoint(sd.name, r.namespace, route),
        context=context,
        workspace=r.workspace.name,
        namespace=r.namespace,
        profile=r.profile.name,
        revisions=[rev],
        serving=1,
        strategy=spec.rollout.strategy,
        scale=S.Scale(replicas=replicas),
        generation=1,
    )
    sd.write(rec)  # the record first: a deploy cut short is a service tau knows
    sd.event(
        "deploy",
        f"revision 1 ({pin.short if pin else 'no model'}) in namespace "
        f"{r.namespace}, queue {r.queue}",
        1,
        who,
    )
    ks.send(objects, create=True)
    say(
        f"sent revision 1 of {sd.name} to namespace {r.namespace} (queue {r.queue}); Kueue "
        "admits it when there is quota"
    )
    return rec


def new_generation(
    sd: ServiceDir,
    rec: S.ServiceRecord,
    rev: S.Revision,
    replicas: int,
    strategy: str,
    say: Say,
    canary: CanaryPlan | None = None,
    now: str = "",
) -> int:
    """A change sent as the next generation's RayService (beside the serving one): refused
    first when the queue could never admit it, or has no room for it now. Returns its number;
    the stable Service moves to it once it serves (`advance`). With `canary`, the generation
    runs `rev` and the split beside the serving generation, which is kept."""
    from taugrid.runs.load import load_manifest
    from taugrid.serve.kube import canary_spec, render, upgrade_gpus

    ks = _serve(rec.context)
    source = Path(rev.source)
    if not source.is_file():
        raise TauError(
            f"revision {rev.number}'s tau.yaml is gone ({rev.source})",
            exit_code=EXIT_USAGE,
            hint=f"roll out from a tau.yaml: tau serve rollout {rec.name} FILE",
        )
    m = load_manifest(source, purpose="service").manifest
    r = ks.resolve(m, rev.spec, replicas, rec.workspace, rec.profile)
    g = (
        max(
            rec.generation,
            rec.pending_generation or 0,
            ks.highest_generation(rec),
            (rec.canary.generation or 0) if rec.canary else 0,
        )
        + 1
    )
    objects = render(
        r,
        rec.name,
        rec.route_prefix,
        rev,
        _bundle(sd.code_dir(rev.number)),
        replicas,
        strategy,
        g,
        canary,
    )
    owner, cm, rayservice, _front = objects  # the Service moves when the new one serves
    if canary is not None:
        canary_spec(owner, rec.current, canary, rev, g, now)
    never, cq, room = ks.queue_room(r, [rayservice])
    if never is not None:
        raise TauError(
            f"revision {rev.number} is not sent: {never}",
            exit_code=EXIT_NOT_ADMITTED,
            hint=f"tau quota request --workspace {r.workspace.name}",
        )
    need = upgrade_gpus(replicas, r.gpus)
    free = _gpus_free(room, r.profile.flavor, r.gpu_resource)
    if need and free is not None and need > free and canary is not None:
        raise TauError(
            f"the canary of revision {rev.number} needs {need} GPU(s) ({replicas} replica(s) x "
            f"{r.gpus}) beside revision {rec.serving}'s, which keeps serving; queue {cq} has "
            f"{free} free",
            exit_code=EXIT_NOT_ADMITTED,
            hint=f"tau quota request --gpus {need - free} --workspace {r.workspace.name}; or "
            f"--strategy blue-green once there is room (it needs revision {rec.serving}'s size "
            "beside it for a moment)"
            + ("; or a smaller --step (fewer canary replicas)" if replicas > 1 else ""),
        )
    if need and free is not None and need > free:
        held = rec.scale.replicas or 0
        beside = (
            (
                f" beside revision {rec.serving}'s ({held} replica(s) x {r.gpus} GPU(s) keep "
                "serving until it answers)"
            )
            if held
            else ""
        )
        raise TauError(
            f"revision {rev.number} needs {need} GPU(s) for its new RayService{beside}; queue "
            f"{cq} has {free} free",
            exit_code=EXIT_NOT_ADMITTED,
            hint=f"tau quota request --gpus {need - free} --workspace {r.workspace.name}; or make "
            f"room: `tau serve scale {rec.name} --replicas 0` stops it first (nothing answers "
            "until the new one serves)",
        )
    _publish(r, rev.model, say)
    ks.send([owner, cm, rayservice], create=False)
    return g


def advance(sd: ServiceDir, rec: S.ServiceRecord) -> S.ServiceRecord:
    """A pending generation that serves takes over: the stable Service moves to it and every
    other generation is deleted (the controller applies the same rule on its own; whichever
    sees it first). A canary's generation that runs takes the route the same way, and the
    serving generation is kept. The caller records the result, under the service's lock."""
    c = rec.canary
    if c is not None and not c.routed and c.generation:
        ks = _serve(rec.context)
        ks.switch_if_ready(rec, c.generation, keep=rec.generation)
        if ks.serving_generation(rec) != c.generation:
            return rec
        sd.event(
            "canary-routed",
            f"revision {c.revision} takes {c.percent}% of the requests "
            f"(RayService {rec.name}-{c.generation} holds the route), revision "
            f"{rec.serving} {100 - c.percent}%",
            c.revision,
        )
        return rec.model_copy(update={"canary": c.model_copy(update={"routed": True})})
    if not rec.pending_generation:
        return rec
    ks = _serve(rec.context)
    ks.switch_if_ready(rec, rec.pending_generation)
    if ks.serving_generation(rec) != rec.pending_generation:
        return rec
    sd.event(
        "switched",
        f"revision {rec.serving} serves (RayService {rec.name}-"
        f"{rec.pending_generation}); the previous one is deleted",
        rec.serving,
    )
    return rec.model_copy(
        update={
            "generation": rec.pending_generation,
            "pending_generation": None,
            "rollout_done": True,
        }
    )


def scale_to_zero(rec: S.ServiceRecord) -> None:
    """Every RayService of the service deleted (the TauService and the Service stay); returns
    once the cluster no longer lists them."""
    from taugrid.serve.local import wait_until

    ks = _serve(rec.context)
    ks.drop(rec)
    wait_until(
        lambda: (
            not any(
                True
                for _ in ks.kube.list(
                    "RayService", rec.namespace, labels={C.LABEL_SERVICE: rec.name}
                )
            )
        ),
        60,
        0.5,
    )


def observe(rec: S.ServiceRecord) -> Any:
    return _serve(rec.context).observe(rec)


def delete(rec: S.ServiceRecord, timeout_s: float, say: Say) -> None:
    """The TauService deleted; waits until the RayService (and so its pods and the quota they
    held) is gone."""
    from taugrid.serve.local import wait_until

    ks = _serve(rec.context)
    ks.remove(rec)
    if not wait_until(lambda: ks.gone(rec), timeout_s, 0.5):
        raise TauError(
            f"the cluster still has {rec.name}'s objects after {timeout_s:.0f}s",
            exit_code=EXIT_PLATFORM,
            hint=f"tau serve status {rec.name}",
        )
    say(f"deleted {rec.name} from namespace {rec.namespace}: its RayService and pods are gone")


def logs(rec: S.ServiceRecord, tail: int | None) -> list[str]:
    """The replica pods' logs (the worker group's containers)."""
    from taugrid.serve.kube import GROUP

    ks = _serve(rec.context)
    out: list[str] = []
    pods = ks.kube.list(
        "Pod", rec.namespace, labels={C.LABEL_SERVICE: rec.name, "ray.io/group": GROUP}
    )
    for p in pods:
        name = p["metadata"]["name"]
        try:
            lines = list(ks.kube.log_lines(name, rec.namespace or "", "ray-worker"))
        except TauError:
            continue
        out += [f"[{name}] {ln}" for ln in (lines[-tail:] if tail else lines)]
    return out


def canary(
    sd: ServiceDir, rec: S.ServiceRecord, rev: S.Revision, percent: int, now: str, say: Say
) -> int:
    """A canary's generation sent beside the serving one (checked against the queue first):
    its share of the replicas (at least one) and the split. Returns its generation."""
    from taugrid.serve.kube import CanaryPlan, replicas_of

    n = replicas_of(rec.scale)
    if n == 0:
        raise TauError(
            f"service {rec.name} is scaled to zero: a canary needs the serving "
            "revision running beside it",
            exit_code=EXIT_USAGE,
            hint=f"tau serve scale {rec.name} --replicas N first, or a rollout",
        )
    replicas = max(1, -(-n * percent // 100))
    plan = CanaryPlan(
        stable_generation=rec.generation, stable_revision=rec.serving, percent=percent
    )
    return new_generation(sd, rec, rev, replicas, "canary", say, canary=plan, now=now)


def promote(sd: ServiceDir, rec: S.ServiceRecord, now: str, who: str, say: Say) -> S.ServiceRecord:
    """The canary takes every request (its split's share set to 100%, in place), the serving
    generation is deleted (its quota back in the queue), and when the canary ran fewer replicas
    than the service's size, a generation at full size follows (the Service moves to it when it
    serves). So a promote never needs more quota than the canary had. The caller writes the
    returned record (under the service's lock)."""
    import yaml

    from taugrid.kube.client import FIELD_MANAGER
    from taugrid.serve.kube import generation_name, object_name, replicas_of
    from taugrid.serve.local import wait_until

    c = rec.canary
    assert c is not None and c.generation
    ks = _serve(rec.context)
    rs = ks.kube.get("RayService", generation_name(rec.name, c.generation), rec.namespace)
    if rs is None:
        raise TauError(
            f"the canary's RayService {generation_name(rec.name, c.generation)} is "
            f"gone from namespace {rec.namespace}",
            exit_code=EXIT_PLATFORM,
            hint=f"tau serve rollback {rec.name} (ends the canary)",
        )
    if not c.routed:
        raise TauError(
            f"the canary of revision {c.revision} does not take requests yet",
            exit_code=EXIT_USAGE,
            hint=f"tau serve status {rec.name} --watch",
        )
    cfg = yaml.safe_load(rs["spec"]["serveConfigV2"])
    for app in cfg.get("applications") or []:
        if app.get("name") == S.split_app(rec.name):
            app["deployments"] = [S.split_deployment(100)]
    ks.kube.merge_patch(
        "RayService",
        generation_name(rec.name, c.generation),
        rec.namespace,
        {"spec": {"serveConfigV2": yaml.safe_dump(cfg, sort_keys=False)}},
        FIELD_MANAGER,
    )
    rev = rec.revision(c.revision)
    groups = rs["spec"]["rayClusterConfig"].get("workerGroupSpecs") or [{}]
    held, full = int(groups[0].get("replicas") or 0), replicas_of(rec.scale)
    ks.kube.merge_patch(
        "TauService",
        object_name(rec.name),
        rec.namespace,
        {
            "spec": {
                "canary": None,
                "generation": c.generation,
                "revision": rev.number,
                "configHash": rev.config_hash,
                "modelRef": rev.model.ref if rev.model else None,
                "modelVersion": rev.model.version if rev.model else None,
                "replicas": held,
            }
        },
        FIELD_MANAGER,
    )
    ks.kube.delete("RayService", generation_name(rec.name, rec.generation), rec.namespace)
    sd.event(
        "promote",
        f"revision {c.revision} takes every request (RayService "
        f"{rec.name}-{c.generation}); revision {rec.serving}'s RayService is deleted",
        c.revision,
        who,
    )
    done = rec.model_copy(
        update={
            "previous": rec.serving,
            "serving": c.revision,
            "canary": None,
            "generation": c.generation,
            "pending_generation": None,
            "rollout_started_at": now,
            "rollout_done": True,
            "strategy": "blue-green",
            "scale": S.Scale(replicas=held),
        }
    )
    if held >= full:
        return done
    sd.write(done)  # (what is true now, if the full size cannot follow)
    wait_until(lambda: rec.generation not in ks.generations(rec), 60, 0.5)
    try:
        pending = new_generation(sd, done, rev, full, "blue-green", say)
    except TauError as e:
        raise TauError(
            f"revision {c.revision} serves every request on its canary's {held} "
            f"replica(s); its full size does not follow: {e.message}",
            exit_code=e.exit_code,
            hint=f"tau serve scale {rec.name} --replicas "
            f"{full} when there is room" + (f"; {e.hint}" if e.hint else ""),
        ) from None
    return done.model_copy(
        update={
            "pending_generation": pending,
            "rollout_done": False,
            "scale": S.Scale(replicas=full),
        }
    )


def end_canary(
    sd: ServiceDir, rec: S.ServiceRecord, back: int, why: str, who: str
) -> S.ServiceRecord:
    """The canary removed: the Service back on the serving generation (the canary's RayService
    deleted: Kueue gets its quota back), the TauService without it. `back` other than the
    serving revision is a rollback after it (a new generation)."""
    ks = _serve(rec.context)
    ks.switch(rec, rec.generation)
    from taugrid.kube.client import FIELD_MANAGER
    from taugrid.serve.kube import object_name

    ks.kube.merge_patch(
        "TauService",
        object_name(rec.name),
        rec.namespace,
        {"spec": {"canary": None, "generation": rec.generation}},
        FIELD_MANAGER,
    )
    sd.event("canary-ended", why, back, who)
    return rec.model_copy(update={"canary": None, "pending_generation": None})
