"""The `tau` command line. Imports stay lazy: `tau --help` must start in well under 0.3 s."""

from __future__ import annotations

import os
import sys
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer
from typer.core import TyperGroup

from taugrid.cli.errors import EXIT_INTERRUPTED, EXIT_RUN_FAILED, TauError


class _RunGroup(TyperGroup):
    """`tau run FILE ...` is shorthand for `tau run submit FILE ...`."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        if args and args[0] not in self.commands and args[0] not in ("--help", "-h"):
            args = ["submit", *args]
        return super().parse_args(ctx, args)


app = typer.Typer(
    name="tau",
    help="TauGrid: run training on your team's GPU clusters (or locally) from one tau.yaml.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,  # plain help: Rich's formatter alone costs ~0.4 s of start-up
    context_settings={"help_option_names": ["-h", "--help"]},
)
run_app = typer.Typer(
    cls=_RunGroup,
    rich_markup_mode=None,
    help="Validate, render and submit runs. `tau run FILE` submits; `tau run FILE --dry-run` renders.",
    no_args_is_help=True,
)
app.add_typer(run_app, name="run")


class RenderFormat(StrEnum):
    yaml = "yaml"
    json = "json"


class ReportFormat(StrEnum):
    text = "text"
    json = "json"


FileArg = Annotated[
    str | None,
    typer.Argument(
        help="tau.yaml, or a folder holding one (default: the current folder)", show_default=False
    ),
]
ProfilesOpt = Annotated[
    Path | None,
    typer.Option(
        "--profiles", "-p", help="Profile snapshot file (kind: TauWorkloadProfileSnapshot)"
    ),
]
WorkspaceOpt = Annotated[
    str | None, typer.Option("--workspace", "-w", help="Workspace (overrides policy.workspace)")
]
RenderOutOpt = Annotated[RenderFormat, typer.Option("--output", "-o", help="yaml or json")]
RunIdOpt = Annotated[
    str | None, typer.Option("--run-id", help="Use this run id (default: a new one)")
]
RayPipOpt = Annotated[
    bool, typer.Option("--ray-pip", help="Let Ray install runtime.pip (local rayjob)")
]
ProfileOpt = Annotated[
    str | None, typer.Option("--profile", help="Workload profile (overrides policy.profile)")
]


def _out(text: str) -> None:
    sys.stdout.write(text if text.endswith("\n") else text + "\n")


def _dump_json(obj: Any) -> str:
    import json

    return json.dumps(obj, indent=2, sort_keys=False)


def _dump_yaml_docs(objs: list[dict[str, Any]]) -> str:
    from taugrid.cli.yamlio import dump_all

    return dump_all(objs)


def _render_objects(
    file: str | None,
    profiles: Path | None,
    workspace: str | None,
    profile: str | None,
    run_id: str | None,
) -> list[dict[str, Any]]:
    from taugrid.api import naming
    from taugrid.cli import codebundle, load, render, resolve

    loaded = load.load_manifest(file)
    if profiles is None:
        raise TauError(
            "rendering for a cluster needs the cluster's workload profiles",
            hint="pass --profiles FILE (a TauWorkloadProfileSnapshot, e.g. examples/profiles.yaml)",
        )
    snap = load.load_snapshot(profiles)
    resolved = resolve.resolve(loaded.manifest, snap, workspace=workspace, profile=profile)
    bundle = codebundle.collect(loaded.folder)
    rid = run_id or naming.new_run_id(loaded.manifest.run_id_stem)
    if run_id is not None:
        from taugrid.api.manifest import DNS_1035

        if not DNS_1035.match(run_id) or len(run_id) > 47:
            raise TauError(f"--run-id {run_id!r} must be a DNS-1035 label of at most 47 characters")
    meta = render.RunMeta(
        run_id=rid, submitter=_submitter(), code_revision=_code_revision(loaded.folder)
    )
    return render.render(resolved, meta, bundle)


def _submitter() -> str:
    import getpass
    import socket

    try:
        return f"{getpass.getuser()}@{socket.gethostname()}"
    except Exception:  # getpass can fail in containers without a passwd entry
        return "unknown"


def _code_revision(folder: Path) -> str:
    """The git commit of the code folder (with `-dirty` if modified), without running git."""
    for d in (folder, *folder.resolve().parents):
        head = d / ".git" / "HEAD"
        if head.is_file():
            ref = head.read_text().strip()
            if ref.startswith("ref: "):
                target = d / ".git" / ref[5:]
                if target.is_file():
                    return target.read_text().strip()[:12]
                packed = d / ".git" / "packed-refs"
                if packed.is_file():
                    for line in packed.read_text().splitlines():
                        if line.endswith(" " + ref[5:]):
                            return line.split()[0][:12]
                return "unknown"
            return ref[:12]
    return "unknown"


@run_app.command("validate")
def run_validate(
    file: FileArg = None,
    profiles: ProfilesOpt = None,
    workspace: WorkspaceOpt = None,
    profile: ProfileOpt = None,
    output: Annotated[ReportFormat, typer.Option("--output", "-o")] = ReportFormat.text,
) -> None:
    """Check a tau.yaml (and, with --profiles, that the cluster can place it)."""
    from taugrid.cli import load

    try:
        loaded = load.load_manifest(file)
        m = loaded.manifest
        placed = None
        if profiles is not None:
            from taugrid.cli import resolve

            placed = resolve.resolve(
                m, load.load_snapshot(profiles), workspace=workspace, profile=profile
            )
    except TauError as e:
        if output is ReportFormat.json:
            _out(_dump_json({"valid": False, "file": file, "errors": _error_items(e)}))
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
        _out(_dump_json(summary))
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
    _out(line)


def _error_items(e: TauError) -> list[dict[str, Any]]:
    from taugrid.cli.errors import ConfigError

    if isinstance(e, ConfigError):
        return [
            {"path": i.path, "value": i.value, "message": i.message, "example": i.example}
            for i in e.issues
        ]
    return [{"path": "", "value": None, "message": e.message, "example": e.hint}]


@run_app.command("render")
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
    if output is RenderFormat.json:
        _out(_dump_json({"apiVersion": "v1", "kind": "List", "items": objs}))
    else:
        _out(_dump_yaml_docs(objs))


class Target(StrEnum):
    local = "local"
    kube = "kube"
    pulumi = "pulumi"


def _pick_target(target: Target | None) -> Target:
    if target is not None:
        return target
    env = os.environ.get("TAU_TARGET")
    if env:
        try:
            return Target(env)
        except ValueError:
            raise TauError(f"TAU_TARGET={env!r} is not one of: local, kube, pulumi") from None
    sys.stderr.write("no cluster is configured (TAU_TARGET / --target): running locally\n")
    return Target.local


def _say(message: str) -> None:
    sys.stderr.write(message + "\n")


def _follow_up(run_id: str) -> str:
    return (
        f"  tau run status {run_id}\n  tau run logs -f {run_id}\n  tau run cancel {run_id}\n"
        f"  evidence: {_run_dir_hint(run_id)}"
    )


def _run_dir_hint(run_id: str) -> str:
    from taugrid.cli.paths import runs_root

    return str(runs_root() / run_id)


def _attach(rd: Any, detach: bool) -> None:
    """Follow a local run to its end; Ctrl-C detaches (the run goes on)."""
    from taugrid.cli.follow import follow

    sys.stderr.write(f"run {rd.run_id}\n")
    if detach:
        _out(rd.run_id)
        return
    try:
        phase = follow(rd)
    except KeyboardInterrupt:
        sys.stderr.write(f"\ndetached; the run goes on. Follow up with:\n{_follow_up(rd.run_id)}\n")
        raise typer.Exit(EXIT_INTERRUPTED) from None
    rec = rd.read_record()
    sys.stderr.write(f"{phase.lower()}: {rec.reason or ''}\nevidence: {rd.path}\n")
    raise typer.Exit(0 if phase == "Succeeded" else EXIT_RUN_FAILED)


@run_app.command("submit")
def run_submit(
    file: FileArg = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Render instead of submitting")
    ] = False,
    target: Annotated[
        Target | None, typer.Option("--target", "-t", help="Where to run (default: local)")
    ] = None,
    detach: Annotated[
        bool, typer.Option("--detach", "-d", help="Return at once with the run id")
    ] = False,
    strict: Annotated[
        bool, typer.Option("--strict", help="Fail instead of running GPU work on CPU")
    ] = False,
    ray_pip: RayPipOpt = False,
    profiles: ProfilesOpt = None,
    workspace: WorkspaceOpt = None,
    profile: ProfileOpt = None,
    run_id: RunIdOpt = None,
    output: RenderOutOpt = RenderFormat.yaml,
) -> None:
    """Submit a run and follow it (with --dry-run: render it)."""
    if dry_run:
        run_render(file, profiles, workspace, profile, run_id, output)
        return
    where = _pick_target(target)
    if where is not Target.local:
        raise TauError(
            f"the {where.value} backend is not part of this build yet",
            hint="run locally (--target local), or render with --dry-run --profiles SNAPSHOT",
        )
    from taugrid.cli import prelaunch

    # A warm local head gets the job now: Ray starts its job supervisor while tau validates.
    early = None if ray_pip else prelaunch.claim(file)
    try:
        from taugrid.cli import load, local

        loaded = load.load_manifest(file)
        rd = local.submit(
            loaded,
            say=_say,
            strict=strict,
            ray_pip=ray_pip,
            submitter=_submitter(),
            code_revision=_code_revision(loaded.folder),
            early=early,
        )
    except BaseException:
        if early is not None:
            early.abort()
        raise
    _attach(rd, detach)


RunArg = Annotated[
    str, typer.Argument(help="Run id, a unique prefix of one, or a run name (newest)")
]
JsonOpt = Annotated[ReportFormat, typer.Option("--output", "-o", help="text or json")]

_STATE_STYLE = {"true": "green", "false": "red", "pending": "yellow", "unknown": "bright_black"}


def _print_status(st: Any) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    console.print(
        f"[bold]{st.run_id}[/]  {st.phase}  ({st.workload_kind} on {st.target}, attempt {st.attempt})"
    )
    console.print(f"  {st.summary}")
    table = Table(show_edge=False, box=None, pad_edge=False)
    for col in ("signal", "state", "since", "reason", "evidence"):
        table.add_column(col)
    for sig in st.signals:
        style = _STATE_STYLE.get(sig.state, "")
        table.add_row(
            sig.name, f"[{style}]{sig.state}[/]", (sig.since or "")[:19], sig.reason, sig.evidence
        )
    console.print(table)


@run_app.command("status")
def run_status(
    run: RunArg,
    watch: Annotated[
        bool, typer.Option("--watch", "-w", help="Keep watching until the run ends")
    ] = False,
    output: JsonOpt = ReportFormat.text,
) -> None:
    """Where is the run, and if it is stuck, why: six signals with their evidence."""
    import time

    from taugrid.api.evidence import TERMINAL
    from taugrid.cli import local, status
    from taugrid.cli.evidence import find_run

    rd = find_run(run)
    last = None
    while True:
        st = status.compute(local.snapshot(rd))
        doc = st.model_dump(mode="json")
        if output is ReportFormat.json:
            if watch:
                if doc != last:
                    _out(__import__("json").dumps(doc))
            else:
                _out(_dump_json(doc))
        elif doc != last:
            _print_status(st)
        last = doc
        if not watch or st.phase in TERMINAL:
            break
        try:
            time.sleep(1.0)
        except KeyboardInterrupt:
            raise typer.Exit(EXIT_INTERRUPTED) from None
    code = (
        0
        if st.phase in ("Succeeded", "Running", "Starting", "Pending", "Retrying")
        else EXIT_RUN_FAILED
    )
    raise typer.Exit(code)


@run_app.command("logs")
def run_logs(
    run: RunArg,
    follow_: Annotated[
        bool, typer.Option("--follow", "-f", help="Keep printing until the run ends")
    ] = False,
) -> None:
    """Print a run's log (live while it runs, from the evidence record after)."""
    from taugrid.cli.evidence import find_run
    from taugrid.cli.follow import follow

    rd = find_run(run)
    if follow_:
        try:
            follow(rd, transitions=False)
        except KeyboardInterrupt:
            raise typer.Exit(EXIT_INTERRUPTED) from None
        return
    if not rd.driver_log.exists():
        sys.stderr.write(f"no log yet for {rd.run_id}\n")
        return
    with rd.driver_log.open("rb") as f:
        while chunk := f.read(1 << 16):
            sys.stdout.write(chunk.decode("utf-8", "replace"))


