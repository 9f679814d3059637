"""Pulling a run's record (outputs, checkpoints, metrics, logs) from where the run kept it: the
workspace volume for a cluster run (through its file server), the run's folder for a local one.

Every file is checked against the record's sealed MANIFEST.sha256 (hashed as it arrives); a pull
cut off is resumed (a file's bytes so far are kept in `<name>.tau-part` and continued with a
range read; files already here that match the manifest are kept, not fetched again); a file here
that differs from the run's is a local edit: kept, unless `force`. What a pull wrote is noted
under tau's home (host/folders.py: each file, the digest of the bytes it wrote), so a file an
earlier pull wrote and no one changed since is updated, never taken for an edit (a pull of a
running run, then of the ended one). A run that still runs has no manifest yet: what it has
written so far is pulled, and said to be unverified.
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Protocol

from taugrid.api import constants as C
from taugrid.api.errors import EXIT_RUN_FAILED, EXIT_USAGE, TauError
from taugrid.api.evidence import RunRecord
from taugrid.api.home import tau_home
from taugrid.api.observations import VolumeFile
from taugrid.host.folders import note_pulled, pulled

PART = ".tau-part"
WORKERS = 4  # files fetched at once (each is a round trip through the API server)
ATTEMPTS = 3  # reads of one file whose connection broke, each going on from the bytes that arrived
KINDS = ("outputs", "checkpoints", "metrics", "logs")


class RecordMissing(TauError):
    """A file or the whole record is not where the run keeps it."""


class NotSealed(TauError):
    """The record has no MANIFEST.sha256 yet (its run still runs): nothing to check against."""


class RecordSource(Protocol):
    """Where a run's record is read from (paths are relative to the record)."""

    where: str  # in words, e.g. "the volume of workspace research"

    def tree(self) -> list[VolumeFile]: ...

    def open(
        self, rel: str, offset: int = 0
    ) -> AbstractContextManager[tuple[int, Iterator[bytes]]]: ...

    def text(self, rel: str) -> str: ...

    def digest(self, rel: str, size: int = 0) -> tuple[str, int]:
        """(sha256, size) of a file of the record, hashed where the record is."""
        ...


class FolderSource:
    """A record in a folder of this machine (a local run's)."""

    def __init__(self, folder: Path, where: str = "this machine") -> None:
        self.folder, self.where = folder, where

    def tree(self) -> list[VolumeFile]:
        if not self.folder.is_dir():
            raise RecordMissing(f"{self.folder} does not exist", exit_code=EXIT_USAGE)
        out = []
        for p in sorted(self.folder.rglob("*")):
            rel = p.relative_to(self.folder)
            if p.is_file() and not any(s.startswith(".") for s in rel.parts):
                st = p.stat()
                out.append(VolumeFile(path=rel.as_posix(), size=st.st_size, mtime=st.st_mtime))
        return out

    @contextmanager
    def open(self, rel: str, offset: int = 0) -> Iterator[tuple[int, Iterator[bytes]]]:
        try:
            f = (self.folder / rel).open("rb")
        except OSError:
            raise RecordMissing(
                f"{rel} is not in the record on {self.where}", exit_code=EXIT_USAGE
            ) from None
        with f:
            size = os.fstat(f.fileno()).st_size
            f.seek(offset)
            yield size, iter(lambda: f.read(1 << 20), b"")

    def text(self, rel: str) -> str:
        with self.open(rel) as (_size, chunks):
            return b"".join(chunks).decode("utf-8", "replace")

    def digest(self, rel: str, size: int = 0) -> tuple[str, int]:
        path = self.folder / rel
        if not path.is_file():
            raise RecordMissing(f"{rel} is not in the record on {self.where}", exit_code=EXIT_USAGE)
        return _sha256(path).hexdigest(), path.stat().st_size


@dataclass(frozen=True)
class Checked:
    """A folder of a sealed record, every file hashed where it is and matching the manifest."""

    files: list[tuple[str, int, str]]  # (path under the folder, size, sha256), in path order
    bytes: int


def sealed_digests(source: RecordSource, then: str, exit_code: int) -> dict[str, str]:
    """{file: sha256} of the record's sealed manifest; NotSealed (saying `then`, with
    `exit_code`) when it has none yet."""
    try:
        return manifest_digests(source.text(C.MANIFEST_FILENAME))
    except RecordMissing:
        raise NotSealed(
            f"the record on {source.where} is not sealed yet (no {C.MANIFEST_FILENAME}): {then}",
            exit_code=exit_code,
        ) from None


