"""Who submitted a run and from which code revision (recorded in run.json and annotations)."""

from __future__ import annotations

from pathlib import Path


def submitter() -> str:
    """`user@host` of the person submitting."""
    import getpass
    import socket

    try:
        return f"{getpass.getuser()}@{socket.gethostname()}"
    except Exception:  # getpass can fail in containers without a passwd entry
        return "unknown"


def code_revision(folder: Path) -> str:
    """The git commit of the code folder (first 12 hex digits), read without running git."""
    for d in (folder, *folder.resolve().parents):
        git = d / ".git"
        head = git / "HEAD"
        if not head.is_file():
            continue
        ref = head.read_text().strip()
        if not ref.startswith("ref: "):
            return ref[:12]  # a detached HEAD
        name = ref[5:]
        target = git / name
        if target.is_file():
            return target.read_text().strip()[:12]
        packed = git / "packed-refs"
        if packed.is_file():
            for line in packed.read_text().splitlines():
                if line.endswith(" " + name):
                    return line.split()[0][:12]
        return "unknown"
    return "unknown"
