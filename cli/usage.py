"""`tau usage`: who used what, from the usage ledger (taugrid.client.usage)."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any

import typer

from taugrid.cli.options import ContextOpt, WorkspaceOpt
from taugrid.cli.output import dump_json, out


class UsageFormat(StrEnum):
    table = "table"
    text = "text"  # the same as table (the other commands' word)
    json = "json"
    csv = "csv"


class By(StrEnum):
    workspace = "workspace"
    team = "team"
    user = "user"
    profile = "profile"
    experiment = "experiment"
    queue = "queue"


def _hours(v: float | None) -> str:
    return "-" if v is None else f"{v:,.1f}" if v >= 10 else f"{v:.2f}"


def _secs(v: float | None) -> str:
    from taugrid.cli.output import duration

    return "-" if v is None else duration(v)


def usage(
    by: Annotated[By, typer.Option("--by", help="Group rows by this")] = By.workspace,
    since: Annotated[
        str, typer.Option("--since", help="Window start: 30d, 12h, 2w, or a date (2026-11-01)")
    ] = "30d",
    team: Annotated[str | None, typer.Option("--team", help="Only this team's workspaces")] = None,
    workspace: WorkspaceOpt = None,
    context: ContextOpt = None,
    output: Annotated[
        UsageFormat, typer.Option("--output", "-o", help="table, json or csv")
    ] = UsageFormat.table,
) -> None:
    """Who used what: GPU- and CPU-hours admitted, busy GPU-hours, queue waits, preemptions
    and the GPU-hours they cost, idle quota per queue, and cost at the stack's prices.

    Admins see every workspace; researchers the workspaces they may read."""
    from taugrid.client import usage as U

    got = U.usage(by.value, since, workspace=workspace, team=team, context=context)
    if output is UsageFormat.json:
        out(dump_json(got.doc()))
        return
    if output is UsageFormat.csv:
        from taugrid.api.usage import as_csv

        out(as_csv(got.rows).rstrip("\n"))
        return
    _table(got, by.value)


def _table(got: Any, by: str) -> None:
    from taugrid.cli.output import columns

    scope = "all workspaces" if got.scope == "cluster" else ", ".join(got.workspaces)
    out(f"usage {got.since} .. {got.until} ({scope}; {got.runs} runs in the ledger)")
    if not got.rows:
        out("no runs were admitted in this window")
    else:
        cost = f"COST ({got.currency})" if got.currency else "COST"
        out(
            columns(
                (
                    by.upper(),
                    "RUNS",
                    "GPU-H",
                    "BUSY GPU-H",
                    "CPU-H",
                    "WAIT P50",
                    "WAIT P95",
                    "PREEMPTED",
                    "LOST GPU-H",
                    cost,
                ),
                [
                    (
                        r.group,
                        str(r.runs),
                        _hours(r.gpuHours),
                        _hours(r.busyGpuHours),
                        _hours(r.cpuHours),
                        _secs(r.waitP50s),
                        _secs(r.waitP95s),
                        str(r.preemptions),
                        _hours(r.lostGpuHours),
                        "-" if r.cost is None else f"{r.cost:,.2f}",
                    )
                    for r in got.rows
                ],
            )
        )
    if got.idle_quota_hours:
        idle = ", ".join(f"{q} {_hours(h)}" for q, h in sorted(got.idle_quota_hours.items()))
        out(f"idle quota (GPU-hours nominal but not held): {idle}")
