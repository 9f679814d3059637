"""`tau quota request | list | approve | deny`: more GPUs for a while, decided by the platform
team (taugrid.client.quota; the controller applies grants); `tau quota status`: each team's
share of the cohort now (taugrid.client.usage)."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from taugrid.cli.options import ContextOpt, JsonOpt, ReportFormat, WorkspaceOpt
from taugrid.cli.output import dump_json, out

app = typer.Typer(
    no_args_is_help=True,
    help="Quota: teams' shares now (status); quota for a while: request and list "
    "(researchers), approve and deny (platform admins).",
)

RefArg = Annotated[str, typer.Argument(help="The request's name (or namespace/name)")]
NoteOpt = Annotated[str, typer.Option("--note", help="Why (kept with the decision)")]


@app.command("request")
def request(
    gpus: Annotated[int, typer.Option("--gpus", help="Extra GPUs of quota")],
    for_: Annotated[str, typer.Option("--for", help="How long once granted: 30m, 48h, 7d")],
    reason: Annotated[str, typer.Option("--reason", help="Why (the platform team reads it)")],
    workspace: WorkspaceOpt = None,
    profile: Annotated[str | None, typer.Option("--profile", help="GPU profile (pool)")] = None,
    context: ContextOpt = None,
    output: JsonOpt = ReportFormat.text,
) -> None:
    """Ask for more GPU quota in a workspace for a while (a TauQuotaRequest)."""
    from taugrid.client import quota

    r = quota.request(gpus, for_, reason, workspace=workspace, profile=profile, context=context)
    if output is ReportFormat.json:
        out(dump_json(r))
        return
    out(
        f"asked for +{gpus} GPU(s) on {r['flavor']} in workspace {r['workspace']} for {for_}: "
        f"request {r['name']} (pending a platform admin's decision)\n"
        f"  follow it: tau quota list --workspace {r['workspace']}"
    )


@app.command("status")
def status(
    team: Annotated[str | None, typer.Option("--team", help="Only this team")] = None,
    context: ContextOpt = None,
    output: JsonOpt = ReportFormat.text,
) -> None:
    """Each team's GPUs now: nominal quota, in use, borrowed, lent, Kueue's weighted share,
    and who is starved (runs pending, and why) versus borrowing."""
    from taugrid.client import usage

    rows = usage.quota_status(team, context=context)
    if output is ReportFormat.json:
        out(dump_json([r.doc() for r in rows]))
        return
    if not rows:
        out("no queues")
        return
    from taugrid.cli.output import columns

    def n(v: float) -> str:
        return f"{v:g}"

    out(
        columns(
            (
                "TEAM",
                "WEIGHT",
                "QUEUES",
                "GPUS",
                "USED",
                "BORROWED",
                "LENT",
                "SHARE",
                "PENDING",
                "STATE",
            ),
            [
                (
                    r.team,
                    "-" if r.weight is None else f"{r.weight:g}",
                    ",".join(r.queues),
                    n(r.nominal),
                    n(r.used),
                    n(r.borrowed),
                    n(r.lent),
                    "-" if r.weighted_share is None else str(r.weighted_share),
                    str(r.pending),
                    r.state,
                )
                for r in rows
            ],
        )
    )
    for r in rows:
        if r.pending and r.why:
            what = "is starved" if r.state == "starved" else f"has {r.pending} waiting"
            out(f"{r.team} {what}: {r.why}")


@app.command("list")
def list_(
    workspace: WorkspaceOpt = None,
    all_: Annotated[bool, typer.Option("--all", "-A", help="Every namespace (admins)")] = False,
    context: ContextOpt = None,
    output: JsonOpt = ReportFormat.text,
) -> None:
    """Quota requests and their state (Pending, Approved, Active, Expired, Denied)."""
    from taugrid.client import quota

    rows = quota.list_requests(workspace=workspace, all_namespaces=all_, context=context)
    if output is ReportFormat.json:
        out(dump_json(rows))
        return
    if not rows:
        out("no quota requests")
        return
    from taugrid.cli.output import columns

    lines = [
        (
            r["name"],
            r["workspace"],
            f"{r['requested']} {r['resource']}",
            r["for"],
            r["phase"],
            str(r["granted"] if r["granted"] is not None else "-"),
            r["expiresAt"] or "-",
            r["decidedBy"] or r["requestedBy"] or "-",
            r["message"] or r["reason"],
        )
        for r in rows
    ]
    out(
        columns(
            ("NAME", "WORKSPACE", "ASKED", "FOR", "PHASE", "GRANTED", "EXPIRES", "BY", "WHY"), lines
        )
    )


def _decide(
    ref: str,
    verdict: Any,
    note: str,
    workspace: str | None,
    context: str | None,
    output: ReportFormat,
) -> None:
    from taugrid.client import quota

    r = quota.decide(ref, verdict, note, workspace=workspace, context=context)
    if output is ReportFormat.json:
        out(dump_json(r))
        return
    out(
        f"{verdict.lower()} {r['namespace']}/{r['name']} (+{r['requested']} {r['resource']} "
        f"for {r['for']}); the controller applies it: tau quota list --workspace {r['workspace']}"
    )


@app.command("approve")
def approve(
    ref: RefArg,
    note: NoteOpt = "",
    workspace: WorkspaceOpt = None,
    context: ContextOpt = None,
    output: JsonOpt = ReportFormat.text,
) -> None:
    """Approve a request (platform admins; the API server checks)."""
    _decide(ref, "Approved", note, workspace, context, output)


@app.command("deny")
def deny(
    ref: RefArg,
    note: NoteOpt = "",
    workspace: WorkspaceOpt = None,
    context: ContextOpt = None,
    output: JsonOpt = ReportFormat.text,
) -> None:
    """Deny a request (platform admins; the API server checks)."""
    _decide(ref, "Denied", note, workspace, context, output)
