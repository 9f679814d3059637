"""The platform through the real Pulumi engine (built by `make pulumi`) on a sandbox that has no
platform yet: `tau platform up` creates it, a second `up` changes nothing, a config change
previews as exactly that change, researchers use what Pulumi made, and `destroy` removes it."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import ROOT
from conftest import run_tau as tau

pytestmark = pytest.mark.e2e

pytest.importorskip("pulumi", reason="the platform extra (pulumi) is not installed")


@pytest.fixture(scope="module")
def bare(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A sandbox with the cluster only (`--no-platform`), in its own TAU_HOME."""
    from taugrid.api.errors import TauError
    from taugrid.infra import engine
    from taugrid.infra.controlplane import binaries_dir

    if binaries_dir() is None:
        pytest.skip("the control plane is not built: `make e2e` builds it")
    try:
        engine.find_bin()
    except TauError:
        pytest.skip("the Pulumi engine is not built: `make pulumi` builds it")
    home = tmp_path_factory.mktemp("pulumihome")
    res = tau(home, "sandbox", "up", "--no-platform")
    assert res.returncode == 0, res.stderr
    assert "tau platform up --stack sandbox" in res.stdout
    yield home
    tau(home, "platform", "destroy", "--stack", "sandbox", "--yes", env=admin_env(home))
    tau(home, "sandbox", "down")


def admin_env(home: Path) -> dict[str, str]:
    return {"KUBECONFIG": tau(home, "sandbox", "kubeconfig").stdout.strip()}


def platform(home: Path, *args: str, stacks: Path | None = None) -> dict[str, Any]:
    extra = ["--stacks-dir", str(stacks)] if stacks else []
    res = tau(home, "platform", *args, "--stack", "sandbox", *extra, "-o", "json",
              env=admin_env(home), timeout=600)  # fmt: skip
    assert res.returncode == 0, res.stderr
    return dict(json.loads(res.stdout))


def admin(home: Path) -> Any:
    from kubernetes import config, dynamic

    kc = admin_env(home)["KUBECONFIG"]
    return dynamic.DynamicClient(config.new_client_from_config(config_file=kc))


def names(home: Path, api_version: str, kind: str, namespace: str | None = None) -> set[str]:
    res = admin(home).resources.get(api_version=api_version, kind=kind)
    items = res.get(namespace=namespace).items if namespace else res.get().items
    return {o.metadata.name for o in items if not o.metadata.deletionTimestamp}


def test_up_creates_the_platform_and_a_second_up_changes_nothing(
    bare: Path, tmp_path: Path
) -> None:
    assert "tau.azure.com" not in {n.split(".", 1)[-1] for n in names(
        bare, "apiextensions.k8s.io/v1", "CustomResourceDefinition")}  # fmt: skip
    # without --yes and without a terminal to ask, nothing is applied
    res = tau(bare, "platform", "up", "--stack", "sandbox", env=admin_env(bare), timeout=300)
    assert res.returncode == 2 and "pass --yes" in res.stderr, res.stderr

    first = platform(bare, "up", "--yes")
    assert first["changes"]["create"] > 40 and first["changes"]["delete"] == 0
    crds = names(bare, "apiextensions.k8s.io/v1", "CustomResourceDefinition")
    assert {"runs.tau.azure.com", "clusters.tau.azure.com", "workspaces.tau.azure.com"} <= crds
    assert names(bare, "tau.azure.com/v1alpha1", "TauCluster", "taugrid-system") == {"cluster"}
    assert names(bare, "kueue.x-k8s.io/v1beta2", "ClusterQueue") == {"gpu", "cpu"}
    assert names(bare, "kueue.x-k8s.io/v1beta2", "LocalQueue", "research") == {"gpu", "cpu"}

    again = platform(bare, "up", "--yes")
    assert again["changes"]["same"] == first["changes"]["create"]
    assert {k: v for k, v in again["changes"].items() if k != "same" and v} == {}
    assert again["steps"] == []

    # researchers use what Pulumi made: profiles from its TauCluster, a run through its queues
    env = {"KUBECONFIG": tau(bare, "sandbox", "kubeconfig", "--as", "researcher").stdout.strip()}
    profiles = json.loads(tau(bare, "profiles", "-o", "json", env=env).stdout)
    assert [p["name"] for p in profiles] == ["a100x1", "a100x2", "cpu"]
    (tmp_path / "s.py").write_text("print('done')\n")
    (tmp_path / "tau.yaml").write_text(
        "schema_version: 1\nname: pu\nrun: {entrypoint: s.py, workload_kind: job}\n"
        "compute: {gpus: 0, cpus: 1, memory: 1Gi}\nruntime: {image: python:3.12-slim}\n"
    )
    res = tau(bare, "run", str(tmp_path), "--target", "kube", env=env, timeout=180)
    assert res.returncode == 0, res.stderr
    assert "[succeeded]" in res.stderr


