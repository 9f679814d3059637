"""GPU remediation: node conditions -> quarantine (cordon, taint, labels), and back (pure).

The shape follows NVIDIA NVSentinel and medik8s NodeHealthCheck: a configured set of node
conditions marks a GPU node faulty; a faulty node is cordoned and tainted
`tau.azure.com/gpu-unhealthy:NoSchedule`, with labels saying by whom, why and when; a circuit
breaker never lets more than a share of the GPU nodes be quarantined at once; dry-run decides
without acting; a node is released only if this controller quarantined it and only after its
conditions have been clear for a while (draino's users were burned by acting on nodes that had
already recovered). NotReady nodes are left to AKS auto-repair.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from taugrid.api import constants as C
from taugrid.api.kubetime import k8s_time, parse_k8s_time
from taugrid.api.platform import RemediationConfig

TAINT_KEY = C.GPU_UNHEALTHY_TAINT
LABEL_BY = f"{C.GROUP}/quarantined-by"
LABEL_REASON = C.QUARANTINE_REASON_LABEL
ANN_AT = C.QUARANTINED_AT_ANNOTATION
ANN_WAS_CORDONED = f"{C.GROUP}/was-unschedulable"  # someone else had cordoned it before us
ANN_CLEAR_SINCE = f"{C.GROUP}/clear-since"  # first time we saw it clear (conditions removed)
BY = "taugrid-controller"


class Action(StrEnum):
    quarantine = "quarantine"
    keep = "keep"  # quarantined and still faulty (or not clear for long enough)
    release = "release"
    skip_not_ready = "skip-not-ready"  # left to AKS auto-repair
    held_by_breaker = "held-by-breaker"
    none = "none"


@dataclass(frozen=True)
class NodeView:
    """What remediation reads of a node."""

    name: str
    gpu: bool
    ready: bool
    unschedulable: bool
    conditions: Mapping[str, tuple[str, str, str]]  # type -> (status, reason|message, since)
    labels: Mapping[str, str]
    annotations: Mapping[str, str]
    taints: tuple[Mapping[str, Any], ...] = ()
    resource_version: str | None = None

    @property
    def ours(self) -> bool:
        return self.labels.get(LABEL_BY) == BY


@dataclass(frozen=True)
class Decision:
    node: str
    action: Action
    why: str
    faults: tuple[str, ...] = ()
    mark_clear: bool = False  # remember now as the time its conditions were seen clear
    wait_s: float | None = None  # kept while its conditions are clear: seconds to its release


@dataclass
class Verdicts:
    decisions: list[Decision] = field(default_factory=list)
    gpu_nodes: int = 0
    limit: int = 0  # most nodes quarantined at once
    quarantined: int = 0  # after this round
    breaker_open: bool = False  # some faulty nodes were held back

    def by_action(self, action: Action) -> list[Decision]:
        return [d for d in self.decisions if d.action == action]


def node_view(obj: Mapping[str, Any]) -> NodeView:
    meta, spec, status = obj.get("metadata") or {}, obj.get("spec") or {}, obj.get("status") or {}
    conds = {
        str(c.get("type")): (
            str(c.get("status")),
            str(c.get("reason") or c.get("message") or ""),
            str(c.get("lastTransitionTime") or ""),
        )
        for c in status.get("conditions") or []
    }
    gpus = (status.get("allocatable") or {}).get(C.GPU_RESOURCE) or (
        status.get("capacity") or {}
    ).get(C.GPU_RESOURCE)
    labels = meta.get("labels") or {}
    return NodeView(
        name=str(meta.get("name")),
        gpu=bool(gpus and str(gpus) != "0") or C.LABEL_GPU_CLASS in labels,
        ready=conds.get("Ready", ("Unknown", "", ""))[0] == "True",
        unschedulable=bool(spec.get("unschedulable")),
        conditions=conds,
        labels=labels,
        annotations=meta.get("annotations") or {},
        taints=tuple(spec.get("taints") or ()),
        resource_version=meta.get("resourceVersion"),
    )


def faults(node: NodeView, cfg: RemediationConfig) -> tuple[str, ...]:
    return tuple(
        f"{t}" + (f" ({node.conditions[t][1]})" if node.conditions[t][1] else "")
        for t in cfg.conditions
        if node.conditions.get(t, ("",))[0] == "True"
    )


def _clear_since(node: NodeView, cfg: RemediationConfig) -> datetime | None:
    """Since when none of the configured conditions is True: the latest transition to False of
    those present, else the time we first saw it clear (annotation), else unknown."""
    times = [
        parse_k8s_time(node.conditions[t][2])
        for t in cfg.conditions
        if t in node.conditions and node.conditions[t][0] != "True"
    ]
    known = [t for t in times if t is not None]
    if known:
        return max(known)
    return parse_k8s_time(node.annotations.get(ANN_CLEAR_SINCE))


def decide(nodes: Iterable[NodeView], cfg: RemediationConfig, now: datetime) -> Verdicts:
    """One decision per GPU node (non-GPU nodes are not ours to judge)."""
    gpu_nodes = sorted((n for n in nodes if n.gpu), key=lambda n: n.name)
    limit = math.floor(cfg.max_unhealthy_share * len(gpu_nodes))
    out = Verdicts(gpu_nodes=len(gpu_nodes), limit=limit)
    quarantined = sum(1 for n in gpu_nodes if n.ours)
    candidates: list[tuple[NodeView, tuple[str, ...]]] = []
    for n in gpu_nodes:
        bad = faults(n, cfg)
        if n.ours:
            d = _quarantined(n, bad, cfg, now)
            out.decisions.append(d)
            if d.action is Action.release:
                quarantined -= 1
            continue
        if not bad:
            out.decisions.append(Decision(n.name, Action.none, "healthy"))
        elif not n.ready:
            out.decisions.append(
                Decision(n.name, Action.skip_not_ready, "NotReady: left to AKS auto-repair", bad)
            )
        else:
            candidates.append((n, bad))
    # Oldest fault first, so the breaker holds back the newest.
    candidates.sort(key=lambda nb: (_fault_time(nb[0], cfg), nb[0].name))
    for n, bad in candidates:
        if quarantined < limit:
            quarantined += 1
            out.decisions.append(Decision(n.name, Action.quarantine, "; ".join(bad), bad))
        else:
            out.breaker_open = True
            out.decisions.append(
                Decision(
                    n.name,
                    Action.held_by_breaker,
                    f"circuit breaker: {quarantined} of {len(gpu_nodes)} GPU nodes already "
                    f"quarantined (limit {limit}, {cfg.max_unhealthy_share:.0%})",
                    bad,
                )
            )
    out.quarantined = quarantined
    return out


def _quarantined(
    n: NodeView, bad: tuple[str, ...], cfg: RemediationConfig, now: datetime
) -> Decision:
    """A node we quarantined: kept while faulty, released once clear for long enough."""
    if bad:
        return Decision(n.name, Action.keep, "still faulty", bad)
    since = _clear_since(n, cfg)
    if since is None:
        return Decision(
            n.name, Action.keep, "clear since now", mark_clear=True, wait_s=cfg.clear_after_seconds
        )
    waited = now - since
    if waited >= timedelta(seconds=cfg.clear_after_seconds):
        return Decision(n.name, Action.release, f"clear for {int(waited.total_seconds())}s")
    left = cfg.clear_after_seconds - waited.total_seconds()
    return Decision(n.name, Action.keep, f"clear; released in {int(left)}s", wait_s=left)


def _fault_time(n: NodeView, cfg: RemediationConfig) -> str:
    return min(
        (n.conditions[t][2] for t in cfg.conditions if n.conditions.get(t, ("",))[0] == "True"),
        default="",
    )


def label_value(text: str) -> str:
    """A condition name as a label value (63 characters of [A-Za-z0-9_.-], alphanumeric ends)."""
    clean = "".join(ch if ch.isalnum() or ch in "-_." else "-" for ch in text)[:63]
    return clean.strip("-_.") or "unknown"


def _others(node: NodeView) -> list[dict[str, Any]]:
    return [dict(t) for t in node.taints if t.get("key") != TAINT_KEY]


def _precondition(node: NodeView) -> dict[str, Any]:
    return {"resourceVersion": node.resource_version} if node.resource_version else {}


def quarantine_patch(node: NodeView, d: Decision, now: datetime) -> dict[str, Any]:
    """A JSON merge patch: cordon, our taint added to the others, labels, when. It carries the
    node's resourceVersion, so a concurrent change makes it fail (409) instead of losing one."""
    first = d.faults[0].split(" ", 1)[0] if d.faults else "unknown"
    ann: dict[str, Any] = {ANN_AT: k8s_time(now), ANN_CLEAR_SINCE: None}
    if node.unschedulable:
        ann[ANN_WAS_CORDONED] = "true"
    taint = {"key": TAINT_KEY, "value": label_value(first), "effect": "NoSchedule"}
    return {
        "metadata": {
            **_precondition(node),
            "labels": {LABEL_BY: BY, LABEL_REASON: label_value(first)},
            "annotations": ann,
        },
        "spec": {"unschedulable": True, "taints": [*_others(node), taint]},
    }


def release_patch(node: NodeView, validate: bool = False) -> dict[str, Any]:
    """Undo only what quarantine did (a node someone else had cordoned stays cordoned). With
    `validate`, the node gets the validating taint in place of the quarantine's: no work lands
    on it until its validation passes (`validation.py` lifts it)."""
    again = [{"key": C.VALIDATING_TAINT, "value": "released", "effect": "NoSchedule"}]
    kept = [t for t in _others(node) if t.get("key") != C.VALIDATING_TAINT]
    spec: dict[str, Any] = {"taints": [*kept, *(again if validate else [])] or None}
    if node.annotations.get(ANN_WAS_CORDONED) != "true":
        spec["unschedulable"] = None
    return {
        "metadata": {
            **_precondition(node),
            "labels": {LABEL_BY: None, LABEL_REASON: None},
            "annotations": {ANN_AT: None, ANN_WAS_CORDONED: None, ANN_CLEAR_SINCE: None},
        },
        "spec": spec,
    }


def clear_seen_patch(now: datetime) -> dict[str, Any]:
    """Remember when a quarantined node's conditions were first seen gone (no transition time)."""
    return {"metadata": {"annotations": {ANN_CLEAR_SINCE: k8s_time(now)}}}
