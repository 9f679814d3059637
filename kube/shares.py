"""Teams' shares of the cohort now (pure: Kueue's objects in, rows out), for `tau quota status`
and the portal's queues page: per team its GPUs nominal, in use, borrowed and lent, Kueue's
weighted share, and whether it is starved (runs pending, with Kueue's reason in TauGrid's
words) or borrowing.

Kueue reports what each ClusterQueue borrows, not from whom: what a team lends is its share of
what the cohort borrows, in proportion to the quota it leaves unused (said in docs/teams.md).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from taugrid.api import constants as C
from taugrid.api.gpuactive import VALIDATION_CLUSTER_QUEUE
from taugrid.api.kueuewords import explain
from taugrid.api.quantity import parse_quantity
from taugrid.api.teams import TeamRef
from taugrid.kube.fleet import QueueRow, queue_rows

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


def _queue_numbers(row: QueueRow, resource: str) -> tuple[float, float, float]:
    """(nominal, used, borrowed) of one resource over the queue's flavors."""
    quota = [q for q in row.quota if q.resource == resource]

    def total(field: str) -> float:
        return float(sum(parse_quantity(getattr(q, field)) for q in quota))

    return total("nominal"), total("used"), total("borrowed")


def _first_pending_reason(workloads: list[dict[str, Any]], queue: str | None) -> str:
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
            words = explain(msg, queue)
            return words.text if words else msg
    return ""


@dataclass(frozen=True)
class _Cohort:
    """The cohort's numbers every team's row reads: each queue's (nominal, used, borrowed), its
    unused quota, and the weighted share Kueue reports on each cohort."""

    numbers: dict[str, tuple[float, float, float]]
    unused: dict[str, float]
    borrowed: float
    cohort_share: dict[str, Any]

    def lent(self, queues: list[str]) -> float:
        """What others borrow, drawn from each queue's unused quota in proportion to it."""
        mine = sum(self.unused[q] for q in queues)
        every = sum(self.unused.values())
        return min(mine, self.borrowed * mine / every) if every else 0.0


def _state(pending: int, used: float, borrowed: float) -> str:
    if pending and not borrowed:
        return "starved"  # runs wait while it holds no more than its own quota
    if borrowed:
        return "borrowing"
    return "within quota" if used else "idle"


def _row(
    team: str,
    ref: TeamRef | None,
    cqs: list[dict[str, Any]],
    co: _Cohort,
    workloads_of: dict[str, list[dict[str, Any]]],
) -> TeamShare:
    names = [cq["metadata"]["name"] for cq in cqs]
    used = sum(co.numbers[q][1] for q in names)
    borrowed = sum(co.numbers[q][2] for q in names)
    shares = [
        s
        for cq in cqs
        for s in (
            ((cq.get("status") or {}).get("fairSharing") or {}).get("weightedShare"),
            co.cohort_share.get((cq.get("spec") or {}).get("cohortName") or ""),
        )
        if s is not None
    ]
    pending = sum(int((cq.get("status") or {}).get("pendingWorkloads") or 0) for cq in cqs)
    wls = [w for ws in (ref.workspaces if ref else []) for w in workloads_of.get(ws, [])]
    return TeamShare(
        team=team,
        weight=ref.weight if ref else None,
        queues=names,
        workspaces=list(ref.workspaces) if ref else [],
        nominal=sum(co.numbers[q][0] for q in names),
        used=used,
        borrowed=borrowed,
        lent=round(co.lent(names), 3),
        weighted_share=max(shares) if shares else None,
        pending=pending,
        admitted=sum(int((cq.get("status") or {}).get("admittedWorkloads") or 0) for cq in cqs),
        state=_state(pending, used, borrowed),
        why=_first_pending_reason(wls, names[0] if len(names) == 1 else None) if pending else "",
    )


def team_shares(
    teams: list[TeamRef],
    cluster_queues: list[dict[str, Any]],
    cohorts: list[dict[str, Any]],
    workloads_of: dict[str, list[dict[str, Any]]],
    resource: str = C.GPU_RESOURCE,
) -> list[TeamShare]:
    """Each team's share now; queues no team owns are one more row, `(no team)` (the validation
    queue left out: it only borrows what is unused, for minutes). `workloads_of`: the Workloads
    of each readable workspace (for why a starved team waits)."""
    owner = {q: t.name for t in teams for q in t.queues}
    by_team: dict[str, list[dict[str, Any]]] = {t.name: [] for t in teams}
    for cq in cluster_queues:
        name = cq["metadata"]["name"]
        if name != VALIDATION_CLUSTER_QUEUE:
            by_team.setdefault(owner.get(name, NO_TEAM), []).append(cq)
    numbers = {
        row.name: _queue_numbers(row, resource)
        for row in queue_rows([cq for cqs in by_team.values() for cq in cqs])
    }
    co = _Cohort(
        numbers=numbers,
        unused={q: max(0.0, n - (u - b)) for q, (n, u, b) in numbers.items()},
        borrowed=sum(b for _, _, b in numbers.values()),
        cohort_share={
            c["metadata"]["name"]: ((c.get("status") or {}).get("fairSharing") or {}).get(
                "weightedShare"
            )
            for c in cohorts
        },
    )
    refs = {t.name: t for t in teams}
    return [_row(team, refs.get(team), cqs, co, workloads_of) for team, cqs in by_team.items()]