@run_app.command("list")
def run_list(output: JsonOpt = ReportFormat.text) -> None:
    """List local runs, newest last."""
    from taugrid.cli import local, status
    from taugrid.cli.evidence import list_runs

    rows: list[dict[str, Any]] = []
    for rd in list_runs():
        try:
            snap = local.snapshot(rd)
        except TauError:
            continue
        phase, _ = status.effective_phase(snap)
        rec = snap.record
        rows.append(
            {"run_id": rec.run_id, "name": rec.name, "kind": rec.workload_kind, "target": rec.target,
             "phase": phase, "attempt": rec.attempt, "created_at": rec.created_at,
             "finished_at": rec.finished_at, "last_step": snap.last_step}
        )  # fmt: skip
    if output is ReportFormat.json:
        _out(_dump_json(rows))
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(box=None, show_edge=False)
    for col in ("RUN", "KIND", "PHASE", "STEP", "CREATED"):
        table.add_column(col)
    for r in rows:
        step = "" if r["last_step"] is None else str(r["last_step"])
        table.add_row(r["run_id"], r["kind"], r["phase"], step, r["created_at"][:19])
    Console().print(table if rows else "no runs yet (tau run FILE starts one)")


@run_app.command("cancel")
def run_cancel(run: RunArg) -> None:
    """Stop a run; its evidence is sealed as Cancelled."""
    from taugrid.cli import local
    from taugrid.cli.evidence import find_run

    rd = find_run(run)
    before = rd.read_record().phase
    phase = local.cancel(rd)
    if before in ("Succeeded", "Failed", "Cancelled"):
        _out(f"{rd.run_id} had already ended: {phase}")
    else:
        _out(f"{rd.run_id} cancelled")


