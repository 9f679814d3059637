"""The file store of datasets and models (`file://DIR`): no server, safe for many writers.

Layout under DIR (the same on a laptop and on a workspace volume, e.g. /data/registry):

    blobs/sha256/<2>/<62>                 each file's bytes, once, named by their sha256
    <kind>s/<name>/versions/<hex>.json    an immutable version record
    <kind>s/<name>/aliases.json           alias -> version (replaced atomically)
    <kind>s/<name>/aliases.history.jsonl  every alias move, appended (fsync) under the lock
    <kind>s/<name>/.lock                  flock: alias moves and removals are compare-and-swap
    tmp/                                  half-written files (never visible as blobs or records)

Blobs and records are written to tmp/, fsync'ed, then hard-linked into place only if absent
(create-if-absent): a killed `register` leaves no partial version, and the next one reuses every
blob already complete. A stat cache (size, mtime, inode -> sha256) spares re-reading unchanged
files.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import sqlite3
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import tau_inputs

from taugrid.api.data import (
    DIGEST_PREFIX,
    AliasMove,
    Created,
    FileEntry,
    Kind,
    Lineage,
    Ref,
    VersionRecord,
    check_name,
    check_path,
    manifest_digest,
    short,
)
from taugrid.api.errors import EXIT_PLATFORM, EXIT_RUN_FAILED, EXIT_USAGE, TauError

CHUNK = 1 << 20
Progress = Callable[[int, int], None]  # (bytes done, bytes in all)


class Conflict(TauError):
    """An alias moved under the caller (compare-and-swap lost): exit 1, with the current value."""

    def __init__(self, message: str, current: str | None) -> None:
        super().__init__(message, exit_code=EXIT_RUN_FAILED,
                         hint="read it again (tau data ... alias get) and retry with --expect")  # fmt: skip
        self.current = current


@dataclass(frozen=True)
class Registered:
    record: VersionRecord
    created: bool  # False: that exact content was already a version (nothing written)
    hashed_bytes: int  # bytes read and hashed (0 when the stat cache knew every file)


class StatCache:
    """(device, inode, size, mtime_ns) of a file -> its sha256, in SQLite (one per machine)."""

    def __init__(self, path: Path | None) -> None:
        self.db: sqlite3.Connection | None = None
        self._pending = 0
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            self.db = sqlite3.connect(path, timeout=30, isolation_level=None)
            self.db.execute("PRAGMA journal_mode=WAL")
            self.db.execute("PRAGMA synchronous=NORMAL")
            self.db.execute("CREATE TABLE IF NOT EXISTS stat (dev INTEGER, ino INTEGER, size INTEGER,"
                            " mtime INTEGER, sha TEXT, PRIMARY KEY (dev, ino))")  # fmt: skip
            self.db.execute("BEGIN")

    @staticmethod
    def _key(st: os.stat_result) -> tuple[int, int]:
        return st.st_dev, st.st_ino

    def get(self, st: os.stat_result) -> str | None:
        if self.db is None:
            return None
        row = self.db.execute("SELECT size, mtime, sha FROM stat WHERE dev=? AND ino=?",
                              self._key(st)).fetchone()  # fmt: skip
        if row and row[0] == st.st_size and row[1] == st.st_mtime_ns:
            return str(row[2])
        return None

    def put(self, st: os.stat_result, sha: str) -> None:
        """Kept in batches; a large file's hash at once (a killed register keeps what it read)."""
        if self.db is None:
            return
        self.db.execute("INSERT OR REPLACE INTO stat VALUES (?, ?, ?, ?, ?)",
                        (*self._key(st), st.st_size, st.st_mtime_ns, sha))  # fmt: skip
        self._pending += 1
        if self._pending >= 256 or st.st_size >= CHUNK:
            self.db.execute("COMMIT")
            self.db.execute("BEGIN")
            self._pending = 0

    def close(self) -> None:
        if self.db is not None:
            self.db.execute("COMMIT")
            self.db.close()
            self.db = None


def _offset(progress: Progress | None, base: int, total: int) -> Callable[[int], None]:
    """Progress within one file, as progress of the whole registration."""

    def update(n: int) -> None:
        if progress is not None:
            progress(base + n, total)

    return update


