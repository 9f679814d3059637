"""The `tau` command line: Typer wiring and output only. Each command group is its own module;
the work is done by `taugrid.runs` (and `taugrid.infra` for platform commands), imported inside
the commands, so `tau --help` stays fast.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import typer
from typer.core import TyperGroup
from typer.models import TyperInfo

from taugrid.api.errors import EXIT_INTERRUPTED, TauError
from taugrid.cli import (
    cluster,
    controller,
    data,
    local,
    platform,
    portal,
    quota,
    run,
    sandbox,
    serve,
    usage,
)
from taugrid.cli.lazy import LazyGroup, guard_values, lazy_group
from taugrid.cli.options import RenderFormat, RenderOutOpt
from taugrid.cli.output import object_list, out

# The root help, by audience (a command in no section is listed under "Other").
AUDIENCES: dict[str, list[str]] = {
    "Researchers": [
        "run",
        "logs",
        "data",
        "serve",
        "workspaces",
        "profiles",
        "quota",
        "usage",
        "local",
        "portal",
    ],
    "Platform admins": ["platform", "cluster", "controller", "crds"],
    "Development": ["sandbox", "version"],
}


# The command groups, built into click commands only when one is invoked (or listed in
# help), and then only the command asked for (cli/lazy.py): building all ~60 commands' options
# from their signatures cost every command ~0.1 s.
GROUPS: dict[str, typer.Typer] = {
    "run": run.app,
    "data": data.app,
    "local": local.app,
    "platform": platform.app,
    "sandbox": sandbox.app,
    "quota": quota.app,
    "controller": controller.app,
    "serve": serve.app,
    "cluster": cluster.app,
}


def _short_help(text: str | None, limit: int) -> str:
    first = " ".join((text or "").strip().split("\n\n")[0].split())
    first = first.split(". ")[0].rstrip(".")
    return first if len(first) <= limit else first[: max(limit - 3, 0)].rstrip() + "..."


class _RootGroup(TyperGroup):
    """Commands grouped by who uses them, in a fixed order; the groups are built lazily."""

    def list_commands(self, ctx: Any) -> list[str]:
        names = {*self.commands, *GROUPS}
        order = [c for cmds in AUDIENCES.values() for c in cmds]
        return [c for c in order if c in names] + sorted(c for c in names if c not in order)

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        if cmd_name not in self.commands and cmd_name in GROUPS:
            # under a root with the app's settings (help format), as add_typer has it; the
            # group's own commands are built when asked for (cli/lazy.py)
            self.commands[cmd_name] = lazy_group(
                TyperInfo(GROUPS[cmd_name], name=cmd_name), SETTINGS
            )
        cmd = self.commands.get(cmd_name)
        return guard_values(cmd) if cmd is not None and not isinstance(cmd, LazyGroup) else cmd

    def format_commands(self, ctx: Any, formatter: Any) -> None:
        listed: set[str] = set()
        limit = formatter.width - 20
        for title, names in [*AUDIENCES.items(), ("Other", self.list_commands(ctx))]:
            rows = []
            for name in names:
                if name in listed:
                    continue
                if name in GROUPS and name not in self.commands:
                    rows.append((name, _short_help(GROUPS[name].info.help, limit)))
                elif (cmd := self.commands.get(name)) is not None and not cmd.hidden:
                    rows.append((name, cmd.get_short_help_str(limit=limit)))
                else:
                    continue
                listed.add(name)
            if rows:
                with formatter.section(title):
                    formatter.write_dl(rows)


SETTINGS: dict[str, Any] = {
    "add_completion": False,
    "pretty_exceptions_enable": False,
    "rich_markup_mode": None,  # plain help: Rich's formatter alone costs ~0.4 s of start-up
    "context_settings": {"help_option_names": ["-h", "--help"]},
}
app = typer.Typer(
    cls=_RootGroup,
    name="tau",
    help="TauGrid: run training on your team's GPU clusters (or locally) from one tau.yaml.",
    no_args_is_help=True,
    **SETTINGS,
)
app.command("profiles")(cluster.profiles)
app.command("portal")(portal.portal)
app.command("workspaces")(cluster.workspaces)
app.command("usage")(usage.usage)
app.command("logs", help="Print a run's log (-f: follow it); the same as `tau run logs`.")(
    run.run_logs
)


@app.command("crds")
def crds(output: RenderOutOpt = RenderFormat.yaml) -> None:
    """Print TauGrid's CustomResourceDefinitions (TauCluster, TauWorkspace, TauQuotaRequest,
    TauRun)."""
    from taugrid.api.crds import render_crds

    out(object_list(render_crds(), output is RenderFormat.json))


@app.command("version")
def version(
    short: bool = typer.Option(False, "--short", help="The version alone (for scripts)"),
) -> None:
    """Print the tau version."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as dist_version

    try:
        got = dist_version("taugrid")
    except PackageNotFoundError:
        got = None
    if short:
        if got is None:
            raise TauError("tau is not installed as a package (an uninstalled checkout)")
        out(got)
    else:
        out(f"tau {got}" if got else "tau (not installed)")


