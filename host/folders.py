"""Folders a user names for TauGrid to write into, checked before anything is written."""

from __future__ import annotations

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
