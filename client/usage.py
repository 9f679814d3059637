"""Teams and usage (#42): each team's share of the cohort now (`quota_status`), and who used
what over a window (`usage`), from the usage ledger the controller keeps (api/usage.py).

What one may read decides what one sees: an admin reads every workspace's ledger with one list;
a researcher the ledgers of the workspaces they may read; asking for a workspace one may not
read is Forbidden (exit 4)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from taugrid.client import cluster

if TYPE_CHECKING:
    from taugrid.api.teams import PriceTable, TeamRef
    from taugrid.api.usage import UsageReport, UsageRow
    from taugrid.kube.client import KubeAPI
    from taugrid.kube.shares import TeamShare


def _teams(tc: dict[str, Any], team: str | None = None) -> list[TeamRef]:
    """The cluster's teams; `team`, when given, must be one of them (exit 2 naming them)."""
    from taugrid.api.errors import EXIT_USAGE, TauError
    from taugrid.api.teams import TeamRef

    teams = [TeamRef.model_validate(t) for t in (tc.get("spec") or {}).get("teams") or []]
    if team is not None and team not in {t.name for t in teams}:
        known = ", ".join(t.name for t in teams) or "none: the stack declares no teams"
        raise TauError(f"no team {team!r} (known: {known})", exit_code=EXIT_USAGE)
    return teams


def _namespaces(tc: dict[str, Any]) -> dict[str, str]:
    """workspace -> namespace, as the cluster publishes them."""
    return {
        str(w["name"]): str(w.get("namespace") or w["name"])
        for w in (tc.get("spec") or {}).get("workspaces") or []
    }


def quota_status(team: str | None = None, *, context: str | None = None) -> list[TeamShare]:
    """Per team: GPUs nominal, in use, borrowed and lent, Kueue's weighted share, and whether
    it is starved (with why its first pending run waits) or borrowing."""
    from taugrid.kube.client import Forbidden
    from taugrid.kube.shares import team_shares

    disc = cluster.discovery(context)
    tc = disc.tau_cluster()
    teams = _teams(tc, team)
    cqs = disc.kube.list("ClusterQueue")
    cohorts = disc.kube.list("Cohort")
    spaces = _namespaces(tc)
    waiting = {
        cq["metadata"]["name"]
        for cq in cqs
        if int((cq.get("status") or {}).get("pendingWorkloads") or 0) > 0
    }
    # why a team waits is read only for the teams asked about whose queues have runs waiting
    pending_teams = {
        t.name for t in teams if (team is None or t.name == team) and waiting & set(t.queues)
    }
    workloads: dict[str, list[dict[str, Any]]] = {}
    for t in teams:
        if t.name not in pending_teams:
            continue
        for ws in t.workspaces:
            try:
                workloads[ws] = disc.kube.list("Workload", spaces.get(ws, ws))
            except Forbidden:  # not one's workspace: its queue's count is still shown
                continue
    rows = team_shares(teams, cqs, cohorts, workloads)
    return [r for r in rows if team is None or r.team == team]


@dataclass
class Usage:
    """`tau usage`: rows per group, idle quota per queue, and what was read."""

    by: str
    since: str
    until: str
    rows: list[UsageReport]
    idle_quota_hours: dict[str, float] = field(default_factory=dict)
    scope: str = "cluster"
    workspaces: list[str] = field(default_factory=list)
    currency: str | None = None
    runs: int = 0

    def doc(self) -> dict[str, Any]:
        return {
            "by": self.by,
            "since": self.since,
            "until": self.until,
            "scope": self.scope,
            "workspaces": self.workspaces,
            "runs": self.runs,
            "currency": self.currency,
            "rows": [r.model_dump(mode="json") for r in self.rows],
            "idleQuotaHours": self.idle_quota_hours,
        }


def _ledger_rows(kube: KubeAPI, namespace: str | None) -> list[UsageRow]:
    from taugrid.api.usage import UsageRow

    rows = []
    for obj in kube.list("TauUsage", namespace):
        for raw in ((obj.get("spec") or {}).get("runs") or {}).values():
            try:
                rows.append(UsageRow.model_validate(raw))
            except ValueError:
                continue  # a row a newer controller wrote: not this reader's
    return rows


