"""A kubeconfig file checked before the client reads it: which file, and what is wrong with it,
in words (exit 4), never a parser's exception."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from taugrid.api.errors import EXIT_PLATFORM, TauError

HINT = (
    "set KUBECONFIG to a working file (for the sandbox: export KUBECONFIG=$(tau sandbox "
    "kubeconfig --as researcher)), or pass --context"
)


def kubeconfig_path() -> Path:
    """The kubeconfig a cluster command reads: the first of KUBECONFIG, else ~/.kube/config."""
    first = os.environ.get("KUBECONFIG", "").split(os.pathsep)[0]
    return Path(first or os.path.expanduser("~/.kube/config"))


def _names(items: Any) -> list[str]:
    return [str(i.get("name")) for i in items if isinstance(i, dict) and i.get("name")]


def check(path: Path, context: str | None) -> str:
    """The context to use (`context`, else the file's current-context), once the file is a
    usable kubeconfig; else a TauError that names the file and the problem."""
    return load(path, context)[0]


def load(path: Path, context: str | None) -> tuple[str, dict[str, Any]]:
    """`check`, and the file's content (read and parsed once: the client is made from it)."""
    import yaml

    def bad(what: str) -> TauError:
        return TauError(f"kubeconfig {path}: {what}", exit_code=EXIT_PLATFORM, hint=HINT)

    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        raise bad("no such file") from None
    except OSError as e:
        raise bad(f"cannot be read ({e.strerror or e})") from None
    try:
        doc = yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        problem = getattr(e, "problem", None) or type(e).__name__
        raise bad(f"is not valid YAML{where}: {problem}") from None
    if doc is None:
        raise bad("is empty")
    if not isinstance(doc, dict):
        raise bad(
            f"is not a kubeconfig (a YAML mapping with clusters, users and contexts; "
            f"this file holds a {type(doc).__name__})"
        )
    return _check_context(doc, context, bad), doc


def _check_context(doc: dict[str, Any], context: str | None, bad: Callable[[str], TauError]) -> str:
    """The context to use (`context`, else the current one), checked: it exists, its cluster
    exists and has a server, its user (if any) exists."""
    contexts = doc.get("contexts") or []
    if not isinstance(contexts, list) or not _names(contexts):
        raise bad("has no contexts")
    name = context or doc.get("current-context")
    if not name:
        raise bad(
            f"sets no current-context; pick one with --context ({', '.join(_names(contexts))})"
        )
    ctx = next((c for c in contexts if isinstance(c, dict) and c.get("name") == name), None)
    if ctx is None:
        raise bad(f"has no context {name!r} (contexts: {', '.join(_names(contexts))})")
    raw_spec = ctx.get("context")
    spec: dict[str, Any] = raw_spec if isinstance(raw_spec, dict) else {}
    raw_clusters = doc.get("clusters")
    clusters: list[Any] = raw_clusters if isinstance(raw_clusters, list) else []
    cluster = spec.get("cluster")
    if not cluster or cluster not in _names(clusters):
        known = ", ".join(_names(clusters)) or "none"
        raise bad(
            f"context {name!r} names cluster {cluster!r}, which is not in its clusters ({known})"
        )
    entry = next(c for c in clusters if isinstance(c, dict) and c.get("name") == cluster)
    server = (
        (entry.get("cluster") or {}).get("server")
        if isinstance(entry.get("cluster"), dict)
        else None
    )
    if not server:
        raise bad(f"cluster {cluster!r} has no server address")
    user = spec.get("user")
    raw_users = doc.get("users")
    users: list[Any] = raw_users if isinstance(raw_users, list) else []
    if user and user not in _names(users):
        raise bad(
            f"context {name!r} names user {user!r}, which is not in its users "
            f"({', '.join(_names(users)) or 'none'})"
        )
    return str(name)


def contexts(path: Path | None = None) -> tuple[list[str], str | None] | None:
    """The context names of a kubeconfig and its current-context; None when the file cannot
    be read as one (the client then says why, when it reads it)."""
    try:
        doc = load(path or kubeconfig_path(), None)[1]
    except TauError:
        try:  # a file without a usable current-context still has names
            import yaml

            raw = yaml.safe_load((path or kubeconfig_path()).read_text(encoding="utf-8"))
        except (OSError, ValueError, yaml.YAMLError):
            return None
        if not isinstance(raw, dict) or not isinstance(raw.get("contexts"), list):
            return None
        return _names(raw["contexts"]), None
    return _names(doc.get("contexts") or []), doc.get("current-context") or None


@dataclass(frozen=True)
class ContextChoice:
    """The kubeconfig context a recorded cluster run is looked at through, and what to say
    about it (once) when it is not the one the run was submitted with."""

    context: str | None  # None: the client's own default (the kubeconfig's current context)
    note: str | None = None


def choose_context(
    explicit: str | None, recorded: str | None, known: tuple[list[str], str | None] | None
) -> ContextChoice:
    """Which context: an explicit one (`--context`, `TAU_CONTEXT`) always; else the recorded
    one when the kubeconfig (`known`: its names and current context) has it; else the current
    one, said. A kubeconfig that cannot be read keeps the recorded one (the client says what
    is wrong with the file)."""
    if explicit:
        return ContextChoice(explicit)
    if recorded is None or known is None:
        return ContextChoice(recorded)
    names, current = known
    if recorded in names or not current:
        return ContextChoice(recorded)
    return ContextChoice(
        current,
        f"note: the run was submitted with context {recorded!r}; using {current!r} (this "
        f"kubeconfig has no {recorded!r}; --context picks another)",
    )