def check_in_place(source: RecordSource, folder: str) -> Checked:
    """Every file the sealed manifest lists under `folder`, hashed where the record is (for a
    cluster run: by the volume's file server, so no byte leaves the cluster) and checked
    against the manifest. Raises, naming the files, when the record is not sealed (exit 2),
    lists nothing there (exit 2), or a file is missing, added or not what the manifest says
    (exit 1)."""
    sealed = sealed_digests(source, "nothing can be checked in place", EXIT_USAGE)
    under = folder.strip("/") + "/"
    wanted = {rel: d for rel, d in sealed.items() if rel.startswith(under)}
    if not wanted:
        raise TauError(
            f"{folder} is not in the sealed record on {source.where}", exit_code=EXIT_USAGE
        )
    sizes = {f.path: f.size for f in source.tree()}
    files, bad, missing = [], [], []
    for rel in sorted(wanted):
        if rel not in sizes:
            missing.append(rel)
            continue
        sha, size = source.digest(rel, sizes[rel])
        if sha != wanted[rel]:
            bad.append(rel)
        files.append((rel[len(under) :], size, sha))
    added = sorted(rel for rel in sizes if rel.startswith(under) and rel not in wanted)
    if bad or missing or added:
        named = ", ".join(
            [
                *(f"{r} (changed)" for r in bad),
                *(f"{r} (missing)" for r in missing),
                *(f"{r} (added)" for r in added),
            ]
        )
        raise TauError(
            f"not what the run's sealed manifest says, on {source.where}: {named}",
            exit_code=EXIT_RUN_FAILED,
        )
    return Checked(files, sum(size for _, size, _ in files))


def verify_source(source: RecordSource) -> tuple[int, list[str]]:
    """A whole sealed record where it lies (a cluster run's: each file hashed by its workspace's
    file server): (files the manifest lists, problems), the problems in the words of a local
    record's verify: missing, changed, not in the manifest. NotSealed when it has no manifest."""
    sealed = sealed_digests(source, "a run is sealed when it ends", EXIT_RUN_FAILED)
    sizes = {f.path: f.size for f in source.tree()}
    problems = []
    for rel in sorted(sealed):
        if rel not in sizes:
            problems.append(f"missing: {rel}")
        elif source.digest(rel, sizes[rel])[0] != sealed[rel]:
            problems.append(f"changed: {rel}")
    problems += [
        f"not in the manifest: {rel}"
        for rel in sorted(sizes)
        if rel not in sealed and rel != C.MANIFEST_FILENAME
    ]
    return len(sealed), problems


def selector(rec: RunRecord, kinds: set[str]) -> Callable[[str], bool]:
    """Which of the record's files a pull takes: everything, or only the named kinds."""
    unknown = kinds - set(KINDS)
    if unknown:
        raise TauError(
            f"unknown kind(s) to pull: {', '.join(sorted(unknown))} (known: {', '.join(KINDS)})",
            exit_code=EXIT_USAGE,
        )
    if not kinds:
        return lambda _path: True
    prefixes = []
    if "outputs" in kinds:
        prefixes.append(rec.output_subdir.strip("/") + "/")
    if "checkpoints" in kinds:
        prefixes.append(rec.checkpoint_subdir.strip("/") + "/")
    names = {C.METRICS_FILENAME} if "metrics" in kinds else set()

    def wanted(path: str) -> bool:
        parts = PurePosixPath(path).parts
        is_log = "logs" in kinds and (
            "logs" in parts[:1] or (parts[:1] == ("nodes",) and "logs" in parts[2:3])
        )
        return path in names or is_log or any(path.startswith(p) for p in prefixes)

    return wanted


@dataclass
class Pulled:
    """What a pull did (the JSON of `tau run pull -o json`)."""

    run_id: str
    to: str
    source: str
    sealed: bool
    files: int = 0  # selected files of the record
    bytes: int = 0
    fetched: int = 0  # files (or their rest) read now
    kept: int = 0  # already here and matching
    resumed: int = 0  # fetched on from the bytes an earlier, cut-off pull left
    verified: int = 0  # checked against MANIFEST.sha256
    unverified: list[str] = field(default_factory=list)  # no manifest yet (the run still runs)
    bad: list[str] = field(default_factory=list)  # not what the manifest says: not kept
    missing: list[str] = field(default_factory=list)  # in the manifest, not on the volume
    edited: list[str] = field(default_factory=list)  # here, different, kept (no force)

    @property
    def ok(self) -> bool:
        return not self.bad and not self.missing


def manifest_digests(text: str) -> dict[str, str]:
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            digest, _, rel = line.partition("  ")
            out[rel] = digest
    return out


def _safe(dest: Path, rel: str) -> Path | None:
    p = PurePosixPath(rel)
    if p.is_absolute() or ".." in p.parts or not p.parts:
        return None
    return dest.joinpath(*p.parts)


def _sha256(path: Path, h: hashlib._Hash | None = None) -> hashlib._Hash:
    h = h or hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h


Progress = Callable[[int, str], None]  # (bytes just arrived or found here, the file)


