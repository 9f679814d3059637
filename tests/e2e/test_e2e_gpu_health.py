"""GPU nodes validated against the platform's declaration on the sandbox (#41): its simulated GPU
nodes carry what the GPU Operator would label, so a fresh sandbox validates clean; a node that
loses a GPU is named with the fix and exit 1; the verdicts are kept on the nodes (an admin's
right: a researcher's validation keeps nothing and says so) and `tau cluster nodes` shows them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import run_tau as tau
from sandboxkit import admin, kube_env

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
        shown = tau(sandbox, "cluster", "nodes", "--pool", "a100x2", env=env)
        assert shown.returncode == 0 and "FAILED gpus" in shown.stdout, shown.stdout
        mine = tau(
            sandbox, "cluster", "validate", "nodes", "--pool", "a100x2", env=kube_env(sandbox)
        )
        assert mine.returncode == 1 and "you may not annotate nodes" in mine.stderr, mine.stderr
        kept = json.loads(tau(sandbox, "cluster", "nodes", "-o", "json", env=env).stdout)
        row = next(r for r in kept if r["name"] == NODE)
        assert [v["passed"] for v in row["verdicts"]] == [True, False]  # the researcher's: not
    finally:
        set_gpus(sandbox, NODE, "2")
    res = tau(sandbox, "cluster", "validate", "nodes", "--pool", "a100x2", "--no-keep", env=env)
    assert res.returncode == 0, res.stdout + res.stderr
