"""`tau run --target kube` against the sandbox, through the real CLI: discovery, submission
(idempotent, owned by the TauRun), a truthful status (quota, scheduling, GPU health,
completion), cancel that frees quota, and clear failures (403, unreachable, no platform)."""

from __future__ import annotations

import json
import re
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest
from conftest import EXAMPLES
from conftest import run_tau as tau
from kubekit import wait_until
from sandboxkit import admin, cpu_job, gpu_rayjob, kube_env, sig, status, submit

pytestmark = pytest.mark.e2e


@pytest.fixture()
def gpu_project(tmp_path: Path) -> Path:
    return gpu_rayjob(tmp_path, "kq")


def test_profiles_and_workspaces_come_from_the_cluster(sandbox: Path) -> None:
    res = tau(sandbox, "profiles", "-o", "json", env=kube_env(sandbox))
    assert res.returncode == 0, res.stderr
    # the teams' t4x1 profiles too (one per team's queue): the researcher sees every profile
    names = [p["name"] for p in json.loads(res.stdout)]
    assert names == ["a100x1", "a100x2", "cpu", "t4x1-vision", "t4x1-nlp", "t4x1-speech"]
    # alice is a member of research only: she may use exactly that workspace
    ws = json.loads(tau(sandbox, "workspaces", "-o", "json", env=kube_env(sandbox, "alice")).stdout)
    assert [w["name"] for w in ws] == ["research"] and ws[0]["default"] is True
    assert ws[0]["queues"] == ["cpu", "gpu"] and ws[0]["pvc"] == "research-data"
    bob = json.loads(tau(sandbox, "workspaces", "-o", "json", env=kube_env(sandbox, "bob")).stdout)
    assert [w["name"] for w in bob] == ["llm"]


def test_submission_is_owned_by_the_taurun_and_idempotent(sandbox: Path, gpu_project: Path) -> None:
    run_id = submit(sandbox, gpu_project)
    try:
        _owned_and_idempotent(sandbox, gpu_project, run_id)
    finally:  # a failed check must not leave the run holding quota for the next tests
        tau(sandbox, "run", "cancel", run_id, env=kube_env(sandbox))


def _owned_and_idempotent(sandbox: Path, gpu_project: Path, run_id: str) -> None:
    dyn = admin(sandbox)
    rj = dyn.resources.get(api_version="ray.io/v1", kind="RayJob").get(
        name=run_id, namespace="research"
    )
    owner = rj.metadata.ownerReferences[0]
    assert owner.kind == "TauRun" and owner.name == run_id
    # written by tau (created, field manager tau); KubeRay's and Kueue's entries come after it
    assert "tau" in {m.manager for m in rj.metadata.managedFields}
    taurun = dyn.resources.get(api_version="tau.azure.com/v1alpha1", kind="TauRun")

    def tau_owned() -> tuple[Any, ...]:
        """What tau wrote (the controller writes the status too: resourceVersion moves)."""
        meta = taurun.get(name=run_id, namespace="research").metadata
        mine = [(m.operation, m.time) for m in meta.managedFields if m.manager == "tau"]
        return (meta.generation, *mine)

    before = tau_owned()
    wait_until(lambda: status(sandbox, run_id)["phase"] == "Running", what="Kueue to admit it")
    again = tau(sandbox, "run", str(gpu_project), "-d", "--run-id", run_id, env=kube_env(sandbox))
    assert again.returncode == 0 and "already submitted; nothing changed" in again.stderr
    assert tau_owned() == before
    rj2 = dyn.resources.get(api_version="ray.io/v1", kind="RayJob").get(
        name=run_id, namespace="research"
    )
    assert not rj2.spec.suspend  # Kueue's admission stands: the resubmission did not undo it
    (gpu_project / "tau.yaml").write_text(
        (gpu_project / "tau.yaml").read_text().replace("workers: 1", "workers: 2")
    )
    clash = tau(sandbox, "run", str(gpu_project), "-d", "--run-id", run_id, env=kube_env(sandbox))
    assert clash.returncode == 2 and "already exists" in clash.stderr
    assert tau(sandbox, "run", "cancel", run_id, env=kube_env(sandbox)).returncode == 0
    cms = dyn.resources.get(api_version="v1", kind="ConfigMap")
    wait_until(
        lambda: (
            not [
                c
                for c in cms.get(namespace="research").items
                if c.metadata.name == f"{run_id}-code"
            ]
        ),
        what="the TauRun's objects to be garbage-collected",
    )


