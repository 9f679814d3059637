"""A run's record where the run keeps it, checked: verified against its sealed manifest (a
local run's folder, a cluster run's volume, and this machine's copy), its metrics against the
seal; and a folder a command writes a record into, checked before anything is written. The
record is reached through its backend's record source (`client.runs` hands it over)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from taugrid.api import constants as C
from taugrid.api.errors import EXIT_USAGE, TauError

if TYPE_CHECKING:
    from taugrid.runs.evidence import RunDir
    from taugrid.runs.pull import RecordSource

Say = Callable[[str], None]


@dataclass(frozen=True)
class Verified:
    run_id: str
    files: int
    problems: list[str]
    where: str = "this machine"  # where the record checked lies
    note: str | None = None  # what could not be checked, and why

    @property
    def ok(self) -> bool:
        return not self.problems


def verify_where_it_lies(rd: RunDir, source_of: Callable[[], RecordSource]) -> Verified:
    """The run's record where the run keeps it (its backend's `record_source`: a local run's
    folder; a cluster run's workspace volume, each file hashed there by the file server: what
    the run wrote, whoever asks), and this machine's sealed copy too where that is elsewhere. A
    record that cannot be read from here is said, and then only the copy here is checked."""
    from taugrid.runs.pull import FolderSource, NotSealed, verify_source

    here = (rd.path / C.MANIFEST_FILENAME).is_file()
    try:
        source = source_of()
        n, problems = verify_source(source)
    except NotSealed:
        raise
    except TauError as e:
        if not here:
            raise
        n, problems = rd.verify()
        return Verified(
            rd.run_id, n, problems, note=f"the record where the run keeps it: {e.message}"
        )
    if isinstance(source, FolderSource) and source.folder == rd.path:
        return Verified(rd.run_id, n, problems)
    problems = [f"{p} (on {source.where})" for p in problems]
    if here:
        _, mine = rd.verify()
        problems += [f"{p} (this machine's copy)" for p in mine]
    return Verified(rd.run_id, n, problems, where=source.where)


def check_metrics(run_id: str, source: RecordSource, say: Say) -> None:
    """Say so when the record is sealed and its metrics file is not what the seal says."""
    from taugrid.runs.pull import RecordMissing, manifest_digests

    try:
        sealed = manifest_digests(source.text(C.MANIFEST_FILENAME)).get(C.METRICS_FILENAME)
    except RecordMissing:
        return  # not sealed yet: nothing to check against
    if sealed is None:
        return
    try:
        got, _ = source.digest(C.METRICS_FILENAME)
    except RecordMissing:
        got = "missing"
    if got != sealed:
        say(
            f"warning: {run_id}'s {C.METRICS_FILENAME} on {source.where} is not what its sealed "
            f"manifest says: these are not the numbers the run logged (`tau run verify {run_id}`)"
        )


def check_folder(path: str | Path, what: str) -> Path:
    """`path` as a Path when files can be written into it (a folder, made if missing); else a
    usage error that says why, before anything is written."""
    from taugrid.host.folders import folder_problem

    problem = folder_problem(path)
    if problem:
        raise TauError(f"{what} {str(path)!r} {problem}", exit_code=EXIT_USAGE)
    return Path(path)
