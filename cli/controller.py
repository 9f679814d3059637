"""`tau controller run`: the TauGrid controller out of cluster (for a sandbox, or to try it)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from taugrid.cli.options import ContextOpt
from taugrid.cli.output import say

app = typer.Typer(
    no_args_is_help=True, help="The TauGrid controller (quota grants, run status, GPU remediation)."
)


@app.command("run")
def run(
    context: ContextOpt = None,
    config: Annotated[
        Path | None, typer.Option("--config", help="Controller settings (YAML)")
    ] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Remediation decides, changes no node")
    ] = False,
    standalone: Annotated[
        bool, typer.Option("--standalone", help="No peering (one replica)")
    ] = False,
) -> None:
    """Run the controller against a cluster until interrupted (Ctrl-C)."""
    import logging

    from taugrid.controller import config as cfgmod
    from taugrid.controller.operator import run as run_controller

    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    cfg = cfgmod.load(config)
    if dry_run:
        cfg.remediation = cfg.remediation.model_copy(update={"dry_run": True})
    say("controller starting (Ctrl-C stops it)")
    run_controller(cfg, context=context, standalone=standalone)
