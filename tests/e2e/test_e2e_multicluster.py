"""One queue across clusters (#43) on `tau sandbox up --clusters 3`: a MultiKueue manager and two
workers, each its own control plane (real etcd, API server, Kueue v0.19.2, KWOK nodes) with the
sandbox stack applied as its role. A researcher submits to the manager as to one cluster; the
run runs on a worker; status, logs and cancel work from the manager's side; a worker whose queue
is full is passed over; a worker whose control plane stops loses its run to the other."""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import run_tau as tau
from kubekit import wait_until
from sandboxkit import admin, cpu_job, gpu_rayjob, kube_env, sig, status, submit

from taugrid.api import constants as C
from taugrid.sandbox.controlplane import binaries_dir

pytestmark = pytest.mark.e2e
WORKERS = ("worker-1", "worker-2")


@pytest.fixture(scope="module")
def clusters(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    if binaries_dir() is None:
        pytest.skip("the control plane is not built (make controlplane)")
    home = tmp_path_factory.mktemp("multicluster")
    res = tau(home, "sandbox", "up", "--clusters", "3", timeout=900)
    assert res.returncode == 0, res.stdout + res.stderr
    yield home
    assert tau(home, "sandbox", "down", timeout=300).returncode == 0


def worker(home: Path, name: str) -> Any:
    """The admin's client of a worker, through the context of its name."""
    from taugrid.kube.client import Kube

    return Kube(name, kubeconfig=tau(home, "sandbox", "kubeconfig").stdout.strip())


def jobs_of(home: Path, name: str, run_id: str) -> list[dict[str, Any]]:
    return [
        j
        for j in worker(home, name).list("Job", "research")
        if (j["metadata"].get("labels") or {}).get(C.LABEL_RUN_ID) == run_id
    ]


def placed_on(home: Path, run_id: str) -> str:
    """The worker the manager's status names, once the run is Running."""
    got: dict[str, Any] = {}

    def running() -> bool:
        got.update(status(home, run_id))
        return got.get("phase") == "Running"

    wait_until(running, timeout=180, what=f"{run_id} running on a worker")
    reason = sig(got, "Admitted")["reason"]
    names = [w for w in WORKERS if f"running on worker cluster {w}" in reason]
    assert len(names) == 1, reason
    return names[0]


def test_up_says_the_workers_and_multikueue_connects_them(clusters: Path) -> None:
    doc = json.loads(tau(clusters, "sandbox", "status", "-o", "json").stdout)
    assert sorted(doc["workers"]) == list(WORKERS)
    running = {c["component"] for c in doc["components"] if c["running"]}
    for w in WORKERS:
        assert {f"{w}/kube-apiserver", f"{w}/kueue"} <= running
    # the manager's MultiKueue reaches both with the scoped accounts the workers made
    api = admin(clusters).resources.get(
        api_version="kueue.x-k8s.io/v1beta2", kind="MultiKueueCluster"
    )

    def active() -> list[str]:
        items = api.get().to_dict()["items"]
        return sorted(
            i["metadata"]["name"]
            for i in items
            for c in (i.get("status") or {}).get("conditions") or []
            if c["type"] == "Active" and c["status"] == "True"
        )

    wait_until(lambda: active() == list(WORKERS), timeout=120, what="both workers connected")


def test_a_run_submitted_to_the_manager_runs_on_a_worker_and_is_read_and_cancelled_there(
    clusters: Path, tmp_path: Path
) -> None:
    run_id = submit(clusters, cpu_job(tmp_path / "p", "mc-one", {"SANDBOX_RUN_SECONDS": "3000"}))
    where = placed_on(clusters, run_id)
    other = next(w for w in WORKERS if w != where)
    assert len(jobs_of(clusters, where, run_id)) == 1 and jobs_of(clusters, other, run_id) == []
    st = status(clusters, run_id)
    assert "on worker cluster" in sig(st, "Scheduled")["reason"]
    # logs: read on the worker (its KWOK node serves no log: said, not a traceback)
    logs = tau(clusters, "run", "logs", run_id, env=kube_env(clusters))
    assert f"runs on worker cluster {where}" in logs.stderr, logs.stderr
    assert logs.returncode == 4 and "kubelet does not serve" in logs.stderr, logs.stderr
    # cancel from the manager: the worker's Job goes too
    res = tau(clusters, "run", "cancel", run_id, env=kube_env(clusters))
    assert res.returncode == 0, res.stderr
    wait_until(
        lambda: jobs_of(clusters, where, run_id) == [], timeout=120, what="worker's Job gone"
    )
    assert status(clusters, run_id)["phase"] == "Cancelled"


def filler(name: str) -> dict[str, Any]:
    """A worker's own one-core Job in the research workspace's cpu queue, at the runs' default
    priority, running for long."""
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": "research",
            # the runs' own priority: a run sent there may not preempt it
            "labels": {"kueue.x-k8s.io/queue-name": "cpu", C.KUEUE_PRIORITY_LABEL: "normal"},
        },
        "spec": {
            "suspend": True,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [
                        {
                            "name": "c",
                            "image": "busybox",
                            "env": [{"name": "SANDBOX_RUN_SECONDS", "value": "3000"}],
                            "resources": {"requests": {"cpu": "1", "memory": "256Mi"}},
                        }
                    ],
                }
            },
        },
    }


