"""Writing results: plain text, JSON and YAML on stdout; status tables for people."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from taugrid.api.errors import ConfigError, TauError

if TYPE_CHECKING:
    from taugrid.api.vocabulary import RunStatus


def out(text: str) -> None:
    sys.stdout.write(text if text.endswith("\n") else text + "\n")


def say(message: str) -> None:
    """Progress and warnings: stderr, so that stdout stays parseable."""
    sys.stderr.write(message + "\n")


def say_once() -> Callable[[str], None]:
    """A `say` that writes each message once (a note several steps of one command reach)."""
    said: set[str] = set()

    def once(message: str) -> None:
        if message not in said:
            said.add(message)
            say(message)

    return once


def dump_json(obj: Any) -> str:
    return json.dumps(obj, indent=2, sort_keys=False)


def dump_yaml_docs(objs: list[dict[str, Any]]) -> str:
    from taugrid.api.yamlio import dump_all

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


_STATE_COLOUR = {"true": "32", "false": "31", "pending": "33", "unknown": "90"}  # ANSI


def columns(headers: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    """A table as aligned plain text (two spaces between columns, the last one unpadded): what
    every list command prints. Rich's tables took ~4 ms a row (0.4 s for 100 runs)."""
    table = [list(headers), *([str(c) for c in r] for r in rows)]
    widths = [max(len(r[i]) for r in table) for i in range(len(headers) - 1)]
    return "\n".join(
        "  ".join([*(c.ljust(w) for c, w in zip(r, widths, strict=False)), r[-1]]).rstrip()
        for r in table
    )


def duration(seconds: float | None) -> str:
    if seconds is None:
        return ""
    s = int(seconds)
    if s < 60:
        return f"{seconds:.1f}s" if seconds < 10 else f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{(s % 3600) // 60:02d}m"


def metrics_line(values: dict[str, Any], limit: int = 4) -> str:
    def fmt(v: Any) -> str:
        return f"{v:.4g}" if isinstance(v, float) else str(v)

    return ", ".join(f"{k}={fmt(v)}" for k, v in list(values.items())[:limit])


def _paint(text: str, state: str) -> str:
    """A signal's state in its colour on a terminal (NO_COLOR respected); plain otherwise."""
    import os

    code = _STATE_COLOUR.get(state)
    if not code or not sys.stdout.isatty() or os.environ.get("NO_COLOR"):
        return text
    return f"\x1b[{code}m{text}\x1b[0m"


def print_status(st: RunStatus) -> None:
    """A run's status for people: the phase, the summary, six signals, the timeline (plain
    text: Rich cost this command ~70 ms of start-up)."""
    lines = [
        f"{st.run_id}  {st.phase}  ({st.workload_kind} on {st.target}, attempt {st.attempt})",
        f"  {st.summary}",
    ]
    facts = [f"duration {duration(st.duration_s)}"]
    if st.last_step is not None:
        facts.append(f"step {st.last_step}")
    if st.latest_metrics:
        facts.append(metrics_line(st.latest_metrics))
    lines.append("  " + "; ".join(facts))
    if st.gpu_use is not None and st.phase == "Running":
        from taugrid.api.gpuuse import describe

        lines.append(f"  GPUs: {describe(st.gpu_use)} (DCGM, since {st.gpu_use.since[11:19]})")
    if st.clusters:
        *before, now = st.clusters
        lost = f" (before: {', '.join(before)}, lost or given back)" if before else ""
        lines.append(f"  worker cluster: {now}{lost}")
    if st.last_error:
        lines.append(f"  last error: {st.last_error}")
    rows = [
        (sig.name, sig.state, (sig.since or "")[:19], sig.reason, sig.evidence)
        for sig in st.signals
    ]
    table = columns(("signal", "state", "since", "reason", "evidence"), rows).splitlines()
    at = max(len("signal"), *(len(r[0]) for r in rows)) + 2 if rows else 0  # the state column
    for n, row in enumerate(rows, start=1):
        line = table[n]
        table[n] = line[:at] + _paint(row[1], row[1]) + line[at + len(row[1]) :]
    lines += table
    if st.timeline:
        lines.append("  timeline:")
        for e in st.timeline[-12:]:
            times = f" x{e.count} (last {(e.last or '')[11:19]})" if e.count > 1 else ""
            lines.append(f"    {e.at[:19].replace('T', ' ')}  {e.reason}: {e.message}{times}")
    for i in st.inputs:
        said = f" ({i.ref})" if i.ref and i.ref != f"{i.name}@{i.version}" else ""
        lines.append(
            f"  input: {i.kind} {i.name}@{i.version[:19]}{said} at $TAU_INPUT_DIR/{i.path}"
        )
    if st.evidence:
        lines.append(f"  evidence: {st.evidence}")
    out("\n".join(lines))


def human_size(n: int) -> str:
    """Bytes for people: 512 B, 1.5 KiB, 3.2 GiB."""
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"


@contextmanager
def progress_bar(what: str, enabled: bool) -> Iterator[Any]:
    """A progress bar on stderr for long work (none when stderr is not a terminal, or -o json)."""
    import sys

    if not enabled or not sys.stderr.isatty():
        yield None
        return
    from rich.progress import BarColumn, DownloadColumn, Progress, TransferSpeedColumn

    with Progress(
        "[progress.description]{task.description}",
        BarColumn(),
        DownloadColumn(),
        TransferSpeedColumn(),
        transient=True,
    ) as bar:
        task = bar.add_task(what, total=None)

        def update(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

        yield update
