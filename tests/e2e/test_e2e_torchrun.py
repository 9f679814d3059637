"""A 4-node torchrun job on the sandbox: one Indexed Job, admitted by Kueue as one workload (all
four pods or none: with quota for three nodes nothing starts, and the status says why), its four
pods on four distinct GPU nodes, the headless Service naming each of them; the status counts the
nodes; cancel leaves nothing. (KWOK runs no container: torchrun itself never starts here.)"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from conftest import run_tau as tau
from kubekit import wait_until
from sandboxkit import admin, kube_env, status, submit

from taugrid.api import constants as C

pytestmark = pytest.mark.e2e
NS = "research"
ADMINS = "taugrid-platform-admins-member"


def project(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "train.py").write_text("print('ddp')\n")
    (folder / "tau.yaml").write_text(
        "schema_version: 1\nname: ddp\nrun: {entrypoint: train.py, launcher: torchrun}\n"
        "compute: {gpus: 1, workers: 4, cpus: 4, memory: 16Gi}\npolicy: {profile: a100x1}\n"
        "runtime: {image: rayproject/ray:2.56.0-py312-gpu, env: {SANDBOX_RUN_SECONDS: '86400'}}\n"
    )
    return folder


def grant(home: Path, gpus: int) -> None:
    """A quota request for more a100x1 GPUs, approved by a platform admin."""
    env = kube_env(home, "alice")
    res = tau(
        home,
        "quota",
        "request",
        "--gpus",
        str(gpus),
        "--for",
        "10m",
        "--reason",
        "ddp",
        "--profile",
        "a100x1",
        "-o",
        "json",
        env=env,
    )
    assert res.returncode == 0, res.stderr
    name = json.loads(res.stdout)["name"]

    def approved() -> bool:
        got = tau(home, "quota", "approve", name, "--workspace", NS, env=kube_env(home, ADMINS))
        return got.returncode == 0

    wait_until(approved, 60, "the request approved (once the controller has seen it)")


def one_gpu_job(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "s.py").write_text("print('busy')\n")
    (folder / "tau.yaml").write_text(
        "schema_version: 1\nname: busy\nrun: {entrypoint: s.py, workload_kind: job}\n"
        "compute: {gpus: 1, cpus: 4, memory: 16Gi}\npolicy: {profile: a100x1}\n"
        "runtime: {image: python:3.12-slim, env: {SANDBOX_RUN_SECONDS: '86400'}}\n"
    )
    return folder


def gpu_quota(dyn: Any) -> int:
    """The a100x1 GPUs the gpu queue may use now: its nominal quota and the grants' cohort."""
    total = 0
    for kind, name in (("ClusterQueue", "gpu"), ("Cohort", "tau-grants-gpu")):
        try:
            obj = dyn.resources.get(api_version="kueue.x-k8s.io/v1beta2", kind=kind).get(name=name)
        except Exception:  # (no grant yet: no cohort)
            continue
        for g in obj.to_dict()["spec"].get("resourceGroups") or []:
            for f in g["flavors"]:
                if f["name"] == "a100x1":
                    total += sum(
                        int(r["nominalQuota"])
                        for r in f["resources"]
                        if r["name"] == C.GPU_RESOURCE
                    )
    return total


def test_a_four_node_torchrun_job_is_admitted_whole_on_four_hosts(
    sandbox: Path, tmp_path: Path
) -> None:
    dyn = admin(sandbox)
    pods = dyn.resources.get(api_version="v1", kind="Pod")
    # (the sandbox has four a100x1 nodes: one per node of this job)
    folder = project(tmp_path / "ddp")
    # the queue may use 2 GPUs of a100x1: a job of 4 could never start; refused, nothing sent
    res = tau(sandbox, "run", str(folder), "-d", env=kube_env(sandbox))
    assert res.returncode == 3, res.stderr
    assert "pod set main needs 4 GPU; queue gpu may use at most 2 in flavor a100x1" in res.stderr
    base = gpu_quota(dyn)
    grant(sandbox, 2)
    wait_until(lambda: gpu_quota(dyn) == base + 2, 60, "the grant in the cohort")
    # one GPU busy: room for 3 of the 4 nodes, and nothing starts (all or none)
    busy = submit(sandbox, one_gpu_job(tmp_path / "busy"))
    wait_until(lambda: status(sandbox, busy)["phase"] == "Running", 120, "the busy job running")
    run_id = submit(sandbox, folder)

    def mine() -> list[Any]:
        return list(pods.get(namespace=NS, label_selector=f"{C.LABEL_RUN_ID}={run_id}").items)

    st = wait_until(
        lambda: (s := status(sandbox, run_id))["phase"] == "Queued" and s, 120, "the job queued"
    )
    assert "nvidia.com/gpu" in st["summary"] or "GPU" in st["summary"], st["summary"]
    assert mine() == []
    res = tau(sandbox, "run", "cancel", busy, env=kube_env(sandbox))
    assert res.returncode == 0, res.stderr
    # the fourth GPU free again: admitted as one workload; four pods on four distinct nodes
    placed = wait_until(
        lambda: (p := mine()) and len(p) == 4 and all(x.spec.nodeName for x in p) and p,
        180,
        "four pods scheduled",
    )
    hosts = {p.spec.nodeName for p in placed}
    assert len(hosts) == 4 and all(h.startswith("a100x1") for h in hosts), hosts
    indexes = {p.metadata.annotations["batch.kubernetes.io/job-completion-index"] for p in placed}
    assert indexes == {"0", "1", "2", "3"}
    workloads = [
        w
        for w in dyn.resources.get(api_version="kueue.x-k8s.io/v1beta2", kind="Workload")
        .get(namespace=NS)
        .items
        if any(o.name == run_id for o in w.metadata.ownerReferences or [])
    ]
    assert len(workloads) == 1  # one workload for the four nodes
    (podset,) = workloads[0].spec.podSets
    assert podset.count == 4
    # the headless Service names every node (index 0 is the rendezvous)
    slices = dyn.resources.get(api_version="discovery.k8s.io/v1", kind="EndpointSlice")
    addrs = wait_until(
        lambda: (
            (
                a := [
                    e
                    for s in slices.get(
                        namespace=NS, label_selector=f"kubernetes.io/service-name={run_id}"
                    ).items
                    for e in s.endpoints or []
                ]
            )
            and len(a) == 4
            and a
        ),
        60,
        "four endpoints",
    )
    assert {e.hostname for e in addrs} == {f"{run_id}-{i}" for i in range(4)}
    running = wait_until(
        lambda: (s := status(sandbox, run_id))["phase"] == "Running" and s, 120, "the job running"
    )
    assert "4/4 nodes running" in running["summary"]
    # cancel leaves nothing: the Job, its pods, the Service, the code
    res = tau(sandbox, "run", "cancel", run_id, env=kube_env(sandbox))
    assert res.returncode == 0, res.stderr
    services = dyn.resources.get(api_version="v1", kind="Service")
    jobs = dyn.resources.get(api_version="batch/v1", kind="Job")
    wait_until(
        lambda: (
            not mine()
            and not services.get(namespace=NS, label_selector=f"{C.LABEL_RUN_ID}={run_id}").items
            and not jobs.get(namespace=NS, label_selector=f"{C.LABEL_RUN_ID}={run_id}").items
        ),
        120,
        "nothing of the run left",
    )