# `-w` was --workspace before it became --watch (kubectl's meaning): where a command has no
# --watch, `-w X` still means --workspace for one release, with a note.
_NO_WATCH = {
    ("run", "submit"),
    ("run", "validate"),
    ("run", "render"),
    ("run", "list"),
    ("quota", "request"),
    ("quota", "list"),
    ("quota", "approve"),
    ("quota", "deny"),
}


def deprecated_spellings(argv: list[str]) -> list[str]:
    """Old spellings rewritten to today's (each with a note on stderr)."""
    if "-w" not in argv or len(argv) < 2:
        return argv
    words = [a for a in argv if not a.startswith("-")]
    group = tuple(words[:2])
    subcommands = {c.name for c in run.app.registered_commands}
    if words[:1] == ["run"] and (len(words) < 2 or words[1] not in subcommands):
        group = ("run", "submit")  # `tau run FILE ...`
    if group not in _NO_WATCH:
        return argv
    sys.stderr.write(
        "note: -w for --workspace is deprecated (-w is --watch now): write --workspace\n"
    )
    return ["--workspace" if a == "-w" else a for a in argv]


class _NoPydanticPlugins:
    """tau's own process loads no pydantic plugins: pydantic looks for them through
    importlib.metadata (every installed package's entry points: ~15 ms of a 200 ms command)
    when it builds the first validator. Its loader module, when pydantic imports it, is given
    here as one that finds none (the effect of PYDANTIC_DISABLE_PLUGINS=__all__, which would
    also reach every run tau starts). Library use of taugrid (a notebook) keeps its plugins."""

    NAME = "pydantic.plugin._loader"

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if name != self.NAME:
            return None
        from importlib.machinery import ModuleSpec

        return ModuleSpec(name, self)  # type: ignore[arg-type]  # a Loader by protocol

    def create_module(self, spec: Any) -> None:
        return None  # the default module

    def exec_module(self, module: Any) -> None:
        module.get_plugins = tuple  # get_plugins() -> (): no plugins

    @classmethod
    def install(cls) -> None:
        if cls.NAME not in sys.modules and not any(isinstance(f, cls) for f in sys.meta_path):
            sys.meta_path.insert(0, cls())


def main(argv: list[str] | None = None) -> int:
    """Entry point: every TauError becomes one message on stderr and its exit code."""
    _NoPydanticPlugins.install()
    args: Any = deprecated_spellings(list(sys.argv[1:] if argv is None else argv))
    try:
        app(args=args, prog_name="tau")
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
            f"internal error: {type(e).__name__}: {e}\n  (set TAU_DEBUG=1 for a traceback; please "
            "report it)\n"
        )
        return 1
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
