"""GPU nodes checked against their pool's declaration (#41): the passive tier's checks on nodes as
the GPU Operator, NPD and the controller leave them, bad and odd input included; the report from
a cluster (a fake), the verdicts kept on the nodes, and `tau cluster validate nodes` /
`tau cluster nodes` as a platform admin runs them."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from fakekit import cluster_api

from taugrid.api import constants as C
from taugrid.api import gpuhealth as G
from taugrid.api.errors import EXIT_USAGE, TauError
from taugrid.api.kubetime import k8s_time
from taugrid.cli.app import main

ND96 = G.PoolDeclaration(
    name="a100x8", vmSize="Standard_ND96asr_v4", gpusPerNode=8, gpuClass="a100-40gb"
)
NOW = time.time()


def gpu_node(
    name: str = "a100x8-0",
    pool: str = "a100x8",
    gpus: Any = "8",
    labels: dict[str, str] | None = None,
    conditions: list[dict[str, Any]] | None = None,
    taints: list[dict[str, Any]] | None = None,
    ready: str = "True",
) -> dict[str, Any]:
    """A GPU node as the GPU Operator labels it (an ND96asr_v4: 8 A100 40GB)."""
    base = {
        C.LABEL_POOL: pool,
        G.GFD_PRODUCT: "NVIDIA-A100-SXM4-40GB",
        G.GFD_COUNT: "8",
        G.GFD_DRIVER_MAJOR: "550",
    }
    return {
        "metadata": {"name": name, "labels": {**base, **(labels or {})}},
        "spec": {"taints": taints or []},
        "status": {
            "capacity": {C.GPU_RESOURCE: "8"},
            "allocatable": {} if gpus is None else {C.GPU_RESOURCE: gpus, "cpu": "96"},
            "conditions": [
                {"type": "Ready", "status": ready, "reason": "KubeletReady"},
                *(conditions or []),
            ],
        },
    }


def states(v: G.NodeVerdict) -> dict[str, str]:
    return {f.check: f.state for f in v.findings}


def test_a_node_as_declared_passes_every_check() -> None:
    v = G.check_node(gpu_node(), ND96, NOW)
    assert v.passed and v.failed() == []
    assert set(states(v)) == set(G.CHECKS)
    assert states(v)["mig"] == "skipped"  # not a MIG pool: said, not failed


def test_a_node_that_registers_7_of_its_8_gpus_is_named_with_the_fix() -> None:
    v = G.check_node(gpu_node(gpus="7"), ND96, NOW)
    (bad,) = v.failed()
    assert bad.check == "gpus" and "7 of the 8 GPUs" in bad.message
    assert "device plugin holds 1 back as unhealthy" in bad.message  # GFD still counts 8
    assert bad.fix and "reimage" in bad.fix
    assert bad.evidence == {"allocatable": "7", "declared": "8", "gfdCount": "8"}


@pytest.mark.parametrize("gpus", [None, "garbage", "-1", ""])
def test_no_or_unreadable_gpu_count_fails_instead_of_passing(gpus: Any) -> None:
    v = G.check_node(gpu_node(gpus=gpus), ND96, NOW)
    assert states(v)["gpus"] == "failed"


@pytest.mark.parametrize(
    ("product", "gpu_class", "matches"),
    [
        ("NVIDIA-A100-SXM4-40GB", "a100-40gb", True),
        ("NVIDIA-A100-SXM4-80GB", "a100-80gb", True),
        ("NVIDIA-A100-SXM4-80GB", "a100-40gb", False),  # right family, wrong memory
        ("Tesla-T4", "t4-16gb", True),
        ("NVIDIA-H100-NVL", "h100-94gb", True),  # no memory in the label: the family decides
        ("NVIDIA-H100-80GB-HBM3", "a100-80gb", False),
        ("NVIDIA-A10", "a100-80gb", False),  # A10 is not A100
        ("NVIDIA-A100-PCIE-40GB", "a10-24gb", False),
        ("anything", "custom", True),  # a class of another shape: nothing to compare
    ],
)
def test_the_product_label_is_compared_with_the_pools_gpu_class(
    product: str, gpu_class: str, matches: bool
) -> None:
    assert G.product_matches(product, gpu_class) is matches


def test_a_pool_declaration_the_node_contradicts_is_named() -> None:
    v = G.check_node(gpu_node(labels={G.GFD_PRODUCT: "NVIDIA-H100-80GB-HBM3"}), ND96, NOW)
    (bad,) = v.failed()
    assert bad.check == "product" and "NVIDIA-H100-80GB-HBM3" in bad.message
    assert "a100-40gb" in bad.message and "vmSize or gpuClass" in (bad.fix or "")


def test_missing_gpu_operator_labels_fail_only_where_the_operator_is_declared() -> None:
    bare = gpu_node()
    for k in (G.GFD_PRODUCT, G.GFD_DRIVER_MAJOR):
        del bare["metadata"]["labels"][k]
    v = G.check_node(bare, ND96, NOW)
    assert states(v)["product"] == "failed" and states(v)["driver"] == "failed"
    no_operator = ND96.model_copy(update={"gpuOperator": False})
    v = G.check_node(bare, no_operator, NOW)
    assert v.passed and states(v)["product"] == states(v)["driver"] == "skipped"


def test_a_notready_node_fails_with_its_reason() -> None:
    v = G.check_node(gpu_node(ready="False"), ND96, NOW)
    (bad,) = v.failed()
    assert bad.check == "ready" and "NotReady (KubeletReady)" in bad.message
    nothing = gpu_node()
    nothing["status"]["conditions"] = []
    assert states(G.check_node(nothing, ND96, NOW))["ready"] == "failed"


def test_gpu_fault_conditions_xids_and_quarantine_fail() -> None:
    fault = {"type": "NVLinkStatusInactive", "status": "True", "reason": "NVLinkDown"}
    fatal = {"type": C.XID_CONDITION, "status": "True", "message": "Xid 79 fell off the bus"}
    v = G.check_node(
        gpu_node(
            conditions=[fault, fatal, {"type": "GPUMissing", "status": "False"}],
            taints=[{"key": C.GPU_UNHEALTHY_TAINT, "value": "XIDErrors", "effect": "NoSchedule"}],
        ),
        ND96,
        NOW,
    )
    got = {f.check: f.message for f in v.failed()}
    assert set(got) == {"conditions", "xid", "quarantine"}
    assert "NVLinkStatusInactive (NVLinkDown)" in got["conditions"]
    assert "GPUMissing" not in got["conditions"]  # False: not a fault
    assert "Xid 79" in got["xid"] and "XIDErrors" in got["quarantine"]


def test_recent_xid_events_fail_and_old_ones_do_not() -> None:
    recent = {"at": NOW - 3600, "message": "NVRM: Xid (PCI:0000:00:1e): 13, Graphics Exception"}
    old = {"at": NOW - 3 * 24 * 3600, "message": "NVRM: Xid 31"}
    v = G.check_node(gpu_node(), ND96, NOW, [old, recent])
    (bad,) = v.failed()
    assert bad.check == "xid" and "1 GPU XID event(s)" in bad.message and "13," in bad.message
    assert G.check_node(gpu_node(), ND96, NOW, [old]).passed


def test_a_mig_pool_counts_instances_and_its_managers_state() -> None:
    mig = G.PoolDeclaration(
        name="mig", vmSize="Standard_NC24ads_A100_v4", gpusPerNode=1, migProfile="MIG1g"
    )
    good = gpu_node(pool="mig", gpus=None)
    good["status"]["allocatable"] = {"nvidia.com/mig-1g.10gb": "7"}
    assert G.check_node(good, mig, NOW).passed
    short = gpu_node(pool="mig", gpus=None)
    short["status"]["allocatable"] = {"nvidia.com/mig-1g.10gb": "3"}
    (bad,) = G.check_node(short, mig, NOW).failed()
    assert bad.check == "mig" and "3 MIG instances" in bad.message and "make 7" in bad.message
    failed = gpu_node(pool="mig", labels={G.MIG_CONFIG_STATE: "failed"})
    (bad,) = G.check_node(failed, mig, NOW).failed()
    assert bad.check == "mig" and "failed" in bad.message


def test_history_keeps_the_last_verdicts_and_survives_a_bad_annotation() -> None:
    node = gpu_node()
    for i in range(G.HISTORY_KEEP + 3):
        v = G.check_node(gpu_node(gpus="7" if i % 2 else "8"), ND96, NOW, checked_at=f"t{i}")
        node["metadata"]["annotations"] = {G.VALIDATION_ANNOTATION: G.with_verdict(node, v)}
    kept = G.history_of(node)
    assert len(kept) == G.HISTORY_KEEP and kept[-1].at == f"t{G.HISTORY_KEEP + 2}"
    assert [k.passed for k in kept[-2:]] == [False, True]  # t11: 7 GPUs, t12: 8
    assert "7 of the 8" in kept[-2].failed["gpus"] and kept[-1].failed == {}
    for garbage in ("not json", "[1, 2]", '[{"at": 1}]', "{}"):
        node["metadata"]["annotations"] = {G.VALIDATION_ANNOTATION: garbage}
        assert G.history_of(node) == []


# --- the report from a cluster, and the commands -------------------------------------------------
def objects(nodes: list[dict[str, Any]], events: list[dict[str, Any]] | None = None) -> Any:
    pools = [
        ND96.model_dump(mode="json"),
        {"name": "t4", "vmSize": "Standard_NC4as_T4_v3", "gpusPerNode": 1, "gpuClass": "t4-16gb"},
    ]
    return {
        "TauCluster": [{"metadata": {"name": "cluster"}, "spec": {"stack": "s", "pools": pools}}],
        "Node": nodes,
        "Event": events or [],
    }


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Any:
    return cluster_api(monkeypatch)


def xid_event(node: str, at: str, msg: str = "NVRM: Xid (PCI:0000:00:1e): 48, DBE") -> Any:
    return {
        "metadata": {"name": f"{node}.xid", "namespace": "default", "creationTimestamp": at},
        "involvedObject": {"kind": "Node", "name": node},
        "reason": G.XID_EVENT_REASON,
        "message": msg,
        "lastTimestamp": at,
    }


def test_the_report_checks_declared_pools_keeps_verdicts_and_names_strays(fake: Any) -> None:
    from taugrid.client import cluster

    stray = gpu_node("other-0", pool="unknown")
    kube = fake(
        objects(
            [gpu_node(), gpu_node("a100x8-1", gpus="7"), stray, {"metadata": {"name": "cpu-0"}}],
            [xid_event("a100x8-0", k8s_time())],
        )
    )
    got = cluster.validate_nodes()
    assert [v.node for v in got.verdicts] == ["a100x8-0", "a100x8-1"]
    assert not got.passed and got.kept
    assert [f.check for f in got.verdicts[0].failed()] == ["xid"]
    assert [f.check for f in got.verdicts[1].failed()] == ["gpus"]
    assert got.unchecked == {
        "other-0": "has GPUs but is in no declared GPU pool (pool label: unknown)"
    }
    kept = G.history_of(kube.get("Node", "a100x8-1"))
    assert len(kept) == 1 and not kept[0].passed and "gpus" in kept[0].failed
    cluster.validate_nodes()
    assert len(G.history_of(kube.get("Node", "a100x8-1"))) == 2  # one more, not replaced


def test_one_pool_an_unknown_pool_and_no_rights_to_keep(fake: Any) -> None:
    from taugrid.client import cluster

    t4 = gpu_node("t4-0", pool="t4", gpus="1", labels={G.GFD_PRODUCT: "Tesla-T4"})
    kube = fake(objects([gpu_node(), t4]))
    only = cluster.validate_nodes(pool="t4", keep=False)
    assert [v.node for v in only.verdicts] == ["t4-0"] and not only.kept
    assert G.history_of(kube.get("Node", "t4-0")) == []  # --no-keep: nothing written
    with pytest.raises(TauError) as e:
        cluster.validate_nodes(pool="h100")
    assert e.value.exit_code == EXIT_USAGE and "a100x8, t4" in (e.value.hint or "")
    kube.forbid.add(("patch", "Node", None))
    kube.forbid.add(("list", "Event", "default"))
    got = cluster.validate_nodes()
    assert got.passed and not got.kept
    assert any("you may not annotate nodes" in n for n in got.notes)
    assert any("XID events not read" in n for n in got.notes)


def test_nodes_of_one_pool_and_an_unknown_pool_is_refused_naming_the_pools(
    fake: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    from taugrid.cli.app import main
    from taugrid.client import cluster

    t4 = gpu_node("t4-0", pool="t4", gpus="1", labels={G.GFD_PRODUCT: "Tesla-T4"})
    fake(objects([gpu_node(), t4]))
    assert [r.name for r in cluster.gpu_nodes(pool="t4")] == ["t4-0"]
    assert [r.name for r in cluster.gpu_nodes()] == ["a100x8-0", "t4-0"]
    with pytest.raises(TauError) as e:
        cluster.gpu_nodes(pool="nosuch")
    assert e.value.exit_code == EXIT_USAGE and "a100x8, t4" in (e.value.hint or "")
    capsys.readouterr()
    assert main(["cluster", "nodes", "--pool", "nosuch"]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert "no GPU pool 'nosuch'" in err and "a100x8, t4" in err


def test_tau_cluster_validate_nodes_prints_fixes_and_exits_1(
    fake: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    fake(objects([gpu_node(), gpu_node("a100x8-1", gpus="7")]))
    assert main(["cluster", "validate", "nodes", "--no-keep"]) == 1
    text = capsys.readouterr().out
    assert "ok    a100x8-0 (a100x8)" in text
    assert "FAIL  a100x8-1 (a100x8) gpus: 7 of the 8 GPUs" in text and "fix: cordon" in text
    assert "2 node(s) checked, 1 failed" in text
    assert main(["cluster", "validate", "nodes", "-o", "json", "--pool", "a100x8"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["passed"] is False and [n["passed"] for n in doc["nodes"]] == [True, False]
    assert main(["cluster", "validate", "nodes", "--pool", "nope"]) == 2


def test_tau_cluster_nodes_shows_the_last_validation(
    fake: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    fake(objects([gpu_node(), gpu_node("a100x8-1", gpus="7")]))
    assert main(["cluster", "nodes"]) == 0
    assert "never" in capsys.readouterr().out
    main(["cluster", "validate", "nodes"])
    capsys.readouterr()
    assert main(["cluster", "nodes"]) == 0
    rows = {ln.split()[0]: ln for ln in capsys.readouterr().out.splitlines()[1:]}
    assert " passed " in rows["a100x8-0"] and "FAILED gpus" in rows["a100x8-1"]
    assert main(["cluster", "nodes", "-o", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [len(r["verdicts"]) for r in doc] == [1, 1]


def test_the_sandboxs_simulated_gpu_nodes_are_labelled_as_their_class() -> None:
    """Every GPU VM size the platform knows: the sandbox's simulated GPU Operator labels name a
    product the check accepts for the size's class (so a fresh sandbox validates clean)."""
    from taugrid.api.platform import VM_SIZES, GpuPool
    from taugrid.sandbox.cluster import gpu_operator_labels

    for vm, (_, _, gpus, cls) in VM_SIZES.items():
        pool = GpuPool(name="p", vmSize=vm, maxCount=1)
        labels = gpu_operator_labels(pool)
        if not gpus:
            continue
        assert cls and G.product_matches(labels[G.GFD_PRODUCT], cls), (vm, labels)
        assert labels[G.GFD_COUNT] == str(gpus)
    # a class of its own naming (the sandbox's a100x2 pool)
    own = GpuPool(name="p", vmSize="Standard_NC48ads_A100_v4", gpuClass="a100-80gb-2x", maxCount=1)
    assert gpu_operator_labels(own)[G.GFD_PRODUCT] == "NVIDIA-A100-SXM4-80GB"
    assert G.product_matches("NVIDIA-A100-SXM4-80GB", "a100-80gb-2x")


