"""Datasets and models with versions, aliases and lineage: the records (pure: no I/O).

A version is immutable and named by its content: the sha256 of its canonical manifest (one
line `path<TAB>size<TAB>sha256` per file, sorted by path), shown short as `sha256:1a2b3c4d5e6f`.
Each file's bytes are stored once in a store, however many versions contain them. Aliases
(`prod`, `latest`) point at versions; every move is appended to the alias's history.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from operator import attrgetter
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from taugrid.api.defaults import new_list
from taugrid.api.errors import EXIT_USAGE, TauError
from taugrid.api.vocabulary import (
    ResolvedInput as ResolvedInput,  # a run's input (the run vocabulary)
)

Kind = Literal["dataset", "model"]
KINDS: tuple[Kind, ...] = ("dataset", "model")
DIGEST_PREFIX = "sha256:"
SHORT = 12  # hex digits shown

_NAME = re.compile(r"^[a-z0-9]([a-z0-9._-]{0,61}[a-z0-9])?$")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
# A path inside a version: `/`-separated parts, none empty, `.` or `..` (a part may start with a
# dot: `.cache`, `..x`), no backslash or control character. One pattern: a path is checked
# with one match (a record holds 100,000).
_C = r"[^/\\\x00-\x1f\x7f]"
_PART = rf"(?:[^./\\\x00-\x1f\x7f]{_C}*|\.[^./\\\x00-\x1f\x7f]{_C}*|\.\.{_C}+)"
PATH_PATTERN = rf"^{_PART}(?:/{_PART})*$"
_PATH = re.compile(PATH_PATTERN)
_SHA = re.compile(r"[0-9a-f]{64}")
# Many at once: the values joined by NUL (never in a path or a digest), one match in C for a
# whole file list instead of a call per file; a list that fails is then checked one by one.
_PATHS = re.compile(rf"{_PART}(?:/{_PART})*(?:\x00{_PART}(?:/{_PART})*)*")
_SHAS = re.compile(r"[0-9a-f]{64}(?:\x00[0-9a-f]{64})*")


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)


def bad(what: str, value: str, why: str, hint: str | None = None) -> TauError:
    return TauError(f"{what} {value!r}: {why}", exit_code=EXIT_USAGE, hint=hint)


def check_name(value: str, what: str = "name") -> str:
    """Dataset, model and alias names: lower-case letters, digits, `.`, `_`, `-` (<= 63)."""
    if not _NAME.match(value) or ".." in value:
        raise bad(
            what,
            value,
            "use lower-case letters, digits, '.', '_' and '-' (at most 63, "
            "starting and ending with a letter or digit)",
            "e.g. fineweb-edu or prod",
        )
    return value


def check_path(value: str) -> str:
    """A file's path inside a version: relative, `/`-separated, no `..`, no control chars."""
    if _PATH.fullmatch(value):
        return value
    if not value or value.startswith("/") or _CONTROL.search(value) or "\\" in value:
        raise bad("path", value, "must be relative, '/'-separated, without control characters")
    raise bad("path", value, "must not contain '.', '..' or empty parts")


_ACCOUNT = re.compile(r"^[a-z0-9]{3,24}$")
_CONTAINER = re.compile(r"^[a-z0-9](?!.*--)[a-z0-9-]{1,61}[a-z0-9]$")
REGISTRY_FORMS = "file:///ABSOLUTE/FOLDER or az://ACCOUNT/CONTAINER[/PREFIX]"


@dataclass(frozen=True)
class RegistryURL:
    """A registry's address, parsed (`parse_registry`): a file store's absolute folder, or an
    Azure Blob container (and a prefix inside it). `url` is its one spelling."""

    url: str
    scheme: Literal["file", "az"]
    path: str = ""  # file: the absolute folder
    account: str = ""  # az
    container: str = ""
    prefix: str = ""  # az: "" or "a/b/" (with its trailing slash)


def parse_registry(url: str) -> RegistryURL:
    """The one grammar of registry addresses: `file:///ABSOLUTE/FOLDER` (three slashes: no
    host) or `az://ACCOUNT/CONTAINER[/PREFIX]` (Azure's naming rules). Anything else (a plain
    path, `file:x`, `file:/x`, `file://host/x`, `az:/x`, another scheme) is a TauError (exit 2)
    naming the expected form."""
    got = _parse_registry(url)
    if isinstance(got, str):
        raise TauError(
            f"registry {url!r}: {got}", exit_code=EXIT_USAGE, hint=f"a registry is {REGISTRY_FORMS}"
        )
    return got


