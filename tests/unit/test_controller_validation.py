"""The controller proves a GPU node before it takes work (#41): a node that registers with the
validating taint loses it once its checks pass, keeps it while they fail (named in its kept
verdicts, written once per change of failure, not once per pass), and a node released from
quarantine is validated again; without the platform's declaration nothing is judged."""

from __future__ import annotations

import asyncio
import datetime as dt
from typing import Any

import pytest

from taugrid.api import constants as C
from taugrid.api import gpuhealth as G
from taugrid.controller import validation as V

NOW = dt.datetime(2026, 12, 5, 12, 0, tzinfo=dt.UTC)
POOL = G.PoolDeclaration(
    name="a100x2", vmSize="Standard_NC48ads_A100_v4", gpusPerNode=2, gpuClass="a100-80gb"
)
VALIDATING = {"key": C.VALIDATING_TAINT, "value": "passive", "effect": "NoSchedule"}
SKU = {"key": "sku", "value": "gpu", "effect": "NoSchedule"}


def node(name: str, gpus: str = "2", taints: list[Any] | None = None, pool: str = "a100x2") -> Any:
    return {
        "metadata": {
            "name": name,
            "resourceVersion": "41",
            "labels": {
                C.LABEL_POOL: pool,
                G.GFD_PRODUCT: "NVIDIA-A100-SXM4-80GB",
                G.GFD_DRIVER_MAJOR: "550",
            },
        },
        "spec": {"taints": [SKU, VALIDATING] if taints is None else taints},
        "status": {
            "allocatable": {C.GPU_RESOURCE: gpus},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def test_a_good_node_loses_the_taint_and_keeps_its_verdict() -> None:
    (v,) = V.decide({"g0": node("g0")}, {"a100x2": POOL}, NOW)
    assert v.lifted and v.patch is not None
    assert v.patch["spec"]["taints"] == [SKU]  # only the validating taint goes
    assert v.patch["metadata"]["resourceVersion"] == "41"  # a quarantine meanwhile is not lost
    kept = G.history_of({"metadata": {"annotations": v.patch["metadata"]["annotations"]}})
    assert [k.passed for k in kept] == [True]
    alone = node("g1", taints=[VALIDATING])
    (v,) = V.decide({"g1": alone}, {"a100x2": POOL}, NOW)
    assert v.patch is not None and v.patch["spec"]["taints"] is None  # none left: removed


def test_a_degraded_node_keeps_the_taint_and_is_named_once_per_change() -> None:
    bad = node("g0", gpus="1")
    (v,) = V.decide({"g0": bad}, {"a100x2": POOL}, NOW)
    assert not v.lifted and v.patch is not None and "spec" not in v.patch  # taint stays
    bad["metadata"]["annotations"] = v.patch["metadata"]["annotations"]
    (again,) = V.decide({"g0": bad}, {"a100x2": POOL}, NOW)
    assert again.patch is None  # the same failure: nothing written
    bad["status"]["conditions"].append({"type": "GPUMissing", "status": "True"})
    (worse,) = V.decide({"g0": bad}, {"a100x2": POOL}, NOW)
    assert worse.patch is not None  # another failure: written


def test_nodes_without_the_taint_or_pool_are_left_alone_or_named() -> None:
    got = V.decide({"g0": node("g0", taints=[SKU])}, {"a100x2": POOL}, NOW)
    assert got == []
    (v,) = V.decide({"x0": node("x0", pool="mystery")}, {"a100x2": POOL}, NOW)
    assert [f.check for f in v.verdict.failed()] == ["pool"] and "mystery" in v.verdict.failed()[
        0
    ].message


@pytest.mark.parametrize("declared", [True, False])
def test_the_controller_lifts_what_passes_and_judges_nothing_undeclared(declared: bool) -> None:
    pytest.importorskip("kopf")
    from taugrid.controller.config import ControllerConfig
    from taugrid.controller.operator import Controller
    from taugrid.kube.fake import FakeKube

    fake = FakeKube({"Node": [node("g0"), node("g1", gpus="1")]})
    ctl = Controller(ControllerConfig(), fake)  # type: ignore[arg-type]
    ctl.nodes = {n["metadata"]["name"]: n for n in fake.list("Node")}
    tc = {"metadata": {"name": "cluster"}, "spec": {"pools": [POOL.model_dump()]}}
    ctl._indexes = {"clusters": {}}  # (what kopf's indexes hold is read through _object)
    ctl._object = lambda kind, name: tc if declared else None  # type: ignore[method-assign]
    asyncio.run(ctl.validate_nodes(NOW))
    taints = {n: [t["key"] for t in fake.get("Node", n)["spec"]["taints"]] for n in ("g0", "g1")}
    if not declared:
        assert taints == {"g0": ["sku", C.VALIDATING_TAINT], "g1": ["sku", C.VALIDATING_TAINT]}
        assert [c for c in fake.calls if c[0] == "patch"] == []
        return
    assert taints == {"g0": ["sku"], "g1": ["sku", C.VALIDATING_TAINT]}
    kept = G.history_of(fake.get("Node", "g1"))
    assert len(kept) == 1 and "gpus" in kept[0].failed
    assert G.history_of(ctl.nodes["g1"]) == kept  # the controller's copy follows its write


def _xid(node_name: str, at: dt.datetime) -> dict[str, Any]:
    stamp = at.strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "metadata": {"name": f"{node_name}.x", "namespace": "default", "creationTimestamp": stamp},
        "involvedObject": {"kind": "Node", "name": node_name},
        "reason": G.XID_EVENT_REASON,
        "message": "NVRM: Xid (PCI:0000:00:1e): 79, GPU has fallen off the bus",
        "lastTimestamp": stamp,
    }


def test_the_controller_counts_the_xid_events_a_client_s_validation_counts() -> None:
    """One verdict per node, in every view: an XID event an hour ago fails the node for the
    controller too, so it is not lifted while `tau cluster validate nodes` fails it."""
    xids = G.xid_events_by_node([_xid("g0", NOW - dt.timedelta(hours=1))])
    (v,) = V.decide({"g0": node("g0")}, {"a100x2": POOL}, NOW, xids)
    assert not v.verdict.passed and [f.check for f in v.verdict.failed()] == ["xid"]
    assert not v.lifted
    (clean,) = V.decide({"g0": node("g0")}, {"a100x2": POOL}, NOW, {})
    assert clean.lifted


def test_a_reset_clears_the_xids_before_it() -> None:
    """The fatal XID condition back to False (the GPU reset, the node rebooted): the XIDs
    before it no longer count; one after it does."""
    reset = NOW - dt.timedelta(minutes=30)
    after_reset = node("g0")
    after_reset["status"]["conditions"].append(
        {
            "type": C.XID_CONDITION,
            "status": "False",
            "lastTransitionTime": reset.strftime("%Y-%m-%dT%H:%M:%SZ"),
        }
    )
    before = G.xid_events_by_node([_xid("g0", reset - dt.timedelta(minutes=5))])
    (v,) = V.decide({"g0": after_reset}, {"a100x2": POOL}, NOW, before)
    assert v.verdict.passed, v.verdict.failed()
    xid = next(f for f in v.verdict.findings if f.check == "xid")
    assert "since its last reset" in xid.message
    again = G.xid_events_by_node([_xid("g0", reset + dt.timedelta(minutes=5))])
    (w,) = V.decide({"g0": after_reset}, {"a100x2": POOL}, NOW, again)
    assert not w.verdict.passed and "since its last reset" in w.verdict.failed()[0].message