@run_app.command("resume")
def run_resume(
    run: RunArg,
    detach: Annotated[
        bool, typer.Option("--detach", "-d", help="Return at once with the new run id")
    ] = False,
    ray_pip: RayPipOpt = False,
) -> None:
    """Start a new run from the newest complete checkpoint of RUN (lineage kept in both)."""
    from taugrid.cli import load, local
    from taugrid.cli.evidence import find_run

    parent = find_run(run)
    rec = parent.read_record()
    if rec.phase not in ("Succeeded", "Failed", "Cancelled"):
        raise TauError(
            f"{parent.run_id} is still {rec.phase.lower()}",
            hint=f"tau run cancel {parent.run_id} first",
        )
    ckpt = local.newest_checkpoint(parent)
    if ckpt is None:
        raise TauError(
            f"{parent.run_id} has no complete checkpoint to resume from", exit_code=EXIT_RUN_FAILED
        )
    folder = Path(rec.code_folder)
    loaded = load.load_manifest(folder / "tau.yaml" if (folder / "tau.yaml").is_file() else folder)
    if loaded.manifest.config_hash() != rec.config_hash:
        sys.stderr.write("note: tau.yaml changed since the original run; the current one is used\n")
    sys.stderr.write(f"resuming {parent.run_id} from {ckpt}\n")
    rd = local.submit(
        loaded,
        say=_say,
        ray_pip=ray_pip,
        resume_from=ckpt,
        parent=parent.run_id,
        submitter=_submitter(),
        code_revision=_code_revision(loaded.folder),
    )
    local.record_child(parent, rd.run_id, ckpt)
    _attach(rd, detach)


