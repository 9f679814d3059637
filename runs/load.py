"""Reading documents (tau.yaml, profile snapshots) from disk into validated models.

Every failure becomes a `ConfigError` naming the file, the key path (and its line), the bad
value and an example of a good one; misspelled keys get a "did you mean" (api/issues.py).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from taugrid.api.documents import parse_yaml, validate_document
from taugrid.api.errors import ConfigError, TauError
from taugrid.api.issues import Issue, config_error
from taugrid.api.manifest import EXAMPLES, Manifest
from taugrid.api.manifest_rules import semantic_issues
from taugrid.runs.paths import DISCOVERY, find_manifest

if TYPE_CHECKING:
    from taugrid.api.profiles import ProfileSnapshot

MAX_DOCUMENT_BYTES = 1024 * 1024
YAML_SUFFIXES = (".yaml", ".yml")
SCRIPT_KINDS = {
    ".py": "a Python script",
    ".sh": "a shell script",
    ".ipynb": "a notebook",
    ".json": "a JSON file",
    ".toml": "a TOML file",
}
EMPTY_EXAMPLE = "schema_version: 1\nname: my-run\nrun: {entrypoint: train.py}"


@dataclass(frozen=True)
class LoadedManifest:
    path: Path
    text: str
    manifest: Manifest

    @property
    def folder(self) -> Path:
        return self.path.parent


def resolve_manifest_path(arg: str | None) -> Path:
    """A file, a folder holding tau.yaml, or nothing (the current folder)."""
    p = Path(arg) if arg else Path.cwd()
    if p.is_dir():
        found = find_manifest(p)
        if found:
            return found
        raise TauError(
            f"{p}: is a directory with no {' / '.join(DISCOVERY)} in it",
            hint="pass the path of a tau.yaml file, e.g. tau run validate "
            "examples/quickstart/tau.yaml",
        )
    if p.suffix.lower() not in YAML_SUFFIXES and p.is_file():
        beside = find_manifest(p.parent)
        what = SCRIPT_KINDS.get(p.suffix.lower(), f"a {p.suffix or 'suffix-less'} file")
        hint = (
            f"its folder has {beside.name}: pass {beside} (or the folder {p.parent})"
            if beside
            else f"write a tau.yaml beside it with run: {{entrypoint: {p.name}}}, then pass "
            "the tau.yaml or its folder"
        )
        raise TauError(f"{p}: is {what}, not a tau.yaml", hint=hint)
    return p


def read_text(path: Path, what: str = "file") -> str:
    """A user's document as text: missing, unreadable, too large or binary are clear errors."""
    try:
        with open(path, "rb") as f:  # one open, not a stat per question
            size = os.fstat(f.fileno()).st_size
            if size > MAX_DOCUMENT_BYTES:
                raise TauError(
                    f"{path}: is {size} bytes; a {what} is at most {MAX_DOCUMENT_BYTES} bytes"
                )
            raw = f.read()
    except FileNotFoundError:
        raise TauError(
            f"{path}: no such {what}", hint="check the path; tau.yaml lives beside your code"
        ) from None
    except IsADirectoryError:
        raise TauError(f"{path}: is a directory, not a {what}") from None
    except PermissionError:
        raise TauError(f"{path}: permission denied") from None
    except OSError as e:
        raise TauError(f"{path}: cannot read ({e.strerror or e})") from None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise TauError(f"{path}: is not UTF-8 text (is it a binary file?)") from None


def read_document(path: Path, what: str = "file") -> tuple[str, Any]:
    """Read and YAML-parse one document. Returns (text, data)."""
    text = read_text(path, what)
    return text, parse_yaml(text, str(path), EMPTY_EXAMPLE)


def load_manifest(arg: str | Path | None, purpose: str = "run") -> LoadedManifest:
    """A validated tau.yaml. `purpose`: "run" (it needs an entrypoint) or "service" (it needs
    a `service` block); a file may declare both."""
    path = resolve_manifest_path(str(arg) if arg is not None else None)
    text, data = read_document(path, "tau.yaml")
    if isinstance(data, dict) and "schema_version" not in data and "engine" in data:
        hint = (
            "this looks like a direct run config (engine: ...); tau.yaml schema_version 1 is the "
            "supported format: add `schema_version: 1` and use run.workload_kind instead of engine"
        )
        raise ConfigError(
            str(path), [Issue("engine", data["engine"], hint, "run: {workload_kind: rayjob}")]
        )
    manifest = validate_document(Manifest, data, str(path), text, "tau.yaml", EXAMPLES)
    problems = semantic_issues(manifest)
    ep = manifest.entrypoint_path
    if not problems and ep and not (path.parent / ep).is_file():
        problems.append(_missing_entrypoint(path.parent, ep))
    if not problems and purpose == "run" and not ep:
        problems.append(
            Issue(
                "run.entrypoint",
                None,
                "is required to run: this tau.yaml declares "
                "a service only (deploy it with `tau serve deploy`)",
                "run: {entrypoint: train.py}",
            )
        )
    if not problems and purpose == "service" and manifest.service is None:
        problems.append(
            Issue(
                "service",
                None,
                "is required to serve: the Ray Serve application and the model it serves",
                EXAMPLES["service"],
            )
        )
    if problems:
        raise config_error(str(path), text, problems)
    return LoadedManifest(path=path, text=text, manifest=manifest)


def _missing_entrypoint(folder: Path, ep: str) -> Issue:
    """A missing entrypoint, with the closest scripts of the folder (a typo is the usual cause)."""
    import difflib

    scripts = sorted(
        p.relative_to(folder).as_posix()
        for pattern in ("*.py", "*.sh", "*/*.py", "*/*.sh")
        for p in folder.glob(pattern)
        if p.is_file() and not any(part.startswith(".") for part in p.relative_to(folder).parts)
    )
    close = difflib.get_close_matches(ep, scripts, n=1, cutoff=0.6)
    if close:
        message = f"no such file in {folder}; did you mean {close[0]!r}?"
    elif scripts:
        shown = ", ".join(scripts[:8]) + (", ..." if len(scripts) > 8 else "")
        message = f"no such file in {folder} (its scripts: {shown})"
    else:
        message = f"no such file in {folder}, which has no .py or .sh file"
    return Issue(
        "run.entrypoint", ep, message, f"run: {{entrypoint: {close[0] if close else 'train.py'}}}"
    )


def load_snapshot(arg: str | Path) -> ProfileSnapshot:
    from taugrid.api.profiles import ProfileSnapshot

    path = Path(arg)
    text, data = read_document(path, "profile snapshot")
    return validate_document(ProfileSnapshot, data, str(path), text, "profile snapshot", None, None)
