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

from taugrid.api.errors import TauError
from taugrid.client import cluster, platform, quota
from taugrid.client.cluster import profiles, workspaces
from taugrid.client.runs import (
    Cancelled,
    SubmitRequest,
    Submitted,
    Verified,
    attach,
    cancel,
    cluster_runs,
    find,
    follow,
    list_runs,
    logs,
    metrics,
    record,
    resume,
    status,
    statuses,
    submit,
    submit_many,
    verify,
    wait,
    watch,
)

list = list_runs

__all__ = [
    "Cancelled",
    "SubmitRequest",
    "Submitted",
    "TauError",
    "Verified",
    "attach",
    "cancel",
    "cluster",
    "cluster_runs",
    "find",
    "follow",
    "list",
    "list_runs",
    "logs",
    "metrics",
    "platform",
    "profiles",
    "quota",
    "record",
    "resume",
    "status",
    "statuses",
    "submit",
    "submit_many",
    "verify",
    "wait",
    "watch",
    "workspaces",
]  # fmt: skip
