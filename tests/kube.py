"""Small helpers over the Kubernetes dynamic client for the e2e tests."""

from __future__ import annotations

import time
from typing import Any

FIELD_MANAGER = "taugrid-e2e"


def apply(dyn: Any, obj: dict[str, Any], dry_run: bool = False) -> Any:
    """Server-side apply one object (the way tau submits)."""
    res = dyn.resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
    kwargs: dict[str, Any] = {"field_manager": FIELD_MANAGER, "force_conflicts": True}
    if dry_run:
        kwargs["dry_run"] = "All"
    ns = obj.get("metadata", {}).get("namespace")
    if res.namespaced and ns:
        return res.server_side_apply(body=obj, namespace=ns, **kwargs)
    return res.server_side_apply(body=obj, **kwargs)


def wait_established(dyn: Any, names: list[str], timeout: float = 60.0) -> None:
    crds = dyn.resources.get(api_version="apiextensions.k8s.io/v1", kind="CustomResourceDefinition")
    deadline = time.monotonic() + timeout
    pending = set(names)
    while pending and time.monotonic() < deadline:
        for name in list(pending):
            obj = crds.get(name=name)
            conds = {c["type"]: c["status"] for c in (obj.status.conditions or [])}
            if conds.get("Established") == "True":
                pending.discard(name)
        if pending:
            time.sleep(0.1)
    if pending:
        raise AssertionError(f"CRDs not established within {timeout}s: {sorted(pending)}")
    dyn.resources.invalidate_cache()


def error_message(exc: BaseException) -> str:
    body = getattr(exc, "body", None)
    if isinstance(body, bytes):
        body = body.decode("utf-8", "replace")
    return f"{exc} {body or ''}"


def install_crds(dyn: Any, upstream: Any, groups: tuple[str, ...] = ("kueue", "kuberay")) -> None:
    """Upstream CRDs (from ../shared/upstream-crds) and TauGrid's, applied and established."""
    import yaml

    from taugrid.api.crds import render_crds

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    names = []
    crds = [
        yaml.load(f.read_text(), Loader=loader)
        for g in groups
        for f in sorted((upstream / g).glob("*.yaml"))
    ]
    for crd in [*crds, *render_crds()]:
        apply(dyn, crd)
        names.append(crd["metadata"]["name"])
    wait_established(dyn, names)


def wait_until(cond: Any, timeout: float = 90.0, what: str = "condition") -> Any:
    """Poll a cluster condition (bounded): the API offers no cheaper way to await these here."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = cond()
        if got:
            return got
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")
