"""The `tau` command line: Typer wiring and output only. Each command group is its own module;
the work is done by `taugrid.runs` (and `taugrid.infra` for platform commands), imported inside
the commands, so `tau --help` stays fast.
"""

from __future__ import annotations

import os
import sys

import typer

from taugrid.api.errors import EXIT_INTERRUPTED, TauError
from taugrid.cli import cluster, controller, local, platform, quota, run, sandbox
from taugrid.cli.options import RenderFormat, RenderOutOpt
from taugrid.cli.output import object_list, out

app = typer.Typer(
    name="tau",
    help="TauGrid: run training on your team's GPU clusters (or locally) from one tau.yaml.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,  # plain help: Rich's formatter alone costs ~0.4 s of start-up
    context_settings={"help_option_names": ["-h", "--help"]},
)
app.add_typer(run.app, name="run")
app.add_typer(local.app, name="local")
app.add_typer(platform.app, name="platform")
app.add_typer(sandbox.app, name="sandbox")
app.add_typer(quota.app, name="quota")
app.add_typer(controller.app, name="controller")
app.command("profiles")(cluster.profiles)
app.command("workspaces")(cluster.workspaces)


@app.command("crds")
def crds(output: RenderOutOpt = RenderFormat.yaml) -> None:
    """Print TauGrid's CustomResourceDefinitions (TauCluster, TauWorkspace, TauQuotaRequest, TauRun)."""
    from taugrid.api.crds import render_crds

    out(object_list(render_crds(), output is RenderFormat.json))


@app.command("version")
def version() -> None:
    """Print the tau version."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as dist_version

    try:
        out(f"tau {dist_version('taugrid')}")
    except PackageNotFoundError:
        out("tau (not installed)")


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