def test_a_node_kept_from_work_reads_validating(
    fake: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    taint = {"key": C.VALIDATING_TAINT, "value": "passive", "effect": "NoSchedule"}
    held = {"key": C.GPU_UNHEALTHY_TAINT, "value": "XIDErrors", "effect": "NoSchedule"}
    fake(objects([gpu_node(taints=[taint]), gpu_node("a100x8-1", taints=[taint, held])]))
    assert main(["cluster", "nodes"]) == 0
    rows = {ln.split()[0]: ln.split()[4] for ln in capsys.readouterr().out.splitlines()[1:]}
    assert rows == {"a100x8-0": "validating", "a100x8-1": "quarantined"}


def test_a_node_deleted_while_it_is_validated_is_said_not_fatal(fake: Any) -> None:
    from taugrid.client import cluster

    kube = fake(objects([gpu_node(), gpu_node("a100x8-1")]))
    real = kube.list

    def listed_then_gone(kind: str, *a: Any, **kw: Any) -> Any:
        got = real(kind, *a, **kw)
        if kind == "Node":
            kube.delete("Node", "a100x8-1", None)  # deleted between the read and the write
        return got

    kube.list = listed_then_gone  # type: ignore[method-assign]
    got = cluster.validate_nodes()
    assert [v.node for v in got.verdicts] == ["a100x8-0", "a100x8-1"] and got.kept
    assert any("a100x8-1: its verdict not kept" in n for n in got.notes)
    assert len(G.history_of(kube.get("Node", "a100x8-0"))) == 1


def test_a_node_that_fails_a_kept_validation_is_kept_from_new_work(fake: Any) -> None:
    """#41's promise for `tau cluster validate nodes` too: a node one GPU short gets the
    validating taint (the controller lifts it once the node passes); a passing node is left
    as it is, and a node already kept from work is not tainted twice."""
    from taugrid.client import cluster

    sku = {"key": "sku", "value": "gpu", "effect": "NoSchedule"}
    kube = fake(objects([gpu_node(), gpu_node("a100x8-1", gpus="7", taints=[sku])]))
    got = cluster.validate_nodes()
    assert [v.passed for v in got.verdicts] == [True, False]
    short = kube.get("Node", "a100x8-1")["spec"]["taints"]
    assert sku in short and [t["key"] for t in short].count(C.VALIDATING_TAINT) == 1
    assert not kube.get("Node", "a100x8-0")["spec"].get("taints")
    cluster.validate_nodes()
    again = kube.get("Node", "a100x8-1")["spec"]["taints"]
    assert [t["key"] for t in again].count(C.VALIDATING_TAINT) == 1
    assert not cluster.validate_nodes(keep=False).passed
