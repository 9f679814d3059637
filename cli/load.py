"""Reading documents (tau.yaml, profile snapshots) into validated models, with clear errors.

Every failure becomes a `ConfigError` naming the file, the key path (and its line), the bad
value and an example of a good one; misspelled keys get a "did you mean".
"""

from __future__ import annotations

import difflib
import re
import types
import typing
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from taugrid.api.manifest import Issue, Manifest, semantic_issues
from taugrid.cli.errors import ConfigError, TauError
from taugrid.cli.paths import DISCOVERY, find_manifest

MAX_DOCUMENT_BYTES = 1024 * 1024

_Loader: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _UniqueKeyLoader(_Loader):  # type: ignore[valid-type,misc]
    """Safe loader that refuses duplicate keys instead of silently keeping the last one."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None,
                    None,
                    f"key {key!r} appears twice (first on line {seen[key] + 1})",
                    key_node.start_mark,
                )
            seen[key] = key_node.start_mark.line
        return super().construct_mapping(node, deep=deep)  # type: ignore[no-any-return]


# Good examples per key path; the generic fallback builds one from the field's type.
EXAMPLES: dict[str, str] = {
    "schema_version": "schema_version: 1",
    "name": "name: my-run",
    "run": "run: {entrypoint: train.py, workload_kind: rayjob}",
    "run.entrypoint": "run: {entrypoint: train.py}",
    "run.workload_kind": "run: {workload_kind: rayjob}   # rayjob | job",
    "run.args": "run: {args: ['--epochs', '3']}",
    "compute": "compute: {gpus: 1, workers: 1, cpus: 16, memory: 64Gi}",
    "compute.gpus": "compute: {gpus: 1}   # per worker, 0..8",
    "compute.workers": "compute: {workers: 2}   # worker pods, 1..256",
    "compute.cpus": "compute: {cpus: 8}   # or 0.5, or 500m",
    "compute.memory": "compute: {memory: 64Gi}",
    "compute.worker_cpus": "compute: {worker_cpus: 8}",
    "compute.worker_memory": "compute: {worker_memory: 32Gi}",
    "compute.cpu_limit": "compute: {cpus: 8, cpu_limit: 16}",
    "compute.memory_limit": "compute: {memory: 64Gi, memory_limit: 128Gi}",
    "compute.mig_profile": "compute: {mig_profile: 1g.10gb}",
    "runtime": "runtime: {image: rayproject/ray:2.56.0-py312, pip: ['torch>=2.4.0']}",
    "runtime.image": "runtime: {image: rayproject/ray:2.56.0-py312}",
    "runtime.pip": "runtime: {pip: ['torch>=2.4.0', 'transformers']}",
    "runtime.env": "runtime: {env: [{name: MY_FLAG, value: '1'}]}",
    "runtime.env_from_secret": "runtime: {env_from_secret: {HF_TOKEN: 'hf-secret:token'}}",
    "storage": "storage: {checkpoint: checkpoints, output: outputs}",
    "storage.data_pvc": "storage: {data_pvc: team-a-data}",
    "storage.checkpoint": "storage: {checkpoint: checkpoints}",
    "storage.output": "storage: {output: outputs}",
    "policy": "policy: {workspace: team-a, profile: a100-1x, priority: normal}",
    "policy.profile": "policy: {profile: a100-1x}",
    "policy.workspace": "policy: {workspace: team-a}",
    "resilience": "resilience: {max_retries: 2, retry_on: [Preempted, Evicted]}",
    "resilience.max_retries": "resilience: {max_retries: 2}   # 0..20",
    "resilience.retry_on": "resilience: {retry_on: [Preempted, Evicted, NodeFailure]}",
    "metrics.stall_after_seconds": "metrics: {stall_after_seconds: 900}",
    "resource_naming.prefix": "resource_naming: {prefix: tau}",
}


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
            hint="pass the path of a tau.yaml file, e.g. tau run validate examples/quickstart/tau.yaml",
        )
    return p


def read_document(path: Path, what: str = "file") -> tuple[str, Any]:
    """Read and YAML-parse one document. Returns (text, data)."""
    try:
        if not path.exists():
            raise TauError(
                f"{path}: no such {what}", hint="check the path; tau.yaml lives beside your code"
            )
        if path.is_dir():
            raise TauError(f"{path}: is a directory, not a {what}")
        size = path.stat().st_size
        if size > MAX_DOCUMENT_BYTES:
            raise TauError(
                f"{path}: is {size} bytes; a {what} is at most {MAX_DOCUMENT_BYTES} bytes"
            )
        raw = path.read_bytes()
    except PermissionError:
        raise TauError(f"{path}: permission denied") from None
    except OSError as e:
        raise TauError(f"{path}: cannot read ({e.strerror or e})") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise TauError(f"{path}: is not UTF-8 text (is it a binary file?)") from None
    if not text.strip():
        raise ConfigError(
            str(path),
            [
                Issue(
                    "",
                    None,
                    "is empty",
                    "schema_version: 1\nname: my-run\nrun: {entrypoint: train.py}",
                )
            ],
        )
    try:
        data = yaml.load(text, Loader=_UniqueKeyLoader)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None) or getattr(e, "context_mark", None)
        where = f"{path}:{mark.line + 1}" if mark is not None else str(path)
        problem = getattr(e, "problem", None) or str(e)
        context = getattr(e, "context", None)
        msg = f"{where}: not valid YAML: {problem}" + (
            f" ({context})" if context and "twice" not in problem else ""
        )
        raise TauError(msg, hint="check indentation and quoting around that line") from None
    return text, data


# --- mapping pydantic errors to issues ----------------------------------------------------
def _unwrap(annotation: Any) -> list[Any]:
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        return [t for a in typing.get_args(annotation) for t in _unwrap(a)]
    if origin is typing.Annotated:
        return _unwrap(typing.get_args(annotation)[0])
    return [annotation]


def _model_at(root: type[BaseModel], loc: Sequence[int | str]) -> type[BaseModel] | None:
    """The model class that holds the key at `loc` (loc without the key itself)."""
    current: Any = root
    for part in loc:
        candidates = _unwrap(current)
        nxt: Any = None
        for c in candidates:
            if isinstance(part, int) and typing.get_origin(c) is list:
                nxt = typing.get_args(c)[0]
                break
            if isinstance(part, str) and isinstance(c, type) and issubclass(c, BaseModel):
                field = c.model_fields.get(part)
                if field is not None:
                    nxt = field.annotation
                    break
        if nxt is None:
            return None
        current = nxt
    for c in _unwrap(current):
        if isinstance(c, type) and issubclass(c, BaseModel):
            return c
    return None


def _all_paths(model: type[BaseModel], prefix: str = "") -> Iterator[str]:
    for name, field in model.model_fields.items():
        path = f"{prefix}{name}"
        yield path
        for c in _unwrap(field.annotation):
            if isinstance(c, type) and issubclass(c, BaseModel):
                yield from _all_paths(c, path + ".")


def _path(loc: Sequence[int | str]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + part
    return out


MINIMAL = "{schema_version: 1, name: my-run, run: {entrypoint: train.py}}"


def _example_for(
    path: str, examples: dict[str, str] | None = None, fallback: str | None = MINIMAL
) -> str | None:
    """The closest example: the key's own, else its block's, else a minimal document."""
    examples = EXAMPLES if examples is None else examples
    key = path
    while key:
        stripped = re.sub(r"\[\d+\]", "", key)
        if stripped in examples:
            return examples[stripped]
        key = key.rpartition(".")[0]
    return fallback


def _did_you_mean(root: type[BaseModel], loc: Sequence[int | str]) -> str | None:
    key = str(loc[-1])
    parent = _model_at(root, loc[:-1])
    if parent is not None:
        close = difflib.get_close_matches(key, list(parent.model_fields), n=1, cutoff=0.6)
        if close:
            return _path([*loc[:-1], close[0]])
    # A key written at the wrong level (e.g. top-level `gpus`): find where it belongs.
    here = _path(loc[:-1])
    for p in _all_paths(root):
        if p.rpartition(".")[2] == key and p != _path(loc) and (not here or p.startswith(here)):
            return p
    matches = difflib.get_close_matches(
        key, [p.rpartition(".")[2] for p in _all_paths(root)], n=1, cutoff=0.75
    )
    if matches:
        return next(p for p in _all_paths(root) if p.rpartition(".")[2] == matches[0])
    return None


_TYPE_WORDS = {
    "int_type": "must be a whole number",
    "int_from_float": "must be a whole number",
    "float_type": "must be a number",
    "string_type": "must be a string (quote it)",
    "bool_type": "must be true or false",
    "list_type": "must be a list",
    "dict_type": "must be a mapping of keys to values",
    "model_type": "must be a mapping of keys to values",
    "model_attributes_type": "must be a mapping of keys to values",
}


def issues_from_validation(
    root: type[BaseModel],
    err: ValidationError,
    examples: dict[str, str] | None = None,
    fallback: str | None = MINIMAL,
) -> list[Issue]:
    out: list[Issue] = []
    seen: set[str] = set()
    for e in err.errors(include_url=False):
        loc = [
            p
            for p in e["loc"]
            if not (isinstance(p, str) and ("[" in p or p.startswith(("function-", "list["))))
        ]
        # pydantic reports union branches separately; keep the first error per path.
        loc = [p for p in loc if p not in ("str", "int", "float", "dict[str,str]", "list[EnvVar]")]
        path = _path(loc)
        if path in seen:
            continue
        seen.add(path)
        kind, ctx = e["type"], e.get("ctx") or {}
        value = e.get("input")
        example = _example_for(path, examples, fallback)
        if kind == "extra_forbidden":
            guess = _did_you_mean(root, loc)
            msg = "unknown key" + (f"; did you mean {guess!r}?" if guess else "")
            parent = _model_at(root, loc[:-1])
            if guess is None and parent is not None:
                msg += f" (known here: {', '.join(parent.model_fields)})"
            out.append(
                Issue(path, value, msg, _example_for(guess or _path(loc[:-1]), examples, fallback))
            )
            continue
        if kind == "missing":
            msg = "is required"
            value = None
        elif kind in ("greater_than_equal", "greater_than", "less_than_equal", "less_than"):
            field_model = _model_at(root, loc[:-1])
            lo = hi = None
            if field_model is not None:
                for m in field_model.model_fields[str(loc[-1])].metadata:
                    lo = getattr(m, "ge", lo)
                    hi = getattr(m, "le", hi)
            rng = f"{lo if lo is not None else '...'}..{hi if hi is not None else '...'}"
            msg = f"is out of range: want {rng}"
        elif kind == "literal_error":
            msg = f"must be one of: {ctx.get('expected', '')}".replace("'", "")
        elif kind in _TYPE_WORDS:
            msg = _TYPE_WORDS[kind] + (f", got {type(value).__name__}" if value is not None else "")
        elif kind == "value_error":
            msg = str(ctx.get("error", e["msg"]))
        elif kind == "union_tag_invalid" or kind.startswith("union"):
            msg = e["msg"]
        else:
            msg = e["msg"][0].lower() + e["msg"][1:]
        out.append(Issue(path, value, msg, example))
    return out


def _line_of(text: str, path: str) -> int | None:
    """1-based line of a key path, for error messages (computed only when reporting)."""
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError:
        return None
    parts: list[int | str] = []
    for seg in path.replace("[", ".[").split("."):
        if not seg:
            continue
        parts.append(int(seg[1:-1]) if seg.startswith("[") else seg)
    line = None
    for part in parts:
        if isinstance(node, yaml.MappingNode) and isinstance(part, str):
            match = next(((k, v) for k, v in node.value if k.value == part), None)
            if match is None:
                break
            line = match[0].start_mark.line + 1
            node = match[1]
        elif (
            isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value)
        ):
            node = node.value[part]
            line = node.start_mark.line + 1
        else:
            break
    return line


def config_error(path: Path, text: str, issues: list[Issue]) -> ConfigError:
    located = []
    for i in issues:
        line = _line_of(text, i.path) if i.path else None
        located.append(
            (
                line or 0,
                Issue(f"{i.path} (line {line})" if line else i.path, i.value, i.message, i.example),
            )
        )
    located.sort(key=lambda pair: pair[0])
    return ConfigError(str(path), [issue for _, issue in located])


M = TypeVar("M", bound=BaseModel)


def validate_document(model: type[M], data: Any, path: Path, text: str, what: str) -> M:
    if not isinstance(data, dict):
        raise ConfigError(
            str(path),
            [
                Issue(
                    "",
                    None,
                    f"must be a mapping of keys to values (a {what}), got {type(data).__name__}",
                    None,
                )
            ],
        )
    try:
        return model.model_validate(data)
    except ValidationError as e:
        raise config_error(path, text, issues_from_validation(model, e)) from None


def load_manifest(arg: str | Path | None) -> LoadedManifest:
    path = resolve_manifest_path(str(arg) if arg is not None else None)
    text, data = read_document(path, "tau.yaml")
    if (
        isinstance(data, dict)
        and "schema_version" not in data
        and ("engine" in data or "run" in data)
    ):
        hint = (
            "this looks like a direct run config (engine: ...); tau.yaml schema_version 1 is the "
            "supported format: add `schema_version: 1` and use run.workload_kind instead of engine"
        )
        if "engine" in data:
            raise ConfigError(
                str(path), [Issue("engine", data["engine"], hint, "run: {workload_kind: rayjob}")]
            )
    manifest = validate_document(Manifest, data, path, text, "tau.yaml")
    problems = semantic_issues(manifest)
    ep = manifest.entrypoint_path
    if not problems and ep and not (path.parent / ep).is_file():
        problems.append(
            Issue(
                "run.entrypoint",
                ep,
                f"no such file in {path.parent}",
                "run: {entrypoint: train.py}",
            )
        )
    if problems:
        raise config_error(path, text, problems)
    return LoadedManifest(path=path, text=text, manifest=manifest)


def load_snapshot(arg: str | Path) -> Any:
    from taugrid.api.profiles import ProfileSnapshot

    path = Path(arg)
    text, data = read_document(path, "profile snapshot")
    return validate_document(ProfileSnapshot, data, path, text, "profile snapshot")