def quota_state(kube: Any, job: str) -> str | None:
    """ "admitted", "waiting" (Kueue has no quota for it, its own or borrowed), or None yet."""
    for w in kube.list("Workload", "research"):
        if any(r.get("name") == job for r in w["metadata"].get("ownerReferences") or []):
            for c in (w.get("status") or {}).get("conditions") or []:
                if c["type"] == "QuotaReserved":
                    return "admitted" if c["status"] == "True" else "waiting"
    return None


def test_a_run_whose_profile_no_cluster_has_is_refused_before_it_is_sent(
    clusters: Path, tmp_path: Path
) -> None:
    """The workers' queues are the manager's (compared before they are wired): a profile the
    manager does not offer, no worker has; refused at once as for one cluster (exit 2, a run
    that cannot be placed as written, with the profiles offered), nothing sent anywhere."""
    folder = cpu_job(tmp_path / "p", "mc-noprofile", extra="policy: {profile: h100x8}\n")
    res = tau(clusters, "run", str(folder), "-d", env=kube_env(clusters))
    assert res.returncode == 2 and "h100x8" in res.stderr and "available:" in res.stderr
    for w in WORKERS:
        assert not [j for j in worker(clusters, w).list("Job", "research") if "noprofile" in str(j)]


def test_a_worker_whose_queue_is_full_is_passed_over(clusters: Path, tmp_path: Path) -> None:
    """worker-1's cpu queue is filled by Jobs of its own, one core at a time until Kueue has no
    more for one (what the cohort lends included): the manager's next runs go to worker-2."""
    w1 = worker(clusters, "worker-1")
    made: list[str] = []
    try:
        for i in range(40):  # the sandbox's cpu quota and what its cohort lends: < 40 cores
            made.append(f"filler-{i}")
            w1.create(filler(made[-1]))
            got = wait_until(lambda: quota_state(w1, made[-1]), timeout=60, what="Kueue's answer")
            if got == "waiting":
                break
        else:
            pytest.fail("worker-1's cpu queue never filled")
        for i in range(2):
            run_id = submit(
                clusters,
                cpu_job(tmp_path / f"p{i}", f"mc-full{i}", {"SANDBOX_RUN_SECONDS": "3000"}),
            )
            assert placed_on(clusters, run_id) == "worker-2"
            assert tau(clusters, "run", "cancel", run_id, env=kube_env(clusters)).returncode == 0
    finally:
        for name in made:
            w1.delete("Job", name, "research")


def validate_workers(home: Path) -> dict[str, dict[str, Any]]:
    res = tau(
        home, "cluster", "validate", "installation", "-o", "json", env=kube_env(home, "admin")
    )
    doc = json.loads(res.stdout)
    findings = doc["findings"] if isinstance(doc, dict) else doc
    return {f["item"]: f for f in findings if f["item"].startswith("worker ")}


def test_a_worker_whose_token_the_manager_holds_no_longer_works_is_named_with_the_fix(
    clusters: Path,
) -> None:
    """The manager's kubeconfig Secret for worker-2 holds a token worker-2 refuses (as an
    expired one): `tau cluster validate installation` names the worker and says what to do;
    the Secret put back, it connects again."""
    import base64

    from taugrid.components.multikueue import KUEUE_NAMESPACE, secret_name

    found = validate_workers(clusters)
    assert {k: v["state"] for k, v in found.items()} == {
        "worker worker-1": "ok",
        "worker worker-2": "ok",
    }, found
    api = admin(clusters).resources.get(api_version="v1", kind="Secret")
    name = secret_name("worker-2")
    kept = api.get(name=name, namespace=KUEUE_NAMESPACE).to_dict()["data"]["kubeconfig"]
    text = base64.b64decode(kept).decode()
    token = next(ln.split(":", 1)[1].strip() for ln in text.splitlines() if "token:" in ln)
    bad = text.replace(token, "expired." + token[8:])

    def patch(raw: str) -> None:
        body = {"data": {"kubeconfig": base64.b64encode(raw.encode()).decode()}}
        api.patch(
            name=name,
            namespace=KUEUE_NAMESPACE,
            body=body,
            content_type="application/merge-patch+json",
        )

    patch(bad)
    try:
        got = wait_until(
            lambda: (f := validate_workers(clusters)["worker worker-2"])["state"] == "failed" and f,
            timeout=180,
            what="worker-2 refused",
        )
        assert "provide credentials" in got["message"], got  # client-go's words for a 401
        assert "pulumi up the worker's stack" in got["fix"], got
    finally:
        patch(text)
    wait_until(
        lambda: validate_workers(clusters)["worker worker-2"]["state"] == "ok",
        timeout=180,
        what="worker-2 connected again",
    )


