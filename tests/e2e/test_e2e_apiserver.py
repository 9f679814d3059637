"""Against a real kube-apiserver: CRDs install, rendered runs are accepted, wrong objects
refused."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import EXAMPLE_DIRS, PROFILES
from kubekit import api_client, apply, error_message

from taugrid.api import naming
from taugrid.runs import codebundle, load, render, resolve

pytestmark = pytest.mark.e2e
_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
UPSTREAM = ["kueue", "kuberay"]


@pytest.fixture(scope="module")
def crds_installed(cluster_crds: Any) -> Any:
    dyn = cluster_crds
    for ns in ("research", "llm"):
        apply(dyn, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    return dyn


def rendered(folder: Path) -> list[dict[str, Any]]:
    loaded = load.load_manifest(folder)
    r = resolve.resolve(loaded.manifest, load.load_snapshot(PROFILES))
    meta = render.RunMeta(run_id=naming.new_run_id(loaded.manifest.run_id_stem), submitter="e2e")
    return render.render(r, meta, codebundle.collect(loaded.folder))


def test_api_server_reports_the_built_version(cluster: Any) -> None:
    from kubernetes import client

    from taugrid.sandbox.controlplane import versions

    info = client.VersionApi(api_client(cluster)).get_code()
    assert info.git_version == versions()["kubernetes"]


def test_tau_crds_are_served(crds_installed: Any) -> None:
    for kind, short in (
        ("TauCluster", "tc"),
        ("TauWorkspace", "tw"),
        ("TauQuotaRequest", "tqr"),
        ("TauRun", "tr"),
    ):
        res = crds_installed.resources.get(api_version="tau.azure.com/v1alpha1", kind=kind)
        assert short in res.short_names


@pytest.mark.parametrize("folder", EXAMPLE_DIRS, ids=lambda p: p.name)
def test_rendered_examples_are_accepted_by_server_side_apply(
    crds_installed: Any, folder: Path
) -> None:
    for obj in rendered(folder):
        created = apply(crds_installed, obj)
        assert created.metadata.name == obj["metadata"]["name"]
        if obj["kind"] in ("RayJob", "Job"):
            assert created.spec.suspend is True
            got = created.to_dict()
            labels = got["metadata"]["labels"]
            assert labels["tau.azure.com/run-id"] == obj["metadata"]["name"]
            if obj["kind"] == "RayJob":
                # nothing the renderer wrote was pruned by the real schema
                groups = got["spec"]["rayClusterSpec"]["workerGroupSpecs"]
                assert (
                    groups[0]["replicas"]
                    == obj["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["replicas"]
                )
                assert (
                    got["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["metadata"]["labels"]
                    == (
                        obj["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["metadata"][
                            "labels"
                        ]
                    )
                )


def _rayjob() -> dict[str, Any]:
    return rendered(EXAMPLE_DIRS[0].parent / "quickstart")[1]


BAD: list[tuple[str, Any, str]] = [
    (
        "rayjob-replicas-not-int",
        lambda o: o["spec"]["rayClusterSpec"]["workerGroupSpecs"][0].update(replicas="x"),
        "replicas",
    ),
    (
        "rayjob-managedBy-cel",
        lambda o: o["spec"].update(managedBy="someone-else"),
        "managedBy field value must be either",
    ),
    (
        "rayjob-deletionStrategy-cel",
        lambda o: o["spec"].update(deletionStrategy={}),
        "deletionStrategy requires either BOTH",
    ),
]


@pytest.mark.parametrize(("name", "mutate", "message"), BAD, ids=[b[0] for b in BAD])
def test_wrong_rayjobs_are_rejected(
    crds_installed: Any, name: str, mutate: Any, message: str
) -> None:
    obj = copy.deepcopy(_rayjob())
    mutate(obj)
    with pytest.raises(Exception) as e:
        apply(crds_installed, obj, dry_run=True)
    assert message in error_message(e.value)


def test_wrong_kueue_and_tau_objects_are_rejected(crds_installed: Any) -> None:
    cq = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ClusterQueue",
        "metadata": {"name": "no-cohort"},
        "spec": {
            "namespaceSelector": {},
            "resourceGroups": [
                {
                    "coveredResources": ["cpu"],
                    "flavors": [
                        {
                            "name": "cpu",
                            "resources": [{"name": "cpu", "nominalQuota": 4, "borrowingLimit": 2}],
                        }
                    ],
                }
            ],
        },
    }
    with pytest.raises(Exception) as e:
        apply(crds_installed, cq, dry_run=True)
    assert "borrowingLimit must be nil when cohort is empty" in error_message(e.value)
    rf = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ResourceFlavor",
        "metadata": {"name": "bad-tol"},
        "spec": {"tolerations": [{"operator": "Equal", "value": "x", "effect": "NoSchedule"}]},
    }
    with pytest.raises(Exception) as e:
        apply(crds_installed, rf, dry_run=True)
    assert "operator must be Exists when 'key' is empty" in error_message(e.value)
    run = {
        "apiVersion": "tau.azure.com/v1alpha1",
        "kind": "TauRun",
        "metadata": {"name": "r-abcde", "namespace": "research"},
        "spec": {
            "runId": "r-abcde",
            "runName": "r",
            "workspace": "research",
            "profile": "cpu",
            "workloadKind": "spark",
            "configHash": "sha256:0",
        },
    }
    with pytest.raises(Exception) as e:
        apply(crds_installed, run, dry_run=True)
    assert "workloadKind" in error_message(e.value) and "spark" in error_message(e.value)
    good = copy.deepcopy(run)
    good["spec"]["workloadKind"] = "job"
    assert apply(crds_installed, good).spec.workloadKind == "job"
