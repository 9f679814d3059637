"""YAML documents to validated models, with one clear message per problem. Pure (text in,
model or ConfigError out); reading the file is the caller's (taugrid.runs.load, infra).
"""

from __future__ import annotations

from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from taugrid.api.errors import ConfigError, TauError
from taugrid.api.issues import MINIMAL, Issue, config_error, issues_from_validation

_Loader: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
M = TypeVar("M", bound=BaseModel)


_STR, _MAP, _SEQ = "tag:yaml.org,2002:str", "tag:yaml.org,2002:map", "tag:yaml.org,2002:seq"
_MERGE = "tag:yaml.org,2002:merge"
# A plain scalar's text -> the tag PyYAML's implicit resolvers give it (a regular expression per
# candidate tag, in Python, for every scalar of every document). It depends on the text alone
# (no path resolvers are registered), and the same texts come back: keys, small values.
_PLAIN_TAGS: dict[str, str] = {}
_PLAIN_TAGS_MAX, _PLAIN_TEXT_MAX = 10_000, 64


class _Slow(Exception):
    """The fast construction met what only PyYAML's own handles (a merge key, a cycle, ...)."""


def _twice(key: Any, first_line: int, mark: Any) -> yaml.constructor.ConstructorError:
    return yaml.constructor.ConstructorError(
        None, None, f"key {key!r} appears twice (first on line {first_line + 1})", mark
    )


class _UniqueKeyLoader(_Loader):  # type: ignore[valid-type,misc]
    """Safe loader that refuses duplicate keys instead of silently keeping the last one.

    Documents are built from the parsed nodes by one recursive function: plain mappings,
    sequences and strings directly, every other scalar by PyYAML's own constructor for its tag
    (ints, bools, floats, nulls, timestamps: the same values). Anything else (a merge key `<<`,
    an alias that contains itself, an explicit collection tag, an unknown tag) is built by
    PyYAML's machinery, which costs ~5x per node."""

    def resolve(self, kind: Any, value: Any, implicit: Any) -> Any:
        if kind is not yaml.ScalarNode or not implicit[0] or self.yaml_path_resolvers:
            return super().resolve(kind, value, implicit)
        tag = _PLAIN_TAGS.get(value)
        if tag is None:
            tag = super().resolve(kind, value, implicit)
            if len(value) <= _PLAIN_TEXT_MAX and len(_PLAIN_TAGS) < _PLAIN_TAGS_MAX:
                _PLAIN_TAGS[value] = tag
        return tag

    def construct_document(self, node: yaml.Node) -> Any:
        try:
            return self._build(node, {}, set())
        except _Slow:
            return super().construct_document(node)

    def _build(self, node: yaml.Node, done: dict[int, Any], busy: set[int]) -> Any:
        kind, tag = type(node), node.tag
        if kind is yaml.ScalarNode:
            if tag == _STR:
                return node.value
            make = self.yaml_constructors.get(tag)
            if make is None:
                raise _Slow
            return make(self, node)
        key = id(node)
        if key in done:  # an alias: the same object, as PyYAML gives it
            return done[key]
        if key in busy:
            raise _Slow
        busy.add(key)
        if kind is yaml.MappingNode and tag == _MAP:
            out: dict[Any, Any] = {}
            lines: dict[Any, int] = {}
            for key_node, value_node in node.value:
                if key_node.tag == _MERGE:
                    raise _Slow
                k = self._build(key_node, done, busy)
                try:
                    if k in lines:
                        raise _twice(k, lines[k], key_node.start_mark)
                except TypeError:  # not hashable: PyYAML says so
                    raise _Slow from None
                lines[k] = key_node.start_mark.line
                out[k] = self._build(value_node, done, busy)
        elif kind is yaml.SequenceNode and tag == _SEQ:
            out = [self._build(item, done, busy) for item in node.value]  # type: ignore[assignment]
        else:
            raise _Slow
        busy.discard(key)
        done[key] = out
        return out

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        """The mapping's own keys once each (keys a merge `<<` brings may be overridden, as YAML
        says); an unhashable key is PyYAML's error."""
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == _MERGE:
                continue
            key = self.construct_object(key_node, deep=deep)
            try:
                if key in seen:
                    raise _twice(key, seen[key], key_node.start_mark)
            except TypeError:
                break
            seen[key] = key_node.start_mark.line
        return super().construct_mapping(node, deep=deep)  # type: ignore[no-any-return]


