"""`tau quota request | list | approve | deny`: more GPUs for a while, decided by the platform
team (the work is in taugrid.runs.backends.kube.quota; the controller applies grants)."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from taugrid.cli.cluster import ContextOpt, _backend
from taugrid.cli.options import JsonOpt, ReportFormat
from taugrid.cli.output import console, dump_json, out

app = typer.Typer(no_args_is_help=True, help="Ask for more quota for a while; admins decide.")

RefArg = Annotated[str, typer.Argument(help="The request's name (or namespace/name)")]
NoteOpt = Annotated[str, typer.Option("--note", help="Why (kept with the decision)")]


@app.command("request")
def request(
    gpus: Annotated[int, typer.Option("--gpus", help="Extra GPUs of quota")],
    for_: Annotated[str, typer.Option("--for", help="How long once granted: 30m, 48h, 7d")],
    reason: Annotated[str, typer.Option("--reason", help="Why (the platform team reads it)")],
    workspace: Annotated[str | None, typer.Option("--workspace", "-w", help="Workspace")] = None,
    profile: Annotated[str | None, typer.Option("--profile", help="GPU profile (pool)")] = None,
    context: ContextOpt = None,
    output: JsonOpt = ReportFormat.text,
) -> None:
    """Ask for more GPU quota in a workspace for a while (a TauQuotaRequest)."""
    from taugrid.runs.backends.kube import quota as q

    backend = _backend(context)
    snap = backend.snapshot()
    ws = backend.workspace(snap, workspace)
    prof = q.pick_profile(snap, ws, profile)
    obj = q.new_request(snap, ws, prof, gpus, for_, reason, q.whoami(backend.kube))
    got = q.submit(backend.kube, obj)
    r = q.row(got)
    if output is ReportFormat.json:
        out(dump_json(r))
        return
    out(f"asked for +{gpus} GPU(s) on {prof.name} in workspace {ws.name} for {for_}: "
        f"request {r['name']} (pending a platform admin's decision)\n"
        f"  follow it: tau quota list -w {ws.name}")  # fmt: skip


@app.command("list")
def list_(
    workspace: Annotated[str | None, typer.Option("--workspace", "-w", help="Workspace")] = None,
    all_: Annotated[bool, typer.Option("--all", "-A", help="Every namespace (admins)")] = False,
    context: ContextOpt = None,
    output: JsonOpt = ReportFormat.text,
) -> None:
    """Quota requests and their state (Pending, Approved, Active, Expired, Denied)."""
    from taugrid.runs.backends.kube import quota as q

    backend = _backend(context)
    rows = [q.row(o) for o in q.list_requests(backend.kube, q.namespaces(backend, workspace, all_))]
    if output is ReportFormat.json:
        out(dump_json(rows))
        return
    if not rows:
        out("no quota requests")
        return
    from rich.table import Table

    table = Table(box=None, show_edge=False, pad_edge=False)
    for col in ("NAME", "WORKSPACE", "ASKED", "FOR", "PHASE", "GRANTED", "EXPIRES", "BY", "WHY"):
        table.add_column(col)
    for r in rows:
        table.add_row(r["name"], r["workspace"], f"{r['requested']} {r['resource']}", r["for"],
                      r["phase"], str(r["granted"] if r["granted"] is not None else "-"),
                      r["expiresAt"] or "-", r["decidedBy"] or r["requestedBy"] or "-",
                      r["message"] or r["reason"])  # fmt: skip
    console().print(table)


def _decide(ref: str, verdict: Any, note: str, workspace: str | None, context: str | None,
            output: ReportFormat) -> None:  # fmt: skip
    from taugrid.runs.backends.kube import quota as q

    backend = _backend(context)
    namespaces = q.namespaces(backend, workspace, workspace is None)
    obj = q.find(backend.kube, ref, namespaces)
    got = q.decide(backend.kube, obj, verdict, note, q.whoami(backend.kube))
    r = q.row(got)
    if output is ReportFormat.json:
        out(dump_json(r))
        return
    out(f"{verdict.lower()} {r['namespace']}/{r['name']} (+{r['requested']} {r['resource']} "
        f"for {r['for']}); the controller applies it: tau quota list -w {r['workspace']}")  # fmt: skip


@app.command("approve")
def approve(ref: RefArg, note: NoteOpt = "",
            workspace: Annotated[str | None, typer.Option("--workspace", "-w")] = None,
            context: ContextOpt = None, output: JsonOpt = ReportFormat.text) -> None:  # fmt: skip
    """Approve a request (platform admins; the API server checks)."""
    _decide(ref, "Approved", note, workspace, context, output)


@app.command("deny")
def deny(ref: RefArg, note: NoteOpt = "",
         workspace: Annotated[str | None, typer.Option("--workspace", "-w")] = None,
         context: ContextOpt = None, output: JsonOpt = ReportFormat.text) -> None:  # fmt: skip
    """Deny a request (platform admins; the API server checks)."""
    _decide(ref, "Denied", note, workspace, context, output)