def test_a_config_change_previews_as_exactly_that_change(bare: Path, tmp_path: Path) -> None:
    text = (ROOT / "stacks" / "Pulumi.sandbox.yaml").read_text()
    changed = text.replace("nominalQuota: {cpu: 6, memory: 24Gi}\n",
                           "nominalQuota: {cpu: 8, memory: 24Gi}\n")  # fmt: skip
    assert changed.count("cpu: 8") == 1
    (tmp_path / "Pulumi.sandbox.yaml").write_text(changed)
    preview = platform(bare, "preview", stacks=tmp_path)
    (step,) = preview["steps"]
    assert (step["op"], step["name"]) == ("update", "kueue-queues:cpu")
    assert step["type"].endswith("kueue.x-k8s.io/v1beta2:ClusterQueue")
    assert preview["changes"]["update"] == 1
    assert sum(v for k, v in preview["changes"].items() if k != "same") == 1
    # what changes, field by field, with its old and new value (the engine's diffs were [])
    (change,) = step["changes"]
    assert change["field"].endswith("nominalQuota") and "[cpu]" in change["field"], change
    assert (str(change["old"]), str(change["new"])) == ("6", "8")
    assert step["diffs"] == ["spec"]
    # and nothing was applied: the stack file as it is still previews clean
    assert platform(bare, "preview")["steps"] == []


def test_a_mandatory_policy_violation_blocks_up_and_changes_nothing(
    bare: Path, tmp_path: Path
) -> None:
    """TauGrid's policy pack runs in the real engine (as an executable pack: no Python language
    host): a floating version in the stack's version lock stops `up` before anything changes."""
    text = (ROOT / "stacks" / "Pulumi.sandbox.yaml").read_text()
    bad = text.replace(
        "kuberay: {install: external}", "kuberay: {install: external, version: latest}"
    )
    bad = bad.replace(
        "nominalQuota: {cpu: 6, memory: 24Gi}\n", "nominalQuota: {cpu: 8, memory: 24Gi}\n"
    )
    (tmp_path / "Pulumi.sandbox.yaml").write_text(bad)
    before = platform(bare, "preview")["changes"]
    res = tau(bare, "platform", "up", "--stack", "sandbox", "--stacks-dir", str(tmp_path), "--yes",
              env=admin_env(bare), timeout=300)  # fmt: skip
    assert res.returncode == 4, res.stderr
    assert "mandatory policy violation" in res.stderr and "nothing was changed" in res.stderr
    assert "versions-pinned: component kuberay has version 'latest'" in res.stderr
    # the quota change in the same config was not applied either
    assert platform(bare, "preview")["changes"] == before
    cpu = admin(bare).resources.get(api_version="kueue.x-k8s.io/v1beta2", kind="ClusterQueue")
    quota = cpu.get(name="cpu").spec.resourceGroups[0].flavors[0].resources[0].nominalQuota
    assert quota == "6"
    # the same config without the checks would go through: the pack is what stopped it
    res = tau(bare, "platform", "preview", "--stack", "sandbox", "--stacks-dir", str(tmp_path),
              "--no-policies", "-o", "json", env=admin_env(bare), timeout=300)  # fmt: skip
    assert res.returncode == 0, res.stderr


