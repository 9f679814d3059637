"""Registry stores of datasets and models: no server, safe for many writers.

`Store` holds what every store does (register with the stat cache, resolve, verify, pull,
list), on a few primitives each store implements: blobs and version records written
create-if-absent, and an alias document moved by compare-and-swap. `FileStore` (`file://DIR`)
is below; `AzureStore` (`az://`, data/azure.py) writes with ETag conditions.

The file store's layout under DIR (the same on a laptop and on a workspace volume, e.g.
/data/registry):

    blobs/sha256/<2>/<62>                 a large file's bytes, once, named by their sha256
    packs/<id>.pack, packs/<id>.idx       small files' bytes, once, one after another, and
                                          where each is (data/pack.py; an index is written
                                          after its pack: a pack is visible only through it)
    <kind>s/<name>/versions/<hex>.json    an immutable version record
    <kind>s/<name>/versions/<hex>.head    its head (size, file count, created): what `list` reads
    <kind>s/<name>/aliases.json           {aliases: alias -> version, history: every move,
                                          removed: versions removed}, replaced atomically
    <kind>s/<name>/.lock                  flock: alias moves and removals are compare-and-swap
    tmp/                                  half-written files (never visible as blobs or records;
                                          `tau data gc` removes a killed registration's)
    .gc.lock                              flock: registrations and copies shared, gc exclusive

Blobs, packs and records are written to tmp/, then hard-linked into place only if absent
(create-if-absent), and synced before the record that names them: a killed `register` leaves no
partial version, and the next one reuses every blob and published pack already complete. A stat
cache (size, mtime, inode -> sha256) spares re-reading unchanged
files.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import itertools
import json
import marshal
import os
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tau_inputs

from taugrid.api.data import (
    DIGEST_PREFIX,
    AliasMove,
    Created,
    FileEntry,
    Kind,
    Lineage,
    Ref,
    VersionHead,
    VersionRecord,
    check_name,
    check_path,
    check_paths,
    manifest_digest,
    short,
)
from taugrid.api.errors import EXIT_PLATFORM, EXIT_RUN_FAILED, EXIT_USAGE, TauError
from taugrid.data import pack

CHUNK = 1 << 20
Progress = Callable[[int, int], None]  # (bytes done, bytes in all)


class Conflict(TauError):
    """An alias moved under the caller (compare-and-swap lost): exit 1, with the current value."""

    def __init__(self, message: str, current: str | None) -> None:
        super().__init__(
            message,
            exit_code=EXIT_RUN_FAILED,
            hint="read it again (tau data ... alias get) and retry with --expect",
        )
        self.current = current


@dataclass(frozen=True)
class Registered:
    record: VersionRecord
    created: bool  # False: that exact content was already a version (nothing written)
    hashed_bytes: int  # bytes read and hashed (0 when the stat cache knew every file)


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


_CHANGED_HINT = (
    "register it again once nothing writes to it (or register a copy): a version "
    "records the bytes of one moment"
)


def _unchanged(path: str, before: os.stat_result) -> None:
    """Refuse a file written while it was read: its bytes would be of no one moment (the bytes
    stored stay unnamed by any version, for `tau data gc`)."""
    try:
        after = os.stat(path, follow_symlinks=False)
    except OSError:
        after = None
    if after is None or not pack.same_moment(before, after):
        raise TauError(
            f"cannot register {path}: {pack.CHANGED}", exit_code=EXIT_USAGE, hint=_CHANGED_HINT
        )


def _offset(progress: Progress | None, base: int, total: int) -> Callable[[int], None]:
    """Progress within one file, as progress of the whole registration."""

    def update(n: int) -> None:
        if progress is not None:
            progress(base + n, total)

    return update


def _fsync(path: Path | str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_dir(path: Path | str) -> None:
    with contextlib.suppress(OSError):
        _fsync(path)


def _fsync_all(paths: list[str]) -> None:
    """Each file on disk, then the folders that name them: what a registration wrote, and
    nothing of anyone else's (os.sync() would flush every writer on the machine)."""
    for p in paths:
        with contextlib.suppress(FileNotFoundError):
            _fsync(p)
    for d in sorted({os.path.dirname(p) for p in paths}):
        _fsync_dir(d)