def test_over_quota_waits_with_kueues_reason_and_cancel_frees_the_quota(
    sandbox: Path, gpu_project: Path
) -> None:
    # the a100x1 flavor has 2 GPUs of quota: the third 1-GPU run waits
    ids = [submit(sandbox, gpu_project) for _ in range(3)]
    try:
        _over_quota(sandbox, ids)
    finally:  # whatever happened, the quota is free for the next test
        for rid in ids:
            tau(sandbox, "run", "cancel", rid, env=kube_env(sandbox))


def _over_quota(sandbox: Path, ids: list[str]) -> None:
    wait_until(
        lambda: sig(status(sandbox, ids[0]), "Admitted")["state"] == "true", what="run 1 admitted"
    )
    wait_until(
        lambda: sig(status(sandbox, ids[1]), "Admitted")["state"] == "true", what="run 2 admitted"
    )
    wait_until(lambda: status(sandbox, ids[2])["phase"] == "Queued", what="run 3 queued")
    st = status(sandbox, ids[2])
    adm = sig(st, "Admitted")
    assert adm["state"] == "pending" and "waiting for quota in queue gpu" in adm["reason"]
    assert "GPU needed in flavor a100x1" in adm["reason"] and "position unknown" in adm["reason"]
    assert "nvidia.com/gpu" in adm["detail"]  # Kueue's own words stay in -o json
    # the sandbox's Kueue does not serve its visibility API (an aggregated API needs a service
    # reference, which nothing here may use): the true reason, not "may not read"
    assert "visibility API (pendingworkloads) is not served here" in adm["reason"]
    assert st["summary"].startswith("queued: waiting for quota")
    res = tau(sandbox, "run", "cancel", ids[0], env=kube_env(sandbox))
    assert res.returncode == 0 and "cancelled" in res.stdout
    wait_until(
        lambda: sig(status(sandbox, ids[2]), "Admitted")["state"] == "true",
        what="the queued run to be admitted once quota frees",
    )
    wait_until(lambda: status(sandbox, ids[1])["phase"] == "Running", what="run 2 running on KWOK")
    st = status(sandbox, ids[1])
    assert sig(st, "Scheduled")["state"] == "true" and "a100x1-" in sig(st, "Scheduled")["reason"]
    assert status(sandbox, ids[0])["phase"] == "Cancelled"


def test_a_gpu_condition_on_the_runs_node_shows_in_its_status(
    sandbox: Path, gpu_project: Path
) -> None:
    """The sandbox's controller quarantines the node and moves the run's worker off it (see
    test_e2e_controller: GPUHealthy is false while a run stays on a faulty node); `tau run
    status` shows the fault in the run's timeline, with the node and the condition."""
    run_id = submit(sandbox, gpu_project)
    wait_until(lambda: status(sandbox, run_id)["phase"] == "Running", what="the run to run")
    gpu_node = next(
        n
        for n in sig(status(sandbox, run_id), "Scheduled")["reason"].split(" on ")[1].split(", ")
        if n.startswith("a100")
    )
    nodes = admin(sandbox).resources.get(api_version="v1", kind="Node")
    patch = {
        "status": {
            "conditions": [
                {
                    "type": "GPUXidError",
                    "status": "True",
                    "reason": "Xid79",
                    "message": "GPU fell off the bus",
                }
            ]
        }
    }
    nodes.status.patch(
        name=gpu_node, body=patch, content_type="application/strategic-merge-patch+json"
    )
    try:
        wait_until(
            lambda: any(
                e["reason"] == "GPUFault"
                and gpu_node in e["message"]
                and "GPUXidError=True" in e["message"]
                for e in status(sandbox, run_id).get("timeline") or []
            ),
            what="the fault in the run's status",
        )
        text = tau(sandbox, "run", "status", run_id, env=kube_env(sandbox)).stdout
        assert "GPUFault" in text and gpu_node in text
    finally:
        clear = {
            "status": {"conditions": [{"type": "GPUXidError", "status": "False", "reason": "Ok"}]}
        }
        nodes.status.patch(
            name=gpu_node, body=clear, content_type="application/strategic-merge-patch+json"
        )
        tau(sandbox, "run", "cancel", run_id, env=kube_env(sandbox))
        # the controller releases the node 10 s after its condition clears: wait, so the next
        # tests see every node schedulable
        wait_until(
            lambda: not nodes.get(name=gpu_node).spec.unschedulable,
            timeout=60,
            what="the node's release",
        )


