"""`taugrid.client.serve` on a cluster (`--target kube`): the same verbs, with a RayService in
the workspace owned by a TauService (taugrid.serve.kube). Called by `client.serve`, which picks
the target from the service's record; not a public module of its own.

What differs from the local target, and why:
- every revision (new code or model) is a new RayCluster beside the serving one until it serves
  (KubeRay's NewCluster upgrade), so a rollout is checked against the queue's room first and
  refused with the numbers when it does not fit;
- replicas are fixed sizes (Kueue admits those): autoscaling bounds deploy their maximum, and
  scale to zero (`--replicas 0`) gives the GPUs back to the queue;
- tau sends no request into a cluster: `invoke` says where the service answers instead.
"""

from __future__ import annotations

from collections.abc import Callable
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any

from taugrid.api import serve as S
from taugrid.api.errors import EXIT_NOT_ADMITTED, EXIT_PLATFORM, EXIT_USAGE, TauError

if TYPE_CHECKING:
    from taugrid.runs.resolve import Resolved
    from taugrid.serve.kube import KubeServe
    from taugrid.serve.records import ServiceDir

Say = Callable[[str], None]


def _serve(context: str | None) -> KubeServe:
    from taugrid.serve.kube import KubeServe

    return KubeServe(context)


def _bundle(folder: Path) -> Any:
    from taugrid.runs.codebundle import collect

    return collect(folder)  # with tau_inputs.py: the workers' init container runs it


def _publish(r: Resolved, pin: S.ModelPin | None, say: Say) -> None:
    """The model version into the workspace's registry, before anything is sent."""
    if pin is None:
        return
    from taugrid.api.vocabulary import ResolvedInput
    from taugrid.runs.prepare import publish

    publish(r.workspace, [ResolvedInput(kind="model", name=pin.name, version=pin.version,
                                        path=pin.name, ref=pin.ref)], say)  # fmt: skip


def _gpus_free(room: dict[tuple[str, str], Decimal] | None, resource: str) -> int | None:
    if room is None:
        return None
    return int(sum((q for (_, res), q in room.items() if res == resource), Decimal(0)))


def endpoint(name: str, namespace: str, route: str) -> str:
    """Where the service answers inside the cluster (KubeRay's serve Service)."""
    from taugrid.serve.kube import SERVE_PORT, object_name

    return f"http://{object_name(name)}-serve-svc.{namespace}.svc:{SERVE_PORT}{route}"


def deploy(sd: ServiceDir, m: Any, spec: S.ServiceSpec, source: Path, pin: S.ModelPin | None,
           route: str, *, context: str | None, workspace: str | None, profile: str | None,
           created: str, who: str, say: Say) -> S.ServiceRecord:  # fmt: skip
    """Revision 1 on the cluster: placed, checked against the queue, recorded, then sent."""
    from taugrid.client.serve import _snapshot_code
    from taugrid.serve.kube import render, replicas_of

    ks = _serve(context)
    replicas = replicas_of(S.scale_of(spec))
    r = ks.resolve(m, spec, replicas, workspace, profile)
    digest = _snapshot_code(source.parent, sd.code_dir(1))
    rev = S.Revision(number=1, created_at=created, created_by=who,
                     config_hash=S.config_hash(spec, pin, digest), code_digest=digest, model=pin,
                     spec=spec, source=str(source.resolve()), reason="deploy")  # fmt: skip
    objects = render(
        r, sd.name, route, rev, _bundle(source.parent), replicas, spec.rollout.strategy
    )
    never, _, _ = ks.queue_room(r, objects)
    if never is not None:
        raise TauError(f"service {sd.name} is not deployed: {never}", exit_code=EXIT_NOT_ADMITTED,
                       hint=f"tau quota request --workspace {r.workspace.name}, or fewer "
                       "replicas or GPUs in service")  # fmt: skip
    _publish(r, pin, say)
    rec = S.ServiceRecord(name=sd.name, target="kube", created_at=created, created_by=who,
                          route_prefix=route, endpoint=endpoint(sd.name, r.namespace, route),
                          context=context, workspace=r.workspace.name, namespace=r.namespace,
                          profile=r.profile.name, revisions=[rev], serving=1,
                          strategy=spec.rollout.strategy, scale=S.Scale(replicas=replicas))  # fmt: skip
    sd.write(rec)  # the record first: a deploy cut short is a service tau knows
    sd.event("deploy", f"revision 1 ({pin.short if pin else 'no model'}) in namespace "
             f"{r.namespace}, queue {r.queue}", 1, who)  # fmt: skip
    ks.send(objects, create=True)
    say(f"sent revision 1 of {sd.name} to namespace {r.namespace} (queue {r.queue}); Kueue "
        "admits it when there is quota")  # fmt: skip
    return rec


