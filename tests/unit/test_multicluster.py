"""One queue across clusters, the declaration (#43, first part): a stack's role, a manager's
MultiKueue objects and a worker's scoped ServiceAccount, each valid against Kueue's real CRDs;
Kueue's configuration and the ClusterQueues' admission check on a manager only; a worker whose
queues differ from the manager's is named with each difference; bad roles refused."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import SMALL_PLATFORM
from k8s_schemas import crd_errors, k8s_errors

from taugrid.api import constants as C
from taugrid.api import multicluster as MC
from taugrid.api.platform import PlatformConfigError, validate_platform
from taugrid.api.published import queue_signature
from taugrid.components import manifests as M
from taugrid.components import multikueue as MK

WORKERS = [{"name": "east", "stack": "org/taugrid/east"}, {"name": "west", "stack": "west"}]


def stack(**multi: Any) -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load(yaml.safe_dump(SMALL_PLATFORM))
    if multi:
        doc["multiCluster"] = multi
    return doc


def test_a_managers_objects_are_valid_kueue_objects(upstream_crds: Path) -> None:
    cfg = validate_platform(stack(role="manager", workers=WORKERS))
    objs = MK.manager_objects(cfg, {"east": "kubeconfig-east", "west": "kubeconfig-west"})
    kinds = [o["kind"] for o in objs]
    assert kinds == [
        "Secret",
        "Secret",
        "MultiKueueCluster",
        "MultiKueueCluster",
        "MultiKueueConfig",
        "AdmissionCheck",
    ]
    files = {
        "MultiKueueCluster": "multikueueclusters",
        "MultiKueueConfig": "multikueueconfigs",
        "AdmissionCheck": "admissionchecks",
        "ClusterQueue": "clusterqueues",
    }
    cqs = [o for o in M.kueue_objects(cfg) if o["kind"] == "ClusterQueue"]
    for o in [*objs, *cqs]:
        if o["kind"] in files:
            crd = upstream_crds / "kueue" / f"kueue.x-k8s.io_{files[o['kind']]}.yaml"
            assert crd_errors(o, crd, "v1beta2") == [], o["metadata"]["name"]
        else:
            assert k8s_errors(o) == [], o["metadata"]["name"]
    east = objs[2]["spec"]["clusterSource"]["kubeConfig"]
    assert east == {"locationType": "Secret", "location": "multikueue-east"}
    assert objs[0]["stringData"] == {"kubeconfig": "kubeconfig-east"}
    assert objs[4]["spec"]["clusters"] == ["east", "west"]
    # every queue admits through MultiKueue
    assert all(
        q["spec"]["admissionChecksStrategy"] == {"admissionChecks": [{"name": MC.ADMISSION_CHECK}]}
        for q in cqs
    )
    conf = json.loads(M.kueue_values(cfg)["managerConfig"]["controllerManagerConfigYaml"])
    assert conf["multiKueue"] == {
        "dispatcherName": "kueue.x-k8s.io/multikueue-dispatcher-incremental",
        "workerLostTimeout": "15m",
    }


def test_a_worker_gets_a_scoped_service_account_and_no_admission_check() -> None:
    cfg = validate_platform(stack(role="worker", name="east"))
    objs = MK.worker_objects(cfg)
    assert [o["kind"] for o in objs] == [
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "Secret",
    ]
    assert all(k8s_errors(o) == [] for o in objs)
    rules = {
        (g, r): set(x["verbs"])
        for x in objs[1]["rules"]
        for g in x["apiGroups"]
        for r in x["resources"]
    }
    # what MultiKueue does there, and the ConfigMaps of a run the manager's controller makes
    # beside its Job (create only); nothing more: no pods, no secrets, no wildcard
    assert {g for g, _ in rules} == {"batch", "ray.io", "kueue.x-k8s.io", ""}
    assert rules[("", "configmaps")] == {"create"} and {r for g, r in rules if g == ""} == {
        "configmaps"
    }
    assert not any("*" in r or "*" in v for (_, r), v in rules.items())
    assert ("", "secrets") not in rules and ("", "pods") not in rules
    assert objs[3]["type"] == "kubernetes.io/service-account-token"
    (cq,) = [o for o in M.kueue_objects(cfg) if o["kind"] == "ClusterQueue"]
    assert "admissionChecksStrategy" not in cq["spec"]
    conf = json.loads(M.kueue_values(cfg)["managerConfig"]["controllerManagerConfigYaml"])
    assert "multiKueue" not in conf
    assert MK.worker_objects(validate_platform(stack())) == []  # standalone: nothing


def test_a_worker_kubeconfig_has_only_a_token() -> None:
    kc = yaml.safe_load(MK.worker_kubeconfig("east", "https://east:443", "Q0E=", "tok"))
    assert kc["users"] == [{"name": MC.WORKER_SERVICE_ACCOUNT, "user": {"token": "tok"}}]
    assert kc["clusters"][0]["cluster"] == {
        "server": "https://east:443",
        "certificate-authority-data": "Q0E=",
    }
    assert kc["current-context"] == "east"


def test_queues_that_differ_are_named() -> None:
    manager = queue_signature(validate_platform(stack()))
    assert MC.queue_differences(manager, manager, "east") == []
    other = stack()
    other["queues"]["clusterQueues"][0]["flavors"][0]["nominalQuota"] = {"nvidia.com/gpu": 1}
    other["queues"]["clusterQueues"].append(
        {"name": "extra", "flavors": [{"pool": "cpu", "nominalQuota": {"cpu": 2}}]}
    )
    other["workspaces"][0]["queues"].append("extra")
    worker = queue_signature(validate_platform(other))
    diff = MC.queue_differences(manager, worker, "east")
    assert diff == [
        "worker east has ClusterQueue extra, which the manager does not",
        "worker east: ClusterQueue gpu quota of nvidia.com/gpu on a100 is '1', the manager's '2'",
    ]
    assert (
        MC.queue_differences(worker, manager, "east")[0] == "worker east has no ClusterQueue extra"
    )


@pytest.mark.parametrize(
    ("multi", "needle"),
    [
        ({"role": "manager"}, "a manager needs workers"),
        ({"role": "worker", "workers": WORKERS, "name": "e"}, "only a manager has workers"),
        ({"role": "worker"}, "a worker needs its name"),
        ({"role": "manager", "workers": WORKERS, "name": "m"}, "only a worker has a name"),
        ({"role": "leader"}, "multiCluster.role"),
        ({"role": "manager", "workers": [WORKERS[0], WORKERS[0]]}, "used twice: east"),
        ({"role": "manager", "workers": [{"name": "East_1", "stack": "s"}]}, "DNS label"),
        ({"role": "manager", "workers": WORKERS, "workerLostTimeout": "0s"}, "longer than 0"),
        ({"role": "manager", "workers": WORKERS, "dispatcher": "Random"}, "dispatcher"),
    ],
)
def test_bad_roles_are_refused(multi: dict[str, Any], needle: str) -> None:
    with pytest.raises(PlatformConfigError) as e:
        validate_platform(stack(**multi))
    assert needle in str(e.value)


def test_the_program_wires_a_manager_and_a_worker_offline() -> None:
    from taugrid.infra import plan

    inv = plan.evaluate("mgr", validate_platform(stack(role="manager", workers=WORKERS)))
    names = {r.name for r in inv.resources}
    assert {
        "multikueuecluster-east",
        "multikueuecluster-west",
        "admissioncheck-taugrid-multikueue",
        "secret-kueue-system-multikueue-east",
    } <= names
    assert "multikueueKubeconfig" not in inv.exports and "queueSignature" in inv.exports
    inv = plan.evaluate("wrk", validate_platform(stack(role="worker", name="east")))
    assert "clusterrole-taugrid-multikueue" in {r.name for r in inv.resources}
    # its token Secret is made after its ServiceAccount (else the token controller deletes it)
    by_name = {r.name: r for r in inv.resources}
    account = by_name["serviceaccount-kueue-system-taugrid-multikueue"]
    assert account.urn in by_name["secret-kueue-system-taugrid-multikueue-token"].depends_on
    assert inv.exports[MC.NAME_OUTPUT] == "east"  # the manager checks it is the name it gives
    kc = yaml.safe_load(inv.exports["multikueueKubeconfig"])
    assert kc["users"][0]["name"] == MC.WORKER_SERVICE_ACCOUNT
    assert inv.exports["queueSignature"] == queue_signature(validate_platform(stack()))


def test_a_worker_is_wired_only_when_its_queues_match() -> None:
    import pulumi

    from taugrid.components.multicluster import checked_kubeconfig

    own = queue_signature(validate_platform(stack()))
    east = MC.WorkerRef(name="east", stack="org/taugrid/east")
    assert checked_kubeconfig([own, "KC", "east"], east, own) == "KC"
    offline = [MC.OFFLINE, "KC", MC.OFFLINE]
    assert checked_kubeconfig(offline, east, own) == "KC"  # the offline plan
    other = {**own, "gpu": {**own["gpu"], "cohort": "elsewhere"}}
    with pytest.raises(pulumi.RunError, match="ClusterQueue gpu cohort is 'elsewhere'"):
        checked_kubeconfig([other, "KC", "east"], east, own)
    with pytest.raises(pulumi.RunError, match="has no multikueueKubeconfig output"):
        checked_kubeconfig([None, None, None], east, own)
    # a worker that calls itself otherwise: its nodes would not be those a resume selects
    with pytest.raises(pulumi.RunError, match=r"names itself 'west'.*give both the same name"):
        checked_kubeconfig([own, "KC", "west"], east, own)


# --- the sandbox's clusters (tau sandbox up --clusters N) --------------------------------------
def test_the_sandbox_makes_a_manager_and_workers_of_one_stack() -> None:
    from taugrid.sandbox import multicluster as MCS

    cfg = validate_platform(stack())
    names = MCS.worker_names(3)
    assert names == ["worker-1", "worker-2"] and MCS.worker_names(1) == []
    manager = MCS.manager_config(cfg, names)
    assert [w.name for w in manager.multiCluster.workers] == names
    assert MK.admission_checks(manager) and MK.kueue_multikueue(manager)
    w = MCS.worker_config(cfg, "https://127.0.0.1:6443", "worker-1")
    assert w.multiCluster.role == "worker" and w.multiCluster.server == "https://127.0.0.1:6443"
    assert all(p.labels[C.LABEL_CLUSTER] == "worker-1" for p in [*w.cpuPools, *w.gpuPools])
    assert not w.components.controller.enabled  # the manager's controller keeps the TauRuns
    assert MK.worker_objects(w) and not MK.admission_checks(w)
    # the same queues: the manager would wire it
    assert MC.queue_differences(queue_signature(manager), queue_signature(w), "worker-1") == []


def test_each_identity_reaches_each_worker_by_a_context_of_its_name(tmp_path: Path) -> None:
    from taugrid.sandbox import multicluster as MCS

    def kubeconfig(path: Path, server: str, who: str) -> str:
        path.write_text(
            json.dumps(
                {
                    "clusters": [{"name": "e2e", "cluster": {"server": server}}],
                    "users": [{"name": who, "user": {"client-certificate": f"{server}.crt"}}],
                    "contexts": [{"name": who, "context": {"cluster": "e2e", "user": who}}],
                    "current-context": who,
                }
            )
        )
        return str(path)

    manager = {w: kubeconfig(tmp_path / f"m-{w}", "https://m", w) for w in ("admin", "carol")}
    workers = {
        "worker-1": {"admin": kubeconfig(tmp_path / "w1-admin", "https://w1", "admin")},
        "worker-2": {
            w: kubeconfig(tmp_path / f"w2-{w}", "https://w2", w) for w in ("admin", "carol")
        },
    }
    MCS.add_worker_contexts(manager, workers)
    carol = json.loads(Path(manager["carol"]).read_text())
    assert carol["current-context"] == "carol"  # still the manager by default
    ctx = {c["name"]: c["context"] for c in carol["contexts"]}
    assert set(ctx) == {"carol", "worker-2"}  # carol has no identity on worker-1
    users = {u["name"]: u["user"] for u in carol["users"]}
    clusters = {c["name"]: c["cluster"]["server"] for c in carol["clusters"]}
    assert clusters[ctx["worker-2"]["cluster"]] == "https://w2"
    assert users[ctx["worker-2"]["user"]] == {"client-certificate": "https://w2.crt"}
    admin = json.loads(Path(manager["admin"]).read_text())
    assert {c["name"] for c in admin["contexts"]} == {"admin", "worker-1", "worker-2"}


@pytest.mark.parametrize("n", ["4", "0"])
def test_a_sandbox_of_too_many_or_no_clusters_is_refused(n: str, tmp_path: Path) -> None:
    from conftest import run_tau

    res = run_tau(tmp_path, "sandbox", "up", "--clusters", n)
    assert res.returncode == 2 and "--clusters" in res.stderr, res.stderr


def test_real_nodes_with_clusters_are_the_workers_and_down_stops_theirs_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`--clusters 3 --real-nodes 1`: each worker starts one real node, the manager none (its
    runs' pods run on the workers), whose TauCluster is told each worker's registries (its data
    inputs are copied there); a sandbox asked for again the same way is found as it is."""
    from taugrid.api.errors import TauError
    from taugrid.sandbox import cluster as sandbox
    from taugrid.sandbox import controlplane, realnodes

    monkeypatch.setenv("TAU_HOME", str(tmp_path))
    asked: dict[str, Any] = {}

    class CP:
        def __init__(self, bin_dir: Path, work: Path) -> None:
            self.work = work

        def start(self) -> None: ...
        def stop(self) -> None: ...

    def worker(cp: Any, cfg: Any, name: str, stack: str, say: Any, platform: bool, n: int) -> Any:
        asked[name] = n
        return sandbox.State(
            stack,
            "w",
            0.0,
            {},
            {"admin": "x"},
            real_nodes=[f"cpu-{name}"] * n,
            registries={"research": f"file:///volumes/{name}/registry"},
        )

    def manager(
        cp: Any, cfg: Any, stack: str, say: Any, platform: bool, n: int = 0, regs: Any = None
    ) -> Any:
        asked["manager"] = n
        asked["registries"] = regs
        raise TauError("stop here: the manager's install is not this test's")

    monkeypatch.setattr(controlplane, "ControlPlane", CP)
    monkeypatch.setattr(sandbox, "_start_worker", worker)
    monkeypatch.setattr(sandbox, "_install", manager)
    stopped: list[Path] = []
    monkeypatch.setattr(realnodes, "stop_nodes", lambda work, net: stopped.append(work))
    work = tmp_path / "w"
    with pytest.raises(TauError, match="stop here"):
        cfg = validate_platform(stack())
        sandbox._start(tmp_path, work, cfg, "sandbox", lambda _m: None, True, 1, ["w1", "w2"])
    assert asked == {
        "w1": 1,
        "w2": 1,
        "manager": 0,
        "registries": {w: {"research": f"file:///volumes/{w}/registry"} for w in ("w1", "w2")},
    }
    assert stopped == [work / "workers" / "w1", work / "workers" / "w2", work]
    state = sandbox.State("s", "m", 0.0, {}, {}, workers={"w1": {"real_nodes": ["cpu-0"]}})
    assert state.real_node_count() == 1
    assert sandbox.State("s", "m", 0.0, {}, {}, real_nodes=["a", "b"]).real_node_count() == 2


