"""Fake GPU nodes (KWOK) and pod lifecycles: scheduling against the GPU taint and nvidia.com/gpu."""

from __future__ import annotations

from typing import Any

import pytest
from conftest import EXAMPLES, PROFILES
from kubekit import api_client, apply, dynamic, wait_until

from taugrid.api import constants as C
from taugrid.runs import codebundle, load, render, resolve

pytestmark = pytest.mark.e2e
GPU_TAINT = {"key": "sku", "value": "gpu", "effect": "NoSchedule"}
NS = "kwok-e2e"  # this module's own namespace: other modules apply the workspace objects


wait = wait_until


@pytest.fixture(scope="module")
def nodes(cluster: Any) -> Any:
    if not cluster.has_kwok:
        pytest.skip("KWOK is not built; see e2e/controlplane/build.sh")
    if "kube-scheduler" not in cluster.procs:
        pytest.skip("kube-scheduler is not built")
    from kubernetes import client

    core = client.CoreV1Api(api_client(cluster))
    cluster.add_fake_node(
        "gpu-a100-0",
        gpus=1,
        labels={C.LABEL_POOL: "a100-1x", C.LABEL_GPU_CLASS: "a100-80gb"},
        taints=[GPU_TAINT],
        cpu="24",
        memory="220Gi",
    )
    cluster.add_fake_node("cpu-0", labels={C.LABEL_POOL: "cpu"}, cpu="16", memory="64Gi")
    for name in ("gpu-a100-0", "cpu-0"):
        wait(
            lambda n=name: any(
                c.type == "Ready" and c.status == "True"
                for c in (core.read_node(n).status.conditions or [])
            ),
            what=f"{name} Ready",
        )
    apply(dynamic(cluster), {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    return core


def _pod(name: str, gpus: int, tolerate: bool) -> dict[str, Any]:
    res = {"limits": {"nvidia.com/gpu": str(gpus)}} if gpus else {"requests": {"cpu": "100m"}}
    spec: dict[str, Any] = {"containers": [{"name": "c", "image": "fake", "resources": res}]}
    if tolerate:
        spec["tolerations"] = [{**GPU_TAINT, "operator": "Equal"}]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NS},
        "spec": spec,
    }


def test_gpu_nodes_are_ready_with_gpus(nodes: Any) -> None:
    node = nodes.read_node("gpu-a100-0")
    assert node.status.allocatable["nvidia.com/gpu"] == "1"
    assert node.spec.taints[0].key == "sku"


def test_gpu_pod_lands_on_the_gpu_node_and_runs(cluster: Any, nodes: Any) -> None:
    apply(dynamic(cluster), _pod("trainer", gpus=1, tolerate=True))
    pod = wait(
        lambda: (p := nodes.read_namespaced_pod("trainer", NS)).status.phase == "Running" and p,
        what="Running",
    )
    assert pod.spec.node_name == "gpu-a100-0"


def test_pod_without_toleration_is_not_scheduled_on_gpus(cluster: Any, nodes: Any) -> None:
    apply(dynamic(cluster), _pod("untolerated", gpus=1, tolerate=False))

    def unschedulable() -> bool:
        p = nodes.read_namespaced_pod("untolerated", NS)
        return any(
            c.type == "PodScheduled" and c.status == "False" and c.reason == "Unschedulable"
            for c in (p.status.conditions or [])
        )

    wait(unschedulable, what="Unschedulable")
    events = nodes.list_namespaced_event(NS, field_selector="involvedObject.name=untolerated").items
    assert any(e.reason == "FailedScheduling" for e in events)


def test_rendered_job_runs_to_completion_once_admitted(cluster: Any, nodes: Any) -> None:
    """Unsuspending (what Kueue does on admission) runs the rendered Job's pod on a fake node."""
    loaded = load.load_manifest(EXAMPLES / "batch-job")
    r = resolve.resolve(loaded.manifest, load.load_snapshot(PROFILES))
    cm, job = render.render(
        r, render.RunMeta(run_id="batch-score-kwok1"), codebundle.collect(loaded.folder)
    )
    cm["metadata"]["namespace"] = job["metadata"]["namespace"] = NS
    pod_spec = job["spec"]["template"]["spec"]
    pod_spec.pop("serviceAccountName", None)  # no such ServiceAccount in this bare namespace
    pod_spec["nodeSelector"] = {C.LABEL_POOL: "cpu"}
    # The workspace's /data volume: a PVC bound to a pre-made PV (no provisioner, no kubelet).
    apply(
        dynamic(cluster),
        {
            "apiVersion": "v1",
            "kind": "PersistentVolume",
            "metadata": {"name": "kwok-e2e-data-pv"},
            "spec": {
                "capacity": {"storage": "1Ti"},
                "accessModes": ["ReadWriteMany"],
                "hostPath": {"path": "/nonexistent/kwok"},
                "storageClassName": "",
                "claimRef": {"namespace": NS, "name": r.pvc},
            },
        },
    )
    apply(
        dynamic(cluster),
        {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": r.pvc, "namespace": NS},
            "spec": {
                "accessModes": ["ReadWriteMany"],
                "storageClassName": "",
                "volumeName": "kwok-e2e-data-pv",
                "resources": {"requests": {"storage": "1Ti"}},
            },
        },
    )
    apply(dynamic(cluster), cm)
    apply(dynamic(cluster), job)
    from kubernetes import client

    batch = client.BatchV1Api(api_client(cluster))
    assert not nodes.list_namespaced_pod(
        NS, label_selector=f"{C.LABEL_RUN_ID}=batch-score-kwok1"
    ).items
    batch.patch_namespaced_job("batch-score-kwok1", NS, {"spec": {"suspend": False}})
    pod = wait(
        lambda: next(
            iter(
                nodes.list_namespaced_pod(
                    NS, label_selector=f"{C.LABEL_RUN_ID}=batch-score-kwok1"
                ).items
            ),
            None,
        ),
        what="the Job's pod",
    )
    assert pod.metadata.labels[C.KUEUE_QUEUE_LABEL] == "cpu"  # run labels reach the pod
    done = wait(
        lambda: (j := batch.read_namespaced_job("batch-score-kwok1", NS)).status.succeeded and j,
        timeout=90,
        what="Complete",
    )
    assert done.status.succeeded == 1
