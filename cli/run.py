"""`tau run ...`: validate, render, submit, and follow up on runs (any target)."""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Any

import typer

from taugrid.api.errors import (
    EXIT_INTERRUPTED,
    EXIT_PLATFORM,
    EXIT_RUN_FAILED,
    EXIT_USAGE,
    TauError,
)
from taugrid.cli.lazy import LazyGroup
from taugrid.cli.options import (
    ContextOpt,
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
    TargetOpt,
    WatchOpt,
    WorkspaceOpt,
)
from taugrid.cli.output import (
    dump_json,
    error_items,
    object_list,
    out,
    print_status,
    say,
    say_once,
)

if TYPE_CHECKING:
    from taugrid.client.runs import RunDir


class _RunGroup(LazyGroup):
    """`tau run FILE ...` is shorthand for `tau run submit FILE ...`."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        if args and args[0] not in self.list_commands(ctx) and args[0] not in ("--help", "-h"):
            args = ["submit", *args]
        return super().parse_args(ctx, args)


app = typer.Typer(
    cls=_RunGroup,
    rich_markup_mode=None,
    help="Validate, render and submit runs. `tau run FILE` submits; `tau run FILE --dry-run` "
    "renders.",
    no_args_is_help=True,
)


@app.command("validate")
def run_validate(
    file: FileArg = None,
    profiles: ProfilesOpt = None,
    workspace: WorkspaceOpt = None,
    profile: ProfileOpt = None,
    output: JsonOpt = ReportFormat.text,
) -> None:
    """Check a tau.yaml: every check `tau run` makes that needs no cluster (the data inputs'
    versions and runtime.python included) and, with --profiles, that the cluster can place it."""
    from taugrid.client import runs

    try:
        got = runs.validate(file, profiles=profiles, workspace=workspace, profile=profile)
    except TauError as e:
        if output is ReportFormat.json:
            out(dump_json({"valid": False, "file": file, "errors": error_items(e)}))
            raise typer.Exit(e.exit_code) from None
        raise
    loaded, m, bundle, placed = got.loaded, got.loaded.manifest, got.bundle, got.placed
    summary: dict[str, Any] = {
        "valid": True,
        "file": str(loaded.path),
        "name": m.name,
        "workload_kind": m.workload_kind(),
        "workers": m.compute.workers,
        "gpus_per_worker": m.compute.gpus,
        "config_hash": m.config_hash(),
        "code_bundle": bundle.as_json(),
        "inputs": [i.model_dump(mode="json") for i in got.inputs],
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
    out(_valid_line(got))
    note = bundle.left_out_summary()
    if note:
        say(f"note: {note}")


def _valid_line(got: Any) -> str:
    """A valid tau.yaml in words: its shape, where it would be placed, its pinned inputs."""
    loaded, m, placed = got.loaded, got.loaded.manifest, got.placed
    kind = m.workload_kind()
    what = (
        f"{m.compute.workers} worker(s) x {m.compute.gpus} GPU"
        if m.compute.gpus
        else f"{m.compute.workers} CPU worker(s)"
    )
    line = f"ok: {loaded.path} is valid ({kind}, {what})"
    if placed is not None:
        res = placed.worker.resources()["requests"]
        line += (
            f"\n    profile {placed.profile.name}, workspace {placed.workspace.name}, queue "
            f"{placed.queue}, "
            f"{res['cpu']} CPU / {res['memory']} per worker"
        )
    for inp in got.inputs:
        line += f"\n    input: {inp.kind} {inp.name}@{inp.version[:19]} ({inp.ref})"
    return line


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
    from taugrid.client import runs

    objs = runs.render(
        file, profiles=profiles, workspace=workspace, profile=profile, run_id=run_id, say=say
    )
    out(object_list(objs, output is RenderFormat.json))


def _follow_up(run_id: str, path: Any) -> str:
    return (
        f"  tau run status {run_id}\n  tau logs -f {run_id}\n  tau run cancel {run_id}\n"
        f"  evidence: {path}"
    )


def _attach(
    rd: RunDir, detach: bool, context: str | None = None, note: Callable[[str], None] = say
) -> None:
    """Follow a run to its end; Ctrl-C detaches (the run goes on)."""
    from taugrid.api.vocabulary import TERMINAL, Phase
    from taugrid.client import runs

    sys.stderr.write(f"run {rd.run_id}\n")
    if detach or not runs.follows(rd, context, note):
        out(rd.run_id)
        return
    try:
        phase = runs.follow(rd, context=context, say=note)
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
    target: TargetOpt = None,
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
    context: ContextOpt = None,
    output: RenderOutOpt = RenderFormat.yaml,
    config: Annotated[
        str | None,
        typer.Option(
            "--config", "-c", help="tau.yaml, as TauGrid's own quickstart spells it (or FILE)"
        ),
    ] = None,
) -> None:
    """Submit a run and follow it (with --dry-run: render it)."""
    if config is not None:
        if file is not None and file != config:
            raise TauError(
                f"two tau.yaml files given: {file} and --config {config}; give one",
                exit_code=EXIT_USAGE,
            )
        file = config
    if dry_run:
        run_render(file, profiles, workspace, profile, run_id, output)
        return
    from taugrid.client import runs

    got = runs.submit(
        file,
        target=target,
        context=context,
        workspace=workspace,
        profile=profile,
        run_id=run_id,
        strict=strict,
        ray_pip=ray_pip,
        python=python,
        say=say,
    )
    _attach(got.run_dir, detach)


def _status_exit(phase: str) -> None:
    raise typer.Exit(EXIT_RUN_FAILED if phase in ("Failed", "Cancelled") else 0)


@app.command("status")
def run_status(
    run: RunArg,
    watch: WatchOpt = False,
    context: ContextOpt = None,
    output: JsonOpt = ReportFormat.text,
) -> None:
    """Where is the run, and if it is stuck, why: six signals with their evidence."""
    import json

    from taugrid.client import runs

    if not watch:
        st = runs.status(run, context=context, say=say)
        out(dump_json(st.model_dump(mode="json"))) if output is ReportFormat.json else print_status(
            st
        )
        _status_exit(st.phase)
    last = None
    try:
        for st in runs.watch(run, context=context, say=say):
            last = st
            if output is ReportFormat.json:
                out(json.dumps(st.model_dump(mode="json")))
            else:
                print_status(st)
    except KeyboardInterrupt:
        raise typer.Exit(EXIT_INTERRUPTED) from None
    assert last is not None
    _status_exit(last.phase)


@app.command("logs")
def run_logs(
    run: RunArg,
    follow_: Annotated[
        bool, typer.Option("--follow", "-f", help="Keep printing until the run ends")
    ] = False,
    context: ContextOpt = None,
) -> None:
    """Print a run's log (live while it runs, from the evidence record after)."""
    from taugrid.client import runs

    if follow_:
        try:
            runs.follow(run, transitions=False, context=context, say=say)
        except KeyboardInterrupt:
            raise typer.Exit(EXIT_INTERRUPTED) from None
        return
    runs.logs(run, sys.stdout, context=context, say=say)


