"""Command groups built one command at a time.

Typer turns a group into click commands all at once: every command's options are read from its
signature (`typing.get_type_hints`, a compile of each string annotation), ~4 ms a command on a
quiet machine. `tau run status` paid for the 20 commands of `tau run` before it ran. A
`LazyGroup` holds its Typer app and builds a command (or a nested group, itself lazy) only when
click asks for it by name: the invoked one, or all of them for `--help`.
"""

from __future__ import annotations

import copy
from typing import Any

import typer
from typer.core import TyperGroup
from typer.models import CommandInfo, TyperInfo


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
                self.commands[cmd_name] = typer.main.get_command_from_info(
                    info,
                    pretty_exceptions_short=self.settings.get("pretty_exceptions_short", True),
                    rich_markup_mode=self.settings.get("rich_markup_mode"),
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
