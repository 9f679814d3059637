"""Who submitted a run and from which code revision (recorded in run.json and annotations)."""

from __future__ import annotations

from pathlib import Path


def submitter() -> str:
    """`user@host` of the person submitting: the user as `getpass.getuser` finds it (the login
    variables, then the password database), without importing getpass (and its terminal
    modules) on every render. The host is the node name `socket.gethostname` returns, read
    from uname where there is one (importing socket costs ~2 ms of a render's start)."""
    import os

    try:
        user = next(
            (os.environ[k] for k in ("LOGNAME", "USER", "LNAME", "USERNAME") if os.environ.get(k)),
            None,
        )
        if user is None:
            import pwd

            user = pwd.getpwuid(os.getuid()).pw_name
        return f"{user}@{_host()}"
    except Exception:  # no passwd entry (a container): as before
        return "unknown"


def _host() -> str:
    import os

    if hasattr(os, "uname"):
        return os.uname().nodename
    import socket  # Windows

    return socket.gethostname()


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