def parse_yaml(text: str, source: str, empty_example: str | None = None) -> Any:
    """One YAML document; duplicate keys, syntax errors and emptiness are clear errors."""
    if not text.strip():
        raise ConfigError(source, [Issue("", None, "is empty", empty_example)])
    try:
        data = yaml.load(text, Loader=_UniqueKeyLoader)
    except yaml.YAMLError as e:
        message, hint = _yaml_problem(e, text, source)
        raise TauError(message, hint=hint) from None
    if data is None:
        raise ConfigError(
            source, [Issue("", None, "is empty (it has only comments)", empty_example)]
        )
    return data


def _yaml_problem(e: yaml.YAMLError, text: str, source: str) -> tuple[str, str]:
    """(message, hint) for a YAML error, at the line that needs the fix."""
    lines = text.splitlines()
    tabbed = next(
        (i for i, ln in enumerate(lines) if "\t" in ln[: len(ln) - len(ln.lstrip())]), None
    )
    problem_mark = getattr(e, "problem_mark", None)
    context_mark = getattr(e, "context_mark", None)
    problem = getattr(e, "problem", None) or str(e)
    context = getattr(e, "context", None) or ""
    if tabbed is not None:
        return (
            f"{source}:{tabbed + 1}: not valid YAML: this line is indented with a tab; "
            "YAML indents with spaces only",
            "replace the tab with spaces (your editor can show whitespace)",
        )
    if context_mark is not None and "flow" in context:
        # An unclosed { or [: the parser notices lines later; the fix is where it opened.
        opened = context_mark.line + 1
        bracket = "{" if "mapping" in context else "["
        closer = "}" if bracket == "{" else "]"
        where = f" (the parser gave up at line {problem_mark.line + 1})" if problem_mark else ""
        return (
            f"{source}:{opened}: not valid YAML: the '{bracket}' opened on this line is not "
            f"closed, or a ',' is missing{where}",
            f"close it with '{closer}' on the same entry, or separate items with ','",
        )
    if context_mark is not None and "quoted scalar" in context:
        return (
            f"{source}:{context_mark.line + 1}: not valid YAML: the quote opened on this line is "
            "not closed",
            "close the string with the same quote character",
        )
    if "appears twice" in problem:
        mark = problem_mark or context_mark
        where = f"{source}:{mark.line + 1}" if mark is not None else source
        return f"{where}: not valid YAML: {problem}", "keep one of the two"
    mark = problem_mark or context_mark
    where = f"{source}:{mark.line + 1}" if mark is not None else source
    extra = f" ({context})" if context and "twice" not in problem else ""
    return (
        f"{where}: not valid YAML: {problem}{extra}",
        "check indentation and quoting around that line",
    )


def validate_document(
    model: type[M],
    data: Any,
    source: str,
    text: str,
    what: str,
    examples: dict[str, str] | None = None,
    fallback: str | None = MINIMAL,
) -> M:
    """`data` as `model`, or a ConfigError listing every problem with its line."""
    if not isinstance(data, dict):
        message = f"must be a mapping of keys to values (a {what}), got {type(data).__name__}"
        raise ConfigError(source, [Issue("", None, message, None)])
    try:
        return model.model_validate(data)
    except ValidationError as e:
        issues = issues_from_validation(model, e, examples, fallback)
        raise config_error(source, text, issues) from None
