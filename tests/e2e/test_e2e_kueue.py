"""Real Kueue (built from its module, run out of cluster with loopback webhooks) admitting runs.

The queue objects come from the platform's own manifests, the Job from `tau`'s renderer, the
node from KWOK: quota admits the first run (which then completes) and holds the second.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import EXAMPLES
from kubekit import api_client, apply, wait_until

from taugrid.api import constants as C
from taugrid.api.platform import SYSTEM_NAMESPACE, parse_platform
from taugrid.api.profiles import ProfileSnapshot
from taugrid.api.published import profile_snapshot
from taugrid.components import manifests
from taugrid.runs import codebundle, load, render, resolve

pytestmark = pytest.mark.e2e
_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
CFG = parse_platform(
    {
        "cluster": {"provider": "existing", "name": "e2e", "context": "e2e"},
        "cpuPools": [{"name": "kqcpu", "vmSize": "Standard_D16s_v5", "maxCount": 2}],
        "queues": {
            "cohort": "e2e",
            "clusterQueues": [
                {
                    "name": "kqcpu",
                    "flavors": [{"pool": "kqcpu", "nominalQuota": {"cpu": 2, "memory": "8Gi"}}],
                }
            ],
        },
        "workspaces": [
            {"name": "kq", "queues": ["kqcpu"], "storage": {"size": "10Gi", "storageClass": None}}
        ],
    }
)


wait = wait_until


@pytest.fixture(scope="module")
def kueue(cluster: Any, cluster_crds: Any) -> Any:
    if not cluster.has_kueue:
        pytest.skip("Kueue is not built (see e2e/controlplane/build.sh)")
    if not cluster.has_kwok:
        pytest.skip("KWOK is not built")
    dyn = cluster_crds
    apply(dyn, manifests.namespace(SYSTEM_NAMESPACE))
    cluster.start_kueue(C.LABEL_WORKSPACE)
    cluster.add_fake_node("kq-cpu-0", labels={C.LABEL_POOL: "kqcpu"}, cpu="16", memory="64Gi")
    for obj in manifests.kueue_objects(CFG):
        apply(dyn, obj)
    for obj in manifests.workspace_objects(CFG, CFG.workspaces[0]):
        if obj["kind"] != "PersistentVolumeClaim":
            apply(dyn, obj)
    # /data: a PVC bound to a pre-made PV (no provisioner here).
    apply(
        dyn,
        {
            "apiVersion": "v1",
            "kind": "PersistentVolume",
            "metadata": {"name": "kq-data-pv"},
            "spec": {
                "capacity": {"storage": "10Gi"},
                "accessModes": ["ReadWriteMany"],
                "storageClassName": "",
                "hostPath": {"path": "/nonexistent/kq"},
                "claimRef": {"namespace": "kq", "name": "kq-data"},
            },
        },
    )
    apply(
        dyn,
        {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": "kq-data", "namespace": "kq"},
            "spec": {
                "accessModes": ["ReadWriteMany"],
                "storageClassName": "",
                "volumeName": "kq-data-pv",
                "resources": {"requests": {"storage": "10Gi"}},
            },
        },
    )
    return dyn


def _job(run_id: str, tmp: Path, cpus: int) -> list[dict[str, Any]]:
    snap = ProfileSnapshot.model_validate(profile_snapshot(CFG, "e2e"))
    folder = tmp / run_id
    folder.mkdir()
    for f in (EXAMPLES / "batch-job").iterdir():
        (folder / f.name).write_bytes(f.read_bytes())
    doc = yaml.safe_load((folder / "tau.yaml").read_text())
    doc["compute"]["cpus"] = cpus
    (folder / "tau.yaml").write_text(yaml.safe_dump(doc))
    loaded = load.load_manifest(folder)
    r = resolve.resolve(loaded.manifest, snap)
    assert r.profile.name == "kqcpu" and r.namespace == "kq"
    return render.render(r, render.RunMeta(run_id=run_id), codebundle.collect(folder))


def _workload(dyn: Any, run_id: str) -> Any:
    wls = (
        dyn.resources.get(api_version="kueue.x-k8s.io/v1beta2", kind="Workload")
        .get(namespace="kq")
        .items
    )
    return next(
        (w for w in wls if any(o["name"] == run_id for o in (w.metadata.ownerReferences or []))),
        None,
    )


def _cond(obj: Any, kind: str) -> Any:
    return (
        next((c for c in (obj.status.conditions or []) if c["type"] == kind), None)
        if obj and obj.status
        else None
    )


def test_kueue_admits_a_rendered_run_which_then_completes(
    cluster: Any, kueue: Any, tmp_path: Path
) -> None:
    for obj in _job("batch-score-kq001", tmp_path, cpus=1):
        apply(kueue, obj)
    wl = wait(
        lambda: (
            (w := _workload(kueue, "batch-score-kq001"))
            and (c := _cond(w, "Admitted"))
            and c["status"] == "True"
            and w
        ),
        what="the Workload to be admitted",
    )
    assert wl.status.admission.clusterQueue == "kqcpu"
    from kubernetes import client

    batch = client.BatchV1Api(api_client(cluster))
    job = wait(
        lambda: (
            (j := batch.read_namespaced_job("batch-score-kq001", "kq")).spec.suspend is False and j
        ),
        what="unsuspend",
    )
    assert job.spec.template.spec.node_selector[C.LABEL_POOL] == "kqcpu"
    wait(
        lambda: batch.read_namespaced_job("batch-score-kq001", "kq").status.succeeded,
        what="the Job to complete",
    )
    wait(
        lambda: (
            (c := _cond(_workload(kueue, "batch-score-kq001"), "Finished"))
            and c["status"] == "True"
        ),
        what="Finished",
    )


def test_run_over_quota_waits_with_kueues_reason(cluster: Any, kueue: Any, tmp_path: Path) -> None:
    objs = _job("batch-score-kq002", tmp_path, cpus=3)  # the queue's nominal quota is 2 CPUs
    for obj in objs:
        apply(kueue, obj)
    wl = wait(
        lambda: (
            (w := _workload(kueue, "batch-score-kq002"))
            and (c := _cond(w, "QuotaReserved"))
            and c["status"] == "False"
            and w
        ),
        what="a pending Workload",
    )
    reason = _cond(wl, "QuotaReserved")["message"]
    assert "couldn't assign flavors" in reason or "insufficient" in reason.lower()
    from kubernetes import client

    job = client.BatchV1Api(api_client(cluster)).read_namespaced_job("batch-score-kq002", "kq")
    assert job.spec.suspend is True


def test_webhook_suspends_jobs_that_arrive_unsuspended(
    cluster: Any, kueue: Any, tmp_path: Path
) -> None:
    _, job = _job("batch-score-kq003", tmp_path, cpus=3)
    unsuspended = copy.deepcopy(job)
    unsuspended["spec"]["suspend"] = False
    created = apply(kueue, unsuspended)
    assert created.spec.suspend is True  # Kueue's mutating webhook, reached on 127.0.0.1
