"""`tau profiles` and `tau workspaces`: what a cluster offers you (read from the cluster); and
`tau cluster nodes | validate nodes`: the GPU nodes, checked against the platform's declaration
(platform admins)."""

from __future__ import annotations

from typing import Annotated

import typer

from taugrid.cli.options import ContextOpt, JsonOpt, ReportFormat
from taugrid.cli.output import dump_json, out, say


def profiles(context: ContextOpt = None, output: JsonOpt = ReportFormat.text) -> None:
    """The cluster's workload profiles (placement and the bounds of one worker)."""
    from taugrid.client import cluster

    rows = cluster.profiles(context)
    if output is ReportFormat.json:
        out(dump_json([r.doc() for r in rows]))
        return
    from taugrid.cli.output import columns

    lines = []
    for r in rows:
        p, cap = r.profile, r.live
        nodes = f"{cap['nodes']} ({cap['healthyNodes']})" if cap else "-"
        lines.append(
            (
                p.name,
                str(p.gpusPerWorker),
                p.gpuClass or "-",
                str(p.allocatable.cpu),
                p.allocatable.memory,
                str(p.maxWorkers or "-"),
                p.localQueue,
                ", ".join(p.workspaces) or "all",
                nodes,
                str(cap["allocatableGpus"]) if cap else "-",
            )
        )
    out(
        columns(
            (
                "PROFILE",
                "GPUS/WORKER",
                "GPU",
                "CPU",
                "MEMORY",
                "MAX WORKERS",
                "QUEUE",
                "WORKSPACES",
                "NODES (HEALTHY)",
                "GPUS NOW",
            ),
            lines,
        )
    )
    if all(r.live is None for r in rows):
        out("(live capacity: none recorded; the TauGrid controller writes it)")


def workspaces(context: ContextOpt = None, output: JsonOpt = ReportFormat.text) -> None:
    """The workspaces you may submit runs to (namespace, queues' profiles, /data PVC)."""
    from taugrid.client import cluster

    got = cluster.workspaces(context)
    rows = [w.doc() for w in got.usable]
    if output is ReportFormat.json:
        out(dump_json(rows))
        return
    if not rows:
        out(
            f"you may submit to no workspace of cluster {got.cluster} "
            f"(workspaces: {', '.join(got.all_names) or 'none'})"
        )
        raise typer.Exit(4)
    for r in rows:
        mark = " (default)" if r["default"] else ""
        out(
            f"{r['name']}{mark}: namespace {r['namespace']}, /data {r['pvc']}, profiles "
            f"{', '.join(r['profiles'])}"
        )


app = typer.Typer(
    no_args_is_help=True,
    help="Platform admins: the cluster's GPU nodes, and checks of them against the platform's "
    "declaration.",
)
validate_app = typer.Typer(
    no_args_is_help=True, help="Check the cluster against the platform's declaration."
)
app.add_typer(validate_app, name="validate")
PoolOpt = Annotated[
    str | None, typer.Option("--pool", help="Only this GPU pool's nodes (as the stack names it)")
]


@app.command("nodes")
def nodes(
    pool: PoolOpt = None, context: ContextOpt = None, output: JsonOpt = ReportFormat.text
) -> None:
    """GPU nodes by pool: ready, GPUs, the controller's quarantine, and their last validation."""
    import dataclasses

    from taugrid.cli.output import columns
    from taugrid.client import cluster

    rows = cluster.gpu_nodes(context, pool=pool)
    if output is ReportFormat.json:
        out(
            dump_json(
                [
                    {**dataclasses.asdict(r), "verdicts": [v.model_dump() for v in r.verdicts]}
                    for r in rows
                ]
            )
        )
        return
    if not rows:
        out("no GPU nodes" + (f" in pool {pool}" if pool else ""))
        return
    lines = []
    for r in rows:
        last = r.verdicts[-1] if r.verdicts else None
        checked = (
            "never"
            if last is None
            else f"{'passed' if last.passed else 'FAILED ' + ','.join(last.failed)} {last.at}"
        )
        state = (
            "quarantined"
            if r.quarantined
            else "validating"
            if r.validating
            else ("ready" if r.ready else "NotReady")
        )
        lines.append((r.name, r.pool or "-", r.gpu_class or "-", str(r.gpus), state, checked))
    out(columns(("NODE", "POOL", "GPU", "GPUS", "STATE", "LAST VALIDATION"), lines))
    for r in rows:
        for p in r.recent:
            out(f"  {r.name}: {p}")


@validate_app.command("nodes")
def validate_nodes(
    pool: PoolOpt = None,
    keep: Annotated[
        bool,
        typer.Option("--keep/--no-keep", help="Keep each verdict in the node's history"),
    ] = True,
    active: Annotated[
        bool,
        typer.Option(
            "--active",
            help="Also DCGM's diagnostics and an NCCL all-reduce on each idle node, as Jobs "
            "Kueue admits through the validation queue (it borrows only unused quota)",
        ),
    ] = False,
    timeout: Annotated[
        int,
        typer.Option("--timeout", min=30, help="--active: seconds to wait for the checks"),
    ] = 900,
    context: ContextOpt = None,
    output: JsonOpt = ReportFormat.text,
) -> None:
    """Check each node of the declared GPU pools against its pool: Ready, GPUs allocatable, the
    GPU product and driver the GPU Operator labels, MIG layout, GPU fault conditions, recent
    XIDs, DCGM's reading, quarantine (and with --active, DCGM diagnostics and NCCL bandwidth).
    One line per failed check with the fix; exit 1 if any node fails."""
    from taugrid.client import cluster

    got = cluster.validate_nodes(
        context, pool=pool, keep=keep, active=active, timeout_s=timeout, say=say
    )
    if output is ReportFormat.json:
        out(dump_json(got.doc()))
    else:
        for v in got.verdicts:
            if v.passed:
                out(f"ok    {v.node} ({v.pool}): {len(v.findings)} checks passed")
                continue
            for f in v.failed():
                out(f"FAIL  {v.node} ({v.pool}) {f.check}: {f.message}")
                out(f"      fix: {f.fix}")
        for name, why in got.unchecked.items():
            out(f"skip  {name}: {why}")
        for note in got.notes:
            say(f"note: {note}")
        failed = sum(1 for v in got.verdicts if not v.passed)
        out(
            f"{len(got.verdicts)} node(s) checked, {failed} failed"
            + ("; verdicts kept on the nodes" if got.kept else "")
        )
        if not got.verdicts:
            say("no node of a declared GPU pool to check")
    if not got.passed:
        raise typer.Exit(1)


@validate_app.command("installation")
def validate_installation(context: ContextOpt = None, output: JsonOpt = ReportFormat.text) -> None:
    """Read-only: the Kubernetes version, TauGrid's and each component's CRDs, each component's
    Helm release at the version the stack's lock says and its workloads Ready, the queues and
    flavors as declared, the controller's heartbeat, NPD and DCGM's exporter on every GPU node.
    One line per finding with the fix; exit 1 if any fails."""
    from taugrid.client import cluster

    got = cluster.validate_installation(context)
    if output is ReportFormat.json:
        out(dump_json(got.doc()))
    else:
        out(f"installation of {got.server}:")
        for f in got.findings:
            mark = {"ok": "ok  ", "failed": "FAIL", "skipped": "skip"}[f.state]
            out(f"{mark}  {f.item}: {f.message}")
            if f.fix and f.state == "failed":
                out(f"      fix: {f.fix}")
        bad = sum(1 for f in got.findings if f.state == "failed")
        out(f"{len(got.findings)} finding(s), {bad} failed")
    if not got.passed:
        raise typer.Exit(1)
