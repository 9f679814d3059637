"""Files on this machine, as a store reads and writes them: the files of a folder to register
(walked in the paths' order, links followed inside it, anything else refused by name), the stat
cache (size, mtime, inode -> sha256) that spares re-reading unchanged files, and files written
whole and checked (durably: fsync before what names them)."""

from __future__ import annotations

import contextlib
import hashlib
import marshal
import os
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import tau_inputs

from taugrid.api.data import VersionRecord, check_path, check_paths
from taugrid.api.errors import EXIT_USAGE, TauError
from taugrid.data import pack
from taugrid.host.folders import pulled

Progress = Callable[[int, int], None]  # (bytes done, bytes in all)


CHANGED_HINT = (
    "register it again once nothing writes to it (or register a copy): a version "
    "records the bytes of one moment"
)


class StatCache:
    """What this machine learned of a source's files: relative path -> (device, inode, size,
    mtime_ns, sha256), so an unchanged file is not read again. One journal per source (a folder
    or a file, by its absolute path) under the cache folder: rows are appended as files are
    read (a killed registration keeps what it learned; a torn last record is ignored) and the
    journal is rewritten as one record when a registration ends. Reading it is one `marshal`
    load (100,000 rows: ~50 ms); a per-file database query cost more than reading the file.
    The cache is only a hint: a row whose bytes the store lacks is read again."""

    MAGIC = b"TAUSTAT1"

    def __init__(self, folder: Path | None, source: Path) -> None:
        self.path: Path | None = None
        self.rows: dict[str, tuple[int, int, int, int, str]] = {}
        if folder is None:
            return
        key = hashlib.sha256(str(source.resolve()).encode()).hexdigest()[:32]
        self.path = folder / f"{key}.stat"
        with contextlib.suppress(OSError):
            self._load(self.path.read_bytes())

    def _load(self, raw: bytes) -> None:
        if not raw.startswith(self.MAGIC):
            return
        at = len(self.MAGIC)
        while at + 4 <= len(raw):
            n = int.from_bytes(raw[at : at + 4], "little")
            if at + 4 + n > len(raw):
                break  # a record cut short by a kill
            try:
                rows = marshal.loads(raw[at + 4 : at + 4 + n])
            except (ValueError, EOFError, TypeError):
                break  # not ours, or damaged: what came before stands
            if not isinstance(rows, dict):
                break
            self.rows.update(rows)
            at += 4 + n

    def get(self, rel: str, st: os.stat_result) -> str | None:
        row = self.rows.get(rel)
        if row and row[:4] == (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns):
            return row[4]
        return None

    def add(self, rows: dict[str, tuple[int, int, int, int, str]], *, keep: bool = True) -> None:
        """Learn rows (relative path -> (device, inode, size, mtime_ns, sha256)); with `keep`,
        kept at once (one append: a killed registration keeps them), else at `compact`."""
        if not rows:
            return
        self.rows.update(rows)
        if self.path is not None and keep:
            self._append(marshal.dumps(rows, 2))

    def journal(self, learned: list[dict[str, tuple[int, int, int, int, str]]]) -> None:
        """Keep rows already learned (`add(..., keep=False)`) in the journal now, as one record."""
        if self.path is not None and learned:
            rows: dict[str, tuple[int, int, int, int, str]] = {}
            for r in learned:
                rows.update(r)
            self._append(marshal.dumps(rows, 2))

    def _append(self, data: bytes) -> None:
        assert self.path is not None
        with contextlib.suppress(OSError):  # a cache: what it cannot keep costs a read later
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            try:
                if os.fstat(fd).st_size == 0:
                    os.write(fd, self.MAGIC)
                os.write(fd, len(data).to_bytes(4, "little") + data)
            finally:
                os.close(fd)

    def compact(self) -> None:
        """The journal as one record (atomically replaced)."""
        if self.path is None or not self.rows:
            return
        data = marshal.dumps(self.rows, 2)
        tmp = self.path.with_suffix(f".{os.getpid()}.tmp")
        with contextlib.suppress(OSError):
            tmp.parent.mkdir(parents=True, exist_ok=True)
            tmp.write_bytes(self.MAGIC + len(data).to_bytes(4, "little") + data)
            os.replace(tmp, self.path)


def unchanged(path: str, before: os.stat_result) -> None:
    """Refuse a file written while it was read: its bytes would be of no one moment (the bytes
    stored stay unnamed by any version, for `tau data gc`)."""
    try:
        after = os.stat(path, follow_symlinks=False)
    except OSError:
        after = None
    if after is None or not pack.same_moment(before, after):
        raise TauError(
            f"cannot register {path}: {pack.CHANGED}", exit_code=EXIT_USAGE, hint=CHANGED_HINT
        )


