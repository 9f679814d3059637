"""`tau run ...`: validate, render, submit, and follow up on runs (any target)."""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, Annotated, Any

import typer
from typer.core import TyperGroup

from taugrid.api.errors import EXIT_INTERRUPTED, EXIT_PLATFORM, EXIT_RUN_FAILED, TauError
from taugrid.cli.options import (
    DetachOpt,
    FileArg,
    JsonOpt,
    ProfileOpt,
    ProfilesOpt,
    PythonOpt,
    RayPipOpt,
    RenderFormat,
    RenderOutOpt,
    ReportFormat,
    RunArg,
    RunIdOpt,
    WorkspaceOpt,
)
from taugrid.cli.output import dump_json, error_items, object_list, out, print_status, say

if TYPE_CHECKING:
    from taugrid.runs.backends.base import Backend
    from taugrid.runs.evidence import RunDir


class _RunGroup(TyperGroup):
    """`tau run FILE ...` is shorthand for `tau run submit FILE ...`."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        if args and args[0] not in self.commands and args[0] not in ("--help", "-h"):
            args = ["submit", *args]
        return super().parse_args(ctx, args)


app = typer.Typer(
    cls=_RunGroup,
    rich_markup_mode=None,
    help="Validate, render and submit runs. `tau run FILE` submits; `tau run FILE --dry-run` renders.",
    no_args_is_help=True,
)


def _render_objects(
    file: str | None,
    profiles: Any,
    workspace: str | None,
    profile: str | None,
    run_id: str | None,
) -> list[dict[str, Any]]:
    from taugrid.runs import load
    from taugrid.runs.prepare import RunRequest, prepare

    loaded = load.load_manifest(file)
    if profiles is None:
        raise TauError(
            "rendering for a cluster needs the cluster's workload profiles",
            hint="pass --profiles FILE (a TauWorkloadProfileSnapshot, e.g. examples/profiles.yaml)",
        )
    request = RunRequest(loaded, workspace=workspace, profile=profile, run_id=run_id)
    prepared = prepare(request, load.load_snapshot(profiles))
    note = prepared.bundle.left_out_summary()
    if note:
        say(f"note: {note}")
    return prepared.objects()


@app.command("validate")
def run_validate(
    file: FileArg = None,
    profiles: ProfilesOpt = None,
    workspace: WorkspaceOpt = None,
    profile: ProfileOpt = None,
    output: JsonOpt = ReportFormat.text,
) -> None:
    """Check a tau.yaml (and, with --profiles, that the cluster can place it)."""
    from taugrid.runs import codebundle, load

    try:
        loaded = load.load_manifest(file)
        m = loaded.manifest
        bundle = codebundle.collect(loaded.folder)  # over the size limit: an error here too
        placed = None
        if profiles is not None:
            from taugrid.runs import resolve

            placed = resolve.resolve(
                m, load.load_snapshot(profiles), workspace=workspace, profile=profile
            )
    except TauError as e:
        if output is ReportFormat.json:
            out(dump_json({"valid": False, "file": file, "errors": error_items(e)}))
            raise typer.Exit(e.exit_code) from None
        raise
    summary: dict[str, Any] = {
        "valid": True,
        "file": str(loaded.path),
        "name": m.name,
        "workload_kind": m.workload_kind(),
        "workers": m.compute.workers,
        "gpus_per_worker": m.compute.gpus,
        "config_hash": m.config_hash(),
        "code_bundle": bundle.as_json(),
    }
    if placed is not None:
        summary.update(
            profile=placed.profile.name,
            workspace=placed.workspace.name,
            queue=placed.queue,
            priority=placed.priority,
            worker=placed.worker.resources(),
        )
    if output is ReportFormat.json:
        out(dump_json(summary))
        return
    kind = summary["workload_kind"]
    what = (
        f"{m.compute.workers} worker(s) x {m.compute.gpus} GPU"
        if m.compute.gpus
        else f"{m.compute.workers} CPU worker(s)"
    )
    line = f"ok: {loaded.path} is valid ({kind}, {what})"
    if placed is not None:
        res = placed.worker.resources()["requests"]
        line += (
            f"\n    profile {placed.profile.name}, workspace {placed.workspace.name}, queue {placed.queue}, "
            f"{res['cpu']} CPU / {res['memory']} per worker"
        )
    out(line)
    note = bundle.left_out_summary()
    if note:
        say(f"note: {note}")


@app.command("render")
def run_render(
    file: FileArg = None,
    profiles: ProfilesOpt = None,
    workspace: WorkspaceOpt = None,
    profile: ProfileOpt = None,
    run_id: RunIdOpt = None,
    output: RenderOutOpt = RenderFormat.yaml,
) -> None:
    """Print the exact Kubernetes objects a run would submit (nothing is sent)."""
    objs = _render_objects(file, profiles, workspace, profile, run_id)
    out(object_list(objs, output is RenderFormat.json))


def _follow_up(run_id: str, path: Any) -> str:
    return (
        f"  tau run status {run_id}\n  tau run logs -f {run_id}\n  tau run cancel {run_id}\n"
        f"  evidence: {path}"
    )


def _attach(backend: Backend, rd: RunDir, detach: bool) -> None:
    """Follow a run to its end; Ctrl-C detaches (the run goes on)."""
    from taugrid.api.vocabulary import TERMINAL, Phase
    from taugrid.runs.backends.base import Follows

    sys.stderr.write(f"run {rd.run_id}\n")
    if detach or not isinstance(backend, Follows):
        out(rd.run_id)
        return
    try:
        phase = backend.follow(rd, sys.stdout, sys.stderr)
    except KeyboardInterrupt:
        follow_up = _follow_up(rd.run_id, rd.path)
        sys.stderr.write(f"\ndetached; the run goes on. Follow up with:\n{follow_up}\n")
        raise typer.Exit(EXIT_INTERRUPTED) from None
    if phase not in TERMINAL:  # its owner is gone, but the run is not over
        raise typer.Exit(EXIT_PLATFORM)
    rec = rd.read_record()
    sys.stderr.write(f"{phase.lower()}: {rec.reason or ''}\nevidence: {rd.path}\n")
    raise typer.Exit(0 if phase == Phase.Succeeded else EXIT_RUN_FAILED)


@app.command("submit")
def run_submit(
    file: FileArg = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Render instead of submitting")
    ] = False,
    target: Annotated[
        str | None,
        typer.Option("--target", "-t", help="Where to run: local, kube or pulumi (default: local)"),
    ] = None,
    detach: DetachOpt = False,
    strict: Annotated[
        bool, typer.Option("--strict", help="Fail instead of running GPU work on CPU")
    ] = False,
    ray_pip: RayPipOpt = False,
    python: PythonOpt = None,
    profiles: ProfilesOpt = None,
    workspace: WorkspaceOpt = None,
    profile: ProfileOpt = None,
    run_id: RunIdOpt = None,
    context: Annotated[
        str | None, typer.Option("--context", help="kube target: the kubeconfig context")
    ] = None,
    output: RenderOutOpt = RenderFormat.yaml,
) -> None:
    """Submit a run and follow it (with --dry-run: render it)."""
    if dry_run:
        run_render(file, profiles, workspace, profile, run_id, output)
        return
    from taugrid.runs import load
    from taugrid.runs.backends import base
    from taugrid.runs.prepare import RunRequest

    chosen = base.pick_target(target, os.environ, say)
    backend = base.get(chosen, **({"context": context} if context else {}))
    loaded = load.load_manifest(file)
    request = RunRequest(loaded, workspace=workspace, profile=profile, run_id=run_id)
    prepared = backend.prepare(request)
    options = base.SubmitOptions(strict=strict, ray_pip=ray_pip, python=python)
    rd = backend.submit(prepared, options, say)
    _attach(backend, rd, detach)


@app.command("status")
def run_status(
    run: RunArg,
    watch: Annotated[
        bool, typer.Option("--watch", "-w", help="Keep watching until the run ends")
    ] = False,
    output: JsonOpt = ReportFormat.text,
) -> None:
    """Where is the run, and if it is stuck, why: six signals with their evidence."""
    import json
    import time

    from taugrid.api.vocabulary import TERMINAL, Phase
    from taugrid.runs import status
    from taugrid.runs.backends import base
    from taugrid.runs.index import find_run

    rd = find_run(run)
    backend = base.for_record(rd.read_record())
    last = None
    # A backend that watches says when to look again; the others are looked at every second.
    ticks = backend.changes([rd]) if watch and isinstance(backend, base.Watches) else None
    while True:
        if ticks is not None:
            next(ticks)
        (obs,) = backend.observe([rd])
        st = status.compute(obs)
        doc = st.model_dump(mode="json")
        changed = {k: v for k, v in doc.items() if k != "duration_s"}  # time alone is no change
        if output is ReportFormat.json:
            if watch:
                if changed != last:
                    out(json.dumps(doc))
            else:
                out(dump_json(doc))
        elif changed != last:
            print_status(st)
        last = changed
        if not watch or st.phase in TERMINAL:
            break
        if ticks is None:
            try:
                time.sleep(1.0)
            except KeyboardInterrupt:
                raise typer.Exit(EXIT_INTERRUPTED) from None
    failed = st.phase in (Phase.Failed, Phase.Cancelled)
    raise typer.Exit(EXIT_RUN_FAILED if failed else 0)


@app.command("logs")
def run_logs(
    run: RunArg,
    follow_: Annotated[
        bool, typer.Option("--follow", "-f", help="Keep printing until the run ends")
    ] = False,
) -> None:
    """Print a run's log (live while it runs, from the evidence record after)."""
    from taugrid.runs.backends import base
    from taugrid.runs.index import find_run

    rd = find_run(run)
    backend = base.for_record(rd.read_record())
    if follow_ and isinstance(backend, base.Follows):
        try:
            backend.follow(rd, sys.stdout, sys.stderr, transitions=False)
        except KeyboardInterrupt:
            raise typer.Exit(EXIT_INTERRUPTED) from None
        return
    backend.logs(rd, sys.stdout)