def _fsync_dir(path: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


class FileStore:
    def __init__(self, root: Path, stat_cache: Path | None = None) -> None:
        self.root = root
        self.stat_cache = stat_cache
        try:
            for d in ("blobs/sha256", "tmp"):
                (root / d).mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise TauError(f"registry {root} is not usable: {e.strerror}", exit_code=EXIT_PLATFORM,
                           hint="choose a writable folder (--registry file://DIR or TAU_REGISTRY)") from None  # fmt: skip

    @property
    def url(self) -> str:
        return f"file://{self.root}"

    # --- paths -------------------------------------------------------------------------------
    def blob(self, sha: str) -> Path:
        path: Path = tau_inputs.blob_path(self.root, sha)
        return path

    def home(self, kind: Kind, name: str) -> Path:
        return self.root / f"{kind}s" / check_name(name)

    def _record_path(self, kind: Kind, name: str, version: str) -> Path:
        return self.home(kind, name) / "versions" / f"{version[len(DIGEST_PREFIX) :]}.json"

    @contextlib.contextmanager
    def _lock(self, kind: Kind, name: str) -> Iterator[None]:
        home = self.home(kind, name)
        home.mkdir(parents=True, exist_ok=True)
        with (home / ".lock").open("a") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(f, fcntl.LOCK_UN)

    def _place(self, tmp: Path, final: Path) -> bool:
        """Create-if-absent: link the finished tmp file into place. False: it was there."""
        final.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.link(tmp, final)
            _fsync_dir(final.parent)
            return True
        except FileExistsError:
            return False
        finally:
            tmp.unlink(missing_ok=True)

    # --- register ----------------------------------------------------------------------------
    def register(self, kind: Kind, name: str, source: Path, created: Created, *,
                 purpose: str | None = None, description: str | None = None,
                 tags: dict[str, str] | None = None, lineage: Lineage | None = None,
                 progress: Progress | None = None) -> Registered:  # fmt: skip
        """Store a file or a folder as a version (the same content again: the same version)."""
        check_name(name)
        files = _walk(source)
        total = sum(st.st_size for _, _, st in files)
        cache = StatCache(self.stat_cache)
        done = hashed = 0
        entries: list[FileEntry] = []
        try:
            for rel, path, st in files:
                sha = cache.get(st)
                if sha is None or not self.blob(sha).is_file():
                    sha = self._store_blob(path, _offset(progress, done, total))
                    hashed += st.st_size
                    cache.put(st, sha)
                entries.append(FileEntry(path=rel, size=st.st_size, sha256=sha))
                done += st.st_size
                if progress:
                    progress(done, total)
        finally:
            cache.close()
        version = manifest_digest(entries)
        record = VersionRecord(kind=kind, name=name, version=version,
                               files=sorted(entries, key=lambda e: e.path), size=total,
                               created=created, purpose=purpose, description=description,
                               tags=tags or {}, lineage=lineage or Lineage())  # fmt: skip
        final = self._record_path(kind, name, version)
        tmp = self._tmp_write(record.model_dump_json(indent=1, by_alias=True).encode())
        if not self._place(tmp, final):
            return Registered(self.read(kind, name, version), False, hashed)
        return Registered(record, True, hashed)

    def _tmp_write(self, data: bytes) -> Path:
        fd, name = tempfile.mkstemp(dir=self.root / "tmp")
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        return Path(name)

    def _store_blob(self, path: Path, progress: Callable[[int], None]) -> str:
        """Stream a file into the blob store (hashing as it goes): flat memory at any size."""
        h = hashlib.sha256()
        fd, name = tempfile.mkstemp(dir=self.root / "tmp")
        tmp = Path(name)
        n = 0
        try:
            with os.fdopen(fd, "wb") as out, path.open("rb") as src:
                while chunk := src.read(CHUNK):
                    h.update(chunk)
                    out.write(chunk)
                    n += len(chunk)
                    progress(n)
                out.flush()
                os.fsync(out.fileno())
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        sha = h.hexdigest()
        tmp.chmod(0o444)  # a blob is never written again
        self._place(tmp, self.blob(sha))
        return sha

    # --- read --------------------------------------------------------------------------------
    def names(self, kind: Kind) -> list[str]:
        d = self.root / f"{kind}s"
        return sorted(p.name for p in d.iterdir() if p.is_dir()) if d.is_dir() else []

    def versions(self, kind: Kind, name: str) -> list[VersionRecord]:
        d = self.home(kind, name) / "versions"
        if not d.is_dir():
            return []
        # oldest first: by when it was made, then by when its record was written (ns)
        found = [(self._load(p), p.stat().st_mtime_ns) for p in d.glob("*.json")]
        return [r for r, _ in sorted(found, key=lambda x: (x[0].created.at, x[1]))]

    def _load(self, path: Path) -> VersionRecord:
        return VersionRecord.model_validate_json(path.read_bytes())

    def read(self, kind: Kind, name: str, version: str) -> VersionRecord:
        try:
            return self._load(self._record_path(kind, name, version))
        except FileNotFoundError:
            raise self._unknown(kind, name, version) from None

    def _unknown(self, kind: Kind, name: str, at: str) -> TauError:
        known = [short(r.version) for r in self.versions(kind, name)][-5:]
        aliases = sorted(self.aliases(kind, name))
        if not known:
            return TauError(f"no {kind} {name!r} in {self.url}", exit_code=EXIT_USAGE,
                            hint=f"tau data {kind} list (register it first: tau data {kind} register)")  # fmt: skip
        return TauError(f"{kind} {name} has no version or alias {at!r}", exit_code=EXIT_USAGE,
                        hint=f"versions: {', '.join(known)}; aliases: {', '.join(aliases) or 'none'}")  # fmt: skip

    def resolve(self, kind: Kind, ref: Ref) -> VersionRecord:
        """NAME (its `latest` alias, else its newest version), NAME@ALIAS or NAME@VERSION."""
        name, at = ref.name, ref.at
        if at is None:
            at = "latest" if "latest" in self.aliases(kind, name) else None
            if at is None:
                vs = self.versions(kind, name)
                if not vs:
                    raise self._unknown(kind, name, "")
                return vs[-1]
        if at.startswith(DIGEST_PREFIX):
            hexpart = at[len(DIGEST_PREFIX) :]
            d = self.home(kind, name) / "versions"
            hits = sorted(d.glob(f"{hexpart}*.json")) if d.is_dir() else []
            if len(hits) == 1:
                return self._load(hits[0])
            if len(hits) > 1:
                raise TauError(f"{at} names {len(hits)} versions of {name}", exit_code=EXIT_USAGE,
                               hint="give more digits of the version")  # fmt: skip
            raise self._unknown(kind, name, at)
        target = self.aliases(kind, name).get(at)
        if target is None:
            raise self._unknown(kind, name, at)
        return self.read(kind, name, target)

    # --- aliases (compare-and-swap under the lock) ------------------------------------------
    def aliases(self, kind: Kind, name: str) -> dict[str, str]:
        p = self.home(kind, name) / "aliases.json"
        try:
            return dict(json.loads(p.read_text()))
        except FileNotFoundError:
            return {}

    def set_alias(self, kind: Kind, name: str, alias: str, version: str | None, by: str, at: str,
                  *, expect: str | None = None, expect_absent: bool = False) -> AliasMove:  # fmt: skip
        """Point `alias` at `version` (None: remove it), only if it is `expect` now (or absent,
        with `expect_absent`); the move is appended to the alias history. Exit 1 on a lost race."""
        check_name(alias, "alias")
        if version is not None:
            self.read(kind, name, version)  # exists
        with self._lock(kind, name):
            home = self.home(kind, name)
            current = self.aliases(kind, name)
            now = current.get(alias)
            if expect_absent and now is not None:
                raise Conflict(f"alias {name}@{alias} exists (it is {short(now)})", now)
            if expect is not None and now != expect:
                said = short(now) if now else "absent"
                raise Conflict(f"alias {name}@{alias} is {said}, not {short(expect)}", now)
            if version is None:
                current.pop(alias, None)
            else:
                current[alias] = version
            tmp = self._tmp_write(json.dumps(current, indent=1, sort_keys=True).encode())
            os.replace(tmp, home / "aliases.json")
            move = AliasMove(alias=alias, from_version=now, to=version, by=by, at=at)
            with (home / "aliases.history.jsonl").open("a") as f:
                f.write(move.model_dump_json(by_alias=True) + "\n")
                f.flush()
                os.fsync(f.fileno())
            return move

    def history(self, kind: Kind, name: str, alias: str | None = None) -> list[AliasMove]:
        p = self.home(kind, name) / "aliases.history.jsonl"
        try:
            lines = p.read_text().splitlines()
        except FileNotFoundError:
            return []
        moves = [AliasMove.model_validate_json(ln) for ln in lines if ln.strip()]
        return [m for m in moves if alias is None or m.alias == alias]

    # --- remove, verify, pull ---------------------------------------------------------------
    def remove(self, kind: Kind, name: str, version: str) -> None:
        """Drop a version's record (its files stay while another version shares them); refused
        while an alias points at it (checked under the lock, so no alias can move to it meanwhile)."""
        with self._lock(kind, name):
            self.read(kind, name, version)
            held = sorted(a for a, v in self.aliases(kind, name).items() if v == version)
            if held:
                raise TauError(f"{name}@{short(version)} is held by alias {', '.join(held)}",
                               exit_code=EXIT_USAGE,
                               hint=f"move or remove the alias first (tau data {kind} alias rm)")  # fmt: skip
            self._record_path(kind, name, version).unlink()

    def verify(self, record: VersionRecord, progress: Progress | None = None) -> list[str]:
        """Re-hash every file of a version: the problems (missing or changed files), or none."""
        problems = (
            [] if record.digest_ok() else ["the record's file list does not match its version id"]
        )
        done = 0
        for f in record.files:
            p = self.blob(f.sha256)
            if not p.is_file():
                problems.append(f"{f.path}: missing")
                continue
            h = hashlib.sha256()
            with p.open("rb") as src:
                while chunk := src.read(CHUNK):
                    h.update(chunk)
                    done += len(chunk)
                    if progress:
                        progress(done, record.size)
            if h.hexdigest() != f.sha256:
                problems.append(
                    f"{f.path}: changed (sha256 {h.hexdigest()[:12]}, recorded {f.sha256[:12]})"
                )
        return problems

    def pull(self, record: VersionRecord, dest: Path, progress: Progress | None = None) -> int:
        """Copy a version's files to `dest` (checked against their sha256 as they are copied)."""
        done = 0
        for f in record.files:
            src, out = self.blob(f.sha256), dest / check_path(f.path)
            out.parent.mkdir(parents=True, exist_ok=True)
            h = hashlib.sha256()
            try:
                with src.open("rb") as i, out.open("wb") as o:
                    while chunk := i.read(CHUNK):
                        h.update(chunk)
                        o.write(chunk)
                        done += len(chunk)
                        if progress:
                            progress(done, record.size)
            except FileNotFoundError:
                raise TauError(f"{record.name}@{record.short}: {f.path} is missing from the store",
                               exit_code=EXIT_RUN_FAILED, hint=f"tau data {record.kind} verify {record.name}@{record.short}") from None  # fmt: skip
            if h.hexdigest() != f.sha256:
                raise TauError(f"{record.name}@{record.short}: {f.path} changed in the store",
                               exit_code=EXIT_RUN_FAILED, hint=f"tau data {record.kind} verify {record.name}@{record.short}")  # fmt: skip
        return len(record.files)


def _walk(source: Path) -> list[tuple[str, Path, os.stat_result]]:
    """The files of a file or folder, by relative path (sorted); symlinks and specials left out."""
    if not source.exists():
        raise TauError(f"{source}: no such file or folder", exit_code=EXIT_USAGE)
    if source.is_file():
        return [(check_path(source.name), source, source.stat())]
    out: list[tuple[str, Path, os.stat_result]] = []
    for dirpath, dirnames, filenames in os.walk(source):
        dirnames.sort()
        for fn in sorted(filenames):
            p = Path(dirpath) / fn
            if p.is_symlink() or not p.is_file():
                continue
            rel = p.relative_to(source).as_posix()
            out.append((check_path(rel), p, p.stat()))
    if not out:
        raise TauError(f"{source}: no files to register", exit_code=EXIT_USAGE)
    return out


REGISTRY_ENV = "TAU_REGISTRY"


def registry_url(registry: str | None = None) -> str:
    """`registry`, else TAU_REGISTRY, else $TAU_HOME/data/registry (the local stand-in for the
    workspace volume's /data/registry)."""
    from taugrid.api.home import tau_home

    return registry or os.environ.get(REGISTRY_ENV) or f"file://{tau_home() / 'data' / 'registry'}"


def default_store(registry: str | None = None) -> FileStore:
    from taugrid.api.home import tau_home

    return open_store(registry_url(registry), tau_home() / "cache" / "data-stat.sqlite")


def open_store(url: str, stat_cache: Path | None = None) -> FileStore:
    """`file://DIR` or a plain folder; `az://` is not in this build yet."""
    if url.startswith("file://"):
        return FileStore(Path(url[len("file://") :]).expanduser(), stat_cache)
    if "://" in url:
        raise TauError(f"registry {url}: only file:// stores are in this build (az:// is planned)",
                       exit_code=EXIT_USAGE, hint="--registry file://DIR")  # fmt: skip
    return FileStore(Path(url).expanduser(), stat_cache)
