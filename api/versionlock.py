"""The version lock: every setting of the platform declaration marked promotable (component
versions and the like), what promotion moves from one stack to the next and what a CI cluster
verifies."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, MutableMapping
from typing import Any

from pydantic import BaseModel

from taugrid.api.platform import PlatformConfig, validate_platform


# --- the version lock: what promotion moves from one stack to the next --------------------------
def _promotable(model: BaseModel, prefix: str) -> Iterator[tuple[str, Any]]:
    """(path, value) of every field marked promotable, in nested models (never in lists: pools
    and workspaces belong to one cluster)."""
    for name, info in type(model).model_fields.items():
        value = getattr(model, name)
        extra = info.json_schema_extra if isinstance(info.json_schema_extra, dict) else {}
        if extra.get("promotable"):
            yield f"{prefix}{name}", value
        elif isinstance(value, BaseModel):
            yield from _promotable(value, f"{prefix}{name}.")


def version_lock(cfg: PlatformConfig) -> dict[str, str]:
    """The stack's version lock: every promotable setting, by its path in `taugrid:platform`,
    with the effective value (a component version left unset is the pinned default)."""
    lock: dict[str, str] = {}
    for path, value in _promotable(cfg, ""):
        if value is None and path.startswith("components.") and path.endswith(".version"):
            value = cfg.components.version(path.split(".")[1])
        if value is not None:
            lock[path] = str(value)
    return dict(sorted(lock.items()))


def set_path(node: MutableMapping[str, Any], path: str, value: Any) -> None:
    """Set a dotted path (of the version lock) in a `taugrid:platform` mapping: plain dicts or
    a round-trip YAML document, creating the levels it lacks."""
    *parents, leaf = path.split(".")
    for key in parents:
        if node.get(key) is None:
            node[key] = {}
        node = node[key]
    node[leaf] = value


def with_lock(cfg: PlatformConfig, lock: Mapping[str, str]) -> PlatformConfig:
    """`cfg` with another stack's lock values, for the paths `cfg` has (an existing cluster has
    no Kubernetes version to take)."""
    own = version_lock(cfg)
    data: dict[str, Any] = cfg.model_dump(mode="json", exclude_none=True)
    for path, value in lock.items():
        if path in own:
            set_path(data, path, value)
    return validate_platform(data)


def lock_hash(lock: dict[str, str]) -> str:
    import hashlib
    import json

    return hashlib.sha256(json.dumps(lock, sort_keys=True).encode()).hexdigest()[:16]