@app.command("list")
def run_list(output: JsonOpt = ReportFormat.text) -> None:
    """List the runs submitted from this machine, newest last."""
    import time
    from collections import defaultdict

    from taugrid.runs import status
    from taugrid.runs.backends import base
    from taugrid.runs.index import list_runs

    by_target: dict[str, list[RunDir]] = defaultdict(list)
    for rd in list_runs():
        try:
            by_target[rd.read_record().target].append(rd)
        except TauError:
            continue
    rows: list[dict[str, Any]] = []
    for target, runs in by_target.items():
        try:
            observed = base.get(target).observe(runs)
        except TauError as e:  # e.g. a cluster that does not answer: the other runs still list
            say(f"note: {len(runs)} {target} run(s) shown from their local records: {e.message}")
            observed = [status.Observations(record=rd.read_record(), history=[], now=time.time(),
                                            owner_alive=None, evidence=str(rd.path))
                        for rd in runs]  # fmt: skip
        for obs in observed:
            st = status.compute(obs)
            doc = st.model_dump(mode="json", exclude={"signals"})
            doc["kind"] = doc.pop("workload_kind")
            rows.append(doc)
    rows.sort(key=lambda r: r["created_at"])
    if output is ReportFormat.json:
        out(dump_json(rows))
        return
    from rich.markup import escape
    from rich.table import Table

    from taugrid.cli.output import console, duration, metrics_line

    table = Table(box=None, show_edge=False, pad_edge=False)
    for col in ("RUN", "KIND", "PHASE", "DURATION", "STEP", "METRICS", "CREATED", "NOTE"):
        table.add_column(col)
    for r in rows:
        step = "" if r["last_step"] is None else str(r["last_step"])
        note = r["last_error"] or ("" if r["phase"] in ("Succeeded", "Running") else r["summary"])
        table.add_row(r["run_id"], r["kind"], r["phase"], duration(r["duration_s"]), step,
                      escape(metrics_line(r["latest_metrics"], 2)), r["created_at"][:19],
                      escape(note or ""))  # fmt: skip
    console().print(table if rows else "no runs yet (tau run FILE starts one)")


