"""Quota grants: arithmetic (base + grants <= pool capacity, borrowing limit), the life of a
request (Pending -> Approved -> Active -> Expired; Denied), expiry, and the cohort quota."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest

from taugrid.api.crds import QuotaDecision, TauQuotaRequestSpec, TauQuotaRequestStatus
from taugrid.controller import quota as Q

T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
GPU = Q.Target("gpu", "a100x1", "nvidia.com/gpu")


def req(
    name: str,
    gpus: int | str = 4,
    duration: str = "2h",
    decided: str | None = None,
    at: datetime = T0,
    status: dict[str, Any] | None = None,
    generation: int = 1,
    decided_gen: int | None = 1,
    created: datetime = T0,
    target: Q.Target | None = GPU,
    problem: str | None = None,
) -> Q.Request:
    st = TauQuotaRequestStatus.model_validate(status or {})
    if decided:
        st.decision = QuotaDecision(verdict=decided, by="pat", at=Q.iso(at), generation=decided_gen)  # type: ignore[arg-type]
    spec = TauQuotaRequestSpec(
        workspace="research", flavor="a100x1", requested=gpus, reason="deadline", duration=duration
    )
    return Q.Request("research", name, generation, created, spec, st, target, problem)


ROOM = {GPU: Q.Room(capacity=Decimal(16), base=Decimal(8))}


def advance(r: Q.Request, plan: Q.Plan) -> Q.Request:
    """The request as the next reconcile sees it (its status written)."""
    st = plan.statuses[r.key].model_copy(update={"decision": r.status.decision})
    return Q.Request(r.namespace, r.name, r.generation, r.created, r.spec, st, r.target, r.problem)


def test_undecided_is_pending_and_grants_nothing() -> None:
    plan = Q.plan([req("a")], ROOM, T0)
    st = plan.statuses["research/a"]
    assert st.phase == "Pending" and "tau quota approve" in (st.message or "")
    assert plan.grants[GPU] == 0
    assert {c.type: c.status for c in st.conditions}["Pending"] == "True"


def test_approved_becomes_active_then_expires_and_the_grant_goes() -> None:
    r = req("a", gpus=4, duration="2h", decided="Approved")
    plan = Q.plan([r], ROOM, T0)
    st = plan.statuses["research/a"]
    assert st.phase == "Active" and st.granted == 4 and plan.grants[GPU] == 4
    assert st.activeSince == Q.iso(T0) and st.expiresAt == Q.iso(T0 + timedelta(hours=2))
    conds = {c.type: c for c in st.conditions}
    assert conds["Approved"].status == "True" and "pat" in conds["Approved"].message
    assert Q.next_change(plan.statuses.values()) == T0 + timedelta(hours=2)
    r = advance(r, plan)
    # one second before the end: still active; at the end: expired, nothing granted
    assert Q.plan([r], ROOM, T0 + timedelta(hours=2, seconds=-1)).grants[GPU] == 4
    late = Q.plan([r], ROOM, T0 + timedelta(hours=2))
    assert late.statuses["research/a"].phase == "Expired" and late.grants[GPU] == 0
    # expired stays expired (terminal), also when asked again later
    r = advance(r, late)
    again = Q.plan([r], ROOM, T0 + timedelta(days=3))
    assert again.statuses["research/a"].phase == "Expired" and again.grants[GPU] == 0


def test_grants_never_exceed_pool_capacity_older_first() -> None:
    a = req("a", gpus=6, decided="Approved", at=T0, created=T0)
    b = req("b", gpus=6, decided="Approved", at=T0 + timedelta(minutes=1), created=T0)
    plan = Q.plan([b, a], ROOM, T0 + timedelta(minutes=2))  # order of listing does not matter
    sa, sb = plan.statuses["research/a"], plan.statuses["research/b"]
    # capacity 16 - base 8 = 8 of room: a (approved first) gets 6, b the 2 left
    assert sa.granted == 6 and sb.granted == 2 and plan.grants[GPU] == 8
    assert "+2 of 6" in (sb.message or "") and "pool capacity 16" in (sb.message or "")


def test_an_approval_without_room_waits_then_activates_when_room_appears() -> None:
    full = {GPU: Q.Room(capacity=Decimal(8), base=Decimal(8))}
    r = req("a", gpus=2, decided="Approved")
    plan = Q.plan([r], full, T0)
    st = plan.statuses["research/a"]
    assert (
        st.phase == "Approved"
        and st.activeSince is None
        and "waiting for room" in (st.message or "")
    )
    assert plan.grants[GPU] == 0
    later = Q.plan([advance(r, plan)], ROOM, T0 + timedelta(hours=5))
    st2 = later.statuses["research/a"]
    # the clock starts when it becomes active, not when it was approved
    assert st2.phase == "Active" and st2.activeSince == Q.iso(T0 + timedelta(hours=5))


def test_the_queues_borrowing_limit_caps_grants() -> None:
    capped = {GPU: Q.Room(capacity=Decimal(16), base=Decimal(8), borrowing_limit=Decimal(3))}
    plan = Q.plan([req("a", gpus=4, decided="Approved")], capped, T0)
    st = plan.statuses["research/a"]
    assert st.granted == 3 and "borrowingLimit is 3" in (st.message or "")
    zero = {GPU: Q.Room(capacity=Decimal(16), base=Decimal(8), borrowing_limit=Decimal(0))}
    st0 = Q.plan([req("a", gpus=4, decided="Approved")], zero, T0).statuses["research/a"]
    assert st0.phase == "Approved" and st0.granted is None


def test_denied_is_terminal_and_says_who() -> None:
    plan = Q.plan([req("a", decided="Denied")], ROOM, T0)
    st = plan.statuses["research/a"]
    assert st.phase == "Denied" and "pat" in (st.message or "") and plan.grants[GPU] == 0
    assert {c.type: c.status for c in st.conditions}["Denied"] == "True"


def test_a_request_changed_after_approval_needs_a_new_decision() -> None:
    r = req("a", decided="Approved", generation=2, decided_gen=1)
    st = Q.plan([r], ROOM, T0).statuses["research/a"]
    assert st.phase == "Pending" and "changed after it was approved" in (st.message or "")


def test_an_unresolved_target_is_never_granted() -> None:
    r = req("a", decided="Approved", target=None, problem="no workspace 'x'")
    st = Q.plan([r], ROOM, T0).statuses["research/a"]
    assert st.phase == "Approved" and "no workspace 'x'" in (st.message or "")


@pytest.mark.parametrize("bad", ["0", "-2", "lots"])
def test_nonsense_amounts_grant_nothing(bad: str) -> None:
    st = Q.plan([req("a", gpus=bad, decided="Approved")], ROOM, T0).statuses["research/a"]
    assert st.phase == "Approved" and not st.granted


def test_unknown_capacity_grants_nothing() -> None:
    room = {GPU: Q.Room(capacity=None, base=Decimal(8))}
    st = Q.plan([req("a", decided="Approved")], room, T0).statuses["research/a"]
    assert st.phase == "Approved" and "capacity" in (st.message or "")


def test_condition_times_move_only_on_change() -> None:
    r = req("a", decided="Approved")
    first = Q.plan([r], ROOM, T0)
    stamped = first.statuses["research/a"].model_copy()
    stamped.conditions = Q.stamp(stamped.conditions, T0)
    r2 = Q.Request(
        r.namespace,
        r.name,
        r.generation,
        r.created,
        r.spec,
        stamped.model_copy(update={"decision": r.status.decision}),
        r.target,
    )
    second = Q.plan([r2], ROOM, T0 + timedelta(minutes=10)).statuses["research/a"]
    before = {c.type: c.lastTransitionTime for c in stamped.conditions}
    after = {c.type: c.lastTransitionTime for c in second.conditions}
    assert before == after  # nothing changed: no condition moved


def test_cohort_quota_lists_every_covered_resource_per_flavor_and_never_lends() -> None:
    other = Q.Target("gpu", "a100x2", "nvidia.com/gpu")
    cpu = Q.Target("gpu", "a100x1", "cpu")
    groups = Q.cohort_quota({GPU: Decimal(4), other: Decimal(2), cpu: Decimal("0.5")}, "gpu")
    (group,) = groups
    assert group["coveredResources"] == ["cpu", "nvidia.com/gpu"]
    flavors = {f["name"]: {r["name"]: r for r in f["resources"]} for f in group["flavors"]}  # type: ignore[attr-defined]
    assert flavors["a100x1"]["nvidia.com/gpu"]["nominalQuota"] == "4"
    assert flavors["a100x1"]["cpu"]["nominalQuota"] == "500m"
    assert flavors["a100x2"]["cpu"]["nominalQuota"] == "0"  # listed, as Kueue requires
    assert all(r["lendingLimit"] == "0" for f in flavors.values() for r in f.values())
    assert Q.cohort_quota({GPU: Decimal(0)}, "gpu") == []
    assert Q.cohort_quota({GPU: Decimal(4)}, "cpu") == []  # another queue's grants


def test_the_reconcilers_read_the_watched_objects_and_list_nothing() -> None:
    """Every Workload event wakes the quota reconciler: it used to LIST seven kinds each time
    (thousands of LISTs under a burst of runs). Now it reads kopf's indexes, and before the
    watches have filled them it waits (it does not act on an empty picture)."""
    import asyncio

    pytest.importorskip("kopf")
    from taugrid.components import manifests as M
    from taugrid.controller.config import ControllerConfig
    from taugrid.controller.operator import PLATFORM_KINDS, Controller
    from taugrid.kube.fake import FakeKube
    from taugrid.sandbox.cluster import stacks_dir_for, validated

    cfg = validated("sandbox", stacks_dir_for("sandbox", None))
    ws = next(o for o in M.workspace_objects(cfg, cfg.workspaces[0]) if o["kind"] == "TauWorkspace")
    fake = FakeKube({"TauWorkspace": [ws]})
    ctl = Controller(ControllerConfig(), fake)  # type: ignore[arg-type]
    assert (
        asyncio.run(ctl.reconcile_quota()) is None and asyncio.run(ctl.reconcile_platform()) is None
    )
    assert fake.calls == []  # not ready: nothing read, nothing written
    fake.calls.clear()
    other = {**ws, "metadata": {"name": "elsewhere", "namespace": "default"}}
    indexes: dict[str, dict[Any, list[dict[str, Any]]]] = {
        (plural or version): {} for _, version, plural, _ in PLATFORM_KINDS
    }
    indexes["workspaces"] = {
        (ctl.cfg.system_namespace, ws["metadata"]["name"]): [ws],
        ("default", "elsewhere"): [other],
    }
    ctl._indexes = indexes
    asyncio.run(ctl.reconcile_quota())
    asyncio.run(ctl.reconcile_platform())
    assert not [c for c in fake.calls if c[0] in ("list", "get")]
    assert [
        w["metadata"]["name"] for w in ctl._objects("workspaces", ctl.cfg.system_namespace)
    ] == [ws["metadata"]["name"]]
