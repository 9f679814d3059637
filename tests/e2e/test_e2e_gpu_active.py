"""The active tier on the sandbox (#41): `tau cluster validate nodes --active` runs DCGM's
diagnostics and an NCCL all-reduce on the idle 2-GPU node as Jobs that the real Kueue admits
through the validation queue (borrowing the gpu queue's unused quota; the sandbox's node agent
ends their pods from the node's knobs), names a node under the bandwidth floor, and leaves no Job
behind; a pool that asks for the active tier gets it from the controller before a new node's
validating taint is lifted, and a node whose diagnostics fail keeps it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from conftest import run_tau as tau
from kubekit import wait_until
from sandboxkit import admin, new_gpu_node

from taugrid.api import constants as C
from taugrid.api import gpuactive as A
from taugrid.api import gpuhealth as G

pytestmark = pytest.mark.e2e
NODE = "a100x2-0"


def as_admin(home: Path) -> dict[str, str]:
    return {"KUBECONFIG": tau(home, "sandbox", "kubeconfig").stdout.strip()}


def findings(doc: dict[str, Any], node: str) -> dict[str, dict[str, Any]]:
    verdict = next(v for v in doc["nodes"] if v["node"] == node)
    return {f["check"]: f for f in verdict["findings"]}


def jobs_left(home: Path) -> list[str]:
    api = admin(home).resources.get(api_version="batch/v1", kind="Job")
    return [j.metadata.name for j in api.get(namespace=A.VALIDATION_NAMESPACE).items]


def test_active_checks_run_as_kueue_admitted_jobs_and_name_a_slow_node(sandbox: Path) -> None:
    env = as_admin(sandbox)
    args = ("cluster", "validate", "nodes", "--pool", "a100x2", "--active", "--timeout", "120")
    res = tau(sandbox, *args, "--no-keep", "-o", "json", env=env)
    assert res.returncode == 0, res.stdout + res.stderr
    got = findings(json.loads(res.stdout), NODE)
    assert got["dcgm-diag"]["state"] == "ok" and got["nccl"]["state"] == "ok", got
    assert "150.0 GB/s (floor 10.0 GB/s)" in got["nccl"]["message"]
    assert "active checks: 2 Job(s)" in res.stderr  # the progress a person sees
    try:
        tau(sandbox, "sandbox", "gpu", NODE, "--nccl-gbps", "4")
        res = tau(sandbox, *args, "--no-keep", env=env)
        assert res.returncode == 1, res.stdout + res.stderr
        assert (
            f"FAIL  {NODE} (a100x2) nccl: NCCL all-reduce: 4.0 GB/s, under the pool's floor"
            in res.stdout
        )
        assert "fix: check the node's NVLink" in res.stdout
    finally:
        tau(sandbox, "sandbox", "gpu", NODE, "--reset")
    assert jobs_left(sandbox) == []  # each check's Job deleted once read


def _set_active(home: Path, active: bool) -> None:
    tc = admin(home).resources.get(api_version=f"{C.GROUP}/{C.VERSION}", kind="TauCluster")
    body = tc.get(name="cluster").to_dict()
    for p in body["spec"]["pools"]:
        if p["name"] == "a100x2":
            p["active"] = active
    tc.patch(
        name="cluster",
        body={"spec": {"pools": body["spec"]["pools"]}},
        content_type="application/merge-patch+json",
    )


def test_a_pool_that_asks_for_it_gets_the_active_tier_before_its_taint_is_lifted(
    sandbox: Path,
) -> None:
    api = admin(sandbox).resources.get(api_version="v1", kind="Node")

    def taints(name: str) -> list[str]:
        return [t.key for t in api.get(name=name).spec.taints or []]

    def kept(name: str) -> list[G.VerdictSummary]:
        return G.history_of(api.get(name=name).to_dict())

    good, bad = "a100x2-act-ok", "a100x2-act-bad"
    _set_active(sandbox, True)
    try:
        api.create(body=new_gpu_node(good))
        api.create(body=new_gpu_node(bad, knobs={"diag_fail": True}))
        wait_until(lambda: C.VALIDATING_TAINT not in taints(good), 120, "the good node lifted")
        last = kept(good)[-1]
        assert last.passed and last.tier == "active"
        failed = wait_until(lambda: (k := kept(bad)) and not k[-1].passed and k, 120, "the bad one")
        assert (
            "dcgm-diag" in failed[-1].failed
            and "DCGM_FR_FAULTY_MEMORY" in failed[-1].failed["dcgm-diag"]
        )
        assert C.VALIDATING_TAINT in taints(bad)  # kept from work
        wait_until(lambda: not jobs_left(sandbox), 60, "the check Jobs deleted once read")
    finally:
        _set_active(sandbox, False)
        for n in (good, bad):
            api.delete(name=n)