def test_a_controller_grant_survives_pulumi_up_of_a_new_base_quota(
    bare: Path, tmp_path: Path
) -> None:
    """Ownership with the real engine: the controller's grant (the quota of the queue's grant
    cohort, field manager taugrid-controller) and Pulumi's declarations (the queue's base quota,
    the cohort's parent) are different fields: `up` with a new base quota neither conflicts nor
    reverts the grant, and the next `up` sees no drift."""
    dyn = admin(bare)
    cohorts = dyn.resources.get(api_version="kueue.x-k8s.io/v1beta2", kind="Cohort")
    cqs = dyn.resources.get(api_version="kueue.x-k8s.io/v1beta2", kind="ClusterQueue")
    grant = [{"coveredResources": ["cpu"], "flavors": [{"name": "cpu", "resources": [
        {"name": "cpu", "nominalQuota": "2", "lendingLimit": "0"}]}]}]  # fmt: skip
    cohorts.server_side_apply(
        body={"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Cohort",
              "metadata": {"name": "tau-grants-cpu"}, "spec": {"resourceGroups": grant}},
        field_manager="taugrid-controller", force_conflicts=True,
    )  # fmt: skip
    text = (ROOT / "stacks" / "Pulumi.sandbox.yaml").read_text()
    (tmp_path / "Pulumi.sandbox.yaml").write_text(
        text.replace(
            "nominalQuota: {cpu: 6, memory: 24Gi}\n", "nominalQuota: {cpu: 8, memory: 24Gi}\n"
        )
    )
    try:
        up = platform(bare, "up", "--yes", stacks=tmp_path)
        assert up["changes"]["update"] == 1
        assert (
            cqs.get(name="cpu").spec.resourceGroups[0].flavors[0].resources[0].nominalQuota == "8"
        )
        got = cohorts.get(name="tau-grants-cpu").to_dict()["spec"]
        assert got["parentName"] == "sandbox" and got["resourceGroups"] == grant
        assert platform(bare, "preview", stacks=tmp_path)["steps"] == []  # no drift seen
    finally:
        platform(bare, "up", "--yes")
    assert cohorts.get(name="tau-grants-cpu").to_dict()["spec"]["resourceGroups"] == grant


def test_drift_is_seen_and_repaired(bare: Path) -> None:
    """On a cluster changed out of band (a ClusterQueue and a workspace's namespace deleted by
    hand), `up` used to print "same" from the state's memory. `preview --refresh` shows both,
    `tau platform refresh` reports them, `up --refresh` puts them back."""
    from kubekit import wait_until

    dyn = admin(bare)
    dyn.resources.get(api_version="kueue.x-k8s.io/v1beta2", kind="ClusterQueue").delete(name="cpu")
    namespaces = dyn.resources.get(api_version="v1", kind="Namespace")
    namespaces.delete(name="llm")

    def gone() -> bool:  # not just terminating: a terminating namespace still exists
        from kubernetes.dynamic.exceptions import NotFoundError

        try:
            namespaces.get(name="llm")
        except NotFoundError:
            return True
        return False

    wait_until(gone, timeout=180, what="the namespace to be gone")
    assert "cpu" not in names(bare, "kueue.x-k8s.io/v1beta2", "ClusterQueue")
    seen = platform(bare, "preview", "--refresh")
    created = {
        (st["type"].rsplit(":", 1)[-1], st["name"]) for st in seen["steps"] if st["op"] == "create"
    }
    assert ("ClusterQueue", "kueue-queues:cpu") in created or any(
        t == "ClusterQueue" and n.endswith("cpu") for t, n in created), created  # fmt: skip
    assert any(t == "Namespace" and "llm" in n for t, n in created), created
    drift = platform(bare, "refresh")["drift"]
    gone = {d["name"] for d in drift if d["drift"] == "gone"}
    assert any(n.endswith("cpu") for n in gone) and any("llm" in n for n in gone), drift
    platform(bare, "up", "--refresh", "--yes")
    assert "cpu" in names(bare, "kueue.x-k8s.io/v1beta2", "ClusterQueue")
    assert "llm" in names(bare, "v1", "Namespace")
    assert platform(bare, "preview", "--refresh")["steps"] == []  # nothing left to repair


