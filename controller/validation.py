"""Nodes proven before they take work (pure: nodes and pools in, patches out).

A GPU node registers with the `validating` taint (its pool's node taints), and gets it again when
the controller releases it from quarantine. Each pass checks every node that carries it against
its pool's declaration (`api.gpuhealth`, the passive tier): a node that passes loses the taint, a
node that fails keeps it, and either way the verdict joins the node's kept history, written only
when it changed (a node that keeps failing the same way costs no write per pass).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from taugrid.api import constants as C
from taugrid.api import gpuhealth as G
from taugrid.api.kubetime import k8s_time


@dataclass(frozen=True)
class Validated:
    node: str
    verdict: G.NodeVerdict
    patch: dict[str, Any] | None  # None: nothing to write (the same failure as last time)

    @property
    def lifted(self) -> bool:
        return self.verdict.passed and self.patch is not None


def validating(node: Mapping[str, Any]) -> bool:
    taints = (node.get("spec") or {}).get("taints") or []
    return any(t.get("key") == C.VALIDATING_TAINT for t in taints)


def decide(
    nodes: Mapping[str, Mapping[str, Any]],
    pools: Mapping[str, G.PoolDeclaration],
    now: datetime,
    xids: Mapping[str, list[dict[str, Any]]] | None = None,
) -> list[Validated]:
    """A verdict for each node that carries the taint, and what to write. `xids`: NPD's XID
    events by node (`G.xid_events_by_node`), so the controller's verdict is the one `tau cluster
    validate nodes` gives (one verdict per node, in every view)."""
    out = []
    for name in sorted(nodes):
        node = nodes[name]
        if not validating(node):
            continue
        pool = pools.get(G.pool_of(node) or "")
        verdict = (
            G.check_node(
                node, pool, now.timestamp(), (xids or {}).get(name, []), checked_at=k8s_time(now)
            )
            if pool is not None
            else _no_pool(name, G.pool_of(node), k8s_time(now))
        )
        out.append(Validated(name, verdict, _patch(node, verdict)))
    return out


def with_active(
    node: Mapping[str, Any], verdict: G.NodeVerdict, found: list[G.Finding]
) -> Validated:
    """The passive verdict joined by the active tier's findings, and what to write."""
    whole = verdict.model_copy(update={"findings": [*verdict.findings, *found], "tier": "active"})
    return Validated(whole.node, whole, _patch(node, whole))


def _no_pool(name: str, pool: str | None, at: str) -> G.NodeVerdict:
    finding = G.Finding(
        check="pool",
        state="failed",
        message=f"its pool {pool!r} is not a GPU pool the platform declares: nothing to check "
        "it against",
        fix="declare the pool in the stack (gpuPools), or remove the node from the cluster",
    )
    return G.NodeVerdict(node=name, pool=pool, checkedAt=at, findings=[finding])


def _patch(node: Mapping[str, Any], verdict: G.NodeVerdict) -> dict[str, Any] | None:
    """Passed: the taint lifted and the verdict kept. Failed: the verdict kept, unless the last
    kept one failed the same checks (then nothing is written)."""
    kept = G.history_of(node)
    meta = node.get("metadata") or {}
    history = {"annotations": {G.VALIDATION_ANNOTATION: G.with_verdict(node, verdict)}}
    if verdict.passed:
        others = [
            t
            for t in (node.get("spec") or {}).get("taints") or []
            if t.get("key") != C.VALIDATING_TAINT
        ]
        # the resourceVersion: a taint added meanwhile (a quarantine) is not lost by this write
        rv = {"resourceVersion": meta["resourceVersion"]} if meta.get("resourceVersion") else {}
        return {"metadata": {**rv, **history}, "spec": {"taints": others or None}}
    last = kept[-1] if kept else None
    if (
        last is not None
        and not last.passed
        and set(last.failed) == {f.check for f in verdict.failed()}
    ):
        return None
    return {"metadata": history}
