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


def parse_yaml(text: str, source: str, empty_example: str | None = None) -> Any:
    """One YAML document; duplicate keys, syntax errors and emptiness are clear errors."""
    if not text.strip():
        raise ConfigError(source, [Issue("", None, "is empty", empty_example)])
    try:
        return yaml.load(text, Loader=_UniqueKeyLoader)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None) or getattr(e, "context_mark", None)
        where = f"{source}:{mark.line + 1}" if mark is not None else source
        problem = getattr(e, "problem", None) or str(e)
        context = getattr(e, "context", None)
        msg = f"{where}: not valid YAML: {problem}" + (
            f" ({context})" if context and "twice" not in problem else ""
        )
        raise TauError(msg, hint="check indentation and quoting around that line") from None


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