# --- a lost worker: the manager's Job released to Kueue ----------------------------------------
def _lost(**over: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    job = {
        "kind": "Job",
        "spec": {"managedBy": "kueue.x-k8s.io/multikueue"},
        "status": {"active": 1, "ready": 1},
    }
    kw = {
        "status": {
            "conditions": [
                {"type": "QuotaReserved", "status": "True"},
                {
                    "type": "Evicted",
                    "status": "True",
                    "reason": "AdmissionCheck",
                    "message": 'Evicted due to AdmissionCheck in Retry state: "taugrid-multikueue" '
                    '(Admitting remote lost, Previously: "Ready")',
                },
            ]
        }
    }
    for path, value in over.items():
        obj, key = path.split("__")
        target = job if obj == "job" else kw
        if key == "managedBy":
            target["spec"][key] = value
        elif key == "counts":
            target["status"] = value
        elif key == "evicted":
            target["status"]["conditions"][1]["status"] = value
        elif key == "message":
            target["status"]["conditions"][1]["message"] = value
    return job, kw


def test_a_run_whose_worker_was_lost_is_released_only_then() -> None:
    """Kueue evicts the run of a lost worker but waits for the manager's Job to stop: its pod
    counts (the lost worker's last copy) are zeroed, and only in that case."""
    from taugrid.controller.decide import lost_worker_release

    assert lost_worker_release(*_lost()) == {"status": {"active": 0, "ready": 0}}
    for case in (
        {"job__managedBy": None},  # a Job that runs on this cluster: its pods are real
        {"job__counts": {"active": 0}},  # released already
        {"kw__evicted": "False"},  # not evicted
        {"kw__message": "Preempted to accommodate a workload"},  # evicted, the worker is alive
    ):
        assert lost_worker_release(*_lost(**case)) is None, case
    job, kw = _lost()
    assert lost_worker_release({**job, "kind": "Deployment"}, kw) is None
    assert lost_worker_release(None, kw) is None and lost_worker_release(job, None) is None


@pytest.mark.parametrize(
    ("deployment", "patched"),
    [
        ("Running", True),  # the lost worker's last word: Kueue reads it as running
        ("Initializing", True),
        (None, True),  # copied before the worker said anything: "" is active to Kueue too
        ("Suspended", False),  # released already
        ("New", False),
        ("Complete", False),  # ended: nothing to requeue
        ("Failed", False),
    ],
)
def test_a_rayjob_whose_worker_was_lost_is_released_as_suspended(
    deployment: str | None, patched: bool
) -> None:
    """kubernetes-sigs/kueue#15380: a manager's RayJob keeps the lost worker's deployment
    status, which Kueue reads as running, so its evicted Workload is never requeued. The
    controller writes what is true on the manager (Suspended), only for a lost worker's run."""
    from taugrid.controller.decide import lost_worker_release

    job, kw = _lost()
    ray = {**job, "kind": "RayJob", "status": {"jobDeploymentStatus": deployment}}
    want = {"status": {"jobDeploymentStatus": "Suspended"}} if patched else None
    assert lost_worker_release(ray, kw) == want
    _, alive = _lost(kw__message="Preempted to accommodate a workload")
    assert lost_worker_release(ray, alive) is None  # evicted, its worker alive: not ours
    local = {**ray, "spec": {}}
    assert lost_worker_release(local, kw) is None  # not MultiKueue's


def test_run_list_on_a_manager_says_which_worker_runs_each_and_filters_by_one(
    capsys: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from runkit import dispatched_status

    from taugrid.cli.app import main
    from taugrid.client import runs

    st = dispatched_status
    rows = [st("a-00001", ["worker-1", "worker-2"]), st("b-00002", ["worker-1"]), st("c-3", [])]
    monkeypatch.setattr(runs, "cluster_runs", lambda **_: rows)
    assert main(["run", "list", "--cluster"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "WORKER" in lines[0].split()
    at = lines[0].index("WORKER")
    assert [ln[at:].split()[0] for ln in lines[1:3]] == ["worker-2", "worker-1"]
    assert main(["run", "list", "--worker", "worker-1", "-o", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [r["run_id"] for r in doc] == ["b-00002"] and doc[0]["clusters"] == ["worker-1"]
    monkeypatch.setattr(runs, "cluster_runs", lambda **_: [rows[2]])
    assert main(["run", "list", "--cluster"]) == 0
    assert "WORKER" not in capsys.readouterr().out


# --- the manager's installation: each worker connected, or why not and the fix ----------------
def _mkc(name: str, status: str, reason: str = "", message: str = "") -> dict[str, Any]:
    cond = {"type": "Active", "status": status, "reason": reason, "message": message}
    return {"metadata": {"name": name}, "status": {"conditions": [cond]}}


@pytest.mark.parametrize(
    ("reason", "message", "fix"),
    [
        ("ClientConnectionFailed", "Unauthorized", "expired or revoked token"),
        (  # what Kueue v0.19.2 said on the sandbox for a token the worker refused
            "ClientConnectionFailed",
            "failed to get server groups: the server has asked for the client to provide "
            "credentials",
            "expired or revoked token",
        ),
        (
            "ClientConnectionFailed",
            'rayservices.ray.io is forbidden: User "system:serviceaccount:kueue-system:'
            'taugrid-multikueue" cannot watch resource "rayservices"',
            "scopes that account's ClusterRole",
        ),
        (
            "ClientConnectionFailed",
            "dial tcp 10.0.0.4:443: connect: connection refused",
            "does not answer the manager",
        ),
        ("BadConfig", "something new", "kubectl get multikueuecluster west -o yaml"),
    ],
)
def test_a_worker_the_manager_cannot_reach_is_named_with_the_fix(
    reason: str, message: str, fix: str
) -> None:
    from taugrid.api import installation as I

    cfg = validate_platform(stack(role="manager", workers=WORKERS))
    spec = M.tau_cluster(cfg, "prod")["spec"]
    assert spec["multiCluster"] == {"role": "manager", "workers": ["east", "west"]}
    got = I.workers(
        spec, [_mkc("east", "True", "Active", "Connected"), _mkc("west", "False", reason, message)]
    )
    east, west = got
    assert east.state == "ok" and east.item == "worker east"
    assert west.state == "failed" and west.item == "worker west"
    assert message[:20] in west.message and fix in (west.fix or "")


def test_a_declared_worker_without_its_cluster_object_and_a_standalone_cluster() -> None:
    from taugrid.api import installation as I

    spec = M.tau_cluster(validate_platform(stack(role="manager", workers=WORKERS)), "p")["spec"]
    (east, west) = I.workers(spec, [_mkc("east", "True")])
    assert (
        east.state == "ok"
        and west.state == "failed"
        and "pulumi up the manager" in (west.fix or "")
    )
    # each worker's registry of a workspace, as the manager's stack read it from theirs
    first = validate_platform(stack()).workspaces[0].name
    regs = {"east": {first: "az://east/data/reg"}, "west": {}}
    managed = M.tau_cluster(validate_platform(stack(role="manager", workers=WORKERS)), "p", regs)
    by_ws = {w["name"]: w.get("workerRegistries") for w in managed["spec"]["workspaces"]}
    assert by_ws[first] == {"east": "az://east/data/reg"}
    assert [v for k, v in by_ws.items() if k != first] == [None] * (len(by_ws) - 1)
    alone = M.tau_cluster(validate_platform(stack()), "p")["spec"]
    assert "multiCluster" not in alone and I.workers(alone, []) == []
    worker = M.tau_cluster(validate_platform(stack(role="worker", name="east")), "p")["spec"]
    assert worker["multiCluster"] == {"role": "worker", "workers": []}  # its name is a label
    assert I.workers(worker, []) == []


def test_a_runs_worker_comes_through_the_thin_listing_of_run_list() -> None:
    """`tau run list --cluster` reads TauRuns as the API server's Table (printer columns only):
    the worker a run is on is a column, so the list's WORKER column has it."""
    from runkit import taurun

    from taugrid.api.crds import TauRunStatus, read_status
    from taugrid.kube.fake import FakeKube

    st = {"phase": "Running", "clusters": ["worker-1", "worker-2"], "cluster": "worker-2"}
    (thin,) = FakeKube({"TauRun": [taurun(st)]}).list_columns("TauRun", "research")
    got, why = read_status(TauRunStatus, thin["status"])
    assert why is None and got is not None
    assert got.cluster == "worker-2" and got.clusters == []  # only its columns


# --- a dispatched run's ConfigMaps, made on its worker ------------------------------------------
def _submitted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str) -> tuple[Any, str, str]:
    """A run submitted to a fake manager as tau submits it: (manager, run id, its kind)."""
    from fakekit import EXAMPLES, prepared, tau_cluster

    from taugrid.kube.fake import FakeKube
    from taugrid.runs.backends.base import SubmitOptions
    from taugrid.runs.backends.kube.backend import KubeBackend

    monkeypatch.setenv("TAU_HOME", str(tmp_path / "home"))
    project = tmp_path / "project"
    shutil.copytree(EXAMPLES / "batch-job", project)
    manifest = project / "tau.yaml"
    manifest.write_text(
        manifest.read_text().replace("workload_kind: job", f"workload_kind: {kind}")
    )
    manager = FakeKube({"TauCluster": [tau_cluster()]})
    backend = KubeBackend(kube=manager)
    rd = backend.submit(prepared(backend, tmp_path), SubmitOptions(), lambda _m: None)
    rec = rd.read_record()
    kind = "RayJob" if rec.workload_kind == "rayjob" else "Job"
    return manager, rec.run_id, kind


def _mkc_with_secret(manager: Any, worker: str) -> None:
    import base64

    kubeconfig = yaml.safe_dump({"clusters": [], "current-context": worker})
    manager.put(
        "MultiKueueCluster",
        {
            "metadata": {"name": worker},
            "spec": {
                "clusterSource": {
                    "kubeConfig": {"locationType": "Secret", "location": MK.secret_name(worker)}
                }
            },
        },
    )
    manager.put(
        "Secret",
        {
            "metadata": {"name": MK.secret_name(worker), "namespace": MC.KUEUE_NAMESPACE},
            "data": {"kubeconfig": base64.b64encode(kubeconfig.encode()).decode()},
        },
    )


@pytest.mark.parametrize("workload", ["job", "rayjob"])
def test_every_configmap_a_submitted_runs_pods_mount_is_made_on_its_worker(
    workload: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What tau submits (code and helpers ConfigMaps beside a Job or RayJob) is what the pods
    mount, and the controller makes exactly those on the worker the run was dispatched to: the
    run's own owned by the worker's copy of its Job, the shared ones unowned; once only."""
    from taugrid.controller import decide as D
    from taugrid.controller.carry import Carrier
    from taugrid.kube.fake import FakeKube

    manager, run, kind = _submitted(tmp_path, monkeypatch, workload)
    made_here = {n for (k, _ns, n) in manager.objects if k == "ConfigMap"}
    job = manager.get(kind, run, "research")
    assert set(D.companions(job)) == made_here and len(made_here) == 2
    _mkc_with_secret(manager, "worker-1")
    worker = FakeKube({})
    worker.put(kind, {"metadata": {"name": run, "namespace": "research", "uid": "remote-uid"}})
    docs: list[dict[str, Any]] = []
    carrier = Carrier(manager, connect=lambda doc: docs.append(doc) or worker)

    assert carrier.needed(("research", run), "worker-1")
    assert carrier.carry(("research", run), kind, "worker-1") == 2
    assert docs == [{"clusters": [], "current-context": "worker-1"}]  # from the Secret
    there = {n: o for (k, _ns, n), o in worker.objects.items() if k == "ConfigMap"}
    assert set(there) == made_here
    for name, cm in there.items():
        mine = manager.get("ConfigMap", name, "research")
        assert cm["data"] == mine["data"] and cm.get("immutable") == mine.get("immutable")
        owners = [o["uid"] for o in cm["metadata"].get("ownerReferences") or []]
        assert owners == (["remote-uid"] if mine["metadata"].get("ownerReferences") else [])
    assert not carrier.needed(("research", run), "worker-1")
    assert carrier.needed(("research", run), "worker-2")  # moved: carried again
    assert carrier.carry(("research", run), kind, "worker-1") == 0  # there already: no change


def test_a_carry_to_a_worker_that_refuses_is_an_error_and_its_credentials_are_read_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from taugrid.api.errors import TauError
    from taugrid.controller.carry import Carrier, NotYet
    from taugrid.kube.fake import FakeKube

    manager, run, kind = _submitted(tmp_path, monkeypatch, "job")
    _mkc_with_secret(manager, "worker-1")
    worker = FakeKube({})
    carrier = Carrier(manager, connect=lambda doc: worker)
    with pytest.raises(NotYet):  # MultiKueue has not made the Job there yet: nothing made
        carrier.carry(("research", run), kind, "worker-1")
    assert not [k for k in worker.objects if k[0] == "ConfigMap"]
    assert carrier.needed(("research", run), "worker-1")  # tried again in a moment
    worker.put(kind, {"metadata": {"name": run, "namespace": "research"}})
    worker.forbid.add(("create", "ConfigMap", "research"))
    connects: list[int] = []
    carrier = Carrier(manager, connect=lambda doc: connects.append(1) or worker)
    with pytest.raises(TauError):
        carrier.carry(("research", run), kind, "worker-1")
    assert carrier.needed(("research", run), "worker-1")  # not done: tried again later
    worker.forbid.clear()
    assert carrier.carry(("research", run), kind, "worker-1") == 2
    assert len(connects) == 2  # the Secret read again after the refusal
    with pytest.raises(TauError, match="no MultiKueueCluster 'worker-9'"):
        carrier.carry(("research", run), kind, "worker-9")


def test_only_a_dispatched_multikueue_run_is_carried() -> None:
    from taugrid.controller import decide as D

    job = {"kind": "Job", "spec": {"managedBy": "kueue.x-k8s.io/multikueue"}}
    kw = {"status": {"clusterName": "worker-2"}}
    assert D.carry_to(job, kw) == "worker-2"
    assert D.carry_to(job, {"status": {}}) is None  # not dispatched yet
    assert D.carry_to({"kind": "Job", "spec": {}}, kw) is None  # runs here
    assert D.carry_to(None, kw) is None and D.carry_to(job, None) is None
    pod = {
        "volumes": [
            {"name": "a", "configMap": {"name": "code"}},
            {"name": "b", "projected": {"sources": [{"configMap": {"name": "proj"}}]}},
            {"name": "c", "persistentVolumeClaim": {"claimName": "ws"}},
        ],
        "containers": [
            {
                "envFrom": [{"configMapRef": {"name": "envs"}}, {"secretRef": {"name": "s"}}],
                "env": [{"name": "X", "valueFrom": {"configMapKeyRef": {"name": "one"}}}],
            }
        ],
    }
    assert D.companions({"spec": {"template": {"spec": pod}}}) == [
        "code",
        "envs",
        "one",
        "proj",
    ]


def test_a_manager_s_controller_reads_its_workers_secrets_by_name_only() -> None:
    from taugrid.components import controller_manifests as CM

    assert CM.manager_access(validate_platform(stack())) == []
    assert CM.manager_access(validate_platform(stack(role="worker", name="east"))) == []
    role, binding = CM.manager_access(validate_platform(stack(role="manager", workers=WORKERS)))
    assert role["kind"] == "Role" and role["metadata"]["namespace"] == MC.KUEUE_NAMESPACE
    assert role["rules"] == [
        {
            "apiGroups": [""],
            "resources": ["secrets"],
            "verbs": ["get"],
            "resourceNames": ["multikueue-east", "multikueue-west"],
        }
    ]
    assert binding["subjects"][0]["name"] == CM.CONTROLLER
    assert all(k8s_errors(o) == [] for o in (role, binding))


# --- a resume goes back to the worker whose volume holds its checkpoint --------------------------
def test_a_named_worker_s_nodes_and_flavors_carry_its_name_and_nothing_else_changes(
    upstream_crds: Path,
) -> None:
    from taugrid.api.platform import derive_profiles, pool_labels

    worker = validate_platform(stack(role="worker", name="east"))
    plain = validate_platform(stack())
    for cfg, want in ((worker, "east"), (plain, None)):
        flavors = [o for o in M.kueue_objects(cfg) if o["kind"] == "ResourceFlavor"]
        assert flavors and all(
            f["spec"]["nodeLabels"].get(C.LABEL_CLUSTER) == want for f in flavors
        )
        for f in flavors:
            crd = upstream_crds / "kueue" / "kueue.x-k8s.io_resourceflavors.yaml"
            assert crd_errors(f, crd, "v1beta2") == []
        pools = [*cfg.cpuPools, *cfg.gpuPools]
        assert all(pool_labels(p).get(C.LABEL_CLUSTER) == want for p in pools)
    # the profiles researchers are offered do not select it (a manager offers the same ones)
    assert all(C.LABEL_CLUSTER not in p.nodeSelector for p in derive_profiles(worker))
    # its queues are the same queues: a manager wires it
    assert queue_signature(worker) == queue_signature(plain)
    with pytest.raises(PlatformConfigError, match="only a worker has a name"):
        validate_platform(stack(role="manager", workers=WORKERS, name="east"))


def test_a_resume_of_a_dispatched_run_selects_its_parent_s_worker_and_a_new_run_does_not(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The parent ran on worker-2 (its manager's Workload says so, or once that is gone the
    TauRun's recorded worker): its resume's pods select worker-2; any other run selects none."""

    from taugrid.runs import load
    from taugrid.runs.backends.base import SubmitOptions
    from taugrid.runs.backends.kube.backend import KubeBackend
    from taugrid.runs.prepare import RunRequest

    manager, parent, kind = _submitted(tmp_path, monkeypatch, "job")
    backend = KubeBackend(kube=manager)
    loaded = load.load_manifest(str(tmp_path / "project"))
    fresh = backend.prepare(RunRequest(loaded, workspace="research"))
    assert fresh.meta.cluster is None
    request = RunRequest(loaded, workspace="research", resume_from="/data/c", parent=parent)
    assert backend.prepare(request).meta.cluster is None  # the parent ran here: no pin
    taurun = manager.get("TauRun", parent, "research")
    taurun["status"] = {"phase": "Failed", "clusters": ["worker-2"], "cluster": "worker-2"}
    manager.put("TauRun", taurun)
    prepared = backend.prepare(request)
    assert prepared.meta.cluster == "worker-2"
    rd = backend.submit(prepared, SubmitOptions(), lambda _m: None)
    job = manager.get(kind, rd.run_id, "research")
    selector = job["spec"]["template"]["spec"]["nodeSelector"]
    assert selector[C.LABEL_CLUSTER] == "worker-2" and C.LABEL_POOL in selector


def _kubeconfig(path: Path, current: str, **servers: str) -> Path:
    path.write_text(
        yaml.safe_dump(
            {
                "clusters": [
                    {"name": f"c-{n}", "cluster": {"server": s}} for n, s in servers.items()
                ],
                "contexts": [{"name": n, "context": {"cluster": f"c-{n}"}} for n in servers],
                "current-context": current,
            }
        )
    )
    return path


def test_a_worker_reached_by_a_context_is_reached_by_its_manager_at_that_contexts_server(
    tmp_path: Path,
) -> None:
    """A worker stack without multiCluster.server publishes the API server of the context its
    provider uses, read from the kubeconfig files the provider reads (KUBECONFIG, in order)."""
    from taugrid.components.multicluster import context_server

    a = _kubeconfig(tmp_path / "a", "east", east="https://east:6443")
    b = _kubeconfig(tmp_path / "b", "west", west="https://west:6443", east="https://other:1")
    both = {"KUBECONFIG": f"{tmp_path / 'missing'}{os.pathsep}{a}{os.pathsep}{b}"}
    assert context_server("west", both) == "https://west:6443"
    assert context_server("east", both) == "https://east:6443"  # the first file naming it wins
    assert context_server(None, {"KUBECONFIG": str(b)}) == "https://west:6443"  # current one
    assert context_server("north", both) == ""
    (tmp_path / "bad").write_text("{not yaml")
    assert context_server("west", {"KUBECONFIG": f"{tmp_path / 'bad'}{os.pathsep}{b}"})


def test_a_worker_whose_context_is_nowhere_is_refused_with_the_fix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from taugrid.components.platform import Platform

    doc = stack(role="worker", name="east")
    doc["cluster"] = {"provider": "existing", "name": "east", "context": "east"}
    cfg = validate_platform(doc)
    monkeypatch.setenv("KUBECONFIG", str(_kubeconfig(tmp_path / "k", "west", west="https://w:1")))
    with pytest.raises(ValueError, match=r"no kubeconfig context 'east'.*multiCluster.server"):
        Platform._context_server(cfg)
    monkeypatch.setenv("KUBECONFIG", str(_kubeconfig(tmp_path / "k", "x", east="https://e:2")))
    assert Platform._context_server(cfg) == "https://e:2"
    # the offline plan reads no kubeconfig: its worker kubeconfig names a stand-in server
    from taugrid.infra import plan

    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "none"))
    inv = plan.evaluate("wrk", cfg)
    kc = yaml.safe_load(inv.exports["multikueueKubeconfig"])
    assert kc["clusters"][0]["cluster"]["server"] == plan.OFFLINE_SERVER
