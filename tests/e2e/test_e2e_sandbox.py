"""`tau sandbox` end to end, through the real CLI: up (idempotent), status, identities and their
RBAC, a rendered RayJob through its real lifecycle (Kueue admits it, KubeRay makes a RayCluster,
KWOK runs its pods on nodes shaped like the stack's pools), and down stopping every process."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from conftest import EXAMPLES, TAU
from conftest import run_tau as tau
from kubekit import wait_until

from taugrid.host.procs import group_alive
from taugrid.sandbox.controlplane import binaries_dir

pytestmark = pytest.mark.e2e


def dyn(home: Path, who: str) -> Any:
    from kubernetes import config, dynamic

    kc = tau(home, "sandbox", "kubeconfig", "--as", who).stdout.strip()
    return dynamic.DynamicClient(config.new_client_from_config(config_file=kc))


def test_status_lists_every_component_running(sandbox: Path) -> None:
    res = tau(sandbox, "sandbox", "status", "-o", "json")
    assert res.returncode == 0, res.stdout + res.stderr
    doc = json.loads(res.stdout)
    assert doc["up"] and doc["api"].startswith("https://127.0.0.1:")
    running = {c["component"] for c in doc["components"] if c["running"]}
    assert {
        "etcd",
        "kube-apiserver",
        "kube-controller-manager",
        "kube-scheduler",
        "kwok",
    } <= running
    assert doc["nodes"] == [
        "a100x1-0",
        "a100x1-1",
        "a100x1-2",
        "a100x1-3",
        "a100x2-0",
        *(f"t4x1-{i}" for i in range(6)),  # the teams' pool
        "cpu-0",
        "cpu-1",
    ]
    text = tau(sandbox, "sandbox", "status").stdout
    assert "kube-apiserver" in text and "running" in text


def test_up_again_changes_nothing(sandbox: Path) -> None:
    before = json.loads((sandbox / "sandbox" / "state.json").read_text())
    res = tau(sandbox, "sandbox", "up")
    assert res.returncode == 0 and "already up" in res.stderr
    assert json.loads((sandbox / "sandbox" / "state.json").read_text()) == before


def test_the_stacks_platform_is_installed(sandbox: Path) -> None:
    admin = dyn(sandbox, "admin")
    tc = admin.resources.get(api_version="tau.azure.com/v1alpha1", kind="TauCluster").get(
        name="cluster"
    )
    assert tc.spec.stack == "sandbox" and tc.spec.defaultWorkspace == "research"
    pvcs = admin.resources.get(api_version="v1", kind="PersistentVolumeClaim")
    wait_until(
        lambda: pvcs.get(name="research-data", namespace="research").status.phase == "Bound",
        what="the workspace PVC to bind",
    )
    nodes = {
        n.metadata.name: n for n in admin.resources.get(api_version="v1", kind="Node").get().items
    }
    gpu = nodes["a100x2-0"]
    assert gpu.status.allocatable["nvidia.com/gpu"] == "2"
    assert gpu.metadata.labels["tau.azure.com/pool"] == "a100x2"
    assert any(t.key == "sku" for t in gpu.spec.taints)


def test_a_researcher_runs_a_rayjob_through_kueue_kuberay_and_kwok(
    sandbox: Path, tmp_path: Path
) -> None:
    status = json.loads(tau(sandbox, "sandbox", "status", "-o", "json").stdout)
    running = {c["component"] for c in status["components"] if c["running"]}
    if not {"kueue", "kuberay"} <= running:
        pytest.skip(f"Kueue or KubeRay does not run here: {status['components']}")
    snap = tmp_path / "profiles.yaml"
    snap.write_text(
        subprocess.run(
            [TAU, "platform", "snapshot", "--stack", "sandbox"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    )
    objs = json.loads(
        subprocess.run(
            [TAU, "run", "render", str(EXAMPLES / "quickstart"), "-p", str(snap), "-o", "json"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    )["items"]
    me = dyn(sandbox, "researcher")
    for o in objs:  # the sandbox's Ray job runs until the test is over (it succeeds at once else)
        if o["kind"] == "RayJob":
            head = o["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]["containers"][0]
            head["env"].append({"name": "SANDBOX_RUN_SECONDS", "value": "86400"})
        res = me.resources.get(api_version=o["apiVersion"], kind=o["kind"])
        res.server_side_apply(body=o, namespace="research", field_manager="tau")
    run_id = objs[-1]["metadata"]["name"]
    admin = dyn(sandbox, "admin")
    workloads = admin.resources.get(api_version="kueue.x-k8s.io/v1beta2", kind="Workload")

    def admitted() -> bool:
        for w in workloads.get(namespace="research").items:
            if w.metadata.ownerReferences and w.metadata.ownerReferences[0].name == run_id:
                return any(
                    c.type == "Admitted" and c.status == "True" for c in w.status.conditions or []
                )
        return False

    wait_until(admitted, what="Kueue to admit the RayJob")
    pods = admin.resources.get(api_version="v1", kind="Pod")

    def running_pods() -> list[Any]:
        found = pods.get(
            namespace="research", label_selector=f"tau.azure.com/run-id={run_id}"
        ).items
        return [p for p in found if p.status.phase == "Running"]

    wait_until(lambda: len(running_pods()) == 2, what="the head and the worker to run on KWOK")
    placed = {p.metadata.labels["ray.io/node-type"]: p.spec.nodeName for p in running_pods()}
    assert placed["head"].startswith("cpu-") and placed["worker"].startswith("a100x1-")
    # ...and not in a workspace the researcher is not a member of
    from kubernetes.client.exceptions import ApiException

    cm = dict(objs[0], metadata={**objs[0]["metadata"], "namespace": "llm"})
    with pytest.raises(ApiException) as e:
        me.resources.get(api_version="v1", kind="ConfigMap").server_side_apply(
            body=cm, namespace="llm", field_manager="tau"
        )
    assert e.value.status == 403
    me.resources.get(api_version=objs[-1]["apiVersion"], kind=objs[-1]["kind"]).delete(
        name=run_id, namespace="research"
    )  # the GPU back for the next tests


def test_a_sandbox_job_runs_as_long_as_its_env_says_then_succeeds_or_fails(
    sandbox: Path, tmp_path: Path
) -> None:
    """KWOK runs a Job's pod SANDBOX_RUN_SECONDS, then ends it as SANDBOX_RESULT says (what the
    scale benchmark's runs do): the run ends on its own, its record says it ran that long.
    (Not caught Running by polling: a poll is two `tau` processes, seconds apiece on a busy
    machine, and the window is 6 s.)"""
    from sandboxkit import cpu_job, status, submit

    ok = submit(sandbox, cpu_job(tmp_path / "ok", "lasts", {"SANDBOX_RUN_SECONDS": "6"}))
    bad = submit(
        sandbox,
        cpu_job(
            tmp_path / "bad",
            "breaks",
            {"SANDBOX_RUN_SECONDS": "2", "SANDBOX_RESULT": "FAILED"},
            "resilience: {max_retries: 0}\n",
        ),
    )
    wait_until(
        lambda: status(sandbox, ok)["phase"] == "Succeeded",
        timeout=120,
        what="the job to succeed on its own",
    )
    done = status(sandbox, ok)
    assert done["started_at"] and done["duration_s"] >= 6, done
    wait_until(
        lambda: status(sandbox, bad)["phase"] == "Failed",
        timeout=120,
        what="the failing job to fail",
    )
    failed = status(sandbox, bad)
    assert failed["attempt"] == 0, "tried once: no retry was made"
    assert not [e for e in failed.get("timeline") or [] if e["reason"] == "Retrying"]


def test_down_stops_every_process(tmp_path: Path) -> None:
    if binaries_dir() is None:
        pytest.skip("the control plane is not built")
    home = tmp_path / "home"
    assert tau(home, "sandbox", "up", "--real-nodes", "0").returncode == 0
    pids = json.loads((home / "sandbox" / "state.json").read_text())["pids"]
    res = tau(home, "sandbox", "down")
    assert res.returncode == 0 and f"stopped {len(pids)}" in res.stderr
    assert not [name for name, pid in pids.items() if group_alive(pid)]
    assert tau(home, "sandbox", "status").returncode == 3
    assert tau(home, "sandbox", "down").stdout.strip() == "the sandbox was not up"


def test_up_without_the_binaries_says_how_to_build_them(tmp_path: Path) -> None:
    res = tau(tmp_path / "home", "sandbox", "up", env={"TAUGRID_CP_CACHE": str(tmp_path / "empty")})
    assert res.returncode == 4
    assert "make controlplane" in res.stderr and "minutes" in res.stderr
