"""Small helpers over the Kubernetes dynamic client for the e2e tests."""

from __future__ import annotations

import time
from typing import Any

FIELD_MANAGER = "taugrid-e2e"


def api_client(cp: Any, who: str = "admin") -> Any:
    """The `kubernetes` package's client as `who` (the tests' second opinion: the product
    talks through its own, lightkube)."""
    from kubernetes import config

    return config.new_client_from_config(config_file=str(cp.identities[who].kubeconfig))


def dynamic(cp: Any, who: str = "admin") -> Any:
    from kubernetes.dynamic import DynamicClient

    return DynamicClient(api_client(cp, who))


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


def error_message(exc: BaseException) -> str:
    body = getattr(exc, "body", None)
    if isinstance(body, bytes):
        body = body.decode("utf-8", "replace")
    return f"{exc} {body or ''}"


def wait_until(
    cond: Any, timeout: float = 90.0, what: str = "condition", max_pause: float = 3.0
) -> Any:
    """Poll a cluster condition (bounded): the API offers no cheaper way to await these here.
    The pause between looks grows from 0.2 s to 3 s: a look is often a `tau` process (about
    a CPU-second), and the e2e suite's workers wait at once on 2 cores (docs/ci.md). A test that
    measures when the condition began to hold asks for a shorter `max_pause`."""
    deadline = time.monotonic() + timeout
    pause = 0.2
    while time.monotonic() < deadline:
        got = cond()
        if got:
            return got
        time.sleep(min(pause, max(0.0, deadline - time.monotonic())))
        pause = min(pause * 1.5, max_pause)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def platform(**extra: Any) -> Any:
    """A small valid platform declaration (one GPU pool and queue, the `research` workspace with
    a member), with `extra` top-level settings on top."""
    from taugrid.api.platform import validate_platform

    return validate_platform(
        {
            "cluster": {
                "provider": "aks",
                "name": "c",
                "location": "westus3",
                "kubernetesVersion": "1.36",
            },
            "gpuPools": [{"name": "a100", "vmSize": "Standard_NC24ads_A100_v4", "maxCount": 2}],
            "queues": {
                "clusterQueues": [
                    {
                        "name": "gpu",
                        "flavors": [{"pool": "a100", "nominalQuota": {"nvidia.com/gpu": 2}}],
                    }
                ]
            },
            "workspaces": [
                {
                    "name": "research",
                    "queues": ["gpu"],
                    "members": [{"kind": "Group", "name": "ml"}],
                }
            ],
            **extra,
        }
    )