class Store:
    """What every store does, on its primitives (the `_` methods a store implements)."""

    url: str
    stat_cache: Path | None

    # --- primitives ------------------------------------------------------------------------
    def _has_blob(self, sha: str) -> bool:
        raise NotImplementedError

    def _store_file(self, path: Path, progress: Callable[[int], None]) -> str:
        """Store one file's bytes as a blob (create-if-absent); its sha256."""
        raise NotImplementedError

    def _put_head(self, kind: Kind, name: str, version: str, data: bytes) -> None:
        """Keep a version's head beside its record (written after the record: a head is only
        read for a version whose record is listed)."""
        raise NotImplementedError

    def _get_head(self, kind: Kind, name: str, version: str) -> bytes | None:
        raise NotImplementedError

    def _read_blob(self, sha: str) -> Iterator[bytes] | None:
        """A blob's bytes in chunks; None when it is missing."""
        raise NotImplementedError

    def _put_record(self, kind: Kind, name: str, version: str, data: bytes) -> bool:
        """Create-if-absent. False: the record was there."""
        raise NotImplementedError

    def _get_record(self, kind: Kind, name: str, version: str) -> bytes | None:
        raise NotImplementedError

    def _version_ids(self, kind: Kind, name: str) -> list[str]:
        """Hex ids of the versions of `name`, in the order they were written."""
        raise NotImplementedError

    def names(self, kind: Kind) -> list[str]:
        raise NotImplementedError

    def _aliases_doc(self, kind: Kind, name: str) -> dict[str, Any]:
        """{"aliases": {alias: version}, "history": [moves]} as it is now."""
        raise NotImplementedError

    def _update_aliases(
        self, kind: Kind, name: str, change: Callable[[dict[str, Any]], dict[str, Any]]
    ) -> dict[str, Any]:
        """Apply `change` to the alias document atomically (change may raise: nothing written)."""
        raise NotImplementedError

    def _drop_record(self, kind: Kind, name: str, version: str) -> None:
        raise NotImplementedError

    # --- register ----------------------------------------------------------------------------
    def register(
        self,
        kind: Kind,
        name: str,
        source: Path,
        created: Created,
        *,
        purpose: str | None = None,
        description: str | None = None,
        tags: dict[str, str] | None = None,
        lineage: Lineage | None = None,
        progress: Progress | None = None,
    ) -> Registered:
        """Store a file or a folder as a version (the same content again: the same version)."""
        check_name(name)
        with self._writing():
            return self._register(
                kind,
                name,
                source,
                created,
                purpose=purpose,
                description=description,
                tags=tags,
                lineage=lineage,
                progress=progress,
            )

    def _writing(self) -> contextlib.AbstractContextManager[None]:
        """Held while something writes blobs and the record naming them (a registration, a
        copy into this store): `gc` waits for it (a file store's lock; nothing elsewhere)."""
        return contextlib.nullcontext()

    def _register(
        self,
        kind: Kind,
        name: str,
        source: Path,
        created: Created,
        *,
        purpose: str | None,
        description: str | None,
        tags: dict[str, str] | None,
        lineage: Lineage | None,
        progress: Progress | None,
    ) -> Registered:
        try:
            links: dict[str, str] = {}
            entries, total, hashed, packs = self._ingest(source, progress, links)  # paths' order
            version = manifest_digest(entries)
            record = VersionRecord(
                kind=kind,
                name=name,
                version=version,
                files=[],
                size=total,
                created=created,
                purpose=purpose,
                description=description,
                tags=tags or {},
                lineage=lineage or Lineage(),
                written_ns=time.time_ns(),
                packs=packs,
                links=links,
            )
            # the entries are the walk's (each path checked there): not checked a second time
            record = record.model_copy(update={"files": entries})
            data = record.model_dump_json(indent=1, by_alias=True).encode()
            if not self._put_record(kind, name, version, data):
                existing = self.read(kind, name, version)
                self._keep_head(existing)  # a registry written before heads existed
                return Registered(existing, False, hashed)
            self._keep_head(record)
            return Registered(record, True, hashed)
        except OSError as e:  # a file of the source, or the store itself
            raise self._os_problem(e, source) from None

    def _os_problem(self, e: OSError, source: Path) -> TauError:
        where = str(e.filename or "")
        why = e.strerror or str(e)
        if where and where.startswith(str(source)):
            return TauError(
                f"cannot register {where}: {why}",
                exit_code=EXIT_USAGE,
                hint="fix or leave out that file, then register again",
            )
        return TauError(
            f"registry {self.url}: cannot write ({why})",
            exit_code=EXIT_PLATFORM,
            hint="free space there or choose another registry (--registry, TAU_REGISTRY); "
            "nothing half-written is visible, and what was stored is reused next time",
        )

    def _ingest(
        self, source: Path, progress: Progress | None, links: dict[str, str]
    ) -> tuple[list[FileEntry], int, int, list[str]]:
        """Store every file's bytes the store lacks: the entries, their total size, the bytes
        read, and the packs holding them (a file store's; none here: one blob per file).
        `links` learns the symbolic links followed (path -> what the link says)."""
        files = _walk(source, links)
        total = sum(st.st_size for _, _, st in files)
        cache = StatCache(self.stat_cache, source)
        done = hashed = 0
        entries: list[FileEntry] = []
        for rel, path, st in files:
            sha = cache.get(rel, st)
            if sha is None or not self._has_blob(sha):
                sha = self._store_file(Path(path), _offset(progress, done, total))
                _unchanged(path, st)
                hashed += st.st_size
                cache.add({rel: (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, sha)})
            entries.append(FileEntry(rel, st.st_size, sha))
            done += st.st_size
            if progress:
                progress(done, total)
        cache.compact()
        return entries, total, hashed, []

    # --- read --------------------------------------------------------------------------------
    def versions(self, kind: Kind, name: str) -> list[VersionRecord]:
        """Oldest first (by when made; ties: in the order written)."""
        check_name(name)
        recs = []
        for i, hexid in enumerate(self._version_ids(kind, name)):
            raw = self._get_record(kind, name, DIGEST_PREFIX + hexid)
            if raw is not None:
                recs.append((VersionRecord.model_validate_json(raw), i))
        return [r for r, _ in sorted(recs, key=lambda x: (x[0].created.at, x[0].written_ns, x[1]))]

    def _keep_head(self, record: VersionRecord) -> None:
        """The version's head beside its committed record. Best effort: without it, a listing
        reads the record instead."""
        data = VersionHead.of(record).model_dump_json().encode()
        with contextlib.suppress(OSError, TauError):
            self._put_head(record.kind, record.name, record.version, data)

    def summary(self, kind: Kind, name: str) -> tuple[int, VersionHead] | None:
        """How many versions `name` has and the head of its newest (ordered as `versions`
        orders them): small reads only (a version's record when its head is missing)."""
        heads = []
        ids = self._version_ids(kind, check_name(name))
        for i, hexid in enumerate(ids):
            head = self._head(kind, name, DIGEST_PREFIX + hexid)
            if head is not None:
                heads.append((head.created.at, head.written_ns, i, head))
        return (len(ids), max(heads)[3]) if heads else None

    def _head(self, kind: Kind, name: str, version: str) -> VersionHead | None:
        raw = self._get_head(kind, name, version)
        if raw is not None:
            with contextlib.suppress(ValueError):
                head = VersionHead.model_validate_json(raw)
                if head.version == version:
                    return head
        raw = self._get_record(kind, name, version)
        return None if raw is None else VersionHead.of(VersionRecord.model_validate_json(raw))

    def read(self, kind: Kind, name: str, version: str) -> VersionRecord:
        raw = self._get_record(kind, check_name(name), version)
        if raw is None:
            raise self._unknown(kind, name, version)
        return VersionRecord.model_validate_json(raw)

    def _unknown(self, kind: Kind, name: str, at: str) -> TauError:
        known = [short(r.version) for r in self.versions(kind, name)][-5:]
        aliases = sorted(self.aliases(kind, name))
        if not known:
            return TauError(
                f"no {kind} {name!r} in {self.url}",
                exit_code=EXIT_USAGE,
                hint=f"tau data {kind} list (register it first: tau data {kind} register)",
            )
        return TauError(
            f"{kind} {name} has no version or alias {at!r}",
            exit_code=EXIT_USAGE,
            hint=f"versions: {', '.join(known)}; aliases: {', '.join(aliases) or 'none'}",
        )

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
            hits = [h for h in self._version_ids(kind, name) if h.startswith(hexpart)]
            if len(hits) == 1:
                return self.read(kind, name, DIGEST_PREFIX + hits[0])
            if len(hits) > 1:
                raise TauError(
                    f"{at} names {len(hits)} versions of {name}",
                    exit_code=EXIT_USAGE,
                    hint="give more digits of the version",
                )
            raise self._unknown(kind, name, at)
        target = self.aliases(kind, name).get(at)
        if target is None:
            raise self._unknown(kind, name, at)
        return self.read(kind, name, target)

    # --- aliases -----------------------------------------------------------------------------
    def aliases(self, kind: Kind, name: str) -> dict[str, str]:
        return dict(self._aliases_doc(kind, check_name(name)).get("aliases") or {})

    def set_alias(
        self,
        kind: Kind,
        name: str,
        alias: str,
        version: str | None,
        by: str,
        at: str,
        *,
        expect: str | None = None,
        expect_absent: bool = False,
    ) -> AliasMove:
        """Point `alias` at `version` (None: remove it), only if it is `expect` now (or absent,
        with `expect_absent`): a compare-and-swap; the move joins the alias history in the same
        write. Exit 1 (Conflict, naming the current version) on a lost race."""
        check_name(alias, "alias")
        if version is not None:
            self.read(kind, name, version)  # exists
        moved: list[AliasMove] = []

        def change(doc: dict[str, Any]) -> dict[str, Any]:
            aliases = dict(doc.get("aliases") or {})
            now = aliases.get(alias)
            if expect_absent and now is not None:
                raise Conflict(f"alias {name}@{alias} exists (it is {short(now)})", now)
            if expect is not None and now != expect:
                said = short(now) if now else "absent"
                raise Conflict(f"alias {name}@{alias} is {said}, not {short(expect)}", now)
            if version is not None and version in (doc.get("removed") or []):
                raise self._unknown(kind, name, version)
            if version is None:
                aliases.pop(alias, None)
            else:
                aliases[alias] = version
            move = AliasMove(alias=alias, from_version=now, to=version, by=by, at=at)
            moved[:] = [move]
            history = [*(doc.get("history") or []), move.model_dump(mode="json", by_alias=True)]
            return {**doc, "aliases": aliases, "history": history}

        self._update_aliases(kind, name, change)
        return moved[0]

    def history(self, kind: Kind, name: str, alias: str | None = None) -> list[AliasMove]:
        moves = [
            AliasMove.model_validate(m) for m in self._aliases_doc(kind, name).get("history") or []
        ]
        return [m for m in moves if alias is None or m.alias == alias]

    # --- remove, verify, pull ---------------------------------------------------------------
    def remove(self, kind: Kind, name: str, version: str) -> None:
        """Drop a version's record (its files stay while another version shares them); refused
        while an alias points at it. The check and a tombstone are one alias-document write, so
        no alias can move to the version meanwhile."""
        self.read(kind, name, version)

        def change(doc: dict[str, Any]) -> dict[str, Any]:
            held = sorted(a for a, v in (doc.get("aliases") or {}).items() if v == version)
            if held:
                raise TauError(
                    f"{name}@{short(version)} is held by alias {', '.join(held)}",
                    exit_code=EXIT_USAGE,
                    hint=f"move or remove the alias first (tau data {kind} alias rm)",
                )
            return {**doc, "removed": sorted({*(doc.get("removed") or []), version})}

        self._update_aliases(kind, name, change)
        self._drop_record(kind, name, version)

    def verify(self, record: VersionRecord, progress: Progress | None = None) -> list[str]:
        """Re-hash every file of a version: the problems (missing or changed files), or none."""
        problems = (
            [] if record.digest_ok() else ["the record's file list does not match its version id"]
        )
        done = 0
        for f in record.files:
            chunks = self._read_blob(f.sha256)
            if chunks is None:
                problems.append(f"{f.path}: missing")
                continue
            h = hashlib.sha256()
            for chunk in chunks:
                h.update(chunk)
                done += len(chunk)
                if progress:
                    progress(done, record.size)
            if h.hexdigest() != f.sha256:
                problems.append(
                    f"{f.path}: changed (sha256 {h.hexdigest()[:12]}, recorded {f.sha256[:12]})"
                )
        return problems

    def pull(
        self,
        record: VersionRecord,
        dest: Path,
        progress: Progress | None = None,
        *,
        force: bool = False,
    ) -> Pulled:
        """Copy a version's files into the folder `dest` (checked against their sha256 as they
        are copied; each file put in place whole). A file already there with the version's
        bytes is left as it is; one with other bytes (a local edit) is refused before anything
        is written, unless `force`; `dest` or a folder on the way that is a file is refused."""
        hint = f"tau data {record.kind} verify {record.name}@{record.short}"
        if dest.exists() and not dest.is_dir():
            raise TauError(
                f"{dest} is a file: pull into a folder",
                exit_code=EXIT_USAGE,
                hint=f"name a folder (it is made if missing), e.g. {dest}.d",
            )
        same, edited = _already_there(record, dest)
        if edited and not force:
            listed = ", ".join(edited[:5]) + (
                f" and {len(edited) - 5} more" if len(edited) > 5 else ""
            )
            raise TauError(
                f"{dest} has other bytes than {record.name}@{record.short} in "
                f"{len(edited)} file(s): {listed}; nothing was written",
                exit_code=EXIT_USAGE,
                hint="keep your edits elsewhere, or pass --force to replace them",
            )
        done = 0
        for f in record.files:
            if f.path in same:
                done += f.size
                continue
            out = dest / f.path
            out.parent.mkdir(parents=True, exist_ok=True)
            chunks = self._read_blob(f.sha256)
            if chunks is None:
                raise TauError(
                    f"{record.name}@{record.short}: {f.path} is missing from the store",
                    exit_code=EXIT_RUN_FAILED,
                    hint=hint,
                )
            wrote = _write_checked(chunks, out, f.sha256, done, record.size, progress)
            if wrote is None:
                raise TauError(
                    f"{record.name}@{record.short}: {f.path} changed in the store",
                    exit_code=EXIT_RUN_FAILED,
                    hint=hint,
                )
            done = wrote
        return Pulled(len(record.files) - len(same), len(same), len(edited) if force else 0)

    def repair(
        self, record: VersionRecord, source: Path, progress: Progress | None = None
    ) -> list[str]:
        """Restore a version's damaged or missing stored files from `source` (the file or
        folder it was registered from, intact): each file whose stored bytes do not hash to the
        record's sha256 is stored again from the source's file of the same path, once that
        file is checked to have exactly those bytes. Returns the files restored; a damaged file
        the source cannot give back is an error naming it (the others are restored)."""
        damaged = [f for f in record.files if not self._blob_ok(f.sha256)]
        restored: list[str] = []
        unfixable: list[str] = []
        for f in damaged:
            src = source if source.is_file() and len(record.files) == 1 else source / f.path
            try:
                sha = tau_inputs._sha256(src) if src.is_file() else None
            except OSError:
                sha = None
            if sha != f.sha256:
                unfixable.append(
                    f"{f.path} ({'not in' if sha is None else 'other bytes in'} {source})"
                )
                continue
            self._restore_blob(src, f.sha256)
            restored.append(f.path)
        if unfixable:
            raise TauError(
                f"{record.name}@{record.short}: {len(unfixable)} damaged file(s) cannot "
                f"be restored from {source}: {', '.join(unfixable[:5])}"
                + (f" ({len(restored)} restored)" if restored else ""),
                exit_code=EXIT_RUN_FAILED,
                hint="give the folder it was registered from, intact (--from)",
            )
        return restored

    def _blob_ok(self, sha: str) -> bool:
        chunks = self._read_blob(sha)
        if chunks is None:
            return False
        h = hashlib.sha256()
        for chunk in chunks:
            h.update(chunk)
        return h.hexdigest() == sha

    def _restore_blob(self, path: Path, sha: str) -> None:
        """Store `path` (checked to hold `sha`) as the blob of `sha`, over what is there."""
        raise NotImplementedError

    def gc(self, *, dry_run: bool = False, grace_s: float = 3600) -> Collected:
        """Remove what no version names (blobs, packs whose every piece is unnamed) and what a
        killed registration left in tmp/; nothing younger than `grace_s`."""
        raise NotImplementedError

    def _named_blobs(self) -> set[str]:
        """The sha256 of every file some version of the store names (what gc keeps)."""
        named: set[str] = set()
        kinds: tuple[Kind, ...] = ("dataset", "model")
        for kind in kinds:
            for name in self.names(kind):
                for hexid in self._version_ids(kind, name):
                    raw = self._get_record(kind, name, DIGEST_PREFIX + hexid)
                    if raw is not None:
                        named.update(f.sha256 for f in VersionRecord.model_validate_json(raw).files)
        return named

    @contextlib.contextmanager
    def _local_blob(self, sha: str) -> Iterator[Path | None]:
        """A blob as a local file for as long as needed (a file store's own; else a copy)."""
        chunks = self._read_blob(sha)
        if chunks is None:
            yield None
            return
        with tempfile.TemporaryDirectory(prefix="tau-copy-") as tmp:
            staged = Path(tmp) / "blob"
            with staged.open("wb") as o:
                for chunk in chunks:
                    o.write(chunk)
            yield staged

    def has_version(self, kind: Kind, name: str, version: str) -> bool:
        return self._get_record(kind, check_name(name), version) is not None

    def copy_to(
        self, record: VersionRecord, dest: Store, progress: Progress | None = None
    ) -> Copied:
        """Put a version into another store: each file's bytes the destination lacks (checked
        against their sha256 on the way), then the record, last, so a copy cut short is never
        a visible version there and the next copy resumes. Aliases stay where they are."""
        with dest._writing():
            return self._copy_to(record, dest, progress)

    def _copy_to(self, record: VersionRecord, dest: Store, progress: Progress | None) -> Copied:
        hint = f"tau data {record.kind} verify {record.name}@{record.short}"
        if dest.has_version(record.kind, record.name, record.version):
            return Copied(record, 0, 0)
        sent = done = 0
        for f in record.files:
            if not dest._has_blob(f.sha256):
                with self._local_blob(f.sha256) as staged:
                    if staged is None:
                        raise TauError(
                            f"{record.name}@{record.short}: {f.path} is missing from {self.url}",
                            exit_code=EXIT_RUN_FAILED,
                            hint=hint,
                        )
                    got = dest._store_file(staged, _offset(progress, done, record.size))
                if got != f.sha256:
                    raise TauError(
                        f"{record.name}@{record.short}: {f.path} changed in {self.url}",
                        exit_code=EXIT_RUN_FAILED,
                        hint=hint,
                    )
                sent += f.size
            done += f.size
            if progress:
                progress(done, record.size)
        placed = record.model_copy(update={"packs": []})  # the packs are the source's
        data = placed.model_dump_json(indent=1, by_alias=True).encode()
        dest._put_record(record.kind, record.name, record.version, data)
        dest._keep_head(placed)
        return Copied(record, len(record.files), sent)