@app.command("cancel")
def run_cancel(run: RunArg) -> None:
    """Stop a run; its evidence is sealed as Cancelled."""
    from taugrid.api.vocabulary import TERMINAL
    from taugrid.runs.backends import base
    from taugrid.runs.index import find_run

    rd = find_run(run)
    before = rd.read_record()
    phase = base.for_record(before).cancel(rd)
    if before.phase in TERMINAL:
        out(f"{rd.run_id} had already ended: {phase}")
    else:
        out(f"{rd.run_id} cancelled")


@app.command("attach")
def run_attach(run: RunArg, detach: DetachOpt = False) -> None:
    """Re-attach a run whose supervisor died: a new one adopts it if the run still runs
    (else its record is closed as Failed), then follow it like `tau run`."""
    from taugrid.api.vocabulary import TERMINAL
    from taugrid.runs.backends import base
    from taugrid.runs.index import find_run

    rd = find_run(run)
    rec = rd.read_record()
    backend = base.for_record(rec)
    if rec.phase in TERMINAL:
        out(f"{rd.run_id} has already ended: {rec.phase}")
        raise typer.Exit(0 if rec.phase == "Succeeded" else EXIT_RUN_FAILED)
    if not isinstance(backend, base.Attaches):
        raise TauError(f"runs on {rec.target} cannot be re-attached by this build")
    if not backend.attach(rd, say):
        out(f"{rd.run_id}: {rd.read_record().phase}: {rd.read_record().reason}")
        raise typer.Exit(EXIT_RUN_FAILED)
    _attach(backend, rd, detach)