@run_app.command("verify")
def run_verify(run: RunArg) -> None:
    """Check a run's sealed evidence record against its MANIFEST.sha256."""
    from taugrid.cli.evidence import find_run

    rd = find_run(run)
    n, problems = rd.verify()
    if problems:
        sys.stderr.write(
            f"{rd.run_id}: evidence record does NOT verify ({len(problems)} problem(s)):\n"
        )
        for p in problems:
            sys.stderr.write(f"  {p}\n")
        raise typer.Exit(EXIT_RUN_FAILED)
    _out(f"ok: {rd.run_id}: {n} files match {rd.manifest_path.name}")


@run_app.command("metrics")
def run_metrics(
    run: RunArg,
    metric: Annotated[
        list[str] | None, typer.Option("--metric", "-m", help="Metric(s) to plot")
    ] = None,
    png: Annotated[Path | None, typer.Option("--png", help="Write the plot to a PNG file")] = None,
    output: JsonOpt = ReportFormat.text,
) -> None:
    """Plot a run's metrics in the terminal (or to a PNG)."""
    from taugrid.cli import plots
    from taugrid.cli.evidence import find_run

    rd = find_run(run)
    rows = rd.metric_rows()
    if output is ReportFormat.json:
        _out(_dump_json(rows))
        return
    if not rows:
        raise TauError(
            f"{rd.run_id} has no metrics yet ({rd.metrics_path})", exit_code=EXIT_RUN_FAILED
        )
    names = plots.pick_metrics(rows, metric, rd.read_record().primary_metric)
    if png is not None:
        plots.to_png(rows, names, png, title=rd.run_id)
        _out(f"wrote {png}")
    else:
        _out(plots.to_text(rows, names, title=rd.run_id))