class _Bad(Exception):
    """Why a registry address is none (inside `_parse`)."""


def _parse_registry(url: str) -> RegistryURL | str:
    """A RegistryURL, or why `url` is none."""
    try:
        return _parse(url)
    except _Bad as e:
        return str(e)


def _parse(url: str) -> RegistryURL:
    import posixpath

    bad = _Bad
    if _CONTROL.search(url):
        raise bad("contains control characters")
    if url.startswith("file://"):
        path = url[len("file://") :]
        if not path.startswith("/"):
            host = path.split("/", 1)[0]
            raise bad(
                f"a file:// registry names no host ({host!r}): file:///ABSOLUTE/FOLDER"
                if host
                else "names no folder"
            )
        path = posixpath.normpath(path)
        if path.startswith("//"):
            path = "/" + path.lstrip("/")
        return RegistryURL(f"file://{path}", "file", path=path)
    if url.startswith("az://"):
        parts = url[len("az://") :].strip("/").split("/", 2)
        if len(parts) < 2 or not parts[0] or not parts[1]:
            raise bad("expected az://ACCOUNT/CONTAINER[/PREFIX]")
        if not _ACCOUNT.match(parts[0]):
            raise bad(f"storage account {parts[0]!r}: 3-24 lower-case letters and digits")
        if not _CONTAINER.match(parts[1]):
            raise bad(
                f"container {parts[1]!r}: 3-63 lower-case letters, digits and single "
                "hyphens, starting and ending with a letter or digit"
            )
        prefix = parts[2].strip("/") if len(parts) > 2 else ""
        if prefix and any(p in ("", ".", "..") for p in prefix.split("/")):
            raise bad("the prefix must not contain empty, '.' or '..' parts")
        canonical = f"az://{parts[0]}/{parts[1]}" + (f"/{prefix}" if prefix else "")
        return RegistryURL(
            canonical,
            "az",
            account=parts[0],
            container=parts[1],
            prefix=prefix + "/" if prefix else "",
        )
    if url.startswith(("file:", "az:")):
        raise bad(f"not {REGISTRY_FORMS}")
    if "://" not in url and url.startswith("/"):
        raise bad(f"a folder is named as a URL: file://{url}")
    raise bad(f"not {REGISTRY_FORMS}")


def registry_problem(url: str) -> str | None:
    """Why `url` cannot name a registry (None: it can): `parse_registry`'s reason."""
    got = _parse_registry(url)
    return got if isinstance(got, str) else None


@dataclass(slots=True)
class FileEntry:
    """One file of a version: a plain dataclass, checked where it comes from outside (a record
    read: VersionRecord checks each entry; a registration: the walk checks each path). A record
    holds 100,000 of them: a model instance costs ~4x a dataclass to make, and a frozen
    dataclass ~3x a plain one (nothing changes an entry once made; the record holding it is
    frozen)."""

    path: str
    size: int
    sha256: str

    __pydantic_config__ = ConfigDict(extra="forbid")


def _joined_ok(pattern: re.Pattern[str], values: list[str]) -> bool:
    """Each value matches (a NUL inside a value would split it: then counted as a failure)."""
    joined = "\0".join(values)
    return joined.count("\0") == len(values) - 1 and pattern.fullmatch(joined) is not None


def check_paths(values: list[str]) -> None:
    """check_path of each value (the first bad one is the error), in one match when all are good."""
    if values and not _joined_ok(_PATHS, values):
        for v in values:
            check_path(v)


def entries_problem(files: list[FileEntry]) -> str | None:
    """Why one of the entries read from a record is not one (None: all are): one match over
    every path and one over every digest; the entries one by one only when one is bad."""
    if not files:
        return None
    ok = (
        _joined_ok(_PATHS, [f.path for f in files])
        and _joined_ok(_SHAS, [f.sha256 for f in files])
        and min(f.size for f in files) >= 0
    )
    if ok:
        return None
    for f in files:
        problem = entry_problem(f)
        if problem:
            return problem
    return None


def entry_problem(f: FileEntry) -> str | None:
    """Why a file entry read from a record is not one (None: it is)."""
    if not _PATH.fullmatch(f.path):
        try:
            check_path(f.path)
        except TauError as e:
            return str(e)
    if f.size < 0:
        return f"size {f.size} of {f.path!r} is negative"
    if not _SHA.fullmatch(f.sha256):
        return f"sha256 of {f.path!r} is not a sha256 hex digest"
    return None


