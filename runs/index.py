"""The run index: every run submitted from this machine, found by id, id prefix or name.

A run's evidence record (runs/evidence.py) lives under $TAU_HOME/data/runs/<run-id>/ whatever
its target; its run.json names the target and the backend's handle, so each command finds the
backend that owns the run from the record alone.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from taugrid.api import constants as C
from taugrid.api import naming
from taugrid.api.errors import TauError
from taugrid.runs.evidence import RunDir
from taugrid.runs.paths import runs_root


def list_runs() -> list[RunDir]:
    root = runs_root()
    if not root.is_dir():
        return []
    dirs = [
        RunDir(p) for p in root.iterdir() if p.is_dir() and (p / C.RUN_RECORD_FILENAME).is_file()
    ]
    return sorted(dirs, key=lambda d: d.record_path.stat().st_mtime)


def record_stamps() -> list[tuple[str, tuple[int, int]]]:
    """(run id, (mtime_ns, size) of its record) of every run here: one directory scan and one
    stat per run (relative to the open folder), no record read (what a cache of statuses needs
    to tell what changed)."""
    try:
        fd = os.open(runs_root(), os.O_RDONLY | os.O_DIRECTORY)
    except FileNotFoundError:
        return []
    out = []
    try:
        tail = "/" + C.RUN_RECORD_FILENAME
        for e in os.scandir(fd):
            try:
                st = os.stat(e.name + tail, dir_fd=fd)
            except (FileNotFoundError, NotADirectoryError):
                continue
            out.append((e.name, (st.st_mtime_ns, st.st_size)))
    finally:
        os.close(fd)
    return out


class BadRunRef(TauError):
    """What was given for a run cannot name one (no lookup was made, here or on a cluster)."""


def check_run_ref(ref: str) -> str:
    problem = naming.run_ref_problem(ref)
    if problem:
        raise BadRunRef(
            f"run {ref!r} {problem}", hint="`tau run list` shows the runs and their ids"
        )
    return ref


def find_run(ref: str) -> RunDir:
    """A run by id, unique id prefix, or name (the newest run of that name)."""
    check_run_ref(ref)
    root = runs_root()
    exact = root / ref
    if (exact / C.RUN_RECORD_FILENAME).is_file():
        return RunDir(exact)
    runs = list_runs()
    # A run name (with or without its resource_naming prefix): the newest run of that name.
    by_name = [
        r for r in runs if (stem := r.run_id.rsplit("-", 1)[0]) == ref or stem.endswith("-" + ref)
    ]
    if by_name:
        return by_name[-1]
    by_prefix = [r for r in runs if r.run_id.startswith(ref)]
    if len(by_prefix) == 1:
        return by_prefix[0]
    if len(by_prefix) > 1:
        raise TauError(
            f"{ref!r} matches several runs: {', '.join(r.run_id for r in by_prefix[:8])}"
        )
    raise TauError(f"no run {ref!r} under {root}", hint="`tau run list` shows the runs")


def lineage(rd: RunDir) -> list[tuple[RunDir, int | None]]:
    """The run and the runs it resumed from, oldest first, each with the last step it
    contributed (the step of the checkpoint its child resumed from; None: all of it)."""
    chain: list[tuple[RunDir, int | None]] = [(rd, None)]
    seen = {rd.run_id}
    current = rd
    while True:
        parent = current.read_record().resumed_from
        if parent is None or parent.run_id in seen:
            break
        found = runs_root() / parent.run_id
        if not (found / C.RUN_RECORD_FILENAME).is_file():
            break  # its record is gone: the lineage starts here
        chain.append((RunDir(found), _checkpoint_step(parent.checkpoint)))
        seen.add(parent.run_id)
        current = RunDir(found)
    return list(reversed(chain))


def _checkpoint_step(path: str | None) -> int | None:
    if not path:
        return None
    try:
        return int(path.rstrip("/").rsplit("/", 1)[-1].rsplit("-", 1)[-1])
    except ValueError:
        return None


def lineage_metric_rows(
    rd: RunDir, rows_of: Callable[[RunDir], list[dict[str, Any]]] | None = None
) -> list[dict[str, Any]]:
    """Metric rows across a resume lineage: each ancestor's rows up to the step its child
    resumed from, then the run's own; each row names its run. `rows_of` reads a run's rows
    (default: its record here; a cluster run's are on its workspace volume). Where the step a
    child resumed from is not recorded (a cluster run's pod picks "the newest" checkpoint), the
    child's first row says it: the parent's rows stop before it."""
    chain = lineage(rd)
    rows = [rows_of(run) if rows_of else run.metric_rows() for run, _ in chain]
    out: list[dict[str, Any]] = []
    for i, (run, upto) in enumerate(chain):
        if upto is None and i + 1 < len(chain) and rows[i + 1]:
            upto = int(rows[i + 1][0]["step"]) - 1
        for row in rows[i]:
            if upto is None or row["step"] <= upto:
                row["run_id"] = run.run_id  # a fresh dict per read: named in place
                out.append(row)
    return out