def test_a_cpu_job_runs_to_completion(sandbox: Path, tmp_path: Path) -> None:
    cpu_job(tmp_path, "cpujob")
    run_id = submit(sandbox, tmp_path)
    wait_until(lambda: status(sandbox, run_id)["phase"] == "Succeeded", what="the Job to complete")
    st = status(sandbox, run_id)
    assert sig(st, "Completed")["state"] == "true" and st["summary"] == "succeeded"


def test_an_untolerated_taint_shows_failedschedulings_reason(
    sandbox: Path, gpu_project: Path
) -> None:
    """Every a100x1 node carries a taint the run does not tolerate: admitted by Kueue (quota is
    free) but not schedulable, and status says why in the scheduler's words."""
    nodes = admin(sandbox).resources.get(api_version="v1", kind="Node")
    names = ["a100x1-0", "a100x1-1", "a100x1-2", "a100x1-3"]
    taint = {"key": "tau.azure.com/maintenance", "value": "true", "effect": "NoSchedule"}
    originals = {n: [t.to_dict() for t in (nodes.get(name=n).spec.taints or [])] for n in names}
    for n in names:
        nodes.patch(
            name=n,
            body={"spec": {"taints": [*originals[n], taint]}},
            content_type="application/merge-patch+json",
        )
    run_id = submit(sandbox, gpu_project)
    try:
        wait_until(
            lambda: sig(status(sandbox, run_id), "Scheduled")["state"] == "false",
            what="the scheduler to refuse the worker",
        )
        st = status(sandbox, run_id)
        assert sig(st, "Admitted")["state"] == "true"
        reason = sig(st, "Scheduled")["reason"]
        # the scheduler's words (how many nodes of each kind depends on the sandbox's pools)
        assert "untolerated taint" in reason and "nodes are available" in reason
        assert st["summary"].startswith("starting, but not scheduled:")
    finally:
        for n in names:
            nodes.patch(
                name=n,
                body={"spec": {"taints": originals[n]}},
                content_type="application/merge-patch+json",
            )
        tau(sandbox, "run", "cancel", run_id, env=kube_env(sandbox))


def test_forbidden_elsewhere_says_which_workspace_you_may_use(
    sandbox: Path, gpu_project: Path
) -> None:
    res = tau(
        sandbox, "run", str(gpu_project), "-d", "--workspace", "llm", env=kube_env(sandbox, "alice")
    )
    assert res.returncode == 4
    # the first thing sent (a drawn run id is created, not looked up first) is what RBAC refuses
    assert "forbidden: you may not create runs" in res.stderr and "namespace llm" in res.stderr
    assert "workspaces you may use: research" in res.stderr


def test_an_unreachable_api_fails_fast_with_exit_4(tmp_path: Path, gpu_project: Path) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed once we leave: nothing listens there
    kc = tmp_path / "kc.yaml"
    kc.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "x",
                "clusters": [
                    {
                        "name": "x",
                        "cluster": {
                            "server": f"https://127.0.0.1:{port}",
                            "insecure-skip-tls-verify": True,
                        },
                    }
                ],
                "users": [{"name": "x", "user": {"token": "t"}}],
                "contexts": [{"name": "x", "context": {"cluster": "x", "user": "x"}}],
            }
        )
    )
    # it gives up by itself (the connect timeout) instead of hanging: the bound here is only
    # a generous guard (timing is the benchmark's business)
    res = tau(
        tmp_path / "home",
        "run",
        str(gpu_project),
        "-d",
        env={"KUBECONFIG": str(kc), "TAU_TARGET": "kube"},
        timeout=120,
    )
    assert res.returncode == 4 and "unreachable" in res.stderr, res.stderr


def test_bad_config_exits_2_before_anything_is_sent(sandbox: Path, gpu_project: Path) -> None:
    (gpu_project / "tau.yaml").write_text((gpu_project / "tau.yaml").read_text() + "bogus: 1\n")
    res = tau(sandbox, "run", str(gpu_project), "-d", env=kube_env(sandbox))
    assert res.returncode == 2 and "bogus" in res.stderr