def manifest_digest(files: list[FileEntry]) -> str:
    """The version id: sha256 of the canonical manifest (sorted by path)."""
    lines = "".join(
        [f"{f.path}\t{f.size}\t{f.sha256}\n" for f in sorted(files, key=attrgetter("path"))]
    )
    return DIGEST_PREFIX + hashlib.sha256(lines.encode()).hexdigest()


def short(version: str) -> str:
    return version[: len(DIGEST_PREFIX) + SHORT]


class Created(_Model):
    by: str
    at: str
    host: str
    run: str | None = None  # the run that made it (a model)


class DataInput(_Model):
    """A dataset a run read, by exact version."""

    name: str
    version: str


class Lineage(_Model):
    run: str | None = None
    inputs: list[DataInput] = Field(default_factory=new_list)
    config_hash: str | None = None
    code_revision: str | None = None
    checkpoint: str | None = None  # the run's checkpoint this model is
    metrics: dict[str, float] = Field(default_factory=dict)  # at that checkpoint


class VersionHead(_Model):
    """What a listing shows of a version, kept beside its record (a record may list 100,000
    files: `list` reads heads, never records)."""

    version: str
    size: int = Field(ge=0)
    files: int = Field(ge=0)  # how many
    created: Created
    written_ns: int = 0  # orders versions made in the same second (as the record's)

    @classmethod
    def of(cls, record: VersionRecord) -> VersionHead:
        return cls(
            version=record.version,
            size=record.size,
            files=len(record.files),
            created=record.created,
            written_ns=record.written_ns,
        )


class VersionRecord(_Model):
    """One immutable version of a dataset or a model."""

    schema_version: Literal[1] = 1
    kind: Kind
    name: str
    version: str
    files: list[FileEntry]
    size: int = Field(ge=0)
    created: Created
    purpose: str | None = None
    description: str | None = None
    tags: dict[str, str] = Field(default_factory=dict)
    lineage: Lineage = Field(default_factory=Lineage)
    written_ns: int = Field(
        0, description="When the store wrote it (orders versions made in one second)"
    )
    packs: list[str] = Field(
        default_factory=new_list,
        description="Where a file store packed its small files (a hint for readers, not part "
        "of the version id; another store's copy has its own)",
    )
    links: dict[str, str] = Field(
        default_factory=dict,
        description="The symbolic links inside the registered folder that were followed (path "
        "-> what the link said); their targets' bytes are stored under the links' paths (not "
        "part of the version id)",
    )

    @field_validator("files")
    @classmethod
    def _files(cls, files: list[FileEntry]) -> list[FileEntry]:
        problem = entries_problem(files)
        if problem:
            raise ValueError(problem)
        return files

    @property
    def short(self) -> str:
        return short(self.version)

    def digest_ok(self) -> bool:
        return manifest_digest(self.files) == self.version


class AliasMove(_Model):
    alias: str
    from_version: str | None = Field(None, alias="from")
    to: str | None  # None: removed
    by: str
    at: str

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class Ref(_Model):
    """NAME, NAME@VERSION (full or short digest) or NAME@ALIAS."""

    name: str
    at: str | None = None

    @property
    def is_version(self) -> bool:
        return self.at is not None and self.at.startswith(DIGEST_PREFIX)

    def __str__(self) -> str:
        return f"{self.name}@{self.at}" if self.at else self.name


def parse_ref(text: str) -> Ref:
    name, sep, at = text.partition("@")
    check_name(name)
    if not sep:
        return Ref(name=name)
    if not at:
        raise bad("reference", text, "names nothing after '@'", "NAME@ALIAS or NAME@sha256:VERSION")
    if at.startswith(DIGEST_PREFIX):
        hexpart = at[len(DIGEST_PREFIX) :]
        if not re.fullmatch(r"[0-9a-f]{6,64}", hexpart):
            raise bad("version", at, "is not sha256:<hex> (6 to 64 hex digits)")
        return Ref(name=name, at=at)
    return Ref(name=name, at=check_name(at, "alias"))


def parse_tags(items: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items:
        k, sep, v = item.partition("=")
        if not sep or not k or _CONTROL.search(item):
            raise bad("tag", item, "must be KEY=VALUE", "e.g. --tag split=train")
        out[k] = v
    return out