local_app = typer.Typer(help="The local Ray head that `tau run --target local` uses.", no_args_is_help=True,
                        rich_markup_mode=None)  # fmt: skip
app.add_typer(local_app, name="local")


@local_app.command("status")
def local_status(output: JsonOpt = ReportFormat.text) -> None:
    """Is the local Ray head running, and where."""
    import time

    from taugrid.cli import prelaunch, raylocal

    head = raylocal.read_head()
    up = bool(head and raylocal.healthy(head))
    doc: dict[str, Any] = {"running": up}
    if head and up:
        doc.update(pid=head.pid, address=head.address, dashboard=head.dashboard, cpus=head.num_cpus,
                   gpus=head.num_gpus, uptime_s=round(time.time() - head.started_at),
                   standby_ready=prelaunch.standby_count(head))  # fmt: skip
    if output is ReportFormat.json:
        _out(_dump_json(doc))
    elif up:
        assert head is not None
        _out(
            f"running: pid {head.pid}, {head.address}, dashboard {head.dashboard}, up {doc['uptime_s']}s"
            f"\nstandby jobs ready for the next run: {doc['standby_ready']}"
        )
    else:
        _out("not running (the next local rayjob starts it)")


@local_app.command("stop")
def local_stop() -> None:
    """Stop the local Ray head (runs on it are stopped too)."""
    from taugrid.cli import raylocal

    head = raylocal.stop_head()
    _out(
        f"stopped the local Ray head (pid {head.pid})"
        if head
        else "the local Ray head was not running"
    )


@run_app.command("schema")
def run_schema() -> None:
    """Print the JSON Schema of tau.yaml (for editors: yaml-language-server)."""
    from taugrid.api.manifest import Manifest

    _out(_dump_json(Manifest.model_json_schema()))


platform_app = typer.Typer(
    help="Platform engineers: inspect stacks offline (no credentials, no Pulumi CLI).",
    no_args_is_help=True,
    rich_markup_mode=None,
)
app.add_typer(platform_app, name="platform")
StackOpt = Annotated[
    str, typer.Option("--stack", "-s", help="Stack name: stacks/Pulumi.<stack>.yaml")
]
StacksDirOpt = Annotated[
    Path | None, typer.Option("--stacks-dir", help="Folder of the stack files")
]


def _evaluate(stack: str, stacks_dir: Path | None) -> Any:
    try:
        from taugrid.infra import plan
    except ImportError as e:
        raise TauError(f"the platform commands need Pulumi ({e.name} is missing)", exit_code=4,
                       hint="pip install 'taugrid[platform]'") from None  # fmt: skip
    kwargs = {"stacks_dir": stacks_dir} if stacks_dir else {}
    cfg = plan.validated(stack, **kwargs)
    return plan, plan.evaluate(stack, cfg)


