"""TauGrid's Python API: what the `tau` CLI, the portal and notebooks call.

    from taugrid.client import submit, follow, status

    run = submit("examples/quickstart", target="local")
    follow(run.run_id)                  # streams the log until the run ends
    print(status(run.run_id).summary)

Runs (`taugrid.client.runs`, re-exported here), what a cluster offers (`cluster`: workspaces,
profiles), quota requests (`quota`) and the platform (`platform`). Every call returns models of
`taugrid.api` or small dataclasses, never prints, and raises `taugrid.api.errors.TauError` with
the exit code the CLI uses. Heavy libraries (Ray, the Kubernetes client, Pulumi) are imported by
the calls that need them.
"""

from __future__ import annotations

import builtins
import importlib
from typing import TYPE_CHECKING, Any

from taugrid.api.errors import TauError

if TYPE_CHECKING:
    from taugrid.client import cluster, data, local, platform, quota, runs, serve
    from taugrid.client.cluster import profiles, workspaces
    from taugrid.client.runs import (
        Artifacts,
        Cancelled,
        SubmitRequest,
        Submitted,
        Verified,
        artifacts,
        attach,
        cancel,
        check_in_place,
        cluster_runs,
        find,
        follow,
        list_runs,
        logs,
        metrics,
        pull,
        record,
        resume,
        status,
        statuses,
        submit,
        submit_many,
        validate,
        verify,
        wait,
        watch,
    )

    list = list_runs

# Each name is imported when first used (PEP 562): `from taugrid.client import data` (the CLI's
# `tau data`) does not load the platform, quota and cluster modules too.
_MODULES = ("cluster", "data", "local", "platform", "quota", "runs", "serve")
_FROM = {"profiles": "cluster", "workspaces": "cluster", "list": "runs"}


def __getattr__(name: str) -> Any:
    if name in _MODULES:
        return importlib.import_module(f"taugrid.client.{name}")
    if name in __all__:
        module = importlib.import_module(f"taugrid.client.{_FROM.get(name, 'runs')}")
        value = getattr(module, "list_runs" if name == "list" else name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'taugrid.client' has no attribute {name!r}")


def __dir__() -> builtins.list[str]:
    """What `dir()` and a notebook's tab completion offer: the names imported on first use too."""
    return sorted({*globals(), *__all__, *_MODULES})


__all__ = [
    "Artifacts",
    "Cancelled",
    "SubmitRequest",
    "Submitted",
    "TauError",
    "Verified",
    "artifacts",
    "attach",
    "cancel",
    "check_in_place",
    "cluster",
    "cluster_runs",
    "data",
    "find",
    "follow",
    "list",
    "list_runs",
    "local",
    "logs",
    "metrics",
    "platform",
    "profiles",
    "pull",
    "quota",
    "record",
    "resume",
    "runs",
    "serve",
    "status",
    "statuses",
    "submit",
    "submit_many",
    "validate",
    "verify",
    "wait",
    "watch",
    "workspaces",
]
