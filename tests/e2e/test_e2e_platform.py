"""The platform's Kubernetes objects against a real API server, and the RBAC a workspace grants."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import EXAMPLES, ROOT
from kubekit import apply, dynamic, error_message

from taugrid.api.platform import SYSTEM_NAMESPACE, parse_platform
from taugrid.api.profiles import ProfileSnapshot
from taugrid.api.published import profile_snapshot
from taugrid.components import manifests
from taugrid.runs import codebundle, load, render, resolve

pytestmark = pytest.mark.e2e
_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
STACKS = sorted(p.name.split(".")[1] for p in (ROOT / "stacks").glob("Pulumi.*.yaml"))


def stack_cfg(stack: str) -> Any:
    data = yaml.safe_load((ROOT / "stacks" / f"Pulumi.{stack}.yaml").read_text())
    return parse_platform(data["config"]["taugrid:platform"])


@pytest.fixture(scope="module")
def platform_ready(cluster_crds: Any) -> Any:
    dyn = cluster_crds
    apply(dyn, manifests.namespace(SYSTEM_NAMESPACE))
    return dyn


@pytest.mark.parametrize("stack", STACKS)
def test_kueue_objects_of_every_stack_are_accepted(platform_ready: Any, stack: str) -> None:
    cfg = stack_cfg(stack)
    objs = manifests.kueue_objects(cfg)
    assert {o["kind"] for o in objs} >= {
        "ResourceFlavor",
        "Cohort",
        "WorkloadPriorityClass",
        "ClusterQueue",
    }
    for obj in objs:
        got = apply(platform_ready, obj, dry_run=True)
        assert got.metadata.name == obj["metadata"]["name"]


def test_prod_workspaces_and_profile_are_accepted(platform_ready: Any) -> None:
    cfg = stack_cfg("prod")
    for obj in manifests.kueue_objects(cfg):
        apply(platform_ready, obj)
    for ws in cfg.workspaces:
        for obj in manifests.workspace_objects(cfg, ws):
            apply(platform_ready, obj)
    apply(platform_ready, manifests.researcher_read_clusterrole())
    tc = apply(platform_ready, manifests.tau_cluster(cfg, "prod"))
    assert [p["name"] for p in tc.to_dict()["spec"]["workloadProfiles"]] == [
        "h100x8",
        "a100x1",
        "a100x2",
        "cpu",
    ]
    assert tc.to_dict()["spec"]["defaultWorkspace"] == "research"
    lq = platform_ready.resources.get(api_version="kueue.x-k8s.io/v1beta2", kind="LocalQueue").get(
        name="llm", namespace="llm"
    )
    assert lq.spec.clusterQueue == "llm"


def test_wrong_platform_objects_are_rejected(platform_ready: Any) -> None:
    cq = copy.deepcopy(
        manifests.cluster_queue(stack_cfg("prod"), stack_cfg("prod").queues.clusterQueues[0])
    )
    cq["metadata"]["name"] = "broken"
    cq["spec"]["resourceGroups"][0]["flavors"][0]["resources"].pop()  # fewer resources than covered
    with pytest.raises(Exception) as e:
        apply(platform_ready, cq, dry_run=True)
    assert (
        "flavors must have the same number of resources as the coveredResources"
        in error_message(e.value)
    )
    ws = next(
        o
        for o in manifests.workspace_objects(stack_cfg("prod"), stack_cfg("prod").workspaces[0])
        if o["kind"] == "TauWorkspace"
    )
    bad = copy.deepcopy(ws)
    bad["spec"]["members"] = [{"kind": "Robot", "name": "r2"}]
    with pytest.raises(Exception) as e:
        apply(platform_ready, bad, dry_run=True)
    assert "Robot" in error_message(e.value)


def _allowed(cp: Any, who: str, obj: dict[str, Any]) -> bool:
    from kubernetes.client.exceptions import ApiException

    try:
        apply(dynamic(cp, who), obj, dry_run=True)
        return True
    except ApiException as e:
        if e.status == 403:
            return False
        raise


def test_workspace_rbac_lets_members_work_in_their_namespace_only(
    cluster: Any, platform_ready: Any
) -> None:
    test_prod_workspaces_and_profile_are_accepted(platform_ready)  # idempotent (server-side apply)
    cluster.add_identity("alice@example.com")  # a User member of llm
    cluster.add_identity("bob", ("team-research",))  # a Group member of research
    cluster.add_identity("mallory", ("nobody",))
    snap = ProfileSnapshot.model_validate(profile_snapshot(stack_cfg("prod"), "prod"))

    def rayjob(workspace: str) -> dict[str, Any]:
        loaded = load.load_manifest(EXAMPLES / "quickstart")
        r = resolve.resolve(loaded.manifest, snap, workspace=workspace)
        return render.render(
            r,
            render.RunMeta(run_id="tau-aks-gpu-quickstart-rbac1"),
            codebundle.collect(loaded.folder),
        )[1]

    def quota(ns: str) -> dict[str, Any]:
        return {
            "apiVersion": "tau.azure.com/v1alpha1",
            "kind": "TauQuotaRequest",
            "metadata": {"name": "more-gpus", "namespace": ns},
            "spec": {
                "workspace": ns,
                "flavor": "h100x8",
                "resource": "nvidia.com/gpu",
                "requested": 8,
                "reason": "deadline",
                "duration": "48h",
            },
        }

    assert _allowed(cluster, "alice@example.com", rayjob("llm"))
    assert _allowed(cluster, "alice@example.com", quota("llm"))
    assert not _allowed(cluster, "alice@example.com", rayjob("research"))
    assert not _allowed(cluster, "alice@example.com", quota("research"))
    assert _allowed(cluster, "bob", rayjob("research"))
    assert not _allowed(cluster, "bob", rayjob("llm"))
    assert not _allowed(cluster, "mallory", rayjob("research"))
    # Reading: own TauWorkspace yes, another's no; the TauCluster profiles yes; Roles no.
    from kubernetes.client.exceptions import ApiException

    tw = dynamic(cluster, "alice@example.com").resources.get(
        api_version="tau.azure.com/v1alpha1", kind="TauWorkspace"
    )
    assert tw.get(name="llm", namespace=SYSTEM_NAMESPACE).spec.namespace == "llm"
    with pytest.raises(ApiException) as e:
        tw.get(name="research", namespace=SYSTEM_NAMESPACE)
    assert e.value.status == 403
    tc = dynamic(cluster, "bob").resources.get(
        api_version="tau.azure.com/v1alpha1", kind="TauCluster"
    )
    assert tc.get(name="cluster").spec.stack == "prod"
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": {"name": "sneaky", "namespace": "llm"},
        "rules": [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}],
    }
    assert not _allowed(cluster, "alice@example.com", role)


def test_render_for_prod_uses_the_workspace_pvc(platform_ready: Any, tmp_path: Path) -> None:
    snap = ProfileSnapshot.model_validate(profile_snapshot(stack_cfg("prod"), "prod"))
    loaded = load.load_manifest(EXAMPLES / "multi-worker-gpu")
    with pytest.raises(
        resolve.ResolutionError, match=r"compute\.gpus=2 exceeds profile a100x1: nodes have 1 GPU"
    ):
        resolve.resolve(loaded.manifest, snap, workspace="research", profile="a100x1")
    assert resolve.resolve(loaded.manifest, snap, workspace="research").profile.name == "a100x2"
    r = resolve.resolve(loaded.manifest, snap, workspace="llm", profile="h100x8")
    assert r.profile.name == "h100x8" and r.pvc == "llm-data"
    for obj in render.render(
        r, render.RunMeta(run_id="multi-worker-gpu-e2e01"), codebundle.collect(loaded.folder)
    ):
        apply(platform_ready, obj)
