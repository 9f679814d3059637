"""tau_inputs: a run's data inputs, by exact version, laid out before its entrypoint starts
(stdlib only: it runs in the local launcher and, carried in the run's code, in the pod).

The registry's file layout (the one definition; taugrid.data.store uses these paths):

    <registry>/blobs/sha256/<2>/<62>                  a file's bytes, named by their sha256
    <registry>/packs/<id>.pack                        small files' bytes, one after another
    <registry>/packs/<id>.idx                         `<sha256> <offset> <size>` per file in the
                                                      pack (written after the pack: a pack is
                                                      visible only through its index)
    <registry>/<kind>s/<name>/versions/<hex>.json     a version record (its files: path, size,
                                                      sha256; `packs`: the packs holding them)

A file's bytes are a blob of their own or a piece of a pack (small files are packed: one file
written per registration instead of one per file).

TAU_INPUTS (JSON: [{"kind", "name", "version", "path"}]) names the versions tau resolved at
submit; each is laid out under $TAU_INPUT_DIR/<path>/ as the run's own files (a reflink where
the filesystem has them, else a copy; never a hard link, which would let a write reach the
stored bytes and every other run's), each checked against its size and sha256 as it is laid
out: a missing or changed file stops the run before its code runs. The layout is a working
copy, not part of the run's record (the record names each version): it is removed when the
record is sealed (tau_evidence.seal).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path
from typing import Any

INPUTS_ENV = "TAU_INPUTS"
EXIT_INPUT = 66  # a data input is missing or changed (EX_NOINPUT): the code never ran
FICLONE = 0x40049409  # Linux ioctl: the destination shares the source's extents, copy-on-write
INPUT_DIR_ENV = "TAU_INPUT_DIR"
REGISTRY_DIR_ENV = "TAU_REGISTRY_DIR"
PREFIX = "sha256:"


class InputError(Exception):
    """An input cannot be laid out (the message says which file and why)."""


def blob_path(root: Path, sha: str) -> Path:
    return root / "blobs" / "sha256" / sha[:2] / sha[2:]


def pack_path(root: Path, pack: str) -> Path:
    return root / "packs" / f"{pack}.pack"


def read_pack_index(root: Path, pack: str, into: dict[str, tuple[str, int, int]]) -> None:
    """Add a pack's pieces to `into` (sha256 -> (pack, offset, size)); a missing index adds none."""
    try:
        with (root / "packs" / f"{pack}.idx").open("rb") as f:
            for line in f:
                sha, off, size = line.split()
                into.setdefault(sha.decode(), (pack, int(off), int(size)))
    except FileNotFoundError:
        pass


def pack_ids(root: Path) -> list[str]:
    """Every pack with an index (the visible ones)."""
    try:
        names = os.listdir(root / "packs")
    except FileNotFoundError:
        return []
    return sorted(n[: -len(".idx")] for n in names if n.endswith(".idx"))


