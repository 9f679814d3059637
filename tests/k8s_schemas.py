"""Test oracles: the real upstream CRD schemas and the Kubernetes OpenAPI schemas.

Upstream CRD schemas are made *strict* for testing: where an object lists its properties and
does not preserve unknown fields, an unknown key is an error (the API server would silently
prune it, which would hide a misspelt field in our renderer).
"""

from __future__ import annotations

import copy
import functools
import re
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import yaml

K8S_VERSION = "1.36"
_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def as_json_schema(node: Any) -> Any:
    """An OpenAPI v3 schema as JSON Schema (draft 7): an exclusive bound is a flag beside its
    `minimum`/`maximum` in the one, the bound itself in the other."""
    if isinstance(node, list):
        return [as_json_schema(n) for n in node]
    if not isinstance(node, dict):
        return node
    out = {k: as_json_schema(v) for k, v in node.items()}
    for flag, bound in (("exclusiveMinimum", "minimum"), ("exclusiveMaximum", "maximum")):
        if out.get(flag) is True and bound in out:
            out[flag] = out.pop(bound)
        elif out.get(flag) is False:
            del out[flag]
    return out


_GO_FLAGS = re.compile(r"^\^(\(\?[a-zA-Z]+\))")


def _strict(node: Any) -> Any:
    if isinstance(node, list):
        return [_strict(n) for n in node]
    if not isinstance(node, dict):
        return node
    out = {k: _strict(v) for k, v in as_json_schema(node).items()}
    if isinstance(out.get("pattern"), str):
        # Go's regexp takes flags after `^` (`^(?i)[a-z]...`), Python's only first
        out["pattern"] = _GO_FLAGS.sub(lambda m: m.group(1) + "^", out["pattern"])
    if (
        "properties" in out
        and "additionalProperties" not in out
        and not out.get("x-kubernetes-preserve-unknown-fields")
    ):
        out["additionalProperties"] = False
    return out


@functools.cache
def crd_validator(path: Path, version: str) -> jsonschema.protocols.Validator:
    crd = yaml.load(path.read_text(), Loader=_Loader)
    entry = next(v for v in crd["spec"]["versions"] if v["name"] == version)
    schema = _strict(copy.deepcopy(entry["schema"]["openAPIV3Schema"]))
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft7Validator)
    return cls(schema)  # type: ignore[no-any-return]


def crd_errors(obj: dict[str, Any], crd_file: Path, version: str) -> list[str]:
    v = crd_validator(crd_file, version)
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in v.iter_errors(obj)]


def k8s_errors(obj: dict[str, Any]) -> list[str]:
    try:
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
    except kubernetes_validate.ValidationError as e:
        return [f"{'/'.join(map(str, e.path))}: {e.message}"]
    return []


def pod_template_errors(template: dict[str, Any], name: str = "t") -> list[str]:
    """Validate a pod template embedded in a CRD against the core PodTemplate schema."""
    obj = {
        "apiVersion": "v1",
        "kind": "PodTemplate",
        "metadata": {"name": name},
        "template": template,
    }
    return k8s_errors(obj)
