"""Default factories for model fields.

`Field(default_factory=list)` costs pydantic an `inspect.signature(list)` for every such field
when it builds a model's validator (it asks whether the factory takes the validated data):
~150 us each, as it parses the builtin's text signature with `ast`. A plain function's
signature is ~7 us. Tau builds its models in every command, so the fields use these.
"""

from __future__ import annotations

from typing import Any


def new_list() -> list[Any]:
    """A new empty list (a field's default)."""
    return []
