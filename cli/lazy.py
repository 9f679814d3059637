"""Command groups built one command at a time.

Typer turns a group into click commands all at once: every command's options are read from its
signature (`typing.get_type_hints`, a compile of each string annotation), ~4 ms a command on a
quiet machine. `tau run status` paid for the 20 commands of `tau run` before it ran. A
`LazyGroup` holds its Typer app and builds a command (or a nested group, itself lazy) only when
click asks for it by name: the invoked one, or all of them for `--help`.
"""

from __future__ import annotations

import copy
import unicodedata
from typing import Any

import typer
from typer.core import TyperGroup
from typer.models import CommandInfo, TyperInfo

from taugrid.api.errors import TauError

# The parameter types whose values a user types as text: ids, names, references, paths.
_TEXT_TYPES = ("StringParamType", "TyperPath", "Path")


def _guarded(inner: Any) -> Any:
    """`inner` (a parameter's type: click's, or Typer's own copy of click's) as a subclass of
    its own class whose `convert` first refuses what `blank_problem` finds. An empty id, name or
    path has no meaning to any command; sent on, it became a request for every object (`tau run
    pull ''` asked the API server for services/proxy) or the current folder."""

    class Guarded(type(inner)):  # type: ignore[misc]
        def convert(self, value: Any, param: Any, ctx: Any) -> Any:
            if isinstance(value, str) and _typed(param, ctx):
                problem = blank_problem(value)
                if problem:
                    wanted = getattr(param, "help", None)
                    raise TauError(
                        f"{_label(param)} {problem}" + (f" (expected: {wanted})" if wanted else "")
                    )
            return super().convert(value, param, ctx)

    guarded = copy.copy(inner)
    guarded.__class__ = Guarded
    return guarded


def _typed(param: Any, ctx: Any) -> bool:
    """The value came from the command line or the environment (a default of "" is the
    command's own)."""
    try:
        source = ctx.get_parameter_source(param.name)
    except AttributeError:
        return True
    return source is None or source.name in ("COMMANDLINE", "ENVIRONMENT")


def _label(param: Any) -> str:
    if param is None:
        return "a value"
    if getattr(param, "param_type_name", "") == "argument":
        return str(param.name).upper()
    opts = getattr(param, "opts", None) or [str(param.name)]
    return str(max(opts, key=len))


def blank_problem(value: str) -> str | None:
    """What is wrong with a value a user typed for an id, a name or a path, or None."""
    if not value.strip():
        return "is empty" if not value else "is only spaces"
    bad = sorted({c for c in value if unicodedata.category(c) in ("Cc", "Cf")})
    if bad:
        return "holds control characters (" + ", ".join(repr(c) for c in bad) + ")"
    return None


def guard_values(cmd: Any) -> Any:
    """`cmd` (a click command) with every argument and option a user types as text checked by
    `blank_problem` before its own type converts it."""
    for param in getattr(cmd, "params", []):
        kind = type(param.type).__name__
        if kind in _TEXT_TYPES:
            param.type = _guarded(param.type)
    return cmd


class LazyGroup(TyperGroup):
    """A group whose commands are built from `source` (its Typer app) when first asked for."""

    source: typer.Typer | None = None
    settings: dict[str, Any] = {}  # noqa: RUF012  # the root's settings, set per group

    def _entries(self) -> dict[str, CommandInfo | TyperInfo]:
        if self.source is None:
            return {}
        entries: dict[str, CommandInfo | TyperInfo] = {}
        for info in self.source.registered_commands:
            assert info.callback is not None
            entries[info.name or typer.main.get_command_name(info.callback.__name__)] = info
        for group in self.source.registered_groups:
            name = typer.main.solve_typer_info_defaults(group).name
            if name:
                entries[name] = group
        return entries

    def list_commands(self, ctx: Any) -> list[str]:
        entries = self._entries()  # in the order they were registered, built or not
        return [*entries, *(n for n in self.commands if n not in entries)]

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        if cmd_name not in self.commands:
            info = self._entries().get(cmd_name)
            if isinstance(info, CommandInfo):
                self.commands[cmd_name] = guard_values(
                    typer.main.get_command_from_info(
                        info,
                        pretty_exceptions_short=self.settings.get("pretty_exceptions_short", True),
                        rich_markup_mode=self.settings.get("rich_markup_mode"),
                    )
                )
            elif isinstance(info, TyperInfo):
                self.commands[cmd_name] = lazy_group(info, self.settings)
        return self.commands.get(cmd_name)


def lazy_group(info: TyperInfo, settings: dict[str, Any]) -> LazyGroup:
    """The click group of `info` (an `add_typer` entry) with no command built yet, under a root
    with `settings` (help format, context settings), as `add_typer` would build it."""
    source = info.typer_instance
    assert source is not None
    empty = copy.copy(source)
    empty.registered_commands = []
    empty.registered_groups = []
    empty.info = copy.copy(source.info)
    if not (isinstance(source.info.cls, type) and issubclass(source.info.cls, LazyGroup)):
        empty.info.cls = LazyGroup
    entry = copy.copy(info)
    entry.typer_instance = empty
    holder = typer.Typer(**settings)
    holder.registered_groups.append(entry)
    holder.command("_")(lambda: None)  # two entries: the holder stays a group
    name = typer.main.solve_typer_info_defaults(info).name
    group = typer.main.get_group(holder).commands[str(name)]
    assert isinstance(group, LazyGroup)
    group.source = source
    group.settings = settings
    return group
