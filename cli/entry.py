"""The `tau` console script. Before the CLI framework and the models load (~0.2 s), a plain
`tau run [submit] [FILE] [-d] [--strict] [-t local]` hands its Ray job to a warm local head
(cli/prelaunch.py), so Ray's job start-up overlaps tau's own. Anything else goes straight on.
"""

from __future__ import annotations

import os
import sys

_FLAGS = frozenset({"-d", "--detach", "--strict"})
_TARGET_OPTS = frozenset({"-t", "--target"})
_NOT_SUBMIT = frozenset(
    {"validate", "render", "status", "logs", "list", "cancel", "resume", "verify", "metrics",
     "schema", "-h", "--help"}
)  # fmt: skip


class _Ineligible(Exception):
    pass


def early_file(argv: list[str], env_target: str | None) -> tuple[str | None]:
    """`(FILE,)` when argv is a plain local submission (FILE may be None: the current folder).

    Raises _Ineligible for anything else: other commands, other targets, any other option.
    """
    if not argv or argv[0] != "run":
        raise _Ineligible
    rest = argv[1:]
    if rest and rest[0] == "submit":
        rest = rest[1:]
    elif rest and rest[0] in _NOT_SUBMIT:
        raise _Ineligible
    files: list[str] = []
    target = env_target or "local"
    i = 0
    while i < len(rest):
        a = rest[i]
        if a in _FLAGS:
            pass
        elif a in _TARGET_OPTS and i + 1 < len(rest):
            target = rest[i + 1]
            i += 1
        elif a.startswith("--target="):
            target = a.split("=", 1)[1]
        elif a.startswith("-") or files:
            raise _Ineligible
        else:
            files.append(a)
        i += 1
    if target != "local":
        raise _Ineligible
    return (files[0] if files else None,)


def main() -> int:
    try:
        (file,) = early_file(sys.argv[1:], os.environ.get("TAU_TARGET"))
    except _Ineligible:
        pass
    else:
        from taugrid.cli import prelaunch

        prelaunch.submit_early(file)
    from taugrid.cli.main import main as cli_main

    return cli_main()
