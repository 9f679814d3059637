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
WorkspaceOpt = Annotated[
    str | None, typer.Option("--workspace", "-w", help="Workspace (overrides policy.workspace)")
]
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
