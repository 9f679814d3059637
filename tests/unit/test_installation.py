"""`tau cluster validate installation` (#41): a whole installation passes; each thing a real
cluster gets wrong (a missing CRD, a release at another version or failed, a workload not Ready, a
queue not Active, a dead controller, NPD or DCGM missing on a GPU node, an old Kubernetes, reads
this identity may not make) is one failed finding with the fix; what the stack installs outside
(install: external) or through another chart is skipped, and says so."""

from __future__ import annotations

import base64
import datetime as dt
import gzip
import json
from typing import Any

import pytest
from fakekit import cluster_api

from taugrid.api import constants as C
from taugrid.api import installation as I
from taugrid.api.crds import CRD_TYPES
from taugrid.api.kubetime import k8s_time
from taugrid.api.platform import CHARTS
from taugrid.cli.app import main

LOCK = {"kueue": "0.19.2", "nodeProblemDetector": "2.4.1", "dcgmExporter": "4.8.2"}


def release(name: str, version: str, revision: int = 1, status: str = "deployed") -> Any:
    """A Helm release Secret as Helm writes it: base64 of gzip of JSON, in base64 data."""
    doc = {
        "version": revision,
        "chart": {"metadata": {"version": version}},
        "info": {"status": status},
    }
    blob = base64.b64encode(gzip.compress(json.dumps(doc).encode()))
    ns = next(c.namespace for c in CHARTS.values() if c.release == name)
    return {
        "metadata": {
            "name": f"sh.helm.release.v1.{name}.v{revision}",
            "namespace": ns,
            "labels": {"owner": "helm", "name": name, "status": status},
        },
        "data": {"release": base64.b64encode(blob).decode()},
    }


def crd(name: str, established: bool = True) -> Any:
    status = "True" if established else "False"
    return {
        "metadata": {"name": name},
        "status": {"conditions": [{"type": "Established", "status": status}]},
    }


def pod(name: str, ns: str, node: str, phase: str = "Running") -> Any:
    return {
        "metadata": {"name": name, "namespace": ns},
        "spec": {"nodeName": node},
        "status": {"phase": phase},
    }


def world(**change: Any) -> dict[str, list[Any]]:
    """A whole installation: Kueue and NPD by Helm, DCGM's exporter from the GPU Operator's
    release (not enabled here: its own check is skipped), KubeRay outside the stack."""
    names = [f"{t.plural}.{C.GROUP}" for t in CRD_TYPES]
    names += [*I.COMPONENT_CRDS["kueue"], *I.COMPONENT_CRDS["kuberay"]]
    tc = {
        "metadata": {"name": "cluster"},
        "spec": {
            "stack": "prod",
            "components": {**LOCK, "kuberay": "1.7.0", "controller": "0.1.0"},
            "installedBy": {
                "kueue": "helm",
                "nodeProblemDetector": "helm",
                "dcgmExporter": "gpuOperator",
                "kuberay": "external",
                "controller": "helm",
            },
            "workloadProfiles": [
                {"name": "a100", "clusterQueue": "gpu", "flavor": "a100", "localQueue": "gpu"}
            ],
            "workspaces": [{"name": "team", "namespace": "ws-team", "pvc": "data"}],
        },
        "status": {"controllerHeartbeat": k8s_time()},
    }
    objs: dict[str, list[Any]] = {
        "TauCluster": [tc],
        "CustomResourceDefinition": [crd(n) for n in names],
        "Secret": [release("kueue", "0.19.2"), release("node-problem-detector", "2.4.1")],
        "Deployment": [
            {
                "kind": "Deployment",
                "metadata": {"name": "kueue-controller-manager", "namespace": "kueue-system"},
                "spec": {"replicas": 1},
                "status": {"readyReplicas": 1},
            }
        ],
        "DaemonSet": [],
        "Pod": [
            pod("node-problem-detector-x1", "node-problem-detector", "gpu-0"),
            pod("node-problem-detector-x2", "node-problem-detector", "gpu-1"),
            pod("nvidia-dcgm-exporter-a", "gpu-operator", "gpu-0"),
            pod("nvidia-dcgm-exporter-b", "gpu-operator", "gpu-1"),
        ],
        "ClusterQueue": [
            {
                "metadata": {"name": "gpu"},
                "status": {"conditions": [{"type": "Active", "status": "True"}]},
            }
        ],
        "ResourceFlavor": [{"metadata": {"name": "a100"}}],
        "LocalQueue": [{"metadata": {"name": "gpu", "namespace": "ws-team"}}],
        "Node": [
            {"metadata": {"name": n}, "status": {"capacity": {C.GPU_RESOURCE: "1"}}}
            for n in ("gpu-0", "gpu-1")
        ]
        + [{"metadata": {"name": "cpu-0"}, "status": {"capacity": {"cpu": "8"}}}],
    }
    objs.update(change)
    return objs


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Any:
    return cluster_api(monkeypatch)


