"""GPU nodes validated against the platform's declaration on the sandbox (#41): its simulated GPU
nodes carry what the GPU Operator would label, so a fresh sandbox validates clean; a node that
loses a GPU is named with the fix and exit 1; the verdicts are kept on the nodes (an admin's
right: a researcher's validation keeps nothing and says so) and `tau cluster nodes` shows them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import run_tau as tau
from kubekit import wait_until
from sandboxkit import admin, kube_env, new_gpu_node

from taugrid.api import constants as C

pytestmark = pytest.mark.e2e
NODE = "a100x2-0"  # the sandbox's 2-GPU node


def as_admin(home: Path) -> dict[str, str]:
    return {"KUBECONFIG": tau(home, "sandbox", "kubeconfig").stdout.strip()}


def set_gpus(home: Path, node: str, gpus: str) -> None:
    """The node's allocatable GPUs, as a device plugin that holds some back reports them."""
    api = admin(home).resources.get(api_version="v1", kind="Node")
    body = {"status": {"allocatable": {"nvidia.com/gpu": gpus}}}
    api.status.patch(name=node, body=body, content_type="application/merge-patch+json")


def test_gpu_nodes_validate_clean_then_a_lost_gpu_is_named_and_kept(sandbox: Path) -> None:
    env = as_admin(sandbox)
    res = tau(sandbox, "cluster", "validate", "nodes", "-o", "json", env=env)
    doc = json.loads(res.stdout)
    assert res.returncode == 0, res.stdout + res.stderr
    assert {n["node"] for n in doc["nodes"]} >= {"a100x1-0", NODE} and doc["kept"] is True
    try:
        set_gpus(sandbox, NODE, "1")
        res = tau(sandbox, "cluster", "validate", "nodes", "--pool", "a100x2", env=env)
        assert res.returncode == 1, res.stdout + res.stderr
        assert f"FAIL  {NODE} (a100x2) gpus: 1 of the 2 GPUs" in res.stdout
        assert "device plugin holds 1 back as unhealthy" in res.stdout  # GFD still counts 2
        assert "fix: cordon and drain" in res.stdout
        assert C.VALIDATING_TAINT in taints(sandbox, NODE)  # kept from new work until it passes
        shown = tau(sandbox, "cluster", "nodes", "--pool", "a100x2", env=env)
        assert shown.returncode == 0 and "FAILED gpus" in shown.stdout, shown.stdout

        def verdicts() -> list[bool]:
            kept = json.loads(tau(sandbox, "cluster", "nodes", "-o", "json", env=env).stdout)
            row = next(r for r in kept if r["name"] == NODE)
            return [v["passed"] for v in row["verdicts"]]

        before = verdicts()  # (the controller's own, from the node's registration, may lead)
        assert before[-2:] == [True, False]  # the clean run's, then the lost GPU's
        mine = tau(
            sandbox, "cluster", "validate", "nodes", "--pool", "a100x2", env=kube_env(sandbox)
        )
        assert mine.returncode == 1 and "you may not annotate nodes" in mine.stderr, mine.stderr
        assert verdicts() == before  # the researcher's: not kept
    finally:
        set_gpus(sandbox, NODE, "2")
    res = tau(sandbox, "cluster", "validate", "nodes", "--pool", "a100x2", "--no-keep", env=env)
    assert res.returncode == 0, res.stdout + res.stderr
    # whole again: the controller's validation passes it too, and lifts the taint
    wait_until(lambda: C.VALIDATING_TAINT not in taints(sandbox, NODE), 90, "the taint lifted")


def taints(home: Path, name: str) -> list[str]:
    api = admin(home).resources.get(api_version="v1", kind="Node")
    return [t.key for t in api.get(name=name).spec.taints or []]


def test_a_new_node_is_validated_before_it_takes_work(sandbox: Path) -> None:
    """The controller lifts the validating taint of a node that passes; one that registers 1 of
    its 2 GPUs is named (its kept verdict) and keeps the taint: no work lands on it."""
    from kubekit import wait_until

    from taugrid.api import constants as C
    from taugrid.api import gpuhealth as G

    api = admin(sandbox).resources.get(api_version="v1", kind="Node")

    def taints(name: str) -> list[str]:
        return [t.key for t in api.get(name=name).spec.taints or []]

    # the sandbox's own GPU nodes registered the same way: all lifted by now
    wait_until(
        lambda: all(
            C.VALIDATING_TAINT not in [t.key for t in n.spec.taints or []] for n in api.get().items
        ),
        60,
        "the sandbox's GPU nodes validated",
    )
    good, short = "a100x2-new-ok", "a100x2-new-short"
    try:
        api.create(body=new_gpu_node(good, "2"))
        api.create(body=new_gpu_node(short, "1"))
        wait_until(lambda: C.VALIDATING_TAINT not in taints(good), 60, "the good node lifted")

        def named() -> list[G.VerdictSummary]:
            return G.history_of(api.get(name=short).to_dict())

        kept = wait_until(named, 60, "the short node's failed verdict")
        assert not kept[-1].passed and "1 of the 2 GPUs" in kept[-1].failed["gpus"]
        assert C.VALIDATING_TAINT in taints(short)  # kept from work
        shown = tau(sandbox, "cluster", "nodes", "--pool", "a100x2", env=as_admin(sandbox))
        row = next(ln for ln in shown.stdout.splitlines() if ln.startswith(short))
        assert "validating" in row and "FAILED gpus" in row, shown.stdout
    finally:
        for n in (good, short):
            api.delete(name=n)
