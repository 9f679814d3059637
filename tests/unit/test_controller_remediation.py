"""GPU remediation: condition -> action tables, the circuit breaker, releases after a clear
wait (only of nodes it quarantined), NotReady left to AKS, and the patches themselves."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from taugrid.api import constants as C
from taugrid.api.kubetime import k8s_time
from taugrid.api.platform import RemediationConfig
from taugrid.controller import remediation as R

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
CFG = RemediationConfig(clear_after_seconds=600, max_unhealthy_share=0.5)


def node(
    name: str,
    gpus: int = 1,
    faults: dict[str, str] | None = None,
    ready: bool = True,
    ours: bool = False,
    unschedulable: bool = False,
    cleared: dict[str, datetime] | None = None,
    taints: list[dict[str, Any]] | None = None,
    annotations: dict[str, str] | None = None,
) -> R.NodeView:
    conds = [{"type": "Ready", "status": "True" if ready else "False"}]
    conds += [
        {"type": t, "status": "True", "reason": why, "lastTransitionTime": "2026-12-01T11:00:00Z"}
        for t, why in (faults or {}).items()
    ]
    conds += [
        {"type": t, "status": "False", "lastTransitionTime": k8s_time(at)}
        for t, at in (cleared or {}).items()
    ]
    labels = {R.LABEL_BY: R.BY} if ours else {}
    return R.node_view(
        {
            "metadata": {
                "name": name,
                "labels": labels,
                "annotations": annotations or {},
                "resourceVersion": "7",
            },
            "spec": {"unschedulable": unschedulable, "taints": taints or []},
            "status": {"conditions": conds, "allocatable": {C.GPU_RESOURCE: str(gpus)}},
        }
    )


def actions(nodes: list[R.NodeView], cfg: RemediationConfig = CFG) -> dict[str, R.Action]:
    return {d.node: d.action for d in R.decide(nodes, cfg, NOW).decisions}


@pytest.mark.parametrize(
    ("case", "expected"),
    [
        (dict(faults={C.XID_CONDITION: "XID 79"}), R.Action.quarantine),
        (dict(faults={"GPUMissing": "1 of 8"}), R.Action.quarantine),
        (dict(faults={"SomethingElse": "x"}), R.Action.none),  # not a configured condition
        (dict(), R.Action.none),
        (dict(faults={C.XID_CONDITION: "XID 79"}, ready=False), R.Action.skip_not_ready),
        (dict(faults={C.XID_CONDITION: "XID 79"}, ours=True), R.Action.keep),
        (
            dict(ours=True, cleared={C.XID_CONDITION: NOW - timedelta(seconds=601)}),
            R.Action.release,
        ),
        (dict(ours=True, cleared={C.XID_CONDITION: NOW - timedelta(seconds=30)}), R.Action.keep),
    ],
)
def test_condition_to_action(case: dict[str, Any], expected: R.Action) -> None:
    # three healthy GPU nodes beside it, so the breaker is not what decides
    nodes = [node("n0", **case), *(node(f"ok{i}") for i in range(3))]
    assert actions(nodes)["n0"] == expected


def test_non_gpu_nodes_are_not_judged() -> None:
    got = actions([node("cpu", gpus=0, faults={C.XID_CONDITION: "x"}), node("g")])
    assert "cpu" not in got


def test_the_breaker_holds_back_the_newest_faults() -> None:
    nodes = [node(f"n{i}", faults={C.XID_CONDITION: "x"}) for i in range(3)] + [node("ok")]
    v = R.decide(nodes, CFG, NOW)
    assert v.gpu_nodes == 4 and v.limit == 2 and v.breaker_open
    assert len(v.by_action(R.Action.quarantine)) == 2
    (held,) = v.by_action(R.Action.held_by_breaker)
    assert "circuit breaker" in held.why and "limit 2" in held.why
    # quarantined ones count against the limit: with two already quarantined, none more
    again = [
        node("n0", faults={C.XID_CONDITION: "x"}, ours=True),
        node("n1", faults={C.XID_CONDITION: "x"}, ours=True),
        node("n2", faults={C.XID_CONDITION: "x"}),
        node("ok"),
    ]
    assert actions(again)["n2"] == R.Action.held_by_breaker


def test_a_release_makes_room_for_a_held_node_in_the_same_round() -> None:
    nodes = [
        node("a", ours=True, cleared={C.XID_CONDITION: NOW - timedelta(hours=1)}),
        node("b", faults={C.XID_CONDITION: "x"}, ours=True),
        node("c", faults={C.XID_CONDITION: "x"}),
        node("d"),
    ]
    got = actions(nodes)
    assert got["a"] == R.Action.release and got["c"] == R.Action.quarantine


def test_conditions_gone_without_a_time_start_the_clear_wait_now() -> None:
    d = next(
        x for x in R.decide([node("a", ours=True), node("b")], CFG, NOW).decisions if x.node == "a"
    )
    assert d.action == R.Action.keep and d.mark_clear
    marked = node(
        "a", ours=True, annotations={R.ANN_CLEAR_SINCE: k8s_time(NOW - timedelta(seconds=700))}
    )
    assert actions([marked, node("b")])["a"] == R.Action.release


def test_quarantine_patch_keeps_other_taints_and_says_who_why_when() -> None:
    n = node(
        "a",
        faults={C.XID_CONDITION: "XID 79"},
        taints=[{"key": "sku", "value": "gpu", "effect": "NoSchedule"}],
    )
    d = next(x for x in R.decide([n, node("b"), node("c")], CFG, NOW).decisions if x.node == "a")
    assert d.action == R.Action.quarantine
    p = R.quarantine_patch(n, d, NOW)
    assert p["spec"]["unschedulable"] is True
    assert {t["key"] for t in p["spec"]["taints"]} == {"sku", C.GPU_UNHEALTHY_TAINT}
    assert (
        next(t for t in p["spec"]["taints"] if t["key"] == C.GPU_UNHEALTHY_TAINT)["effect"]
        == "NoSchedule"
    )
    assert p["metadata"]["labels"] == {R.LABEL_BY: R.BY, R.LABEL_REASON: C.XID_CONDITION}
    assert p["metadata"]["annotations"][R.ANN_AT] == "2026-12-01T12:00:00Z"
    assert p["metadata"]["resourceVersion"] == "7"  # a concurrent change makes it fail, not lose


def test_release_undoes_only_what_quarantine_did() -> None:
    mine = node(
        "a",
        ours=True,
        taints=[
            {"key": "sku", "value": "gpu", "effect": "NoSchedule"},
            {"key": C.GPU_UNHEALTHY_TAINT, "effect": "NoSchedule"},
        ],
    )
    p = R.release_patch(mine)
    assert p["spec"]["taints"] == [{"key": "sku", "value": "gpu", "effect": "NoSchedule"}]
    assert p["spec"]["unschedulable"] is None and p["metadata"]["labels"][R.LABEL_BY] is None
    # a node someone else had cordoned before stays cordoned
    theirs = node(
        "b",
        ours=True,
        annotations={R.ANN_WAS_CORDONED: "true"},
        taints=[{"key": C.GPU_UNHEALTHY_TAINT, "effect": "NoSchedule"}],
    )
    p2 = R.release_patch(theirs)
    assert "unschedulable" not in p2["spec"] and p2["spec"]["taints"] is None
    # validated before it takes work again: the validating taint in place of the quarantine's
    p3 = R.release_patch(mine, validate=True)
    assert p3["spec"]["taints"] == [
        {"key": "sku", "value": "gpu", "effect": "NoSchedule"},
        {"key": C.VALIDATING_TAINT, "value": "released", "effect": "NoSchedule"},
    ]


def test_label_values_are_valid() -> None:
    assert R.label_value("XID error: 79 (fatal)") == "XID-error--79--fatal"
    assert len(R.label_value("x" * 100)) == 63
    assert R.label_value("::") == "unknown"


def test_config_rejects_nonsense() -> None:
    with pytest.raises(ValueError):
        RemediationConfig(max_unhealthy_share=0)
    with pytest.raises(ValueError):
        RemediationConfig(conditions=[])
    with pytest.raises(ValueError):
        RemediationConfig(clear_after_seconds=-1)