def findings(fake: Any, objs: Any) -> dict[str, Any]:
    from taugrid.client import cluster

    fake(objs)
    return {f.item: f for f in cluster.validate_installation().findings}


def test_a_whole_installation_passes_and_says_what_it_skipped(fake: Any) -> None:
    got = findings(fake, world())
    assert [i for i, f in got.items() if f.state == "failed"] == []
    assert got["component kueue"].message == "chart 0.19.2 deployed, 1 workload(s) Ready"
    assert "install: external" in got["component kuberay"].message
    assert got["component dcgmExporter"].message == "part of component gpuOperator's release"
    assert got["dcgm-exporter on GPU nodes"].message == "running on all 2"
    assert got["controller"].state == "ok" and got["kubernetes"].message == "v1.36.0"


def test_each_broken_part_is_one_failed_finding_with_its_fix(fake: Any) -> None:
    base = world()
    old = k8s_time(dt.datetime(2026, 1, 1, tzinfo=dt.UTC))
    base["TauCluster"][0]["status"]["controllerHeartbeat"] = old
    broken = world(
        TauCluster=base["TauCluster"],
        CustomResourceDefinition=[
            c for c in base["CustomResourceDefinition"] if c["metadata"]["name"] != "rayjobs.ray.io"
        ],
        Secret=[
            release("kueue", "0.18.0"),
            release("node-problem-detector", "2.4.1", 1),
            release("node-problem-detector", "2.4.1", 2, status="failed"),
        ],
        ClusterQueue=[
            {
                "metadata": {"name": "gpu"},
                "status": {
                    "conditions": [
                        {"type": "Active", "status": "False", "message": "flavor a100 not found"}
                    ]
                },
            }
        ],
        ResourceFlavor=[],
        LocalQueue=[],
        Pod=[pod("node-problem-detector-x1", "node-problem-detector", "gpu-0", "Pending")],
    )
    got = findings(fake, broken)
    failed = {i: f for i, f in got.items() if f.state == "failed"}
    assert set(failed) == {
        "crd rayjobs.ray.io",
        "component kueue",
        "component nodeProblemDetector",
        "controller",
        "queue gpu",
        "flavor a100",
        "queue ws-team/gpu",
        "node-problem-detector on GPU nodes",
        "dcgm-exporter on GPU nodes",
    }
    assert (
        "chart 0.18.0 is deployed; the stack's lock says 0.19.2"
        in failed["component kueue"].message
    )
    assert "revision 2 is failed" in failed["component nodeProblemDetector"].message
    assert "not running" in failed["controller"].message
    assert "flavor a100 not found" in failed["queue gpu"].message
    assert (
        "2 of 2 GPU node(s): gpu-0, gpu-1" in failed["node-problem-detector on GPU nodes"].message
    )
    assert all(f.fix for f in failed.values())


def test_a_workload_not_ready_an_old_kubernetes_and_no_platform(fake: Any) -> None:
    not_ready = world(
        Deployment=[
            {
                "kind": "Deployment",
                "metadata": {"name": "kueue-controller-manager", "namespace": "kueue-system"},
                "spec": {"replicas": 2},
                "status": {"readyReplicas": 1},
            }
        ]
    )
    got = findings(fake, not_ready)
    assert "not Ready: Deployment kueue-controller-manager" in got["component kueue"].message
    kube = fake(world())
    kube.version = "v1.29.4"
    from taugrid.client import cluster

    old = {f.item: f for f in cluster.validate_installation().findings}["kubernetes"]
    assert old.state == "failed" and "at least 1.30" in old.message
    got = findings(fake, world(TauCluster=[]))
    assert got["platform"].state == "failed" and "tau platform up" in (got["platform"].fix or "")


@pytest.mark.parametrize("garbage", ["", "bm90IGd6aXA=", base64.b64encode(b"[1]").decode(), "%%%"])
def test_a_release_secret_that_is_not_one_reads_as_none(garbage: str) -> None:
    assert I.release_of({"data": {"release": garbage}}) is None
    assert I.release_of({}) is None


def test_what_this_identity_may_not_read_is_said(fake: Any) -> None:
    from taugrid.client import cluster

    kube = fake(world())
    kube.forbid.add(("list", "Secret", None))
    got = cluster.validate_installation()
    denied = [f for f in got.findings if f.item.startswith("read ")]
    assert denied and all("platform admin" in (f.fix or "") for f in denied)
    assert not got.passed


def test_the_command_prints_findings_and_exits_by_them(
    fake: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    fake(world())
    assert main(["cluster", "validate", "installation"]) == 0
    text = capsys.readouterr().out
    assert "ok    component kueue: chart 0.19.2 deployed" in text and "0 failed" in text
    fake(world(ResourceFlavor=[]))
    assert main(["cluster", "validate", "installation", "-o", "json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["passed"] is False
    assert [f["item"] for f in doc["findings"] if f["state"] == "failed"] == ["flavor a100"]
