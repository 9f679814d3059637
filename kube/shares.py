"""Teams' shares of the cohort now (pure: Kueue's objects in, rows out), for `tau quota status`
and the portal's queues page: per team its GPUs nominal, in use, borrowed and lent, Kueue's
weighted share, and whether it is starved (runs pending, with Kueue's reason in TauGrid's
words) or borrowing.

Kueue reports what each ClusterQueue borrows, not from whom: what a team lends is its share of
what the cohort borrows, in proportion to the quota it leaves unused (said in docs/teams.md).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from decimal import Decimal, InvalidOperation
from typing import Any

from taugrid.api import constants as C
from taugrid.api.gpuactive import VALIDATION_CLUSTER_QUEUE
from taugrid.api.kueuewords import explain
from taugrid.api.teams import TeamRef

NO_TEAM = "(no team)"


@dataclass(frozen=True)
class TeamShare:
    team: str
    weight: float | None
    queues: list[str]
    workspaces: list[str]
    nominal: float = 0
    used: float = 0
    borrowed: float = 0
    lent: float = 0
    weighted_share: int | None = None  # Kueue's: 0 within quota, higher is more per weight
    pending: int = 0
    admitted: int = 0
    state: str = "idle"  # starved | borrowing | within quota | idle
    why: str = ""  # a starved team: why its first pending run waits
    resources: dict[str, dict[str, float]] = field(default_factory=dict)

    def doc(self) -> dict[str, Any]:
        return asdict(self)


def _num(v: Any) -> float:
    try:
        return float(Decimal(str(v).rstrip("m")) / (1000 if str(v).endswith("m") else 1))
    except (InvalidOperation, ValueError):
        return 0.0


def _queue_numbers(cq: dict[str, Any], resource: str) -> tuple[float, float, float]:
    """(nominal, used, borrowed) of one resource over the queue's flavors."""
    nominal = sum(
        _num(r.get("nominalQuota", 0))
        for g in (cq.get("spec") or {}).get("resourceGroups") or []
        for f in g.get("flavors") or []
        for r in f.get("resources") or []
        if r.get("name") == resource
    )
    used = borrowed = 0.0
    for f in (cq.get("status") or {}).get("flavorsUsage") or []:
        for r in f.get("resources") or []:
            if r.get("name") == resource:
                used += _num(r.get("total", 0))
                borrowed += _num(r.get("borrowed", 0))
    return nominal, used, borrowed


def _first_pending_reason(workloads: list[dict[str, Any]]) -> str:
    """Why the oldest pending Workload of the team's workspaces waits, in TauGrid's words."""
    pending = []
    for wl in workloads:
        conds = {c.get("type"): c for c in (wl.get("status") or {}).get("conditions") or []}
        if conds.get("QuotaReserved", {}).get("status") == "True":
            continue
        if conds.get("Finished", {}).get("status") == "True":
            continue
        msg = str(conds.get("QuotaReserved", {}).get("message") or "")
        pending.append((wl["metadata"].get("creationTimestamp") or "", msg))
    for _, msg in sorted(pending):
        if msg:
            words = explain(msg)
            return words.text if words else msg
    return ""


def team_shares(
    teams: list[TeamRef],
    cluster_queues: list[dict[str, Any]],
    cohorts: list[dict[str, Any]],
    workloads_of: dict[str, list[dict[str, Any]]],
    resource: str = C.GPU_RESOURCE,
) -> list[TeamShare]:
    """Each team's share now; queues no team owns are one more row, `(no team)` (the validation
    queue left out: it only borrows what is unused, for minutes). `workloads_of`: the Workloads
    of each readable workspace namespace (for why a starved team waits)."""
    owner = {q: t.name for t in teams for q in t.queues}
    by_team: dict[str, list[dict[str, Any]]] = {t.name: [] for t in teams}
    for cq in cluster_queues:
        name = cq["metadata"]["name"]
        if name == VALIDATION_CLUSTER_QUEUE:
            continue
        by_team.setdefault(owner.get(name, NO_TEAM), []).append(cq)
    numbers = {
        cq["metadata"]["name"]: _queue_numbers(cq, resource)
        for cqs in by_team.values()
        for cq in cqs
    }
    total_borrowed = sum(b for _, _, b in numbers.values())
    unused = {q: max(0.0, n - (u - b)) for q, (n, u, b) in numbers.items()}
    all_unused = sum(unused.values())
    cohort_share = {
        c["metadata"]["name"]: ((c.get("status") or {}).get("fairSharing") or {}).get(
            "weightedShare"
        )
        for c in cohorts
    }
    refs = {t.name: t for t in teams}
    out = []
    for team, cqs in by_team.items():
        ref = refs.get(team)
        names = [cq["metadata"]["name"] for cq in cqs]
        nominal = sum(numbers[q][0] for q in names)
        used = sum(numbers[q][1] for q in names)
        borrowed = sum(numbers[q][2] for q in names)
        # what others borrow, drawn from the unused quota of each in proportion to it
        mine = sum(unused[q] for q in names)
        lent = min(mine, total_borrowed * mine / all_unused) if all_unused else 0.0
        shares = [
            s
            for cq in cqs
            for s in (
                ((cq.get("status") or {}).get("fairSharing") or {}).get("weightedShare"),
                cohort_share.get(((cq.get("spec") or {}).get("cohortName")) or ""),
            )
            if s is not None
        ]
        pending = sum(int((cq.get("status") or {}).get("pendingWorkloads") or 0) for cq in cqs)
        admitted = sum(int((cq.get("status") or {}).get("admittedWorkloads") or 0) for cq in cqs)
        if pending and not borrowed:
            state = "starved"  # runs wait while it holds no more than its own quota
        elif borrowed:
            state = "borrowing"
        else:
            state = "within quota" if used else "idle"
        why = ""
        if pending:
            wls = [w for ws in (ref.workspaces if ref else []) for w in workloads_of.get(ws, [])]
            why = _first_pending_reason(wls)
        out.append(
            TeamShare(
                team=team,
                weight=ref.weight if ref else None,
                queues=names,
                workspaces=list(ref.workspaces) if ref else [],
                nominal=nominal,
                used=used,
                borrowed=borrowed,
                lent=round(max(0.0, lent), 3),
                weighted_share=max(shares) if shares else None,
                pending=pending,
                admitted=admitted,
                state=state,
                why=why,
            )
        )
    return out
