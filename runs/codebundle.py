"""The code snapshot a run carries: the files of the tau.yaml folder, content-addressed.

What is left out, and why, is part of the result (never silent): hidden entries, caches and
virtualenvs; data and weight files (they belong under /data, not in a ConfigMap); and whatever
the folder's `.gitignore` or `.tauignore` (gitignore syntax, `!pattern` re-includes) excludes.
Later rules win: `.tauignore` over `.gitignore` over the defaults.
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from taugrid.api import constants as C
from taugrid.api.errors import TauError

if TYPE_CHECKING:
    from pathspec import GitIgnoreSpec

QUIET = "hidden, cache or virtualenv"  # left out without naming each entry
DATA = "data or weights"
DEFAULT_RULES: tuple[tuple[str, str], ...] = (
    *((p, QUIET) for p in (".*", "__pycache__/", "node_modules/", "venv/", "*.egg-info/")),
    *((p, "compiled") for p in ("*.pyc", "*.pyo", "*.so", "*.o")),
    *(
        (p, DATA)
        for p in (
            "*.pt",
            "*.pth",
            "*.ckpt",
            "*.safetensors",
            "*.bin",
            "*.npz",
            "*.npy",
            "*.parquet",
            "*.arrow",
            "*.h5",
            "*.onnx",
            "*.tar",
            "*.tar.gz",
            "*.zip",
        )
    ),
)
IGNORE_FILES = (".gitignore", ".tauignore")


@dataclass(frozen=True)
class LeftOut:
    path: str  # posix, relative; a folder ends with '/'
    reason: str


@dataclass(frozen=True)
class CodeBundle:
    root: Path
    files: tuple[tuple[str, bytes], ...]  # (posix relative path, content), sorted
    left_out: tuple[LeftOut, ...] = field(default=())

    @property
    def size(self) -> int:
        return sum(len(b) for _, b in self.files)

    @functools.cached_property
    def digest(self) -> str:
        return "sha256:" + _files_hash(self.files).hexdigest()

    def left_out_summary(self, limit: int = 6) -> str | None:
        """One line naming what a cluster run will not carry, and why (None: nothing)."""
        named = [x for x in self.left_out if x.reason != QUIET]
        if not named:
            return None
        shown = [f"{x.path} ({x.reason})" for x in named[:limit]]
        more = f", and {len(named) - limit} more" if len(named) > limit else ""
        advice = ""
        if any(x.reason == DATA for x in named):
            advice = "; data and weights belong under /data (TAU_DATA_DIR)"
        return "left out of the code bundle: " + "; ".join(shown) + more + advice

    def split_helpers(self) -> tuple[tuple[tuple[str, bytes], ...], tuple[tuple[str, bytes], ...]]:
        """(the folder's own files, the helpers `collect` added): the helpers are the same in
        every run of this TauGrid, so a cluster can hold them once (`helpers_digest`)."""
        added = {id(data) for _, data in _helpers()}
        own = tuple(f for f in self.files if id(f[1]) not in added)
        helpers = tuple(f for f in self.files if id(f[1]) in added)
        return own, helpers

    def as_json(self) -> dict[str, object]:
        return {
            "files": len(self.files),
            "bytes": self.size,
            "limit_bytes": C.CODE_BUNDLE_LIMIT_BYTES,
            "left_out": [
                {"path": x.path, "reason": x.reason} for x in self.left_out if x.reason != QUIET
            ],
        }


HELPER = "tau_run.py"


HELPER_MODULES = ("tau_run", "tau_evidence", "tau_launch", "tau_inputs", "tau_ray")


@functools.cache
def _helpers() -> tuple[tuple[str, bytes], ...]:
    """The stdlib-only modules every run carries, read once per process (found, not imported:
    this process does not need them)."""
    from importlib.util import find_spec

    out = []
    for module in HELPER_MODULES:
        spec = find_spec(module)
        assert spec is not None and spec.origin, f"{module} is part of taugrid's install"
        path = Path(spec.origin)
        out.append((path.name, path.read_bytes()))
    return tuple(out)


@functools.cache
def _helper_digests() -> dict[int, tuple[bytes, bytes]]:
    """sha256 of each helper's content, by the identity of the bytes `_helpers` holds (every
    bundle carries the same ~40 KB: hashed once per process, not once per render)."""
    return {id(data): (data, hashlib.sha256(data).digest()) for _, data in _helpers()}


def file_digest(data: bytes) -> bytes:
    """sha256 of one file of a bundle (a helper's: from `_helper_digests`)."""
    known = _helper_digests().get(id(data))
    if known is not None and known[0] is data:
        return known[1]
    return hashlib.sha256(data).digest()


def _files_hash(files: tuple[tuple[str, bytes], ...]) -> hashlib._Hash:
    """sha256 over (path, content digest) of each file, in order: a bundle's content address."""
    h = hashlib.sha256()
    for rel, data in files:
        h.update(rel.encode() + b"\0" + file_digest(data))
    return h


def helpers_digest(helpers: tuple[tuple[str, bytes], ...]) -> str:
    """A short content address of a set of helpers (a shared ConfigMap's name ends with it)."""
    return _files_hash(helpers).hexdigest()[:12]


@functools.cache
def _helper_texts() -> dict[int, tuple[bytes, str]]:
    return {id(data): (data, data.decode("utf-8")) for _, data in _helpers()}


def text_of(data: bytes) -> str | None:
    """A file of a bundle as UTF-8 text (a helper's: decoded once per process); None: binary."""
    known = _helper_texts().get(id(data))
    if known is not None and known[0] is data:
        return known[1]
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


@dataclass(frozen=True)
class _NameRule:
    """One default rule as string tests, not a regex (compiling ~25 of them was ~3 ms of every
    render's start): a name equal to `exact`, or starting with `prefix` and ending with `suffix`
    (a pattern with one '*'), or else matching `pattern` (any other glob)."""

    exact: str | None
    prefix: str
    suffix: str
    pattern: re.Pattern[str] | None
    folders_only: bool
    reason: str

    def matches(self, name: str) -> bool:
        if self.exact is not None:
            return name == self.exact
        if self.pattern is not None:
            return self.pattern.match(name) is not None
        return (
            len(name) >= len(self.prefix) + len(self.suffix)
            and name.startswith(self.prefix)
            and name.endswith(self.suffix)
        )


_GLOB = frozenset("*?[\\")


def _name_rule(glob: str, reason: str) -> _NameRule:
    name = glob.removesuffix("/")
    folders_only = glob.endswith("/")
    if _GLOB.isdisjoint(name):
        return _NameRule(name, "", "", None, folders_only, reason)
    head, _, tail = name.partition("*")
    if _GLOB.isdisjoint(head + tail):
        return _NameRule(None, head, tail, None, folders_only, reason)
    from fnmatch import translate

    return _NameRule(None, "", "", re.compile(translate(name)), folders_only, reason)


@functools.cache
def _default_rules() -> tuple[_NameRule, ...]:
    """DEFAULT_RULES as name tests, the last first (the last match wins)."""
    return tuple(_name_rule(glob, reason) for glob, reason in reversed(DEFAULT_RULES))


def default_reason(rel: str) -> str | None:
    """DEFAULT_RULES alone, as gitignore reads them, without pathspec (a faster start): each is
    a name pattern with no inner '/', so it matches the last component (the walk has already
    left out ignored folders); a trailing '/' matches folders only; the last match wins."""
    is_dir = rel.endswith("/")
    name = rel.rstrip("/").rsplit("/", 1)[-1]
    for rule in _default_rules():
        if (is_dir or not rule.folders_only) and rule.matches(name):
            return rule.reason
    return None


def _rules(root: Path, names: list[str]) -> tuple[GitIgnoreSpec, list[str]] | None:
    """The folder's ignore rules after the defaults (None: it has no ignore file). `names`:
    the folder's entries (an ignore file it does not have is not looked for)."""
    extra: list[tuple[str, str]] = []
    for name in IGNORE_FILES:
        if name not in names:
            continue
        try:
            text = (root / name).read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        for raw in text.splitlines():
            line = raw.strip()
            if line and not line.startswith("#"):
                extra.append((raw.rstrip(), f"{name}: {line}"))
    if not extra:
        return None
    from pathspec import GitIgnoreSpec

    rules = [*DEFAULT_RULES, *extra]
    return GitIgnoreSpec.from_lines([p for p, _ in rules]), [r for _, r in rules]


def _within(root: Path, files: list[tuple[str, bytes]], limit: int) -> None:
    """Refused when the code is over what a run carries, naming the largest files."""
    total = sum(len(b) for _, b in files)
    if total > limit:
        biggest = sorted(files, key=lambda f: -len(f[1]))[:5]
        shown = ", ".join(f"{rel} ({len(data) // 1024} KiB)" for rel, data in biggest)
        raise TauError(
            f"{root}: the code is {total // 1024} KiB, over the {limit // 1024} KiB a run carries "
            f"(in a ConfigMap); largest: {shown}",
            hint="move data and weights under /data (TAU_DATA_DIR), or list them in .tauignore",
        )


def collect(
    root: Path, limit: int = C.CODE_BUNDLE_LIMIT_BYTES, include_helper: bool = True
) -> CodeBundle:
    """Files under `root` that a run carries, and what is left out (with the reason).

    The stdlib-only helpers are added (unless the folder has its own): `tau_run` so training
    code can `import tau_run` on cluster images that do not have TauGrid installed, and the
    in-pod launcher `tau_launch` with `tau_evidence`, which keep the run's evidence record.
    """
    rules: tuple[GitIgnoreSpec, list[str]] | None = None
    files: list[tuple[str, bytes]] = []
    left_out: list[LeftOut] = []

    def ignored(rel: str) -> str | None:
        if rules is None:
            return default_reason(rel)
        spec, reasons = rules
        hit = spec.check_file(rel)
        return reasons[hit.index] if hit.include and hit.index is not None else None

    top = os.fspath(root)
    for dirpath, dirnames, filenames in os.walk(top):
        prefix = dirpath[len(top) :].lstrip(os.sep).replace(os.sep, "/")  # walk joins onto top
        if prefix:
            prefix += "/"
        else:  # the folder itself, first: its ignore files
            rules = _rules(root, filenames)
        keep = []
        for d in sorted(dirnames):
            rel = f"{prefix}{d}/"
            venv = os.path.exists(os.path.join(dirpath, d, "pyvenv.cfg"))
            why = ignored(rel) or (QUIET if venv else None)
            if why:
                left_out.append(LeftOut(rel, why))
            else:
                keep.append(d)
        dirnames[:] = keep
        for name in sorted(filenames):
            rel = f"{prefix}{name}"
            why = ignored(rel)
            if why:
                left_out.append(LeftOut(rel, why))
                continue
            path = os.path.join(dirpath, name)
            if os.path.isfile(path):
                with open(path, "rb") as f:
                    files.append((rel, f.read()))
    _within(root, files, limit)
    if include_helper:
        have = {rel for rel, _ in files}
        files += [
            (name, data) for name, data in _helpers() if name not in have
        ]  # the folder's own wins
    return CodeBundle(root=root, files=tuple(sorted(files)), left_out=tuple(left_out))