def submit_pinned(
    home: Path, folder: Path, monkeypatch: pytest.MonkeyPatch, **request: Any
) -> tuple[str, str | None]:
    """A run submitted in-process as `tau run` and `tau run resume` do (the researcher's
    kubeconfig), with a RunRequest's `parent`, or pinned to a worker as a resume of a run there
    would be: (its id, the worker its pods select)."""
    from dataclasses import replace

    from taugrid.runs import load
    from taugrid.runs.backends.base import SubmitOptions
    from taugrid.runs.backends.kube.backend import KubeBackend
    from taugrid.runs.prepare import RunRequest

    monkeypatch.setenv("TAU_HOME", str(home))
    monkeypatch.setenv("KUBECONFIG", kube_env(home)["KUBECONFIG"])
    pin = request.pop("pin", None)
    backend = KubeBackend()
    prepared = backend.prepare(RunRequest(load.load_manifest(folder), **request))
    if pin is not None:
        prepared = replace(prepared, meta=replace(prepared.meta, cluster=pin))
    rd = backend.submit(prepared, SubmitOptions(), lambda _m: None)
    return rd.run_id, prepared.meta.cluster


def test_a_resume_goes_back_to_the_worker_its_parent_ran_on(
    clusters: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each worker's nodes and flavors carry its name; a run whose pods select a worker (a
    resume: its parent's checkpoint is on that worker's volume) is admitted there and nowhere
    else, whichever worker the dispatcher would try first; a resume of a run finds its worker
    from the manager. Both workers, so neither the dispatcher's order nor chance can pass it."""
    folder = cpu_job(tmp_path / "p", "mc-pin", {"SANDBOX_RUN_SECONDS": "3000"})
    for target in ("worker-2", "worker-1"):
        parent, pin = submit_pinned(clusters, folder, monkeypatch, pin=target)
        assert placed_on(clusters, parent) == target
        child, pin = submit_pinned(
            clusters, folder, monkeypatch, parent=parent, resume_from="/data/runs/x"
        )
        assert pin == target  # read from the manager's record of where the parent ran
        assert placed_on(clusters, child) == target
        job = jobs_of(clusters, target, child)[0]
        assert job["spec"]["template"]["spec"]["nodeSelector"][C.LABEL_CLUSTER] == target
        for run_id in (parent, child):
            assert tau(clusters, "run", "cancel", run_id, env=kube_env(clusters)).returncode == 0


def test_a_worker_whose_control_plane_stops_loses_its_runs_to_the_other(
    clusters: Path, tmp_path: Path
) -> None:
    """The admitting worker's API server stops: after the sandbox's workerLostTimeout (45 s)
    Kueue takes its runs back and dispatches them to the other worker; status says both. A
    batch Job and a RayJob (kubernetes-sigs/kueue#15380: without TauGrid's release a RayJob's
    Workload stays admitted for ever). Both are put on one worker by holding the other's Kueue
    while they are dispatched."""
    run_id = submit(clusters, cpu_job(tmp_path / "p", "mc-lost", {"SANDBOX_RUN_SECONDS": "3000"}))
    where = placed_on(clusters, run_id)
    other = next(w for w in WORKERS if w != where)
    state = json.loads((clusters / "sandbox" / "state.json").read_text())
    held = state["pids"][f"{other}/kueue"]
    os.killpg(held, signal.SIGSTOP)  # it admits nothing while the RayJob is dispatched
    try:
        ray_id = submit(clusters, gpu_rayjob(tmp_path / "r", "mc-lost-ray", runs_for=3000))
        assert placed_on(clusters, ray_id) == where
    finally:
        os.killpg(held, signal.SIGCONT)
    os.killpg(state["pids"][f"{where}/kube-apiserver"], signal.SIGKILL)
    got: dict[str, dict[str, Any]] = {}

    def moved(run: str) -> bool:
        got[run] = status(clusters, run)
        reason = sig(got[run], "Admitted")["reason"]
        return got[run].get("phase") == "Running" and f"running on worker cluster {other}" in reason

    wait_until(lambda: moved(run_id), timeout=300, what=f"{run_id} re-dispatched to {other}")
    wait_until(lambda: moved(ray_id), timeout=120, what=f"{ray_id} re-dispatched to {other}")
    for run in (run_id, ray_id):
        # the record keeps both: where it ran, where it runs; what happened, in the timeline
        assert got[run]["clusters"] == [where, other], got[run]
        assert got[run]["attempt"] >= 1, got[run]
        reasons = {t["reason"]: t["message"] for t in got[run]["timeline"]}
        assert f"worker cluster {where} stopped answering" in reasons.get("WorkerLost", ""), got
        assert f"now on worker cluster {other} (was on {where})" in reasons.get("Redispatched", "")
    text = tau(clusters, "run", "status", run_id, env=kube_env(clusters)).stdout
    assert f"worker cluster: {other} (before: {where}, lost or given back)" in text, text