def test_destroy_removes_everything_it_created(bare: Path) -> None:
    created = platform(bare, "preview")["changes"]["same"]
    gone = platform(bare, "destroy", "--yes")
    assert gone["changes"]["delete"] == created
    crds = names(bare, "apiextensions.k8s.io/v1", "CustomResourceDefinition")
    assert not {c for c in crds if c.endswith(".tau.azure.com")}
    assert names(bare, "kueue.x-k8s.io/v1beta2", "ClusterQueue") == set()
    assert not {"research", "llm", "taugrid-system"} & names(bare, "v1", "Namespace")
    # the external components stay: they were never the stack's
    assert "clusterqueues.kueue.x-k8s.io" in crds


def test_a_ci_cluster_verifies_a_lock_which_then_promotes(bare: Path, tmp_path: Path) -> None:
    """ci up --from dev on the sandbox (the CI template here targets it), down --passed records
    dev's lock, and only then does promote dev staging write it; reap destroys expired ones."""
    stacks = tmp_path / "stacks"
    shutil.copytree(ROOT / "stacks", stacks)  # links followed: plain files
    dev = stacks / "Pulumi.dev.yaml"
    dev.write_text(dev.read_text().replace(
        "      nodeProblemDetector: {enabled: true}\n",
        "      nodeProblemDetector: {enabled: true}\n      kueue: {version: 0.19.3}\n", 1))  # fmt: skip
    (stacks / "Pulumi.ci.yaml").write_text((ROOT / "stacks" / "Pulumi.sandbox.yaml").read_text())
    env, where = admin_env(bare), ["--stacks-dir", str(stacks)]

    def ci(*args: str) -> Any:
        return tau(bare, "platform", "ci", *args, env=env, timeout=600)

    assert tau(bare, "platform", "promote", "dev", "staging", "--yes", *where).returncode == 2
    res = ci("up", "--name", "e2e1", "--from", "dev", "--ttl", "1h", *where)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip().splitlines()[-1] == "e2e1"
    tc = admin(bare).resources.get(api_version="tau.azure.com/v1alpha1", kind="TauCluster")
    assert tc.get(name="cluster", namespace="taugrid-system").spec.components.kueue == "0.19.3"
    # a second pipeline on this one existing cluster is refused, not merged into the first
    res = ci("up", "--name", "e2e2", *where)
    assert res.returncode == 4 and "holds one CI platform at a time" in res.stderr
    (listed,) = json.loads(ci("list", "-o", "json").stdout)
    assert (listed["id"], listed["from"], listed["expired"]) == ("e2e1", "dev", False)

    res = ci("down", "e2e1", "--passed", *where)
    assert res.returncode == 0, res.stderr
    assert "recorded: dev's version lock" in res.stderr
    assert (
        json.loads((stacks / "verified" / "dev.json").read_text())["records"][0]["verifiedOn"]
        == "ci-e2e1"
    )
    res = tau(bare, "platform", "promote", "dev", "staging", "--yes", *where)
    assert res.returncode == 0, res.stderr
    assert "kueue: {version: 0.19.3}" in (stacks / "Pulumi.staging.yaml").read_text() or (
        "version: 0.19.3" in (stacks / "Pulumi.staging.yaml").read_text()
    )

    # expired CI stacks are destroyed by reap (its 1 s are over once up returns)
    assert ci("up", "--name", "e2e3", "--ttl", "1s", *where).returncode == 0
    res = ci("reap", "-o", "json")
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout) == {"reaped": ["e2e3"]}
    assert json.loads(ci("list", "-o", "json").stdout) == []
    assert names(bare, "kueue.x-k8s.io/v1beta2", "ClusterQueue") == set()
