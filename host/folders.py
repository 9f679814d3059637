"""Folders a user names for TauGrid to write into, checked before anything is written."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path


def folder_problem(path: str | Path) -> str | None:
    """Why files cannot be written into the folder `path` (made if missing), or None: it is a
    file, it is under a file, or the folder it would be made in cannot be written. Said before
    a command writes anything, rather than as an OSError half-way through."""
    p = Path(path).expanduser()
    if not str(path).strip():
        return "is empty"
    if p.exists() and not p.is_dir():
        return "is a file, not a folder"
    probe = p
    while not probe.exists():
        if probe.parent == probe:
            break
        probe = probe.parent
    if probe != p and probe.exists() and not probe.is_dir():
        return f"is under {probe}, which is a file"
    if probe.exists() and not os.access(probe, os.W_OK | os.X_OK):
        return f"cannot be written: {probe} is not writable by this user"
    return None


# What pulls wrote into a folder: one JSON line per file ({"path", "sha256"}, the last line of a
# path wins), so a later pull tells a file it wrote itself, and no one changed since, from a
# person's edit: the first it updates, the second it keeps (unless forced). Kept under tau's
# home, one file per folder, never in the folder itself: a pulled folder holds exactly the files
# pulled (registering it again gives the same version).
LEDGERS = Path("cache") / "pulled"


def ledger(home: Path, dest: Path) -> Path:
    """The ledger of the folder `dest`, under tau's home `home`."""
    key = hashlib.sha256(str(dest.expanduser().resolve()).encode()).hexdigest()[:20]
    return home / LEDGERS / f"{key}.jsonl"


def pulled(home: Path, dest: Path) -> dict[str, str]:
    """What pulls into `dest` wrote: path -> sha256 of the bytes written (a torn line is not
    one)."""
    wrote: dict[str, str] = {}
    try:
        lines = ledger(home, dest).read_text(encoding="utf-8").splitlines()
    except OSError:
        return wrote
    for line in lines:
        try:
            doc = json.loads(line)
            wrote[str(doc["path"])] = str(doc["sha256"])
        except (ValueError, KeyError, TypeError):
            continue
    return wrote


def note_pulled(home: Path, dest: Path, path: str, sha256: str) -> None:
    """That a pull wrote `path` under `dest` with bytes of that digest (one appended line: a
    pull cut off keeps what it noted)."""
    f = ledger(home, dest)
    f.parent.mkdir(parents=True, exist_ok=True)
    with f.open("a", encoding="utf-8") as out:
        out.write(json.dumps({"path": path, "sha256": sha256}) + "\n")