def offset_progress(progress: Progress | None, base: int, total: int) -> Callable[[int], None]:
    """Progress within one file, as progress of the whole registration."""

    def update(n: int) -> None:
        if progress is not None:
            progress(base + n, total)

    return update


def fsync(path: Path | str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_dir(path: Path | str) -> None:
    with contextlib.suppress(OSError):
        fsync(path)


def fsync_all(paths: list[str]) -> None:
    """Each file on disk, then the folders that name them: what a registration wrote, and
    nothing of anyone else's (os.sync() would flush every writer on the machine)."""
    for p in paths:
        with contextlib.suppress(FileNotFoundError):
            fsync(p)
    for d in sorted({os.path.dirname(p) for p in paths}):
        fsync_dir(d)


def walk(
    source: Path, links: dict[str, str] | None = None
) -> list[tuple[str, str, os.stat_result]]:
    """list_names with each file's stat (taken again where the file is read: a change between the
    two is refused)."""
    return [(rel, p, os.stat(p, follow_symlinks=False)) for rel, p in list_names(source, links)]


def list_names(source: Path, links: dict[str, str] | None = None) -> list[tuple[str, str]]:
    """The files of a file or folder: (relative path, path), sorted by relative path."""
    return [name for chunk in name_chunks(source, links=links) for name in chunk]


def kind_of(mode: int) -> str | None:
    """What a path that is neither a file nor a folder is, in words (None: a file or folder)."""
    import stat

    for test, what in (
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISFIFO, "a named pipe"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
    ):
        if test(mode):
            return what
    return None


def check_source(source: Path) -> None:
    """What can be registered: an existing file or folder (a symbolic link to one is followed);
    anything else refused with what it is."""
    try:
        st = os.stat(source)
    except FileNotFoundError:
        raise TauError(f"{source}: no such file or folder", exit_code=EXIT_USAGE) from None
    except OSError as e:
        raise TauError(f"{source}: {e.strerror or e}", exit_code=EXIT_USAGE) from None
    what = kind_of(st.st_mode)
    if what is not None:
        raise TauError(f"{source} is {what}: register a file or a folder", exit_code=EXIT_USAGE)


def write_checked(
    chunks: Iterable[bytes],
    out: Path,
    sha256: str,
    done: int,
    total: int,
    progress: Progress | None,
) -> int | None:
    """A file written whole from its blob's chunks: beside `out`, checked against its
    sha256, then put in place; the bytes done so far, or None (nothing left) when it does not
    match."""
    h = hashlib.sha256()
    part = out.with_name(f".{out.name}.tau-pull")
    try:
        with part.open("wb") as o:
            for chunk in chunks:
                h.update(chunk)
                o.write(chunk)
                done += len(chunk)
                if progress:
                    progress(done, total)
        if h.hexdigest() != sha256:
            return None
        os.replace(part, out)
    finally:
        part.unlink(missing_ok=True)
    return done


def already_there(record: VersionRecord, dest: Path) -> tuple[set[str], list[str]]:
    """Before anything is written: the version's files already in `dest` with its bytes, and
    those with other bytes that a person wrote (a local edit: not the bytes an earlier pull
    wrote there, as the folder's ledger says); a file where the version has a folder (or the
    other way round) is refused."""
    from taugrid.api.home import tau_home

    wrote = pulled(tau_home(), dest)
    edited: list[str] = []
    same: set[str] = set()
    for f in record.files:  # first: what is there already, before anything is written
        out = dest / check_path(f.path)
        for parent in [*reversed(out.relative_to(dest).parents)][1:]:
            if (dest / parent).exists() and not (dest / parent).is_dir():
                raise TauError(
                    f"{dest / parent} is a file where the version has a folder",
                    exit_code=EXIT_USAGE,
                    hint="move it away, or pull into another folder",
                )
        if out.is_dir():
            raise TauError(
                f"{out} is a folder where the version has a file",
                exit_code=EXIT_USAGE,
                hint="move it away, or pull into another folder",
            )
        if out.is_file():
            here = tau_inputs._sha256(out)
            if out.stat().st_size == f.size and here == f.sha256:
                same.add(f.path)
            elif wrote.get(f.path) != here:  # else an earlier pull's, unchanged: replaced
                edited.append(f.path)
    return same, edited


def name_chunks(
    source: Path, size: int = pack.BATCH, links: dict[str, str] | None = None
) -> Iterator[list[tuple[str, str]]]:
    """The files of a file or folder as they are found, `size` at a time: (relative path, path),
    in the order of the relative paths (each folder's entries sorted with a folder's name
    followed by `/`, so the walk's order is the paths' order: nothing to sort after it); each
    chunk's paths checked. A symbolic link whose target is inside the registered folder is
    followed (its target's bytes stored under the link's path; `links` learns the link), one
    leaving it (or dangling, or a loop) is refused by name, and so is a socket, pipe or device:
    nothing is left out without a word. Names only (the type from the directory entry): the
    workers stat."""
    check_source(source)
    if not source.is_dir():
        yield [(check_path(source.name), str(source.resolve()))]
        return
    yield from _Walk(source, size, links).chunks()


class _Walk:
    """One folder's walk for `name_chunks`: the files found so far wait in `buf` until a
    chunk is full."""

    def __init__(self, source: Path, size: int, links: dict[str, str] | None) -> None:
        self.source, self.size, self.links = source, size, links
        self.top = os.path.realpath(source)
        self.buf: list[tuple[str, str]] = []
        self.found = False

    def chunks(self) -> Iterator[list[tuple[str, str]]]:
        yield from self.walk(str(self.source), "", frozenset({self.top}))
        if self.buf:
            check_paths([r for r, _ in self.buf])
            yield self.buf
        elif not self.found:
            raise TauError(f"{self.source}: no files to register", exit_code=EXIT_USAGE)

    def full(self) -> Iterator[list[tuple[str, str]]]:
        while len(self.buf) >= self.size:
            chunk, self.buf = self.buf[: self.size], self.buf[self.size :]
            check_paths([r for r, _ in chunk])
            self.found = True
            yield chunk

    def followed(self, e: os.DirEntry[str], rel: str) -> tuple[str, bool]:
        """A link's target (inside the tree) and whether it is a folder; else refused."""
        target = os.path.realpath(e.path)
        said = os.readlink(e.path)
        if os.path.commonpath([self.top, target]) != self.top:
            raise TauError(
                f"{self.source}/{rel}: a symbolic link to {said} ({target}), outside the "
                "folder registered",
                exit_code=EXIT_USAGE,
                hint="register a folder that holds the link's target too, or copy the "
                "file in place of the link",
            )
        try:
            st = os.stat(target)
        except OSError:
            raise TauError(
                f"{self.source}/{rel}: a symbolic link to {said}, which does not exist",
                exit_code=EXIT_USAGE,
                hint="remove the link, or restore its target",
            ) from None
        if self.links is not None:
            self.links[rel] = said
        what = kind_of(st.st_mode)
        if what is not None:
            raise TauError(f"{self.source}/{rel}: a symbolic link to {what}", exit_code=EXIT_USAGE)
        return target, os.path.isdir(target)

    def entries(self, folder: str, rel: str) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
        """A folder's (sub-folders as (name/, path), files as (relative path, path)), links
        followed; anything else refused by name."""
        with os.scandir(folder) as it:
            found = list(it)
        dirs: list[tuple[str, str]] = []
        files: list[tuple[str, str]] = []
        for e in found:
            if e.is_dir(follow_symlinks=False):
                dirs.append((e.name + "/", e.path))
            elif e.is_file(follow_symlinks=False):
                files.append((rel + e.name, e.path))
            elif e.is_symlink():
                target, is_dir = self.followed(e, rel + e.name)
                if is_dir:
                    dirs.append((e.name + "/", target))
                else:
                    files.append((rel + e.name, target))
            else:
                what = kind_of(e.stat(follow_symlinks=False).st_mode) or "not a regular file"
                raise TauError(
                    f"{self.source}/{rel}{e.name} is {what}: nothing of it can be stored",
                    exit_code=EXIT_USAGE,
                    hint="move it out of the folder, then register again",
                )
        return dirs, files

    def walk(self, folder: str, rel: str, chain: frozenset[str]) -> Iterator[list[tuple[str, str]]]:
        """`chain`: the real folders from the top to this one (a link back into it: a loop)."""
        dirs, files = self.entries(folder, rel)
        if not dirs:  # the common case: a folder of files, taken in whole
            files.sort()
            self.buf += files
            yield from self.full()
            return
        for key, path in sorted(dirs + [(r[len(rel) :], p) for r, p in files]):
            if key[-1] == "/":
                real = os.path.realpath(path)
                if real in chain:
                    raise TauError(
                        f"{self.source}/{rel}{key[:-1]}: a symbolic link to a folder that "
                        "holds it (a loop)",
                        exit_code=EXIT_USAGE,
                    )
                yield from self.walk(path, rel + key, chain | {real})
            else:
                self.buf.append((rel + key, path))
                yield from self.full()