def test_a_cluster_without_the_platform_says_so(tmp_path: Path) -> None:
    """A bare API server (no TauGrid CRDs): exit 4 naming what is not installed."""
    from taugrid.sandbox.controlplane import running

    with running(with_controllers=False) as cp:
        res = tau(tmp_path / "home", "profiles", env={"KUBECONFIG": str(cp.admin.kubeconfig)})
    assert res.returncode == 4, res.stderr
    assert "TauGrid's CRDs (the platform) is not installed" in res.stderr


def test_the_readme_quickstart_succeeds_on_the_sandbox_without_a_name_lookup(
    sandbox: Path,
) -> None:
    """The README's first cluster example, attached: Kueue admits the RayJob, KubeRay makes its
    RayCluster, the sandbox's Ray job ends, and tau says so and seals the record (it ran for
    ever before: KubeRay polled a Ray dashboard that does not exist). No sandbox process looked
    up a host name (KubeRay resolved `*.svc.cluster.local` through the host's resolver)."""
    from taugrid.sandbox.controlplane import name_lookups

    res = tau(sandbox, "run", str(EXAMPLES / "quickstart"), env=kube_env(sandbox), timeout=180)
    assert res.returncode == 0, res.stderr
    assert "[succeeded] succeeded" in res.stderr
    run_id = next(w for w in res.stderr.split() if w.startswith("tau-aks-gpu-quickstart-"))
    assert tau(sandbox, "run", "verify", run_id).returncode == 0
    assert name_lookups(sandbox / "sandbox") == {}


def test_an_attached_run_follows_the_phases_and_logs_say_where_they_are(
    sandbox: Path, tmp_path: Path
) -> None:
    cpu_job(tmp_path, "attached")
    res = tau(sandbox, "run", str(tmp_path), env=kube_env(sandbox), timeout=120)
    assert res.returncode == 0, res.stderr
    assert "[succeeded] succeeded" in res.stderr
    run_id = next(w for w in res.stderr.split() if w.startswith("attached-"))
    rec = json.loads((sandbox / "data" / "runs" / run_id / "run.json").read_text())
    assert rec["phase"] == "Succeeded"  # the local record ended (and was sealed) too
    assert tau(sandbox, "run", "verify", run_id).returncode == 0
    # KWOK runs no containers and serves no logs; tau reads the launcher's copy from the
    # workspace volume through its file server, which a sandbox without real nodes does not
    # run (its pod would never answer): tau says so, at once, with the fix
    res = tau(sandbox, "run", "logs", run_id, env=kube_env(sandbox), timeout=120)
    assert res.returncode == 4, res.stderr
    assert (
        f"reading /data/runs/{run_id}/logs/driver.log from the volume of workspace research"
        in res.stderr
    )
    assert "workspace research has no file server" in res.stderr


def test_status_watch_follows_the_watch_api_to_the_end(sandbox: Path, tmp_path: Path) -> None:
    cpu_job(tmp_path, "watched")
    run_id = submit(sandbox, tmp_path)
    res = tau(
        sandbox,
        "run",
        "status",
        run_id,
        "--watch",
        "-o",
        "json",
        env=kube_env(sandbox),
        timeout=120,
    )
    assert res.returncode == 0, res.stderr
    docs = [json.loads(line) for line in res.stdout.splitlines()]
    assert docs[-1]["phase"] == "Succeeded"

    def comparable(d: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in d.items() if k != "duration_s"}

    assert all(comparable(a) != comparable(b) for a, b in pairwise(docs))  # a line per change
    phases = [
        p for i, p in enumerate(d["phase"] for d in docs) if i == 0 or p != docs[i - 1]["phase"]
    ]
    assert len(phases) == len(set(phases))  # never back to a phase it left


