"""A cluster service's generations (serve/kube.py's docstring): the next one planned against its
queue's room before anything is sent, sent, and the serving one scaled to zero; a canary's split
set to take every request when it is promoted."""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any

from taugrid.api import constants as C
from taugrid.api import serve as S
from taugrid.api.errors import EXIT_NOT_ADMITTED, EXIT_PLATFORM, EXIT_USAGE, TauError
from taugrid.serve.backends.base import Say

if TYPE_CHECKING:
    from taugrid.runs.resolve import Resolved
    from taugrid.serve.kube import KubeServe
    from taugrid.serve.kuberender import CanaryPlan
    from taugrid.serve.records import ServiceDir


def kube_serve(context: str | None) -> KubeServe:
    from taugrid.serve.kube import KubeServe

    return KubeServe(context)


def code_bundle(folder: Path) -> Any:
    from taugrid.runs.codebundle import collect

    return collect(folder)  # with tau_inputs.py: the workers' init container runs it


def _gpus_free(
    room: dict[tuple[str, str], Decimal] | None, flavor: str, resource: str
) -> int | None:
    """The GPUs the queue could still admit in the profile's flavor (its pods go nowhere else)."""
    if room is None:
        return None
    return int(
        sum((q for (f, res), q in room.items() if res == resource and f == flavor), Decimal(0))
    )


@dataclass(frozen=True)
class Generation:
    """A generation ready to send: its objects (the TauService first), where it goes and the
    model version to publish there first."""

    number: int
    objects: list[dict[str, Any]]
    resolved: Resolved
    pin: S.ModelPin | None
    context: str | None


def send_generation(g: Generation, say: Say, *, create: bool = False) -> None:
    publish_model(g.resolved, g.pin, say)
    kube_serve(g.context).send(g.objects, create=create)


def plan_generation(
    sd: ServiceDir,
    rec: S.ServiceRecord,
    rev: S.Revision,
    replicas: int,
    strategy: str,
    canary: CanaryPlan | None = None,
    now: str = "",
) -> Generation:
    """A change as the next generation's RayService (beside the serving one), refused first
    when the queue could never admit it, or has no room for it now; nothing is sent. The stable
    Service moves to it once it serves (`advance`). With `canary`, the generation runs `rev`
    and the split beside the serving generation, which is kept."""
    from taugrid.runs.load import load_manifest
    from taugrid.serve.kuberender import canary_spec, render

    ks = kube_serve(rec.context)
    source = Path(rev.source)
    if not source.is_file():
        raise TauError(
            f"revision {rev.number}'s tau.yaml is gone ({rev.source})",
            exit_code=EXIT_USAGE,
            hint=f"roll out from a tau.yaml: tau serve rollout {rec.name} FILE",
        )
    m = load_manifest(source, purpose="service").manifest
    r = ks.resolve(m, rev.spec, replicas, rec.workspace, rec.profile)
    g = 1 + max(
        rec.generation,
        rec.pending_generation or 0,
        ks.highest_generation(rec),
        (rec.canary.generation or 0) if rec.canary else 0,
    )
    objects = render(
        r,
        rec.name,
        rec.route_prefix,
        rev,
        code_bundle(sd.code_dir(rev.number)),
        replicas,
        strategy,
        g,
        canary,
    )
    owner, cm, rayservice, _front = objects  # the Service moves when the new one serves
    if canary is not None:
        canary_spec(owner, rec.current, canary, rev, g, now)
    _check_room(ks, rec, rev, r, rayservice, replicas, canary is not None)
    return Generation(g, [owner, cm, rayservice], r, rev.model, rec.context)


def _check_room(
    ks: KubeServe,
    rec: S.ServiceRecord,
    rev: S.Revision,
    r: Resolved,
    rayservice: dict[str, Any],
    replicas: int,
    canary: bool,
) -> None:
    """Refused before anything is sent: a RayService its queue could never admit, or one
    whose GPUs the queue has not free now beside the serving generation (said with the room
    a quota request or a scale to zero would make)."""
    from taugrid.serve.kuberender import upgrade_gpus

    never, cq, room = ks.queue_room(r, [rayservice])
    if never is not None:
        raise TauError(
            f"revision {rev.number} is not sent: {never}",
            exit_code=EXIT_NOT_ADMITTED,
            hint=f"tau quota request --workspace {r.workspace.name}",
        )
    need = upgrade_gpus(replicas, r.gpus)
    free = _gpus_free(room, r.profile.flavor, r.gpu_resource)
    if need and free is not None and need > free and canary:
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


def new_generation(
    sd: ServiceDir,
    rec: S.ServiceRecord,
    rev: S.Revision,
    replicas: int,
    strategy: str,
    say: Say,
) -> int:
    """A generation planned and sent at once (a new size, a promoted canary's full size)."""
    g = plan_generation(sd, rec, rev, replicas, strategy)
    send_generation(g, say)
    return g.number


def scale_to_zero(rec: S.ServiceRecord) -> None:
    """Every RayService of the service deleted (the TauService and the Service stay); returns
    once the cluster no longer lists them."""
    from taugrid.serve.local import wait_until

    ks = kube_serve(rec.context)
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


def canary_takes_all(ks: KubeServe, rec: S.ServiceRecord, c: S.Canary) -> int:
    """The canary's split set to 100% in place (its RayService's serve config patched); the
    canary's replicas. Refused when its RayService is gone or it takes no requests yet."""
    import yaml

    from taugrid.kube.client import FIELD_MANAGER
    from taugrid.serve.kuberender import generation_name

    name = generation_name(rec.name, c.generation or 0)
    rs = ks.kube.get("RayService", name, rec.namespace)
    if rs is None:
        raise TauError(
            f"the canary's RayService {name} is gone from namespace {rec.namespace}",
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
        name,
        rec.namespace,
        {"spec": {"serveConfigV2": yaml.safe_dump(cfg, sort_keys=False)}},
        FIELD_MANAGER,
    )
    groups = rs["spec"]["rayClusterConfig"].get("workerGroupSpecs") or [{}]
    return int(groups[0].get("replicas") or 0)


def made_registry(url: str | None) -> str | None:
    if not url:
        return None
    from taugrid.data.store import open_store

    return open_store(url, create=True).url


def publish_model(r: Resolved, pin: S.ModelPin | None, say: Say) -> None:
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
