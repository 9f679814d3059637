"""Small files packed together, read, hashed and written on every core.

A registration of many small files used to write one blob file per file (create, write, link,
unlink: more system calls than reading them). The file store now appends small files to packs
and writes each pack's index after it (the layout is tau_inputs'). Worker processes (one per
core, forked: the file list, the store's index and the loaded modules are shared) each open,
stat, read, hash and append their share of the files to a pack of their own; this process
only hears, per file, its sha256, its stat and where its bytes went, and publishes a pack (its
index, then a link into packs/) once the worker that wrote it has closed it.

Two workers may meet the same new bytes in one registration: both write them, the index
that is read first names them, the other copy is dead space (bytes, never a wrong answer).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import itertools
import os
import time
from collections.abc import Generator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

import tau_inputs

if TYPE_CHECKING:
    from concurrent.futures import Future

PACK_LIMIT = 1 << 20  # files smaller than this are packed; larger ones are blobs of their own
PACK_ROLL = 64 << 20  # a pack is closed (and published) at this size: what a kill can lose
BATCH = 1024  # files per worker task (and per progress step)
PARALLEL_FROM = 2048  # fewer files than this: done here (a worker costs more than it saves)

Piece = tuple[str, int, int]  # (pack, offset, size)

Row = tuple[int, int, int, int, str]  # a stat cache row: (device, inode, size, mtime_ns, sha256)


@dataclass
class Batch:
    """What a worker says of one task, ready to be taken in whole (pickled back, 1,024 files at
    a time): the caller does nothing per file."""

    entries: list[tuple[str, int, str]] = field(default_factory=list)  # (path, size, sha256)
    large: list[int] = field(default_factory=list)  # entries that are large: sha256 "", the
    # caller stores them (blobs of their own, streamed)
    rows: dict[str, Row] = field(default_factory=dict)  # stat cache rows of the files read
    pack: str = ""  # where this task's new files went
    pieces: list[tuple[str, int, int]] = field(default_factory=list)  # (sha256, offset, size)
    packs: set[str] = field(default_factory=set)  # the packs that hold this task's small files
    size: int = 0  # bytes of the small files
    closed: list[str] = field(default_factory=list)  # packs this worker finished writing
    hashed: int = 0  # bytes read
    errors: list[str] = field(default_factory=list)


@dataclass
class _Worker:
    """A worker process's state for one registration (module-global: set before the fork)."""

    root: Path
    prefix: str  # of this registration's packs (what it leaves unpublished is removed)
    cached: dict[str, tuple[int, int, int, int, str]]  # the stat cache's rows
    known: dict[str, Piece]
    loose: set[str]
    file: BinaryIO | None = None
    pack: str = ""
    pos: int = 0
    mine: dict[str, str] = field(default_factory=dict)  # sha256 -> this worker's pack holding it

    def open_pack(self) -> None:
        self.pack = f"{self.prefix}-{os.getpid()}-{os.urandom(2).hex()}"
        self.file = tmp_pack(self.root, self.pack).open("xb", buffering=1 << 20)
        self.pos = 0

    def close_pack(self) -> str | None:
        if self.file is None:
            return None
        self.file.close()
        self.file = None
        return self.pack


_W: _Worker | None = None
_STDIO: list[object] = []


def _child_start() -> None:
    """A forked worker's first step: stdout/stderr replaced by fresh ones, the inherited ones kept
    (never flushed or freed here). The fork may have happened while another thread of the parent
    (a progress bar) held their lock; a worker flushing them at exit would wait forever."""
    import sys

    _STDIO.extend([sys.stdout, sys.stderr])
    sys.stdout = sys.stderr = open(os.devnull, "w")  # noqa: SIM115 (lives as long as the worker)


CHANGED = "changed while it was read (written meanwhile): nothing was recorded"


def same_moment(before: os.stat_result, after: os.stat_result) -> bool:
    """The file was not written between two stats of it: size, modification and change times
    (any write moves the change time) are the same."""
    return (before.st_size, before.st_mtime_ns, before.st_ctime_ns) == (
        after.st_size,
        after.st_mtime_ns,
        after.st_ctime_ns,
    )