def apply_revision(sd: ServiceDir, rec: S.ServiceRecord, rev: S.Revision, replicas: int,
                   strategy: str, *, check_room: bool, say: Say) -> None:  # fmt: skip
    """Send a revision (a rollout, a rollback, a new scale): its objects applied over the
    service's; with `check_room`, refused when the new RayCluster does not fit the queue."""
    from taugrid.runs.load import load_manifest
    from taugrid.serve.kube import render, upgrade_gpus

    ks = _serve(rec.context)
    source = Path(rev.source)
    m = load_manifest(source, purpose="service").manifest if source.is_file() else None
    if m is None:
        raise TauError(f"revision {rev.number}'s tau.yaml is gone ({rev.source})",
                       exit_code=EXIT_USAGE, hint="roll out from a tau.yaml: tau serve rollout "
                       f"{rec.name} FILE")  # fmt: skip
    r = ks.resolve(m, rev.spec, replicas, rec.workspace, rec.profile)
    folder = sd.code_dir(rev.number)
    objects = render(r, rec.name, rec.route_prefix, rev, _bundle(folder), replicas, strategy)
    never, cq, room = ks.queue_room(r, objects)
    if never is not None:
        raise TauError(f"revision {rev.number} is not sent: {never}", exit_code=EXIT_NOT_ADMITTED,
                       hint=f"tau quota request --workspace {r.workspace.name}")  # fmt: skip
    if check_room:
        need = upgrade_gpus(replicas, r.gpus)
        free = _gpus_free(room, r.gpu_resource)
        if need and free is not None and need > free:
            held = rec.scale.replicas if rec.scale.replicas is not None else replicas
            raise TauError(
                f"revision {rev.number} needs {need} more GPU(s) while KubeRay starts its RayCluster "
                f"beside revision {rec.serving}'s ({held} replica(s) x {r.gpus} GPU(s) keep "
                f"serving until it answers); queue {cq} has {free} free",
                exit_code=EXIT_NOT_ADMITTED,
                hint=f"tau quota request --gpus {need - free} --workspace {r.workspace.name}; or "
                f"scale down first (tau serve scale {rec.name} --replicas N) so both fit",
            )  # fmt: skip
    _publish(r, rev.model, say)
    ks.send(objects, create=False)


def observe(rec: S.ServiceRecord) -> Any:
    return _serve(rec.context).observe(rec)


def delete(rec: S.ServiceRecord, timeout_s: float, say: Say) -> None:
    """The TauService deleted; waits until the RayService (and so its pods and the quota they
    held) is gone."""
    from taugrid.serve.local import wait_until

    ks = _serve(rec.context)
    ks.remove(rec)
    if not wait_until(lambda: ks.gone(rec), timeout_s, 0.5):
        raise TauError(f"the cluster still has {rec.name}'s objects after {timeout_s:.0f}s",
                       exit_code=EXIT_PLATFORM, hint=f"tau serve status {rec.name}")  # fmt: skip
    say(f"deleted {rec.name} from namespace {rec.namespace}: its RayService and pods are gone")


def logs(rec: S.ServiceRecord, tail: int | None) -> list[str]:
    """The replica pods' logs (the worker group's containers)."""
    from taugrid.serve.kube import GROUP

    ks = _serve(rec.context)
    out: list[str] = []
    pods = ks.kube.list("Pod", rec.namespace, labels={"tau.azure.com/service": rec.name,
                                                      "ray.io/group": GROUP})  # fmt: skip
    for p in pods:
        name = p["metadata"]["name"]
        try:
            lines = list(ks.kube.log_lines(name, rec.namespace or "", "ray-worker"))
        except TauError:
            continue
        out += [f"[{name}] {ln}" for ln in (lines[-tail:] if tail else lines)]
    return out