@app.command("list")
def run_list(
    cluster: Annotated[
        bool,
        typer.Option(
            "--cluster",
            help="Every run of the cluster's workspaces (from any machine), "
            "not only this machine's",
        ),
    ] = False,
    workspace: WorkspaceOpt = None,
    mine: Annotated[
        bool, typer.Option("--mine", help="--cluster: only runs you submitted")
    ] = False,
    worker: Annotated[
        str | None,
        typer.Option(
            "--worker",
            help="On a MultiKueue manager: only the runs dispatched to this worker cluster "
            "(implies --cluster)",
        ),
    ] = None,
    context: ContextOpt = None,
    output: JsonOpt = ReportFormat.text,
) -> None:
    """List runs, newest last: the ones submitted from this machine, or (--cluster, or a
    --workspace) every run of the cluster's workspaces that you may read. On a MultiKueue
    manager, a WORKER column says which worker cluster runs each."""
    from taugrid.client import runs

    if cluster or workspace or mine or worker:
        statuses = runs.cluster_runs(workspace=workspace, mine=mine, context=context)
    else:
        statuses = runs.list_runs(context=context, say=say)
    if worker:
        statuses = [st for st in statuses if st.clusters and st.clusters[-1] == worker]
    rows: list[dict[str, Any]] = []
    for st in statuses:
        doc = st.model_dump(mode="json", exclude={"signals", "timeline"})
        doc["kind"] = doc.pop("workload_kind")
        rows.append(doc)
    if output is ReportFormat.json:
        out(dump_json(rows))
        return
    out(_list_table(rows) if rows else "no runs yet (tau run FILE starts one)")


