"""Options and arguments shared by several commands (one definition each), and output formats."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer


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
RunArg = Annotated[
    str, typer.Argument(help="Run id, a unique prefix of one, or a run name (newest)")
]
ProfilesOpt = Annotated[
    Path | None,
    typer.Option(
        "--profiles", "-p", help="Profile snapshot file (kind: TauWorkloadProfileSnapshot)"
    ),
]
# `-w` means --watch (as kubectl's); the workspace has no short name (`-w WORKSPACE` still works
# for one release where a command has no --watch: cli/app.py rewrites it, with a note).
WorkspaceOpt = Annotated[
    str | None, typer.Option("--workspace", help="Workspace (overrides policy.workspace)")
]
ContextOpt = Annotated[
    str | None,
    typer.Option(
        "--context", help="kubeconfig context (default: TAU_CONTEXT, else the current one)"
    ),
]
WatchOpt = Annotated[bool, typer.Option("--watch", "-w", help="Keep watching until it ends")]
ProfileOpt = Annotated[
    str | None, typer.Option("--profile", help="Workload profile (overrides policy.profile)")
]
RunIdOpt = Annotated[
    str | None, typer.Option("--run-id", help="Use this run id (default: a new one)")
]
RayPipOpt = Annotated[
    bool, typer.Option("--ray-pip", help="Let Ray install runtime.pip (local rayjob)")
]
PythonOpt = Annotated[
    str | None,
    typer.Option(
        "--python",
        help="Local runs: the Python that runs the entrypoint, e.g. .venv/bin/python "
        "(overrides runtime.python; default: tau's own)",
    ),
]
DetachOpt = Annotated[bool, typer.Option("--detach", "-d", help="Return at once with the run id")]
RenderOutOpt = Annotated[RenderFormat, typer.Option("--output", "-o", help="yaml or json")]
JsonOpt = Annotated[ReportFormat, typer.Option("--output", "-o", help="text or json")]
StackOpt = Annotated[
    str, typer.Option("--stack", "-s", help="Stack name: <stacks>/Pulumi.<stack>.yaml")
]
StacksDirOpt = Annotated[
    Path | None,
    typer.Option(
        "--stacks-dir", help="Folder of the stack files (default: from the project's Pulumi.yaml)"
    ),
]
TargetOpt = Annotated[
    str | None,
    typer.Option(
        "--target",
        "-t",
        help="Where to run: local, kube or pulumi (default: TAU_TARGET, else local)",
    ),
]
