"""`FileStore`: a registry in a folder (`file://DIR`), on a laptop or a workspace volume; the
layout and its guarantees are in data/store.py's docstring."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import itertools
import json
import os
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import tau_inputs

from taugrid.api.data import DIGEST_PREFIX, FileEntry, Kind, check_name
from taugrid.api.errors import EXIT_PLATFORM, EXIT_RUN_FAILED, EXIT_USAGE, TauError
from taugrid.data import pack
from taugrid.data.files import (
    CHANGED_HINT,
    Progress,
    StatCache,
    fsync_all,
    fsync_dir,
    name_chunks,
    offset_progress,
    unchanged,
)
from taugrid.data.store import CHUNK, Collected, Store


class FileStore(Store):
    """`file://DIR`: blobs and records hard-linked into place if absent; the alias document
    (aliases.json, with its history) replaced atomically under an flock."""

    def __init__(self, root: Path, stat_cache: Path | None = None) -> None:
        self.root = root
        self.stat_cache = stat_cache
        self.url = f"file://{root}"
        self._unsynced: list[str] = []  # written, not yet fsynced (before the record naming them)
        self._seq = 0
        self._claim: str | None = None  # the registration under way's prefix (pack.claimed)
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
                    hint=CHANGED_HINT,
                )
            os.chmod(tmp, 0o444)
            final = self.blob(sha)
            final.parent.mkdir(parents=True, exist_ok=True)
            os.replace(tmp, final)
            fsync_dir(final.parent)
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
                fsync_dir(final.parent)
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
        """`_ingest_claimed` under a claim on its tmp files (pack.claimed): a registration
        killed before this one (SIGKILL included) left its files, reclaimed first, at once."""
        pack.discard_stale(self.root)
        pack.reclaim_dead(self.root)
        prefix = pack.new_prefix()
        with pack.claimed(self.root, prefix):
            self._claim = prefix
            try:
                return self._ingest_claimed(source, progress, links, prefix)
            finally:
                self._claim = None

    def _ingest_claimed(
        self, source: Path, progress: Progress | None, links: dict[str, str], prefix: str
    ) -> tuple[list[FileEntry], int, int, list[str]]:
        """Small files are read, hashed and packed by worker processes (data/pack.py); large
        ones become blobs of their own here (streamed: flat memory at any size). Until every
        file has been stat'ed (by the workers) the total is an estimate."""
        # Long because: one loop over the workers' batches keeps the bookkeeping of a
        # registration that may be cut at any point (packs published, the stat cache journaled,
        # what was written kept); its pieces share that state.
        names: list[tuple[str, str]] = []  # as the walk finds them (in the paths' order)

        def found() -> Iterator[list[tuple[str, str]]]:
            for chunk in name_chunks(source, links=links):
                names.extend(chunk)
                yield chunk

        found_entries: list[tuple[str, int, str]] = []  # (path, size, sha256): the workers'
        large: list[int] = []  # indexes of the large files in it
        packs: set[str] = set()  # holding this version's packed files
        unpublished: dict[str, list[tuple[str, int, int]]] = {}
        known, loose = self._packed(), self._loose()
        cache = StatCache(self.stat_cache, source)
        done = hashed = 0
        learned: list[dict[str, pack.Row]] = []  # stat cache rows not journaled yet
        wrote = False  # new pieces in packs
        batches = pack.ingest(self.root, prefix, found(), cache.rows, known, loose, pack.workers())
        try:
            for b in batches:  # taken in whole: nothing here is done per file
                if b.errors:
                    raise TauError(
                        f"cannot register {b.errors[0]}",
                        exit_code=EXIT_USAGE,
                        hint=CHANGED_HINT
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
                blob = self._store_file(Path(path), offset_progress(progress, done, total))
                unchanged(path, st)
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
        owner = self._claim or str(os.getpid())  # a claimed registration's: reclaimed if it dies
        tmp = f"{self._tmpdir}/{owner}-L{threading.get_ident()}-{self._seq}"
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
            fsync_all(self._unsynced)
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
            fsync_dir(self.home(kind, name))
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
