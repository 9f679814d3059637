"""The CrossGuard policy pack: each policy's validate, called as the engine would, on the
resources the shipped stacks declare (under mocks) and on each way to break its rule."""

from __future__ import annotations

import copy
from functools import cache
from types import SimpleNamespace
from typing import Any

import pytest
from conftest import ROOT

pytest.importorskip("pulumi_policy", reason="the policy extra (pulumi-policy) is not installed")
from taugrid.infra import plan
from taugrid.infra.stackfile import validated
from taugrid.policies import pack

STACKS = sorted(p.name.split(".")[1] for p in (ROOT / "stacks").glob("Pulumi.*.yaml"))
BY_NAME = {p.name: p for p in pack.POLICIES}


@cache
def _resources(stack: str) -> tuple[Any, ...]:
    inv = plan.evaluate(stack, validated(stack))
    return tuple(
        SimpleNamespace(resource_type=r.type, props=r.inputs, urn=r.urn, name=r.name)
        for r in inv.resources
    )


def resources(stack: str) -> list[Any]:
    return copy.deepcopy(list(_resources(stack)))


def violations(policy: str, rs: list[Any]) -> list[str]:
    """What `policy` reports on these resources, called the way the engine calls it."""
    got: list[str] = []
    p = BY_NAME[policy]

    def report(message: str, urn: str | None = None) -> None:
        got.append(message)

    if isinstance(p, pack.StackValidationPolicy):
        p.validate(SimpleNamespace(resources=rs), report)
    else:
        for r in rs:
            p.validate(r, report)
    return got


def find(rs: list[Any], type_: str, name: str | None = None) -> Any:
    return next(r for r in rs if r.resource_type == type_ and (name is None or r.name == name))


def test_every_policy_is_mandatory() -> None:
    assert set(BY_NAME) == {
        "gpu-pools-tainted",
        "versions-pinned",
        "prod-api-server-closed",
        "spot-pools-tolerated",
        "quotas-within-capacity",
        "quotas-are-quantities",
        "fair-sharing-weights",
    }
    assert all(p.enforcement_level == pack.EnforcementLevel.MANDATORY for p in pack.POLICIES)


@pytest.mark.parametrize("stack", STACKS)
def test_every_shipped_stack_passes_every_policy(stack: str) -> None:
    rs = resources(stack)
    assert {name: violations(name, rs) for name in BY_NAME} == {name: [] for name in BY_NAME}


def test_an_untainted_gpu_pool_is_refused() -> None:
    rs = resources("prod")
    find(rs, pack.AGENT_POOL, "a100x1").props["nodeTaints"] = []
    find(rs, pack.AGENT_POOL, "cpu").props["nodeTaints"] = []  # CPU pools need none
    (v,) = violations("gpu-pools-tainted", rs)
    assert "a100x1" in v and "NoSchedule" in v
    # an unknown N-series size is a GPU size too
    find(rs, pack.AGENT_POOL, "a100x1").props["vmSize"] = "Standard_NV999_future"
    assert len(violations("gpu-pools-tainted", rs)) == 1


@pytest.mark.parametrize("version", ["latest", "", ">=0.19", "0.19", "0.19.x"])
def test_a_floating_chart_version_is_refused(version: str) -> None:
    rs = resources("prod")
    find(rs, pack.HELM_RELEASE, "kueue").props["version"] = version
    (v,) = violations("versions-pinned", rs)
    assert "kueue" in v and repr(version) in v


@pytest.mark.parametrize("version", ["0.19.2", "v26.7.0", "1.0.0-rc.1", "2.4.1+build.5"])
def test_exact_versions_pass(version: str) -> None:
    rs = resources("prod")
    find(rs, pack.HELM_RELEASE, "kueue").props["version"] = version
    find(rs, pack.TAU_CLUSTER).props["spec"]["components"]["kueue"] = version
    assert violations("versions-pinned", rs) == []


