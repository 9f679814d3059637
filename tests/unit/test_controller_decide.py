"""The controller's decisions are pure: objects in, writes out; applying them and deciding
again writes nothing (level-based and quiet)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from taugrid.api.platform import RemediationConfig
from taugrid.controller import decide as D
from taugrid.kube.fake import FakeKube

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def workspace() -> dict[str, Any]:
    return {
        "metadata": {"name": "research", "namespace": "taugrid-system", "generation": 1},
        "spec": {
            "namespace": "research",
            "storage": {"pvc": "research-data", "size": "1Ti"},
            "localQueues": ["gpu"],
        },
    }


def objects(fake: FakeKube) -> D.PlatformObjects:
    return D.PlatformObjects(
        fake.list("TauWorkspace"),
        fake.list("LocalQueue"),
        fake.list("ClusterQueue"),
        fake.list("PersistentVolumeClaim"),
        fake.get("TauCluster", "cluster"),
        {},
    )


def apply(fake: FakeKube, decision: D.Decision) -> None:
    for w in decision.writes:
        (fake.apply if w.verb == "apply" else fake.apply_status)(w.body, "taugrid-controller")


def test_a_workspace_without_its_pvc_and_queue_is_pending_then_nothing_more_is_written() -> None:
    fake = FakeKube(
        {
            "TauWorkspace": [workspace()],
            "TauCluster": [{"metadata": {"name": "cluster"}, "spec": {"stack": "s"}}],
        }
    )
    first = D.platform(objects(fake), None, RemediationConfig(), NOW)
    kinds = sorted(w.body["kind"] for w in first.writes)
    assert kinds == ["TauCluster", "TauWorkspace"]
    ws = next(w.body for w in first.writes if w.body["kind"] == "TauWorkspace")
    assert ws["status"]["phase"] == "Pending"
    conds = {c["type"]: c for c in ws["status"]["conditions"]}
    assert conds["StorageReady"]["status"] == "False" and conds["QueueReady"]["status"] == "False"
    apply(fake, first)
    assert D.platform(objects(fake), None, RemediationConfig(), NOW).writes == []
    # a minute later, nothing changed: still nothing to write (no timestamps churn)
    later = NOW.replace(minute=1)
    assert D.platform(objects(fake), None, RemediationConfig(), later).writes == []


def test_status_bodies_carry_only_name_namespace_and_status() -> None:
    from taugrid.api.crds import TauWorkspaceStatus

    body = D.status_body("TauWorkspace", workspace(), TauWorkspaceStatus(phase="Ready"))
    assert body["metadata"] == {"name": "research", "namespace": "taugrid-system"}
    assert set(body) == {"apiVersion", "kind", "metadata", "status"}
    assert "spec" not in body


def test_no_requests_no_grants_no_writes() -> None:
    o = D.QuotaObjects([], [], [], [], [], [], None, {})
    assert D.quota(o, NOW) == D.Decision([], None)


def test_the_platform_status_never_writes_the_heartbeat_and_a_heartbeat_asks_for_no_write() -> None:
    """Two field managers on TauCluster.status: the platform reconciler's writes leave the
    heartbeat to the heartbeat's manager (an old value in its write would move it back), and a
    new heartbeat is no reason for a platform write."""
    fake = FakeKube(
        {
            "TauCluster": [
                {
                    "metadata": {"name": "cluster"},
                    "spec": {"stack": "s"},
                    "status": {"controllerHeartbeat": "2026-12-01T11:59:50Z"},
                }
            ]
        }
    )
    first = D.platform(objects(fake), None, RemediationConfig(), NOW)
    body = next(w.body for w in first.writes if w.body["kind"] == "TauCluster")
    assert "controllerHeartbeat" not in body["status"]
    apply(fake, first)
    fake.apply_status(D.heartbeat_body("cluster", NOW), "taugrid-controller-heartbeat")
    assert D.platform(objects(fake), None, RemediationConfig(), NOW).writes == []
