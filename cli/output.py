"""Writing results: plain text, JSON and YAML on stdout; status tables for people."""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Any

from taugrid.api.errors import ConfigError, TauError

if TYPE_CHECKING:
    from taugrid.api.vocabulary import RunStatus


def out(text: str) -> None:
    sys.stdout.write(text if text.endswith("\n") else text + "\n")


def say(message: str) -> None:
    """Progress and warnings: stderr, so that stdout stays parseable."""
    sys.stderr.write(message + "\n")


def dump_json(obj: Any) -> str:
    return json.dumps(obj, indent=2, sort_keys=False)


def dump_yaml_docs(objs: list[dict[str, Any]]) -> str:
    from taugrid.runs.yamlio import dump_all

    return dump_all(objs)


def object_list(objs: list[dict[str, Any]], as_json: bool) -> str:
    if as_json:
        return dump_json({"apiVersion": "v1", "kind": "List", "items": objs})
    return dump_yaml_docs(objs)


def error_items(e: TauError) -> list[dict[str, Any]]:
    if isinstance(e, ConfigError):
        return [
            {"path": i.path, "value": i.value, "message": i.message, "example": i.example}
            for i in e.issues
        ]
    return [{"path": "", "value": None, "message": e.message, "example": e.hint}]


_STATE_STYLE = {"true": "green", "false": "red", "pending": "yellow", "unknown": "bright_black"}


def print_status(st: RunStatus) -> None:
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