@dataclass(frozen=True)
class Pulled:
    """What `pull` did: files written, files already there with the version's bytes, and
    local edits replaced (with force)."""

    written: int
    unchanged: int
    replaced: int


@dataclass(frozen=True)
class Collected:
    """What `gc` removed (or, with dry_run, would remove): counts and bytes."""

    blobs: int
    packs: int
    tmp_files: int
    bytes: int
    dry_run: bool
    kept_packs_dead_bytes: int = 0  # unnamed pieces inside packs that other pieces keep


@dataclass(frozen=True)
class Copied:
    """What `copy_to` did: the version, and the bytes it sent (0: it was there already)."""

    record: VersionRecord
    files: int
    sent: int


class FileStore(Store):
    """`file://DIR`: blobs and records hard-linked into place if absent; the alias document
    (aliases.json, with its history) replaced atomically under an flock."""

    def __init__(self, root: Path, stat_cache: Path | None = None) -> None:
        self.root = root
        self.stat_cache = stat_cache
        self.url = f"file://{root}"
        self._unsynced: list[str] = []  # written, not yet fsynced (before the record naming them)
        self._seq = 0
        self._tmpdir, self._blobdir = str(root / "tmp"), str(root / "blobs" / "sha256")
        self._made: set[str] = set()
        self._pieces: dict[str, tuple[str, int, int]] | None = None  # packed bytes, when read
        self._blobs: set[str] | None = None  # blobs of their own, when listed
        self._packs = tau_inputs.Packs(root)  # open for reading
        try:
            for d in ("blobs/sha256", "tmp"):
                (root / d).mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise TauError(
                f"registry {root} is not usable: {e.strerror}",
                exit_code=EXIT_PLATFORM,
                hint="choose a writable folder (--registry file://DIR or TAU_REGISTRY)",
            ) from None

    def blob(self, sha: str) -> Path:
        path: Path = tau_inputs.blob_path(self.root, sha)
        return path

    def home(self, kind: Kind, name: str) -> Path:
        return self.root / f"{kind}s" / check_name(name)

    def _record_path(self, kind: Kind, name: str, version: str) -> Path:
        path: Path = tau_inputs.record_path(self.root, kind, check_name(name), version)
        return path

    @contextlib.contextmanager
    def _gc_lock(self, exclusive: bool) -> Iterator[None]:
        """Registrations hold it shared for their whole length; gc exclusively: gc never removes
        a blob a registration in flight has stored or counts on."""
        with (self.root / ".gc.lock").open("a") as f:
            fcntl.flock(f, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
            try:
                yield
            finally:
                fcntl.flock(f, fcntl.LOCK_UN)

    def _writing(self) -> contextlib.AbstractContextManager[None]:
        return self._gc_lock(exclusive=False)

    def _restore_blob(self, path: Path, sha: str) -> None:
        """A blob of its own, put in place over a damaged one (a loose blob is read before a
        packed piece, so it also stands in for a damaged piece of a pack)."""
        fd, tmp = tempfile.mkstemp(dir=self.root / "tmp")
        try:
            h = hashlib.sha256()
            with os.fdopen(fd, "wb") as out, path.open("rb") as src:
                while chunk := src.read(CHUNK):
                    h.update(chunk)
                    out.write(chunk)
                out.flush()
                os.fsync(out.fileno())
            if h.hexdigest() != sha:
                raise TauError(
                    f"{path} changed while it was read: nothing restored",
                    exit_code=EXIT_RUN_FAILED,
                    hint=_CHANGED_HINT,
                )
            os.chmod(tmp, 0o444)
            final = self.blob(sha)
            final.parent.mkdir(parents=True, exist_ok=True)
            os.replace(tmp, final)
            _fsync_dir(final.parent)
            if self._blobs is not None:
                self._blobs.add(sha)
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)

    def gc(self, *, dry_run: bool = False, grace_s: float = 3600) -> Collected:
        with self._gc_lock(exclusive=True):
            named = self._named_blobs()
            cutoff = time.time() - grace_s
            blobs = packs = tmps = freed = dead = 0

            def drop(path: str, size: int) -> None:
                nonlocal freed
                freed += size
                if not dry_run:
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(path)

            for sha in sorted(self._loose()):
                p = str(self.blob(sha))
                with contextlib.suppress(FileNotFoundError):
                    st = os.stat(p)
                    if sha not in named and st.st_mtime < cutoff:
                        drop(p, st.st_size)
                        blobs += 1
            for pid in tau_inputs.pack_ids(self.root):
                pieces: dict[str, tuple[str, int, int]] = {}
                tau_inputs.read_pack_index(self.root, pid, pieces)
                pack_file = str(tau_inputs.pack_path(self.root, pid))
                with contextlib.suppress(FileNotFoundError):
                    st = os.stat(pack_file)
                    if st.st_mtime >= cutoff:
                        continue
                    if not any(sha in named for sha in pieces):
                        drop(pack_file[: -len(".pack")] + ".idx", 0)  # the index first: the
                        drop(pack_file, st.st_size)  # pack is invisible from here on
                        packs += 1
                    else:
                        dead += sum(
                            size for sha, (_, _, size) in pieces.items() if sha not in named
                        )
            with contextlib.suppress(FileNotFoundError), os.scandir(self.root / "tmp") as it:
                for e in it:
                    with contextlib.suppress(OSError):
                        st = e.stat(follow_symlinks=False)
                        if st.st_mtime < cutoff:
                            drop(e.path, st.st_size)
                            tmps += 1
            if not dry_run:
                self._blobs = self._pieces = None
        return Collected(blobs, packs, tmps, freed, dry_run, dead)

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

    def _place(self, tmp: Path, final: Path, durable: bool = True) -> bool:
        """Create-if-absent: link the finished tmp file into place. False: it was there."""
        final.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.link(tmp, final)
            if durable:
                _fsync_dir(final.parent)
            return True
        except FileExistsError:
            return False
        finally:
            tmp.unlink(missing_ok=True)

    def _tmp_write(self, data: bytes, sync: bool = True) -> Path:
        fd, name = tempfile.mkstemp(dir=self.root / "tmp")
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            if sync:
                f.flush()
                os.fsync(f.fileno())
        return Path(name)

    # primitives
    def _packed(self) -> dict[str, tuple[str, int, int]]:
        """sha256 -> (pack, offset, size) of every packed file (the packs' indexes, read once)."""
        if self._pieces is None:
            self._pieces = pack.pieces_of(self.root)
        return self._pieces

    def _loose(self) -> set[str]:
        """The blobs of their own (large files), listed once: a registration asks about every
        file, and a stat per file cost more than reading a small one."""
        if self._blobs is None:
            found: set[str] = set()
            with contextlib.suppress(FileNotFoundError), os.scandir(self._blobdir) as tops:
                for top in tops:
                    with os.scandir(top.path) as it:
                        found.update(top.name + e.name for e in it)
            self._blobs = found
        return self._blobs

    def _has_blob(self, sha: str) -> bool:
        """Packed, or a blob of its own (as listed when first asked; else on disk now)."""
        return (
            sha in self._packed()
            or sha in self._loose()
            or os.path.isfile(f"{self._blobdir}/{sha[:2]}/{sha[2:]}")
        )

    def _ingest(
        self, source: Path, progress: Progress | None, links: dict[str, str]
    ) -> tuple[list[FileEntry], int, int, list[str]]:
        """Small files are read, hashed and packed by worker processes (data/pack.py); large
        ones become blobs of their own here (streamed: flat memory at any size). Until every
        file has been stat'ed (by the workers) the total is an estimate."""
        # Long because: one loop over the workers' batches keeps the bookkeeping of a
        # registration that may be cut at any point (packs published, the stat cache journaled,
        # what was written kept); its pieces share that state.
        names: list[tuple[str, str]] = []  # as the walk finds them (in the paths' order)

        def found() -> Iterator[list[tuple[str, str]]]:
            for chunk in _name_chunks(source, links=links):
                names.extend(chunk)
                yield chunk

        pack.discard_stale(self.root)
        found_entries: list[tuple[str, int, str]] = []  # (path, size, sha256): the workers'
        large: list[int] = []  # indexes of the large files in it
        packs: set[str] = set()  # holding this version's packed files
        unpublished: dict[str, list[tuple[str, int, int]]] = {}
        known, loose = self._packed(), self._loose()
        cache = StatCache(self.stat_cache, source)
        done = hashed = 0
        prefix = pack.new_prefix()
        learned: list[dict[str, pack.Row]] = []  # stat cache rows not journaled yet
        wrote = False  # new pieces in packs
        batches = pack.ingest(self.root, prefix, found(), cache.rows, known, loose, pack.workers())
        try:
            for b in batches:  # taken in whole: nothing here is done per file
                if b.errors:
                    raise TauError(
                        f"cannot register {b.errors[0]}",
                        exit_code=EXIT_USAGE,
                        hint=_CHANGED_HINT
                        if pack.CHANGED in b.errors[0]
                        else "fix or leave out that file, then register again",
                    )
                hashed += b.hashed
                done += b.size
                if b.pieces:
                    unpublished.setdefault(b.pack, []).extend(b.pieces)
                    wrote = True
                if b.large:
                    at = len(found_entries)
                    large += [at + j for j in b.large]
                found_entries += b.entries
                packs |= b.packs
                learned.append(b.rows)
                cache.add(b.rows, keep=False)
                for closed in b.closed:
                    self._publish(closed, unpublished.pop(closed, []))
                # journaled when a pack is published (a killed registration keeps what those
                # packs hold); per batch would cost more than reading the small files again
                if b.closed:
                    cache.journal(learned)
                    learned = []
                if progress:  # the files found so far, those not done yet at the mean size
                    at = len(found_entries)
                    progress(
                        done,
                        done
                        + (len(names) - at) * (done // max(at, 1))
                        + sum(found_entries[i][1] for i in large),
                    )
        finally:  # what was written whole is kept (and reused) even when the rest failed
            batches.close()  # the workers have exited: every pack is complete
            for p, pieces in unpublished.items():
                self._publish(p, pieces)
            pack.discard_unpublished(self.root, prefix)
        entries = list(itertools.starmap(FileEntry, found_entries))
        total = done + sum(found_entries[i][1] for i in large)
        for i in large:
            rel, path = names[i]
            st = os.stat(path, follow_symlinks=False)
            blob = cache.get(rel, st)
            if blob is None or not self._has_blob(blob):
                blob = self._store_file(Path(path), _offset(progress, done, total))
                _unchanged(path, st)
                hashed += st.st_size
                cache.add({rel: (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, blob)})
            entries[i] = FileEntry(rel, st.st_size, blob)
            done += st.st_size
            if progress:
                progress(done, total)
        cache.compact()
        if wrote:  # the packs' indexes are read again when next needed (a large file is never
            self._pieces = None  # packed: the loop above did not need this registration's pieces)
        return entries, done, hashed, sorted(packs)

    def _publish(self, name: str, pieces: list[tuple[str, int, int]]) -> None:
        pack.publish(self.root, name, pieces)
        if pieces:
            final = str(tau_inputs.pack_path(self.root, name))
            self._unsynced += [final, final[: -len(".pack")] + ".idx"]

    def _store_file(self, path: Path, progress: Callable[[int], None]) -> str:
        """Copy into the blob store, hashing as it goes: one read, flat memory at any size.
        Strings and a set of made folders in this loop: it runs once per file."""
        h = hashlib.sha256()
        self._seq += 1
        tmp = f"{self._tmpdir}/{os.getpid()}-{threading.get_ident()}-{self._seq}"
        n = 0
        try:
            with open(tmp, "xb") as out, open(path, "rb") as src:
                while chunk := src.read(CHUNK):
                    h.update(chunk)
                    out.write(chunk)
                    n += len(chunk)
                    progress(n)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            raise
        sha = h.hexdigest()
        os.chmod(tmp, 0o444)  # a blob is never written again
        folder = f"{self._blobdir}/{sha[:2]}"
        if folder not in self._made:
            os.makedirs(folder, exist_ok=True)
            self._made.add(folder)
        try:
            os.link(tmp, f"{folder}/{sha[2:]}")
            self._unsynced.append(f"{folder}/{sha[2:]}")  # made durable before the record
        except FileExistsError:
            pass
        finally:
            os.unlink(tmp)
        if self._blobs is not None:
            self._blobs.add(sha)
        return sha

    @contextlib.contextmanager
    def _local_blob(self, sha: str) -> Iterator[Path | None]:
        p = self.blob(sha)
        if p.is_file():
            yield p
        else:  # packed (or missing): a copy, as any store gives
            with super()._local_blob(sha) as staged:
                yield staged

    def _read_blob(self, sha: str) -> Iterator[bytes] | None:
        p = self.blob(sha)
        if not p.is_file():
            piece = self._packed().get(sha)
            if piece is None:
                return None
            try:
                return iter([self._packs.read(piece)])
            except FileNotFoundError:
                return None

        def chunks() -> Iterator[bytes]:
            with p.open("rb") as f:
                while chunk := f.read(CHUNK):
                    yield chunk

        return chunks()

    def __del__(self) -> None:
        with contextlib.suppress(AttributeError, OSError):
            self._packs.close()

    def _put_record(self, kind: Kind, name: str, version: str, data: bytes) -> bool:
        if self._unsynced:  # every pack and blob on disk before the record that names them
            _fsync_all(self._unsynced)
            self._unsynced = []
        return self._place(self._tmp_write(data), self._record_path(kind, name, version))

    # the reads below use strings, not Paths: `list` makes them once per name (1,000 names)
    def _home(self, kind: Kind, name: str) -> str:
        return f"{self.root}/{kind}s/{check_name(name)}"

    def _get_record(self, kind: Kind, name: str, version: str) -> bytes | None:
        try:
            with open(self._record_path(kind, name, version), "rb") as f:
                return f.read()
        except FileNotFoundError:
            return None

    def _version_ids(self, kind: Kind, name: str) -> list[str]:
        try:
            with os.scandir(f"{self._home(kind, name)}/versions") as it:
                found = [e for e in it if e.name.endswith(".json")]
            if len(found) == 1:  # most names: nothing to order, no stat
                return [found[0].name[:-5]]
            ordered = sorted((e.stat().st_mtime_ns, e.name[:-5]) for e in found)
        except (FileNotFoundError, NotADirectoryError):
            return []
        return [hexid for _, hexid in ordered]

    def names(self, kind: Kind) -> list[str]:
        try:
            with os.scandir(f"{self.root}/{kind}s") as it:
                return sorted(e.name for e in it if e.is_dir())
        except (FileNotFoundError, NotADirectoryError):
            return []

    def _aliases_doc(self, kind: Kind, name: str) -> dict[str, Any]:
        try:
            with open(f"{self._home(kind, name)}/aliases.json", "rb") as f:
                return dict(json.loads(f.read()))
        except FileNotFoundError:
            return {}

    def _update_aliases(
        self, kind: Kind, name: str, change: Callable[[dict[str, Any]], dict[str, Any]]
    ) -> dict[str, Any]:
        with self._lock(kind, name):
            new = change(self._aliases_doc(kind, name))
            tmp = self._tmp_write(json.dumps(new, indent=1, sort_keys=True).encode())
            os.replace(tmp, self.home(kind, name) / "aliases.json")
            _fsync_dir(self.home(kind, name))
            return new

    def _drop_record(self, kind: Kind, name: str, version: str) -> None:
        record = self._record_path(kind, name, version)
        record.with_suffix(".head").unlink(missing_ok=True)
        record.unlink(missing_ok=True)

    def _put_head(self, kind: Kind, name: str, version: str, data: bytes) -> None:
        self._place(
            self._tmp_write(data, sync=False),
            self._record_path(kind, name, version).with_suffix(".head"),
            durable=False,
        )

    def _get_head(self, kind: Kind, name: str, version: str) -> bytes | None:
        try:
            with open(
                f"{self._home(kind, name)}/versions/{version[len(DIGEST_PREFIX) :]}.head", "rb"
            ) as f:
                return f.read()
        except FileNotFoundError:
            return None


def _walk(
    source: Path, links: dict[str, str] | None = None
) -> list[tuple[str, str, os.stat_result]]:
    """_names with each file's stat (taken again where the file is read: a change between the
    two is refused)."""
    return [(rel, p, os.stat(p, follow_symlinks=False)) for rel, p in _names(source, links)]


def _names(source: Path, links: dict[str, str] | None = None) -> list[tuple[str, str]]:
    """The files of a file or folder: (relative path, path), sorted by relative path."""
    return [name for chunk in _name_chunks(source, links=links) for name in chunk]


def _kind_of(mode: int) -> str | None:
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
    what = _kind_of(st.st_mode)
    if what is not None:
        raise TauError(f"{source} is {what}: register a file or a folder", exit_code=EXIT_USAGE)


def _write_checked(
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


def _already_there(record: VersionRecord, dest: Path) -> tuple[set[str], list[str]]:
    """Before anything is written: the version's files already in `dest` with its bytes, and
    those with other bytes (a local edit); a file where the version has a folder (or the
    other way round) is refused."""
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
            if out.stat().st_size == f.size and tau_inputs._sha256(out) == f.sha256:
                same.add(f.path)
            else:
                edited.append(f.path)
    return same, edited


def _name_chunks(
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
    """One folder's walk for `_name_chunks`: the files found so far wait in `buf` until a
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
        what = _kind_of(st.st_mode)
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
                what = _kind_of(e.stat(follow_symlinks=False).st_mode) or "not a regular file"
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


REGISTRY_ENV = "TAU_REGISTRY"


def registry_url(registry: str | None = None) -> str:
    """`registry`, else TAU_REGISTRY, else $TAU_HOME/data/registry (the local stand-in for the
    workspace volume's /data/registry)."""
    from taugrid.api.home import tau_home

    return registry or os.environ.get(REGISTRY_ENV) or f"file://{tau_home() / 'data' / 'registry'}"


def default_store(registry: str | None = None) -> Store:
    """The registry a command means: `registry`, else TAU_REGISTRY, else this machine's own
    ($TAU_HOME/data/registry, made on first use). A named one must exist."""
    from taugrid.api.home import tau_home

    named = registry or os.environ.get(REGISTRY_ENV)
    return open_store(registry_url(registry), tau_home() / "cache" / "data-stat", create=not named)


def open_store(url: str, stat_cache: Path | None = None, *, create: bool = False) -> Store:
    """`file:///DIR` or `az://ACCOUNT/CONTAINER[/PREFIX]` (`api.data.parse_registry`: one
    grammar, anything else refused with the expected form). A file store's folder must exist
    unless `create` (a typo must not read as an empty registry, nor make a new one)."""
    from taugrid.api.data import parse_registry

    where = parse_registry(url)
    if where.scheme == "az":
        from taugrid.data.azure import AzureStore

        return AzureStore(where.url, stat_cache)
    root = Path(where.path)
    if not root.is_dir():
        if root.exists():
            raise TauError(
                f"registry {where.url}: {root} is not a folder",
                exit_code=EXIT_USAGE,
                hint="name a folder (file:///ABSOLUTE/FOLDER)",
            )
        if not create:
            raise TauError(
                f"registry {where.url} does not exist",
                exit_code=EXIT_USAGE,
                hint=f"check the address (--registry, {REGISTRY_ENV}); to start a new "
                f"registry there: mkdir -p {root}",
            )
    return FileStore(root, stat_cache)
