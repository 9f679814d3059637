"""`tau profiles` and `tau workspaces`: what a cluster offers you (read from the cluster)."""

from __future__ import annotations

import os
from typing import Annotated, Any

import typer

from taugrid.cli.options import JsonOpt, ReportFormat
from taugrid.cli.output import console, dump_json, out

ContextOpt = Annotated[
    str | None,
    typer.Option("--context", help="kubeconfig context (default: the current one; TAU_CONTEXT)"),
]


def _backend(context: str | None) -> Any:
    from taugrid.runs.backends import base

    return base.get("kube", context=context or os.environ.get("TAU_CONTEXT"))


def profiles(context: ContextOpt = None, output: JsonOpt = ReportFormat.text) -> None:
    """The cluster's workload profiles (placement and the bounds of one worker)."""
    backend = _backend(context)
    snap = backend.snapshot()
    live = backend.capacity()
    if output is ReportFormat.json:
        out(dump_json([{**p.model_dump(mode="json", exclude_none=True),
                        **({"live": live[p.name]} if p.name in live else {})}
                       for p in snap.profiles]))  # fmt: skip
        return
    from rich.table import Table

    table = Table(box=None, show_edge=False, pad_edge=False)
    for col in (
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
    ):
        table.add_column(col)
    for p in snap.profiles:
        cap = live.get(p.name)
        nodes = f"{cap['nodes']} ({cap['healthyNodes']})" if cap else "-"
        table.add_row(p.name, str(p.gpusPerWorker), p.gpuClass or "-", str(p.allocatable.cpu),
                      p.allocatable.memory, str(p.maxWorkers or "-"), p.localQueue,
                      ", ".join(p.workspaces) or "all", nodes,
                      str(cap["allocatableGpus"]) if cap else "-")  # fmt: skip
    console().print(table)
    if not live:
        out("(live capacity: none recorded; the TauGrid controller writes it)")


def workspaces(context: ContextOpt = None, output: JsonOpt = ReportFormat.text) -> None:
    """The workspaces you may submit runs to (namespace, queues' profiles, /data PVC)."""
    backend = _backend(context)
    snap = backend.snapshot()
    usable = backend.usable_workspaces(snap)
    rows = []
    for w in usable:
        mine = [p for p in snap.profiles if p.applies_to(w.name)]
        rows.append({**w.model_dump(mode="json", exclude_none=True),
                     "default": w.name == snap.defaultWorkspace,
                     "queues": sorted({p.localQueue for p in mine}),
                     "profiles": [p.name for p in mine]})  # fmt: skip
    if output is ReportFormat.json:
        out(dump_json(rows))
        return
    if not rows:
        out(f"you may submit to no workspace of cluster {snap.cluster} "
            f"(workspaces: {', '.join(w.name for w in snap.workspaces) or 'none'})")  # fmt: skip
        raise typer.Exit(4)
    for r in rows:
        mark = " (default)" if r["default"] else ""
        out(
            f"{r['name']}{mark}: namespace {r['namespace']}, /data {r['pvc']}, profiles {', '.join(r['profiles'])}"
        )