class Packs:
    """Packs open for reading, each opened once (a version of 100,000 small files is read from
    a handful of packs, often on a network volume)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.fds: dict[str, int] = {}

    def read(self, where: tuple[str, int, int]) -> bytes:
        pack, off, size = where
        fd = self.fds.get(pack)
        if fd is None:
            fd = self.fds[pack] = os.open(pack_path(self.root, pack), os.O_RDONLY)
        return os.pread(fd, size, off)

    def close(self) -> None:
        for fd in self.fds.values():
            os.close(fd)
        self.fds.clear()


def record_path(root: Path, kind: str, name: str, version: str) -> Path:
    return root / f"{kind}s" / name / "versions" / f"{version[len(PREFIX) :]}.json"


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def _copy_checked(src: Path, dst: Path, sha: str) -> bool:
    """The run's own copy of a stored file (a reflink where the filesystem has them: no bytes
    copied; else a copy, hashed as it is written); whether its bytes have `sha`."""
    with src.open("rb") as s, dst.open("xb") as d:
        try:
            import fcntl

            fcntl.ioctl(d.fileno(), FICLONE, s.fileno())
        except (OSError, ImportError, AttributeError):  # no reflinks here: copied, hashed once
            h = hashlib.sha256()
            while chunk := s.read(1 << 20):
                h.update(chunk)
                d.write(chunk)
            return h.hexdigest() == sha
    return _sha256(dst) == sha


def _safe(rel: str) -> str:
    parts = rel.split("/")
    if not rel or rel.startswith("/") or any(p in ("", ".", "..") for p in parts):
        raise InputError(f"unsafe path {rel!r} in a version record")
    return rel


def materialize(root: Path, inputs: list[dict[str, Any]], dest: Path) -> list[str]:
    """Lay out each input under dest/<path>/; returns one line per input."""
    packs = Packs(root)
    try:
        return _materialize(root, inputs, dest, packs)
    finally:
        packs.close()


def _materialize(root: Path, inputs: list[dict[str, Any]], dest: Path, packs: Packs) -> list[str]:
    lines = []
    for inp in inputs:
        kind, name, version = inp["kind"], inp["name"], inp["version"]
        where = dest / _safe(inp.get("path") or name)
        try:
            rec = json.loads(record_path(root, kind, name, version).read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise InputError(
                f"{kind} {name}@{version[:19]} is not in the registry at {root}"
            ) from None
        if where.exists():
            shutil.rmtree(where)  # an earlier attempt's: laid out again, checked again
        packed: dict[str, tuple[str, int, int]] = {}
        for pack in rec.get("packs") or []:
            read_pack_index(root, pack, packed)
        scanned = False  # every pack's index read (a piece not where the record says)
        for f in rec["files"]:
            blob, out = blob_path(root, f["sha256"]), where / _safe(f["path"])
            missing = f"{name}@{version[:19]}: {f['path']} is missing from the registry"
            changed = f"{name}@{version[:19]}: {f['path']} changed in the registry"
            out.parent.mkdir(parents=True, exist_ok=True)
            if not blob.is_file():
                if f["sha256"] not in packed and not scanned:
                    for pack in pack_ids(root):
                        read_pack_index(root, pack, packed)
                    scanned = True
                piece = packed.get(f["sha256"])
                if piece is None:
                    raise InputError(missing)
                try:
                    data = packs.read(piece)
                except FileNotFoundError:
                    raise InputError(missing) from None
                if len(data) != f["size"] or hashlib.sha256(data).hexdigest() != f["sha256"]:
                    raise InputError(changed)
                out.write_bytes(data)
                out.chmod(0o444)
                continue
            if blob.stat().st_size != f["size"] or not _copy_checked(blob, out, f["sha256"]):
                out.unlink(missing_ok=True)
                raise InputError(changed)
            out.chmod(0o444)
        lines.append(f"{kind} {name}@{version[:19]} at {where} ({len(rec['files'])} file(s))")
    return lines


def from_env(env: dict[str, str] | None = None) -> list[str]:
    """Lay out the inputs TAU_INPUTS names (nothing when it is unset)."""
    env = dict(os.environ) if env is None else env
    raw = env.get(INPUTS_ENV)
    if not raw:
        return []
    try:
        inputs = json.loads(raw)
    except ValueError:
        raise InputError(f"{INPUTS_ENV} is not JSON") from None
    root, dest = env.get(REGISTRY_DIR_ENV), env.get(INPUT_DIR_ENV)
    if not root or not dest:
        raise InputError(f"{INPUTS_ENV} is set without {REGISTRY_DIR_ENV} and {INPUT_DIR_ENV}")
    return materialize(Path(root), inputs, Path(dest))


def lay_out(env: dict[str, str], log: Path, say_as: str) -> int | None:
    """Lay out TAU_INPUTS before an entrypoint starts (every launcher calls this: the local
    supervisor, the local Ray launcher, the pod launcher): one line per input on stderr; on a
    missing or changed file the reason is said and appended to `log` (where `tau run status`
    finds it) and EXIT_INPUT is returned: the entrypoint must not start. None: laid out."""
    import sys

    try:
        for line in from_env(env):
            print(f"{say_as}: input {line}", file=sys.stderr, flush=True)
    except InputError as e:
        msg = f"{say_as}: error: a data input cannot be read: {e}; the entrypoint was not started"
        print(msg, file=sys.stderr, flush=True)
        log.parent.mkdir(parents=True, exist_ok=True)
        with log.open("a", encoding="utf-8") as f:
            f.write(msg + "\n")
        return EXIT_INPUT
    return None


def main() -> int:
    """`python tau_inputs.py`: lay out TAU_INPUTS (a service's init container); exit 1 on a
    missing or changed file, with the reason."""
    import sys

    try:
        for line in from_env():
            print(line, flush=True)
    except InputError as e:
        print(f"tau_inputs: {e}", file=sys.stderr, flush=True)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