def _list_table(rows: list[dict[str, Any]]) -> str:
    """`tau run list`'s table: a GPU column where a running run has its GPUs read, a WORKER
    column on a MultiKueue manager."""
    from taugrid.api.gpuuse import short
    from taugrid.cli.output import columns, duration, metrics_line

    # a GPU column where some running run has its GPUs read
    gpu = any(r.get("gpu_use") and r["phase"] == "Running" for r in rows)
    on = any(r.get("clusters") for r in rows)  # a MultiKueue manager's: which worker runs it
    lines = []
    for r in rows:
        step = "" if r["last_step"] is None else str(r["last_step"])
        note = r["last_error"] or ("" if r["phase"] in ("Succeeded", "Running") else r["summary"])
        lines.append(
            (
                r["run_id"],
                r["kind"],
                r["phase"],
                duration(r["duration_s"]),
                step,
                metrics_line(r["latest_metrics"], 2),
                *((short(r.get("gpu_use")) if r["phase"] == "Running" else "",) if gpu else ()),
                *(((r.get("clusters") or [""])[-1],) if on else ()),
                r["created_at"][:19],
                note or "",
            )
        )
    head = (
        *("RUN", "KIND", "PHASE", "DURATION", "STEP", "METRICS"),
        *(("GPU",) if gpu else ()),
        *(("WORKER",) if on else ()),
    )
    return columns((*head, "CREATED", "NOTE"), lines)


@app.command("cancel")
def run_cancel(run: RunArg, context: ContextOpt = None) -> None:
    """Stop a run; its evidence is sealed as Cancelled."""
    from taugrid.client import runs

    c = runs.cancel(run, context=context, say=say)
    out(f"{c.run_id} had already ended: {c.phase}" if c.had_ended else f"{c.run_id} cancelled")


@app.command("attach")
def run_attach(run: RunArg, detach: DetachOpt = False, context: ContextOpt = None) -> None:
    """Re-attach a run whose owner died: locally a new supervisor adopts it if the run still
    runs (else its record is closed as Failed); on a cluster an interrupted submission is sent
    again. Then follow it like `tau run`."""
    from taugrid.client import runs

    try:
        once = say_once()
        rd = runs.attach(run, context=context, say=once)
    except TauError as e:
        if e.exit_code in (
            0,
            EXIT_RUN_FAILED,
        ):  # it had ended, or ends now: an answer, not an error
            out(e.message)
            raise typer.Exit(e.exit_code) from None
        raise
    _attach(rd, detach, context, once)


@app.command("resume")
def run_resume(
    run: RunArg,
    detach: DetachOpt = False,
    ray_pip: RayPipOpt = False,
    python: PythonOpt = None,
    context: ContextOpt = None,
) -> None:
    """Start a new run from the newest complete checkpoint of RUN (lineage kept in both)."""
    from taugrid.client import runs

    got = runs.resume(run, context=context, ray_pip=ray_pip, python=python, say=say)
    _attach(got.run_dir, detach, context)


@app.command("verify")
def run_verify(run: RunArg, context: ContextOpt = None) -> None:
    """Check a run's sealed evidence record against its MANIFEST.sha256."""
    from taugrid.client import runs

    v = runs.verify(run, context=context, say=say)
    if v.note:
        say(f"note: not checked: {v.note}")
    if v.problems:
        sys.stderr.write(
            f"{v.run_id}: evidence record does NOT verify ({len(v.problems)} problem(s)):\n"
        )
        for p in v.problems:
            sys.stderr.write(f"  {p}\n")
        raise typer.Exit(EXIT_RUN_FAILED)
    out(f"ok: {v.run_id}: {v.files} files match MANIFEST.sha256 ({v.where})")


@app.command("metrics")
def run_metrics(
    run: RunArg,
    metric: Annotated[
        list[str] | None, typer.Option("--metric", "-m", help="Metric(s) to plot")
    ] = None,
    png: Annotated[str | None, typer.Option("--png", help="Write the plot to a PNG file")] = None,
    context: ContextOpt = None,
    output: JsonOpt = ReportFormat.text,
) -> None:
    """Plot a run's metrics in the terminal (or to a PNG)."""
    from pathlib import Path

    from taugrid.cli import plots
    from taugrid.client import runs

    rows = runs.metrics(
        run, context=context, say=say
    )  # a resumed run continues its parents' curves
    if output is ReportFormat.json:
        out(dump_json(rows))
        return
    rec = runs.record(run, context=context)
    if not rows:
        raise TauError(f"{rec.run_id} has no metrics yet", exit_code=EXIT_RUN_FAILED)
    names = plots.pick_metrics(rows, metric, rec.primary_metric)
    ids = list(dict.fromkeys(r["run_id"] for r in rows))
    title = (
        rec.run_id if len(ids) == 1 else f"{rec.run_id} (resumed from {' <- '.join(ids[-2::-1])})"
    )
    if png is not None:
        plots.to_png(rows, names, Path(png), title=title)
        out(f"wrote {png}")
    else:
        out(plots.to_text(rows, names, title=title))