@platform_app.command("plan")
def platform_plan(
    stack: StackOpt, stacks_dir: StacksDirOpt = None, output: JsonOpt = ReportFormat.text
) -> None:
    """Every resource the stack would declare, with its key inputs (evaluated offline)."""
    plan, inv = _evaluate(stack, stacks_dir)
    if output is ReportFormat.json:
        doc = {"stack": stack, "offline": True,
               "resources": [{"type": r.type, "name": r.name, "inputs": r.inputs} for r in inv.resources],
               "exports": {k: v for k, v in inv.exports.items() if k != "kubeconfig"}}  # fmt: skip
        _out(_dump_json(doc))
        return
    lines = [f"stack {stack}: {len(inv.resources)} resources "
             "(offline plan: cloud-assigned values such as ids and the kubeconfig are unknown)"]  # fmt: skip
    width = max(len(r.type) for r in inv.resources)
    nwidth = max(len(r.name) for r in inv.resources)
    for r in inv.resources:
        lines.append(f"{r.type:<{width}}  {r.name:<{nwidth}}  {plan.summary(r)}".rstrip())
    lines.append(f"profiles: {', '.join(inv.exports.get('profiles', []))}")
    _out("\n".join(lines))


@platform_app.command("diff")
def platform_diff(
    source: Annotated[
        str, typer.Argument(help="Stack whose declaration is promoted (e.g. staging)")
    ],
    target: Annotated[str, typer.Argument(help="Stack it is promoted onto (e.g. prod)")],
    stacks_dir: StacksDirOpt = None,
    output: JsonOpt = ReportFormat.text,
) -> None:
    """What promoting SOURCE's declaration onto TARGET would change (offline)."""
    plan, a = _evaluate(source, stacks_dir)
    _, b = _evaluate(target, stacks_dir)
    d = plan.diff(a, b)
    if output is ReportFormat.json:
        _out(_dump_json(d))
        return
    lines = [f"promotion {source} -> {target} (offline; cloud-assigned values unknown)"]
    for key in d[f"only_in_{source}"]:
        lines.append(f"  + {key}")
    for key in d[f"only_in_{target}"]:
        lines.append(f"  - {key}")
    for c in d["changed"]:
        lines.append(f"  ~ {c['resource']}")
        for f in c["changes"][:20]:
            lines.append(f"      {f['field']}: {f[target]!r} -> {f[source]!r}")
        if len(c["changes"]) > 20:
            lines.append(f"      ... {len(c['changes']) - 20} more")
    if len(lines) == 1:
        lines.append("  no differences")
    _out("\n".join(lines))


@platform_app.command("snapshot")
def platform_snapshot(stack: StackOpt, stacks_dir: StacksDirOpt = None) -> None:
    """The stack's workload profiles as a snapshot file for `tau run render --profiles`."""
    try:
        from taugrid.components.manifests import profile_snapshot
        from taugrid.infra import plan
    except ImportError as e:
        raise TauError(
            f"the platform commands need Pulumi ({e.name} is missing)", exit_code=4
        ) from None
    kwargs = {"stacks_dir": stacks_dir} if stacks_dir else {}
    cfg = plan.validated(stack, **kwargs)
    from taugrid.cli.yamlio import dump

    _out(dump(profile_snapshot(cfg, stack)))


@app.command("crds")
def crds(
    output: RenderOutOpt = RenderFormat.yaml,
) -> None:
    """Print TauGrid's CustomResourceDefinitions (TauCluster, TauWorkspace, TauQuotaRequest, TauRun)."""
    from taugrid.api.crds import render_crds

    objs = render_crds()
    if output is RenderFormat.json:
        _out(_dump_json({"apiVersion": "v1", "kind": "List", "items": objs}))
    else:
        _out(_dump_yaml_docs(objs))


@app.command("version")
def version() -> None:
    """Print the tau version."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as dist_version

    try:
        _out(f"tau {dist_version('taugrid')}")
    except PackageNotFoundError:
        _out("tau (not installed)")


def main(argv: list[str] | None = None) -> int:
    """Entry point: every TauError becomes one message on stderr and its exit code."""
    try:
        app(args=argv, prog_name="tau")
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except TauError as e:
        sys.stderr.write(f"error: {e.render()}\n")
        return e.exit_code
    except KeyboardInterrupt:
        sys.stderr.write("interrupted\n")
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        return 0
    except Exception as e:
        if os.environ.get("TAU_DEBUG"):
            raise
        sys.stderr.write(
            f"internal error: {type(e).__name__}: {e}\n  (set TAU_DEBUG=1 for a traceback; please report it)\n"
        )
        return 1
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