def test_the_version_lock_in_the_taucluster_is_checked_too() -> None:
    """The sandbox installs no charts (external components): its lock is the TauCluster's."""
    rs = resources("sandbox")
    find(rs, pack.TAU_CLUSTER).props["spec"]["components"]["kuberay"] = "latest"
    (v,) = violations("versions-pinned", rs)
    assert "kuberay" in v


def test_a_public_prod_api_server_is_refused_elsewhere_allowed() -> None:
    rs = resources("prod")
    mc = find(rs, pack.MANAGED_CLUSTER)
    mc.props["apiServerAccessProfile"] = {"enablePrivateCluster": False}
    (v,) = violations("prod-api-server-closed", rs)
    assert "prod" in v and "authorizedIpRanges" in v
    mc.props["apiServerAccessProfile"] = {"enablePrivateCluster": True}
    assert violations("prod-api-server-closed", rs) == []
    staging = resources("staging")
    find(staging, pack.MANAGED_CLUSTER).props.pop("apiServerAccessProfile", None)
    assert violations("prod-api-server-closed", staging) == []  # not a prod stack


def test_a_spot_profile_without_the_spot_toleration_is_refused() -> None:
    rs = resources("staging")
    tc = find(rs, pack.TAU_CLUSTER)
    spot = next(p for p in tc.props["spec"]["workloadProfiles"] if p["flavor"] == "a100spot")
    spot["tolerations"] = [t for t in spot["tolerations"] if t["key"] != pack.SPOT_TAINT.key]
    (v,) = violations("spot-pools-tolerated", rs)
    assert spot["name"] in v and "a100spot" in v


def test_quotas_above_a_pools_capacity_are_refused() -> None:
    rs = resources("prod")
    pool = find(rs, pack.AGENT_POOL, "a100x1")
    pool.props["maxCount"] = 1  # 1 node x 1 GPU, while the queues may use 8
    (v,) = violations("quotas-within-capacity", rs)
    assert "a100x1" in v and "which has 1" in v
    # existing clusters declare no pools: nothing to compare with
    assert violations("quotas-within-capacity", resources("sandbox")) == []


@pytest.mark.parametrize("stack", ["prod", "sandbox"])  # an existing cluster (no pools) too
@pytest.mark.parametrize(
    ("field", "value"), [("nominalQuota", "-2"), ("nominalQuota", "1.5"), ("borrowingLimit", "-1")]
)
def test_negative_or_fractional_gpu_quotas_are_refused(stack: str, field: str, value: str) -> None:
    rs = resources(stack)
    assert violations("quotas-are-quantities", rs) == []
    cq = find(rs, pack.CLUSTER_QUEUE)
    gpu = next(
        r
        for g in cq.props["spec"]["resourceGroups"]
        for f in g["flavors"]
        for r in f["resources"]
        if r["name"] == pack.GPU
    )
    gpu[field] = value
    (v,) = violations("quotas-are-quantities", rs)
    assert cq.name in v and value in v and "whole GPUs" in v


@pytest.mark.parametrize("weight", ["0", "-1", "high", "0m"])
def test_a_queue_or_cohort_weight_of_zero_or_garbage_is_refused(weight: str) -> None:
    rs = resources("prod")
    find(rs, pack.CLUSTER_QUEUE, "clusterqueue-llm").props["spec"]["fairSharing"] = {
        "weight": weight
    }
    find(rs, pack.COHORT, "cohort-tau-grants-llm").props["spec"]["fairSharing"] = {"weight": weight}
    got = violations("fair-sharing-weights", rs)
    assert len(got) == 2 and all(repr(weight) in v and "> 0" in v for v in got)


def test_a_taucluster_with_a_bad_team_weight_or_an_unknown_team_is_refused() -> None:
    rs = resources("prod")
    spec = find(rs, pack.TAU_CLUSTER).props["spec"]
    spec["teams"][0]["weight"] = 0
    spec["workspaces"][0]["team"] = "nobody"
    got = violations("fair-sharing-weights", rs)
    assert any("team llm: weight 0" in v for v in got)
    assert any("team nobody is not declared" in v for v in got)