def test_resume_on_the_cluster_keeps_lineage_in_both_taururns(
    sandbox: Path, tmp_path: Path
) -> None:
    cpu_job(tmp_path, "resumable")
    parent = submit(sandbox, tmp_path)
    wait_until(lambda: status(sandbox, parent)["phase"] == "Succeeded", what="the parent to end")
    res = tau(sandbox, "run", "resume", parent, "-d", env=kube_env(sandbox))
    assert res.returncode == 0, res.stderr
    child = res.stdout.strip()
    runs = admin(sandbox).resources.get(api_version="tau.azure.com/v1alpha1", kind="TauRun")
    assert runs.get(name=child, namespace="research").spec.parentRun == parent
    ann = runs.get(name=parent, namespace="research").metadata.annotations
    assert ann["tau.azure.com/resumed-by"] == child
    job = (
        admin(sandbox)
        .resources.get(api_version="batch/v1", kind="Job")
        .get(name=child, namespace="research")
    )
    env = {e.name: e.value for e in job.spec.template.spec.containers[0].env}
    # the newest checkpoint the workspace's file server lists, or (where none answers, as on
    # KWOK's nodes) the one the pod finds when it starts
    assert re.fullmatch(
        rf"/data/runs/{parent}/checkpoints/(@newest|step-\d+)", env["TAU_RESUME_FROM"]
    ), env["TAU_RESUME_FROM"]
    lineage = (sandbox / "data" / "runs" / parent / "lineage.jsonl").read_text()
    assert child in lineage


@pytest.mark.engine
def test_target_pulumi_runs_as_an_ephemeral_stack(sandbox: Path, tmp_path: Path) -> None:
    """--target pulumi: the run's objects as stack run-<id>, destroyed when the run ends (its
    evidence stays); cancel destroys it; gc destroys the stacks of runs that ended."""
    from taugrid.api.errors import TauError
    from taugrid.infra import engine

    try:
        engine.find_bin()
    except TauError:
        pytest.skip("the Pulumi engine is not built: `make pulumi` builds it")
    cpu_job(tmp_path, "stacked")
    env = {**kube_env(sandbox), "TAU_TARGET": "pulumi"}
    # no backend (no `pulumi login`, no PULUMI_BACKEND_URL): refused, not a private state
    res = tau(sandbox, "run", str(tmp_path), "-d", env=env, timeout=300)
    assert res.returncode == 4 and "no Pulumi backend" in res.stderr, res.stderr
    assert "pulumi login" in res.stderr and "Traceback" not in res.stderr
    state = sandbox / "team-state"  # outside the run's folder (which is its code)
    state.mkdir(exist_ok=True)
    env["PULUMI_BACKEND_URL"] = state.as_uri()  # as a pipeline would set it
    res = tau(sandbox, "run", str(tmp_path), env=env, timeout=300)
    assert res.returncode == 0, res.stderr
    assert "[succeeded]" in res.stderr
    run_id = next(w for w in res.stderr.split() if w.startswith("stacked-"))
    assert f"stack run-{run_id} destroyed; the evidence stays" in res.stderr
    rec = json.loads((sandbox / "data" / "runs" / run_id / "run.json").read_text())
    assert (rec["phase"], rec["handle"]["target"], rec["handle"]["stack"]) == (
        "Succeeded",
        "pulumi",
        f"run-{run_id}",
    )
    assert tau(sandbox, "run", "verify", run_id).returncode == 0

    # detached, then cancelled: the stack (and with it the TauRun and the workload) is gone
    res = tau(sandbox, "run", str(tmp_path), "-d", env=env, timeout=300)
    assert res.returncode == 0, res.stderr
    cancelled = res.stdout.strip()
    assert tau(sandbox, "run", "cancel", cancelled, env=env).returncode == 0
    taurun = admin(sandbox).resources.get(api_version="tau.azure.com/v1alpha1", kind="TauRun")
    assert wait_until(
        lambda: (
            not [r for r in taurun.get(namespace="research").items if r.metadata.name == cancelled]
        ),
        60,
        "the TauRun deleted",
    )

    # detached and left to finish: gc destroys its stack
    finished = tau(sandbox, "run", str(tmp_path), "-d", env=env, timeout=300).stdout.strip()
    wait_until(lambda: status(sandbox, finished)["phase"] == "Succeeded", 90, "the run to end")
    res = tau(sandbox, "run", "gc", "-o", "json", env=env, timeout=300)
    assert res.returncode == 0, res.stderr
    assert f"run-{finished}" in json.loads(res.stdout)["destroyed"]
    assert json.loads(tau(sandbox, "run", "gc", "-o", "json", env=env).stdout) == {"destroyed": []}


