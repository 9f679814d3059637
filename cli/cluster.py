"""`tau profiles` and `tau workspaces`: what a cluster offers you (read from the cluster)."""

from __future__ import annotations

import typer

from taugrid.cli.options import ContextOpt, JsonOpt, ReportFormat
from taugrid.cli.output import dump_json, out


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