def pull(
    source: RecordSource,
    rec: RunRecord,
    dest: Path,
    kinds: set[str] | None = None,
    force: bool = False,
    progress: Progress | None = None,
    total: Callable[[int, int], None] | None = None,
) -> Pulled:
    """Copy the selected files of `rec`'s record from `source` into `dest` (see the module).
    `total(files, bytes)` hears the size of the pull once it is known; `progress` each piece."""
    wanted = selector(rec, kinds or set())
    if dest.exists() and not dest.is_dir():
        raise TauError(
            f"{dest} is a file: pull needs a folder to write into",
            exit_code=EXIT_USAGE,
            hint="--to a folder (it is made if missing)",
        )
    files = source.tree()
    on_volume = {f.path: f for f in files}
    sealed = C.MANIFEST_FILENAME in on_volume
    digests = manifest_digests(source.text(C.MANIFEST_FILENAME)) if sealed else {}
    chosen = [f for f in files if wanted(f.path) or f.path == C.MANIFEST_FILENAME]
    result = Pulled(
        rec.run_id,
        str(dest),
        source.where,
        sealed,
        files=len(chosen),
        bytes=sum(f.size for f in chosen),
    )
    result.missing = sorted(p for p in digests if wanted(p) and p not in on_volume)
    if total:
        total(result.files, result.bytes)
    dest.mkdir(parents=True, exist_ok=True)
    copier = _Copier(
        source,
        dest,
        digests,
        result,
        progress or (lambda _n, _p: None),
        force,
        pulled(tau_home(), dest),
    )
    with ThreadPoolExecutor(max_workers=WORKERS) as pool:
        for done in [pool.submit(copier.one, f) for f in chosen]:
            done.result()  # the first failure (a broken connection) is the pull's error
    result.unverified.sort()
    result.bad.sort()
    result.edited.sort()
    return result


@dataclass
class _Copier:
    """One pull's file copies, run in parallel: each file kept, resumed or fetched, and
    checked against the manifest's digest; `result` counts under a lock."""

    source: RecordSource
    dest: Path
    digests: dict[str, str]
    result: Pulled
    tell: Progress
    force: bool
    wrote: dict[str, str]  # what earlier pulls wrote here: path -> digest of those bytes
    lock: threading.Lock = field(default_factory=threading.Lock)

    def one(self, f: VolumeFile) -> None:
        target = _safe(self.dest, f.path)
        if target is None:
            with self.lock:
                self.result.bad.append(f"{f.path} (not a path inside the record)")
            return
        # the manifest is the check itself
        digest = None if f.path == C.MANIFEST_FILENAME else self.digests.get(f.path)
        if target.is_file() and self._settled_here(f, target, digest):
            return
        target.parent.mkdir(parents=True, exist_ok=True)
        part = target.with_name(target.name + PART)
        offset = part.stat().st_size if part.is_file() else 0
        if offset > f.size:  # the file on the volume changed since: start again
            part.unlink()
            offset = 0
        h = self._fetch(f, part, offset)
        if offset:
            with self.lock:
                self.result.resumed += 1
        if digest and h.hexdigest() != digest:
            part.unlink()
            with self.lock:
                self.result.bad.append(f"{f.path} (its bytes are not what MANIFEST.sha256 says)")
            return
        os.replace(part, target)
        with self.lock:
            self._note(f.path, h.hexdigest())
            self.result.fetched += 1
            if digest:
                self.result.verified += 1
            elif f.path != C.MANIFEST_FILENAME:
                self.result.unverified.append(f.path)

    def _settled_here(self, f: VolumeFile, target: Path, digest: str | None) -> bool:
        """A file already here: kept when it matches (by digest, else by size), left alone and
        named when it was edited here (unless `force`); False when it is to be fetched again."""
        ours = self.wrote.get(f.path)
        here = _sha256(target).hexdigest() if digest or ours else None
        same = here == digest if digest else target.stat().st_size == f.size and here == ours
        if same:
            self.tell(f.size, f.path)
            with self.lock:
                self.result.kept += 1
                self.result.verified += 1 if digest else 0
                if not digest and f.path != C.MANIFEST_FILENAME:
                    self.result.unverified.append(f.path)
            return True
        if ours is not None and here == ours:
            return False  # an earlier pull wrote it and no one changed it since: update it
        if not self.force and f.path != C.MANIFEST_FILENAME:
            self.tell(f.size, f.path)
            with self.lock:
                self.result.edited.append(f.path)
            return True
        return False

    def _note(self, path: str, digest: str) -> None:
        """That this pull wrote `path` with those bytes (under the lock; one appended line, so a
        pull cut off keeps what it noted)."""
        self.wrote[path] = digest
        note_pulled(tau_home(), self.dest, path, digest)

    def _fetch(self, f: VolumeFile, part: Path, offset: int) -> hashlib._Hash:
        """`f` appended to `part` from `offset`; a connection that breaks: go on from what
        arrived, ATTEMPTS times. The digest of the whole part file."""
        h = _sha256(part) if offset else hashlib.sha256()
        if offset:
            self.tell(offset, f.path)
        for attempt in range(1, ATTEMPTS + 1):
            try:
                start = part.stat().st_size if part.exists() else 0
                with self.source.open(f.path, start) as (_size, chunks), part.open("ab") as out:
                    for chunk in chunks:
                        out.write(chunk)
                        h.update(chunk)
                        self.tell(len(chunk), f.path)
                break
            except RecordMissing:
                raise
            except TauError:
                if attempt == ATTEMPTS:
                    raise
        return h