def tmp_pack(root: Path, pack: str) -> Path:
    return root / "tmp" / f"{pack}.pack"


def _task(names: list[tuple[str, str]]) -> Batch:
    """One task in a worker: each file of `names` ((relative path, path)) opened (never through
    a symlink), stat'ed, looked up in the stat cache, read, hashed and appended to this worker's
    pack unless the store or this worker has its bytes."""
    # Long because: the per-file loop is the hot path of registering many small files (the
    # budget in DESIGN.md); its state lives in locals bound once, not in calls per file.
    w = _W
    assert w is not None
    out = Batch()
    sha256 = hashlib.sha256
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0)
    if w.file is None or w.pos >= PACK_ROLL:  # a new pack only between tasks: one per batch
        if w.file is not None:
            out.closed.append(w.pack)
            w.close_pack()
        w.open_pack()
    assert w.file is not None
    out.pack = w.pack
    known, loose, mine, cached = w.known, w.loose, w.mine, w.cached
    entries, rows, pieces, packs = out.entries, out.rows, out.pieces, out.packs
    write, pos, here = w.file.write, w.pos, w.pack
    small = 0
    for rel, path in names:
        try:
            fd = os.open(path, flags)
            try:
                st = os.fstat(fd)
                size = st.st_size
                if size >= PACK_LIMIT:
                    out.large.append(len(entries))
                    entries.append((rel, size, ""))
                    continue
                row = cached.get(rel)
                if row and row[:4] == (st.st_dev, st.st_ino, size, st.st_mtime_ns):
                    sha = row[4]
                    got = known.get(sha)
                    if got is not None or sha in loose or sha in mine:
                        packs.add(got[0] if got is not None else mine.get(sha, ""))
                        entries.append((rel, size, sha))
                        small += size
                        continue
                data = os.read(fd, size + 1)  # +1: a file grown since its stat shows
                after = os.fstat(fd)
            finally:
                os.close(fd)
        except OSError as e:
            out.errors.append(f"{path}: {e.strerror or e}")
            break  # the registration stops at the first file it cannot read
        if len(data) != size or not same_moment(st, after):
            out.errors.append(f"{path}: {CHANGED}")
            break
        sha = sha256(data).hexdigest()
        out.hashed += size
        small += size
        rows[rel] = (st.st_dev, st.st_ino, size, st.st_mtime_ns, sha)
        entries.append((rel, size, sha))
        got = known.get(sha)
        if got is not None:
            packs.add(got[0])
        elif sha in mine:
            packs.add(mine[sha])
        elif sha not in loose:
            write(data)
            pieces.append((sha, pos, size))
            pos += size
            mine[sha] = here
            packs.add(here)
    packs.discard("")  # blobs of their own
    w.pos = pos
    out.size = small
    w.file.flush()  # the parent may publish what this task wrote once it hears of it
    return out


def _finish() -> None:
    """Close this process's pack (in-process ingest; a worker's is closed when it exits: every
    task flushed what it wrote)."""
    if _W is not None:
        _W.close_pack()


def new_prefix() -> str:
    return f"{time.time_ns():x}-{os.urandom(3).hex()}"


def ingest(
    root: Path,
    prefix: str,
    chunks: Iterator[list[tuple[str, str]]],
    cached: dict[str, tuple[int, int, int, int, str]],
    known: dict[str, Piece],
    loose: set[str],
    workers: int,
) -> Generator[Batch, None, None]:
    """Every file of `chunks` (lists of (relative path, path), as the walk finds them: the
    workers start on the first while the rest are found), one Batch per chunk, in order; done
    by `workers` forked processes (here, for fewer than PARALLEL_FROM files); at most two tasks
    a worker in flight, so memory stays flat. When it ends, every pack written is complete and
    closed (the workers have exited); packs are named `prefix-...`."""
    global _W
    _W = _Worker(root, prefix, cached, known, loose)
    first: list[list[tuple[str, str]]] = []
    seen = 0
    for chunk in chunks:  # enough files to be worth the workers?
        first.append(chunk)
        seen += len(chunk)
        if seen >= PARALLEL_FROM:
            break
    try:
        if seen < PARALLEL_FROM or workers < 2 or not hasattr(os, "fork"):
            for chunk in itertools.chain(first, chunks):
                yield _task(chunk)
            return
        import multiprocessing
        from collections import deque
        from concurrent.futures import ProcessPoolExecutor

        fork = multiprocessing.get_context("fork")
        with ProcessPoolExecutor(workers, mp_context=fork, initializer=_child_start) as pool:
            flight: deque[Future[Batch]] = deque()
            for chunk in itertools.chain(first, chunks):
                flight.append(pool.submit(_task, chunk))
                if len(flight) >= 2 * workers:
                    yield flight.popleft().result()
            while flight:
                yield flight.popleft().result()
    finally:
        _finish()
        _W = None


