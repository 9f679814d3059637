"""Registry stores of datasets and models: no server, safe for many writers.

`Store` holds what every store does (register with the stat cache, resolve, verify, pull,
list), on a few primitives each store implements: blobs and version records written
create-if-absent, and an alias document moved by compare-and-swap. `FileStore` (`file://DIR`)
is in data/filestore.py; `AzureStore` (`az://`, data/azure.py) writes with ETag conditions.

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
import hashlib
import os
import tempfile
import time
from collections.abc import Callable, Iterator
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
    manifest_digest,
    short,
)
from taugrid.api.errors import EXIT_PLATFORM, EXIT_RUN_FAILED, EXIT_USAGE, TauError
from taugrid.api.home import tau_home
from taugrid.data.files import Progress as Progress
from taugrid.data.files import (
    StatCache,
    already_there,
    offset_progress,
    unchanged,
    walk,
    write_checked,
)
from taugrid.host.folders import note_pulled

CHUNK = 1 << 20


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


@dataclass(frozen=True)
class Stored:
    """How a version's bytes were stored (what its record keeps beside its files)."""

    total: int  # bytes of every file
    hashed: int  # bytes read and hashed here
    packs: list[str]  # the packs holding small files (a file store's)
    links: dict[str, str]  # symbolic links followed: path -> what the link says


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
            return self._record_version(
                kind,
                name,
                entries,
                created,
                Stored(total, hashed, packs, links),
                purpose=purpose,
                description=description,
                tags=tags,
                lineage=lineage,
            )
        except OSError as e:  # a file of the source, or the store itself
            raise self._os_problem(e, source) from None

    def _record_version(
        self,
        kind: Kind,
        name: str,
        entries: list[FileEntry],
        created: Created,
        stored: Stored,
        *,
        purpose: str | None,
        description: str | None,
        tags: dict[str, str] | None,
        lineage: Lineage | None,
    ) -> Registered:
        """The version record naming `entries` (their bytes already stored), written
        create-if-absent: the same content again is the version already there."""
        version = manifest_digest(entries)
        record = VersionRecord(
            kind=kind,
            name=name,
            version=version,
            files=[],
            size=stored.total,
            created=created,
            purpose=purpose,
            description=description,
            tags=tags or {},
            lineage=lineage or Lineage(),
            written_ns=time.time_ns(),
            packs=stored.packs,
            links=stored.links,
        )
        # the entries are the caller's (each path checked there): not checked a second time
        record = record.model_copy(update={"files": entries})
        data = record.model_dump_json(indent=1, by_alias=True).encode()
        if not self._put_record(kind, name, version, data):
            existing = self.read(kind, name, version)
            self._keep_head(existing)  # a registry written before heads existed
            return Registered(existing, False, stored.hashed)
        self._keep_head(record)
        return Registered(record, True, stored.hashed)

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
        files = walk(source, links)
        total = sum(st.st_size for _, _, st in files)
        cache = StatCache(self.stat_cache, source)
        done = hashed = 0
        entries: list[FileEntry] = []
        for rel, path, st in files:
            sha = cache.get(rel, st)
            if sha is None or not self._has_blob(sha):
                sha = self._store_file(Path(path), offset_progress(progress, done, total))
                unchanged(path, st)
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
        same, edited = already_there(record, dest)
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
            wrote = write_checked(chunks, out, f.sha256, done, record.size, progress)
            if wrote is None:
                raise TauError(
                    f"{record.name}@{record.short}: {f.path} changed in the store",
                    exit_code=EXIT_RUN_FAILED,
                    hint=hint,
                )
            note_pulled(tau_home(), dest, f.path, f.sha256)
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
                    got = dest._store_file(staged, offset_progress(progress, done, record.size))
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
    from taugrid.data.filestore import FileStore

    return FileStore(root, stat_cache)
