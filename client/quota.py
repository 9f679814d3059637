"""Quota requests: ask for more GPUs for a while (researchers), list them, decide (admins).
Each returns the request as a row (`dict`: name, workspace, resource, requested, for, phase,
granted, expiresAt, requestedBy, decidedBy, reason, message)."""

from __future__ import annotations

import builtins
from typing import Any, Literal

from taugrid.client.cluster import discovery


def request(
    gpus: int,
    for_: str,
    reason: str,
    *,
    workspace: str | None = None,
    profile: str | None = None,
    context: str | None = None,
) -> dict[str, Any]:
    """Ask for `gpus` more GPUs of quota in a workspace for `for_` (30m, 48h, 7d) once granted;
    `profile` names the GPU pool (default: the workspace's only GPU profile)."""
    from taugrid.kube import quota as q

    disc = discovery(context)
    snap = disc.snapshot()
    ws = disc.workspace(workspace, snap)
    prof = q.pick_profile(snap, ws, profile)
    obj = q.new_request(snap, ws, prof, gpus, for_, reason, q.whoami(disc.kube))
    return q.row(q.submit(disc.kube, obj))


def list_requests(
    *, workspace: str | None = None, all_namespaces: bool = False, context: str | None = None
) -> builtins.list[dict[str, Any]]:
    """Requests, newest first: of one workspace, of every one the user may use, or (admins,
    `all_namespaces`) cluster-wide."""
    from taugrid.kube import quota as q

    disc = discovery(context)
    return [
        q.row(o) for o in q.list_requests(disc.kube, q.namespaces(disc, workspace, all_namespaces))
    ]


def may_decide(context: str | None = None) -> bool:
    """Whether the user may see every workspace's requests (a platform admin, who decides)."""
    return bool(discovery(context).kube.can("list", "TauQuotaRequest", ""))


def decide(
    ref: str,
    verdict: Literal["Approved", "Denied"],
    note: str = "",
    *,
    workspace: str | None = None,
    context: str | None = None,
) -> dict[str, Any]:
    """Approve or deny a request (platform admins: the API server checks)."""
    from taugrid.kube import quota as q

    disc = discovery(context)
    obj = q.find(disc.kube, ref, q.namespaces(disc, workspace, workspace is None))
    return q.row(q.decide(disc.kube, obj, verdict, note, q.whoami(disc.kube)))


def approve(
    ref: str, note: str = "", *, workspace: str | None = None, context: str | None = None
) -> dict[str, Any]:
    return decide(ref, "Approved", note, workspace=workspace, context=context)


def deny(
    ref: str, note: str = "", *, workspace: str | None = None, context: str | None = None
) -> dict[str, Any]:
    return decide(ref, "Denied", note, workspace=workspace, context=context)


list = list_requests