def publish(root: Path, pack: str, pieces: list[tuple[str, int, int]]) -> None:
    """Make a closed pack visible: its index (sha offset size per line) and the pack linked into
    packs/ (the index last: a pack is visible only through it)."""
    tmp, idx = tmp_pack(root, pack), root / "tmp" / f"{pack}.idx"
    try:
        if pieces:
            idx.write_bytes("".join([f"{s} {o} {n}\n" for s, o, n in pieces]).encode())
            tmp.chmod(0o444)
            idx.chmod(0o444)
            final = tau_inputs.pack_path(root, pack)
            final.parent.mkdir(parents=True, exist_ok=True)
            with contextlib.suppress(FileExistsError):
                os.link(tmp, final)
            with contextlib.suppress(FileExistsError):
                os.link(idx, final.with_suffix(".idx"))
    finally:
        tmp.unlink(missing_ok=True)
        idx.unlink(missing_ok=True)


@contextlib.contextmanager
def claimed(root: Path, prefix: str) -> Iterator[None]:
    """tmp/PREFIX.lock held (flock) while a registration writes its tmp/PREFIX-* files (its
    pack workers inherit it): a writer that can take that lock knows the registration is gone
    (killed, even with SIGKILL) and reclaims its files at once (`reclaim_dead`). Made under
    another name and renamed once locked, so no one ever sees it unlocked while it lives."""
    tmp = root / "tmp"
    new, lock = tmp / f".{prefix}.lock.new", tmp / f"{prefix}.lock"
    fd = os.open(new, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        os.rename(new, lock)
        yield
    finally:
        lock.unlink(missing_ok=True)
        new.unlink(missing_ok=True)
        os.close(fd)


def reclaim_dead(root: Path) -> tuple[int, int]:
    """Remove the tmp files of every registration that is gone (its lock free): (files,
    bytes). A live one's lock is held, and its files are left alone."""
    files = size = 0
    for lock in (root / "tmp").glob("*.lock"):
        try:
            fd = os.open(lock, os.O_RDONLY)
        except OSError:
            continue
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                continue  # held: that registration still writes
            for p in (root / "tmp").glob(f"{lock.name[: -len('.lock')]}-*"):
                with contextlib.suppress(OSError):
                    n = p.stat().st_size
                    p.unlink()
                    files, size = files + 1, size + n
            lock.unlink(missing_ok=True)
        finally:
            os.close(fd)
    return files, size


def discard_stale(root: Path, age_s: float = 86400) -> None:
    """Remove tmp/ files nobody has written for a day: a registration killed mid-way left them
    (a live one writes its pack at least every task)."""
    cutoff = time.time() - age_s
    with contextlib.suppress(FileNotFoundError), os.scandir(root / "tmp") as it:
        for e in it:
            with contextlib.suppress(OSError):
                if e.stat(follow_symlinks=False).st_mtime < cutoff:
                    os.unlink(e.path)


def discard_unpublished(root: Path, prefix: str) -> None:
    """Remove what a registration wrote and did not publish (a worker's pack nobody heard of)."""
    for p in (root / "tmp").glob(f"{prefix}-*"):
        p.unlink(missing_ok=True)


def pieces_of(root: Path) -> dict[str, Piece]:
    """sha256 -> (pack, offset, size) over every visible pack."""
    out: dict[str, Piece] = {}
    for pack in tau_inputs.pack_ids(root):
        tau_inputs.read_pack_index(root, pack, out)
    return out


def workers() -> int:
    n = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return max(1, min(n or 1, 8))