def _read_ledgers(
    kube: KubeAPI, spaces: dict[str, str], workspace: str | None
) -> tuple[list[UsageRow], str, list[str]]:
    """(rows, scope, workspaces read): one workspace (Forbidden if not readable), else the whole
    cluster when one may list it, else every workspace one may read."""
    from taugrid.api.errors import EXIT_PLATFORM, EXIT_USAGE, TauError
    from taugrid.kube.client import Forbidden

    if workspace is not None:
        if workspace not in spaces:
            known = ", ".join(sorted(spaces)) or "none"
            raise TauError(f"no workspace {workspace!r} (known: {known})", exit_code=EXIT_USAGE)
        try:
            return _ledger_rows(kube, spaces[workspace]), "workspace", [workspace]
        except Forbidden:
            raise TauError(
                f"forbidden: you may not read the usage of workspace {workspace}",
                exit_code=EXIT_PLATFORM,
                hint="ask a platform admin, or a member of that workspace",
            ) from None
    try:
        return _ledger_rows(kube, None), "cluster", sorted(spaces)
    except Forbidden:
        pass
    rows: list[UsageRow] = []
    read: list[str] = []
    for ws, ns in sorted(spaces.items()):
        try:
            rows += _ledger_rows(kube, ns)
            read.append(ws)
        except Forbidden:
            continue
    if not read:
        raise TauError(
            "forbidden: you may read the usage of no workspace",
            exit_code=EXIT_PLATFORM,
            hint="usage is readable by a workspace's members and platform admins",
        )
    return rows, "workspaces", read


def _nominal_gpus(kube: KubeAPI) -> dict[tuple[str, str], int]:
    """(ClusterQueue, flavor) -> its nominal GPUs (the validation queue left out)."""
    from taugrid.api import constants as C
    from taugrid.api.gpuactive import VALIDATION_CLUSTER_QUEUE
    from taugrid.kube.fleet import queue_rows

    return {
        (row.name, q.flavor): int(q.nominal)
        for row in queue_rows(kube.list("ClusterQueue"))
        if row.name != VALIDATION_CLUSTER_QUEUE
        for q in row.quota
        if q.resource == C.GPU_RESOURCE and q.nominal.isdigit()
    }


def usage(
    by: str = "workspace",
    since: str = "30d",
    *,
    workspace: str | None = None,
    team: str | None = None,
    now: datetime | None = None,
    context: str | None = None,
) -> Usage:
    """GPU- and CPU-hours admitted, busy GPU-hours, queue waits, preemptions and their lost
    GPU-hours, idle quota hours per queue, and cost (the stack's price table), per group."""
    from taugrid.api.errors import EXIT_USAGE, TauError
    from taugrid.api.kubetime import k8s_time
    from taugrid.api.teams import PriceTable
    from taugrid.api.usage import BY, idle_quota_hours, parse_since, report

    if by not in BY:
        raise TauError(f"--by {by!r}: use one of {', '.join(BY)}", exit_code=EXIT_USAGE)
    end = now or datetime.now(UTC)
    try:
        start = parse_since(since, end)
    except ValueError as e:
        raise TauError(str(e), exit_code=EXIT_USAGE) from None
    disc = cluster.discovery(context)
    tc = disc.tau_cluster()
    teams = _teams(tc, team)
    team_of = {ws: t.name for t in teams for ws in t.workspaces}
    spaces = _namespaces(tc)
    if team is not None:
        spaces = {ws: ns for ws, ns in spaces.items() if team_of.get(ws) == team}
    rows, scope, read = _read_ledgers(disc.kube, spaces, workspace)
    rows = [r for r in rows if r.workspace in read]
    raw_prices = (tc.get("spec") or {}).get("prices")
    prices: PriceTable | None = PriceTable.model_validate(raw_prices) if raw_prices else None
    idle: dict[str, float] = {}
    if scope == "cluster" and workspace is None and team is None:
        idle = idle_quota_hours(_nominal_gpus(disc.kube), rows, start, end)
    return Usage(
        by=by,
        since=k8s_time(start),
        until=k8s_time(end),
        rows=report(
            rows,
            by,
            start,
            end,
            team_of,
            prices.pools if prices else None,
            prices.currency if prices else None,
        ),
        idle_quota_hours=idle,
        scope=scope,
        workspaces=read,
        currency=prices.currency if prices else None,
        runs=len(rows),
    )
