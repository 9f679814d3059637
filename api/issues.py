"""Problems in a document, reported the same way everywhere (tau.yaml, profile snapshots,
stack config): `Issue` (where, what was there, what is wrong, what would be right), pydantic
errors turned into issues with a "did you mean", and the YAML line of a key path. Pure.
"""

from __future__ import annotations

import difflib
import re
import types
import typing
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from taugrid.api.errors import ConfigError


@dataclass(frozen=True)
class Issue:
    """One problem in a document: where, what was there, what is wrong, what would be right."""

    path: str
    value: Any
    message: str
    example: str | None = None


MINIMAL = "{schema_version: 1, name: my-run, run: {entrypoint: train.py}}"


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


def _example_for(
    path: str, examples: dict[str, str] | None = None, fallback: str | None = MINIMAL
) -> str | None:
    """The closest example: the key's own, else its block's, else a minimal document."""
    examples = examples or {}
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


_CONTAINER_KINDS = frozenset(
    {"list_type", "dict_type", "model_type", "model_attributes_type", "string_type"}
)


def issues_from_validation(
    root: type[BaseModel],
    err: ValidationError,
    examples: dict[str, str] | None = None,
    fallback: str | None = MINIMAL,
) -> list[Issue]:
    out: list[Issue] = []
    seen: set[str] = set()
    errors = []
    for e in err.errors(include_url=False):
        loc = [
            p
            for p in e["loc"]
            if not (isinstance(p, str) and ("[" in p or p.startswith(("function-", "list["))))
        ]
        # pydantic reports union branches separately; keep the first error per path.
        loc = [p for p in loc if p not in ("str", "int", "float", "dict[str,str]", "list[EnvVar]")]
        errors.append((loc, _path(loc), e))
    deeper = {path for _, path, _ in errors}
    for loc, path, e in errors:
        if path in seen:
            continue
        kind = e["type"]
        if kind in _CONTAINER_KINDS and any(
            d != path and (d.startswith(path + ".") or d.startswith(path + "[")) for d in deeper
        ):
            # A union branch of another shape (e.g. "must be a list" for a map that the map
            # branch accepted up to a bad value): the deeper error is the real one.
            continue
        seen.add(path)
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
            value = None
        out.append(Issue(path, value, _message(root, loc, e, value), example))
    return out


def _message(root: type[BaseModel], loc: list[Any], e: ErrorDetails, value: Any) -> str:
    """One pydantic error in TauGrid's words: what is wrong with the value at `loc`."""
    kind, ctx = e["type"], e.get("ctx") or {}
    if kind == "missing":
        return "is required"
    if kind in ("greater_than_equal", "greater_than", "less_than_equal", "less_than"):
        field_model = _model_at(root, loc[:-1])
        lo = hi = None
        if field_model is not None:
            for m in field_model.model_fields[str(loc[-1])].metadata:
                lo = getattr(m, "ge", lo)
                hi = getattr(m, "le", hi)
        rng = f"{lo if lo is not None else '...'}..{hi if hi is not None else '...'}"
        return f"is out of range: want {rng}"
    if kind == "literal_error":
        return f"must be one of: {ctx.get('expected', '')}".replace("'", "")
    if kind in _TYPE_WORDS:
        return _TYPE_WORDS[kind] + (f", got {type(value).__name__}" if value is not None else "")
    if kind == "value_error":
        return str(ctx.get("error", e["msg"]))
    if kind == "union_tag_invalid" or kind.startswith("union"):
        return e["msg"]
    return e["msg"][0].lower() + e["msg"][1:]


def line_of(text: str, path: str) -> int | None:
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


def config_error(source: str, text: str, issues: list[Issue]) -> ConfigError:
    located = []
    for i in issues:
        line = line_of(text, i.path) if i.path else None
        located.append(
            (
                line or 0,
                Issue(f"{i.path} (line {line})" if line else i.path, i.value, i.message, i.example),
            )
        )
    located.sort(key=lambda pair: pair[0])
    return ConfigError(source, [issue for _, issue in located])
