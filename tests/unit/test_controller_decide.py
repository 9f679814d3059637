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
    return {"metadata": {"name": "research", "namespace": "taugrid-system", "generation": 1},
            "spec": {"namespace": "research", "storage": {"pvc": "research-data", "size": "1Ti"},
                     "localQueues": ["gpu"]}}  # fmt: skip


def objects(fake: FakeKube) -> D.PlatformObjects:
    return D.PlatformObjects(fake.list("TauWorkspace"), fake.list("LocalQueue"),
                             fake.list("ClusterQueue"), fake.list("PersistentVolumeClaim"),
                             fake.get("TauCluster", "cluster"), {})  # fmt: skip


def apply(fake: FakeKube, decision: D.Decision) -> None:
    for w in decision.writes:
        (fake.apply if w.verb == "apply" else fake.apply_status)(w.body, "taugrid-controller")


def test_a_workspace_without_its_pvc_and_queue_is_pending_then_nothing_more_is_written() -> None:
    fake = FakeKube({"TauWorkspace": [workspace()],
                     "TauCluster": [{"metadata": {"name": "cluster"}, "spec": {"stack": "s"}}]})  # fmt: skip
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