@app.command("pull")
def run_pull(
    run: RunArg,
    outputs: Annotated[bool, typer.Option("--outputs", help="Its output files")] = False,
    checkpoints: Annotated[bool, typer.Option("--checkpoints", help="Its checkpoints")] = False,
    metrics: Annotated[bool, typer.Option("--metrics", help="Its metrics.jsonl")] = False,
    logs: Annotated[bool, typer.Option("--logs", help="Its logs")] = False,
    to: Annotated[
        str | None, typer.Option("--to", help="The folder to write into (default: ./RUN-ID)")
    ] = None,
    force: Annotated[
        bool, typer.Option("--force", help="Replace files here that differ from the run's")
    ] = False,
    context: ContextOpt = None,
    output: JsonOpt = ReportFormat.text,
) -> None:
    """Copy a run's record (or only the kinds named) from where it ran: a cluster run's from its
    workspace volume, from any machine, after its pods are gone. Every file is checked against
    the sealed MANIFEST.sha256; a pull cut off resumes; exit 1 if a file does not match."""
    from taugrid.cli.output import progress_bar
    from taugrid.client import runs

    kinds = [
        k
        for k, on in (
            ("outputs", outputs),
            ("checkpoints", checkpoints),
            ("metrics", metrics),
            ("logs", logs),
        )
        if on
    ]
    sizes: dict[str, int] = {"done": 0, "total": 0}
    with progress_bar(f"pulling {run}", output is ReportFormat.text) as bar:

        def total(_files: int, nbytes: int) -> None:
            sizes["total"] = nbytes

        def progress(n: int, _path: str) -> None:
            sizes["done"] += n
            if bar is not None:
                bar(sizes["done"], sizes["total"])

        got = runs.pull(
            run, to=to, kinds=kinds, force=force, context=context, progress=progress, total=total
        )
    if output is ReportFormat.json:
        out(dump_json({**dataclasses.asdict(got), "ok": got.ok}))
    else:
        _say_pulled(got)
    if not got.ok:
        raise typer.Exit(EXIT_RUN_FAILED)


def _say_pulled(got: Any) -> None:
    """A pull in words: what came, from where, how it was checked, and each file kept, missing
    or refused."""
    from taugrid.cli.output import human_size

    check = (
        f"{got.verified} verified against MANIFEST.sha256"
        if got.sealed
        else "not verified: the run has not sealed its record yet (it still runs, or it was "
        "stopped before it could); complete checkpoints are final, the rest may grow"
    )
    out(
        f"{got.run_id}: {got.files} file(s), {human_size(got.bytes)} from {got.source} in "
        f"{got.to} ({got.fetched} "
        f"fetched{f', {got.resumed} of them resumed' if got.resumed else ''}, "
        f"{got.kept} already here); {check}"
    )
    for path in got.edited:
        say(f"kept your copy of {path}: it differs from the run's (--force replaces it)")
    for path in got.missing:
        say(f"missing on the volume: {path} (MANIFEST.sha256 lists it)")
    for path in got.bad:
        say(f"not kept: {path}")


@app.command("gc")
def run_gc(output: JsonOpt = ReportFormat.text) -> None:
    """Destroy the Pulumi stacks of runs that ended (--target pulumi), and every expired run
    stack; their evidence stays."""
    from taugrid.client import runs

    gone = runs.gc(say)
    out(
        dump_json({"destroyed": gone})
        if output is ReportFormat.json
        else f"destroyed {len(gone)} run stack(s){': ' + ', '.join(gone) if gone else ''}"
    )


@app.command("schema")
def run_schema() -> None:
    """Print the JSON Schema of tau.yaml (for editors: yaml-language-server)."""
    from taugrid.api.manifest import Manifest

    out(dump_json(Manifest.model_json_schema()))