def test_target_pulumi_without_a_pulumi_cli_exits_4(sandbox: Path, tmp_path: Path) -> None:
    cpu_job(tmp_path, "nocli")
    env = {
        **kube_env(sandbox),
        "TAU_TARGET": "pulumi",
        "PATH": "/usr/bin:/bin",
        "TAUGRID_PULUMI_CACHE": str(tmp_path / "none"),
        "TAU_PULUMI_BIN": "",
        "PULUMI_BACKEND_URL": (sandbox / "team-state").as_uri(),
    }
    res = tau(sandbox, "run", str(tmp_path), "-d", env=env)
    assert res.returncode == 4
    assert "no Pulumi CLI found" in res.stderr and "Traceback" not in res.stderr


def test_a_run_its_queue_can_never_admit_is_refused_before_submission(
    sandbox: Path, tmp_path: Path
) -> None:
    """The cpu queue has 6 CPU of flavor cpu and may borrow the gpu queue's 6 (cohort sandbox):
    a RayJob with two 6-CPU workers and a head fits the cpu profile's nodes but can never start
    in that queue. It is refused with the numbers, exit 3, and nothing is left in the cluster or
    in the run records (Kueue would have kept it pending for ever)."""
    (tmp_path / "s.py").write_text("print('big')\n")
    (tmp_path / "tau.yaml").write_text(
        "schema_version: 1\nname: toobig\nrun: {entrypoint: s.py, workload_kind: rayjob}\n"
        "compute: {gpus: 0, workers: 2, worker_cpus: 6, worker_memory: 8Gi}\n"
        "runtime: {image: rayproject/ray:2.56.0-py312}\npolicy: {profile: cpu}\n"
    )
    res = tau(sandbox, "run", str(tmp_path), "-d", env=kube_env(sandbox))
    assert res.returncode == 3, res.stderr
    assert "CPU in all; queue cpu may use at most 12" in res.stderr
    assert "can never start here" in res.stderr
    listed = tau(sandbox, "run", "list", "--cluster", "-o", "json", env=kube_env(sandbox))
    assert not [r for r in json.loads(listed.stdout) if r["name"] == "toobig"]
    assert not list((sandbox / "data" / "runs").glob("toobig-*"))  # no record


def test_a_cluster_run_carries_its_data_input_by_exact_version(
    sandbox: Path, tmp_path: Path
) -> None:
    """A dataset registered on this machine, named by alias in tau.yaml: the Job the cluster
    receives carries the exact version (TAU_INPUTS) and reads the workspace's /data/registry
    (KWOK runs no container, so the in-pod layout is tested locally), the version is copied into
    the workspace's registry at submit; status lists the input."""
    (tmp_path / "corpus").mkdir()
    (tmp_path / "corpus" / "part-0.txt").write_text("words\n")
    reg = tau(
        sandbox, "data", "dataset", "register", "corpus", str(tmp_path / "corpus"), "-o", "json"
    )
    assert reg.returncode == 0, reg.stderr
    version = json.loads(reg.stdout)["version"]
    assert (
        tau(sandbox, "data", "dataset", "alias", "set", "corpus", "prod", version).returncode == 0
    )
    project = cpu_job(tmp_path / "p", "withdata")
    with (project / "tau.yaml").open("a") as f:
        f.write("data: {inputs: [{ref: corpus@prod}]}\n")
    run_id = submit(sandbox, project)
    try:
        job = (
            admin(sandbox)
            .resources.get(api_version="batch/v1", kind="Job")
            .get(name=run_id, namespace="research")
        )
        env = {
            e["name"]: e.get("value")
            for e in job.to_dict()["spec"]["template"]["spec"]["containers"][0]["env"]
        }
        assert json.loads(env["TAU_INPUTS"]) == [
            {"kind": "dataset", "name": "corpus", "version": version, "path": "corpus"}
        ]
        assert env["TAU_REGISTRY_DIR"] == "/data/registry"
        # the version was copied into the workspace's registry (the one its TauCluster
        # publishes; the sandbox's is a folder), where a colleague's run finds it too
        ws_registry = sandbox / "sandbox" / "registries" / "research"
        records = list(ws_registry.glob("datasets/corpus/versions/*.json"))
        assert [r.stem for r in records] == [version.removeprefix("sha256:")]
        shown = tau(sandbox, "run", "status", run_id, env=kube_env(sandbox))
        assert f"input: dataset corpus@{version[:19]} (corpus@prod)" in shown.stdout
    finally:
        tau(sandbox, "run", "cancel", run_id, env=kube_env(sandbox))
