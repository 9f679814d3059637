"""The `tau` command line. Imports stay lazy: `tau --help` must start in well under 0.3 s."""

from __future__ import annotations

import os
import sys
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer
from taugrid.cli.errors import EXIT_INTERRUPTED, TauError
from typer.core import TyperGroup


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
    rid = run_id or render.new_run_id(loaded.manifest.run_id_stem)
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
    run_id: Annotated[
        str | None, typer.Option("--run-id", help="Use this run id (default: a new one)")
    ] = None,
    output: Annotated[RenderFormat, typer.Option("--output", "-o")] = RenderFormat.yaml,
) -> None:
    """Print the exact Kubernetes objects a run would submit (nothing is sent)."""
    objs = _render_objects(file, profiles, workspace, profile, run_id)
    if output is RenderFormat.json:
        _out(_dump_json({"apiVersion": "v1", "kind": "List", "items": objs}))
    else:
        _out(_dump_yaml_docs(objs))


@run_app.command("submit")
def run_submit(
    file: FileArg = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Render instead of submitting")
    ] = False,
    profiles: ProfilesOpt = None,
    workspace: WorkspaceOpt = None,
    profile: ProfileOpt = None,
    run_id: Annotated[
        str | None, typer.Option("--run-id", help="Use this run id (default: a new one)")
    ] = None,
    output: Annotated[RenderFormat, typer.Option("--output", "-o")] = RenderFormat.yaml,
) -> None:
    """Submit a run (with --dry-run: render it)."""
    if dry_run:
        run_render(file, profiles, workspace, profile, run_id, output)
        return
    raise TauError(
        "submission backends are not part of this build yet",
        hint="use `tau run FILE --dry-run --profiles SNAPSHOT` to see what would be submitted",
    )


@run_app.command("schema")
def run_schema() -> None:
    """Print the JSON Schema of tau.yaml (for editors: yaml-language-server)."""
    from taugrid.api.manifest import Manifest

    _out(_dump_json(Manifest.model_json_schema()))


@app.command("crds")
def crds(
    output: Annotated[RenderFormat, typer.Option("--output", "-o")] = RenderFormat.yaml,
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