@app.command("resume")
def run_resume(
    run: RunArg, detach: DetachOpt = False, ray_pip: RayPipOpt = False, python: PythonOpt = None
) -> None:
    """Start a new run from the newest complete checkpoint of RUN (lineage kept in both)."""
    from pathlib import Path

    from taugrid.api.vocabulary import TERMINAL
    from taugrid.runs import load, status
    from taugrid.runs.backends import base
    from taugrid.runs.index import find_run
    from taugrid.runs.prepare import RunRequest

    parent = find_run(run)
    rec = parent.read_record()
    backend = base.for_record(rec)
    phase, _ = status.effective_phase(backend.observe([parent])[0])
    if phase not in TERMINAL:
        raise TauError(
            f"{parent.run_id} is still {phase.lower()}",
            hint=f"tau run cancel {parent.run_id} first",
        )
    if not isinstance(backend, base.Resumes):
        raise TauError(f"runs on {rec.target} cannot be resumed by this build")
    ckpt = backend.newest_checkpoint(parent)
    if ckpt is None:
        raise TauError(
            f"{parent.run_id} has no complete checkpoint to resume from", exit_code=EXIT_RUN_FAILED
        )
    loaded = load.load_manifest(Path(rec.code_folder))
    if loaded.manifest.config_hash() != rec.config_hash:
        sys.stderr.write("note: tau.yaml changed since the original run; the current one is used\n")
    sys.stderr.write(f"resuming {parent.run_id} from {ckpt}\n")
    request = RunRequest(loaded, resume_from=ckpt, parent=parent.run_id)
    options = base.SubmitOptions(ray_pip=ray_pip, python=python)
    rd = backend.submit(backend.prepare(request), options, say)
    parent.record_child(rd.run_id, ckpt)
    if isinstance(backend, base.RecordsLineage):
        backend.record_child(parent, rd.run_id)
    _attach(backend, rd, detach)


@app.command("verify")
def run_verify(run: RunArg) -> None:
    """Check a run's sealed evidence record against its MANIFEST.sha256."""
    from taugrid.runs.index import find_run

    rd = find_run(run)
    n, problems = rd.verify()
    if problems:
        sys.stderr.write(
            f"{rd.run_id}: evidence record does NOT verify ({len(problems)} problem(s)):\n"
        )
        for p in problems:
            sys.stderr.write(f"  {p}\n")
        raise typer.Exit(EXIT_RUN_FAILED)
    out(f"ok: {rd.run_id}: {n} files match {rd.manifest_path.name}")


@app.command("metrics")
def run_metrics(
    run: RunArg,
    metric: Annotated[
        list[str] | None, typer.Option("--metric", "-m", help="Metric(s) to plot")
    ] = None,
    png: Annotated[str | None, typer.Option("--png", help="Write the plot to a PNG file")] = None,
    output: JsonOpt = ReportFormat.text,
) -> None:
    """Plot a run's metrics in the terminal (or to a PNG)."""
    from pathlib import Path

    from taugrid.cli import plots
    from taugrid.runs.index import find_run, lineage_metric_rows

    rd = find_run(run)
    rows = lineage_metric_rows(rd)  # a resumed run continues its parents' curves
    if output is ReportFormat.json:
        out(dump_json(rows))
        return
    if not rows:
        raise TauError(
            f"{rd.run_id} has no metrics yet ({rd.metrics_path})", exit_code=EXIT_RUN_FAILED
        )
    names = plots.pick_metrics(rows, metric, rd.read_record().primary_metric)
    runs = list(dict.fromkeys(r["run_id"] for r in rows))
    title = (
        rd.run_id if len(runs) == 1 else f"{rd.run_id} (resumed from {' <- '.join(runs[-2::-1])})"
    )
    if png is not None:
        plots.to_png(rows, names, Path(png), title=title)
        out(f"wrote {png}")
    else:
        out(plots.to_text(rows, names, title=title))


@app.command("gc")
def run_gc(output: JsonOpt = ReportFormat.text) -> None:
    """Destroy the Pulumi stacks of runs that ended (--target pulumi), and every expired run
    stack; their evidence stays."""
    from taugrid.runs.backends.pulumi.backend import gc
    from taugrid.runs.index import list_runs

    gone = gc(list_runs(), say)
    out(dump_json({"destroyed": gone}) if output is ReportFormat.json else
        f"destroyed {len(gone)} run stack(s){': ' + ', '.join(gone) if gone else ''}")  # fmt: skip


@app.command("schema")
def run_schema() -> None:
    """Print the JSON Schema of tau.yaml (for editors: yaml-language-server)."""
    from taugrid.api.manifest import Manifest

    out(dump_json(Manifest.model_json_schema()))
