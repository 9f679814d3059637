"""`tau serve --target kube` on the sandbox: a RayService in the researcher's workspace, admitted
by Kueue, its replica pods on GPU nodes; a rollout that cannot fit beside the serving revision is
refused with the numbers; scale to zero gives the queue its GPUs back; a blue/green rollback
switches the stable Service to a new RayService and deletes the old (the controller does it,
and records the TauService's status); delete removes everything;
another workspace's researcher cannot touch it. (KWOK runs no containers: the sandbox's KubeRay
reports
the Serve application as KubeRay would see it, and no request is ever answered.)"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from conftest import run_tau as tau
from kubekit import wait_until
from sandboxkit import admin, kube_env

from taugrid.api import constants as C

pytestmark = pytest.mark.e2e
NS = "research"  # the research workspace's namespace (Pulumi.sandbox.yaml)


@pytest.fixture(autouse=True)
def no_service_left(sandbox: Path) -> Any:
    """A test that fails midway leaves no service behind holding GPUs (the next tests on the
    shared sandbox would fail for want of quota, hiding what really broke)."""
    yield
    dyn = admin(sandbox)
    tsvc = dyn.resources.get(api_version="tau.azure.com/v1alpha1", kind="TauService")
    for o in tsvc.get(namespace=NS).items:
        tsvc.delete(name=o.metadata.name, namespace=NS)
    rs = dyn.resources.get(api_version="ray.io/v1", kind="RayService")
    wait_until(lambda: not rs.get(namespace=NS).items, 180, "every service's RayService gone")
    # and Kueue's count of their quota with them (a test that reads the queue's usage first
    # would otherwise start from GPUs that are about to come back)
    wl = dyn.resources.get(api_version="kueue.x-k8s.io/v1beta2", kind="Workload")

    def services_hold_quota() -> bool:
        return any(
            any(o.kind == "RayService" for o in (w.metadata.ownerReferences or []))
            for w in wl.get(namespace=NS).items
        )

    wait_until(lambda: not services_hold_quota(), 180, "the services' Kueue workloads gone")


def project(folder: Path, name: str, replicas: int) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "serve_app.py").write_text("app = None  # (KWOK runs no container)\n")
    (folder / "tau.yaml").write_text(
        f"schema_version: 1\nname: {name}\n"
        "runtime: {image: rayproject/ray:2.56.0-py312-gpu}\n"
        f"service: {{import_path: 'serve_app:app', model: clf@prod, gpus: 1, cpus: 4, "
        f"memory: 16Gi, replicas: {replicas}}}\n"
    )
    return folder


def register(home: Path, folder: Path, text: str) -> str:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "model.json").write_text(text)
    res = tau(home, "data", "model", "register", "clf", str(folder), "-o", "json")
    assert res.returncode == 0, res.stderr
    return str(json.loads(res.stdout)["version"])


def serve(home: Path, *args: str, who: str = "researcher") -> Any:
    return tau(home, "serve", *args, env=kube_env(home, who))


def st(home: Path, name: str) -> dict[str, Any]:
    res = serve(home, "status", name, "-o", "json")
    assert res.returncode == 0, res.stderr
    return dict(json.loads(res.stdout))


def gpus_used(dyn: Any, flavor: str = "a100x1") -> int:
    cq = dyn.resources.get(api_version="kueue.x-k8s.io/v1beta2", kind="ClusterQueue").get(
        name="gpu"
    )
    for f in (cq.to_dict().get("status") or {}).get("flavorsUsage") or []:
        if f["name"] == flavor:
            return sum(
                int(r.get("total", "0")) for r in f["resources"] if r["name"] == C.GPU_RESOURCE
            )
    return 0


def test_a_service_on_the_cluster_from_deploy_to_delete(sandbox: Path, tmp_path: Path) -> None:
    dyn = admin(sandbox)
    v1 = register(sandbox, tmp_path / "m1", '{"w": 1}')
    v2 = register(sandbox, tmp_path / "m2", '{"w": 2}')
    assert tau(sandbox, "data", "model", "alias", "set", "clf", "prod", v1).returncode == 0
    folder = project(tmp_path / "svc", "clf", replicas=2)
    before = gpus_used(dyn)

    res = serve(sandbox, "deploy", str(folder), "--target", "kube", "--no-wait", "-o", "json")
    assert res.returncode == 0, res.stderr
    assert "queue" in res.stderr and NS in res.stderr
    # Kueue admits the RayService; its two one-GPU replicas run on a100x1 nodes
    wait_until(lambda: st(sandbox, "clf")["admitted"] is True, 120, "Kueue admits it")
    pods = wait_until(
        lambda: (
            [
                p
                for p in dyn.resources.get(api_version="v1", kind="Pod")
                .get(namespace=NS, label_selector=f"{C.LABEL_SERVICE}=clf,ray.io/group=replicas")
                .items
                if p.spec.nodeName
            ]
            or None
        ),
        120,
        "replica pods scheduled",
    )
    nodes = {p.spec.nodeName for p in pods}
    assert all(n.startswith("a100x1") for n in nodes), nodes
    # the ClusterQueue's usage is Kueue's status, written after it admits: waited for, not raced
    wait_until(lambda: gpus_used(dyn) == before + 2, 60, "Kueue to count the replicas' GPUs")
    ready = wait_until(lambda: (s := st(sandbox, "clf"))["phase"] == "Ready" and s, 180, "Ready")
    assert ready["model"] == f"clf@{v1[:19]}" and ready["revision"] == 1
    assert "simulated" in ready["summary"]  # KWOK: no container, no answer
    assert ready["endpoint"] == f"http://clf.{NS}.svc:8000/clf"
    rs = dyn.resources.get(api_version="ray.io/v1", kind="RayService").get(
        name="clf-1", namespace=NS
    )
    owner = rs.metadata.ownerReferences[0]
    assert (owner.kind, owner.name) == ("TauService", "clf")

    # a new model is a new RayService beside the serving one until it serves, and the queue
    # has no room for two more GPUs in a100x1: refused with the numbers, nothing changed
    res = serve(sandbox, "rollout", "clf", "--model", f"clf@{v2}")
    assert res.returncode == 3, res.stderr
    assert "needs 2 GPU(s) for its new RayService beside revision 1" in res.stderr
    assert "queue gpu has 0 free" in res.stderr and "tau quota request --gpus 2" in res.stderr
    assert st(sandbox, "clf")["revision"] == 1

    # invoking a service on KWOK's nodes (no container runs there) is refused at once, with how
    # to have it answer (on real nodes it goes through the API server's proxy: test_e2e_realnodes)
    res = serve(sandbox, "invoke", "clf", "--data", "{}")
    assert res.returncode == 4 and "runs on simulated nodes" in res.stderr, res.stderr
    assert "--real-nodes" in res.stderr

    # another workspace's researcher cannot touch it
    bob_home = tmp_path / "bob"
    shutil.copytree(sandbox / "services" / "clf", bob_home / "services" / "clf")
    res = tau(bob_home, "serve", "delete", "clf", env=kube_env(sandbox, "bob"))
    assert res.returncode == 4 and "forbidden" in res.stderr.lower(), res.stderr
    res = serve(
        sandbox,
        "deploy",
        str(folder),
        "--target",
        "kube",
        "--name",
        "theirs",
        "--workspace",
        NS,
        "--no-wait",
        who="bob",
    )
    assert res.returncode == 4 and "forbidden" in res.stderr.lower(), res.stderr
    assert dyn.resources.get(api_version="ray.io/v1", kind="RayService").get(
        name="clf-1", namespace=NS
    )

    # scale to zero gives the queue its GPUs back; the service and its endpoint stay
    res = serve(sandbox, "scale", "clf", "--replicas", "0", "-o", "json")
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["phase"] == "ScaledToZero"
    wait_until(lambda: gpus_used(dyn) == before, 120, "the GPUs back in the queue")
    # a rollout while at zero is recorded; one replica starts it, then a blue/green rollback
    # runs the previous revision's RayService beside it (room for one more GPU) and switches
    res = serve(sandbox, "rollout", "clf", "--model", f"clf@{v2}", "-o", "json")
    assert res.returncode == 0 and json.loads(res.stdout)["phase"] == "ScaledToZero", res.stderr
    res = serve(sandbox, "scale", "clf", "--replicas", "1", "-o", "json")
    assert res.returncode == 0, res.stderr
    up = json.loads(res.stdout)
    assert (up["phase"], up["revision"], up["model"]) == ("Ready", 2, f"clf@{v2[:19]}")
    # (--no-wait, and no tau command looks: the controller moves the service to the new
    # generation once it serves, deletes the previous one, and records the status)
    res = serve(sandbox, "rollback", "clf", "--no-wait", "-o", "json")
    assert res.returncode == 0, res.stderr
    rayservices = dyn.resources.get(api_version="ray.io/v1", kind="RayService")

    def live() -> list[str]:
        return [
            r.metadata.name
            for r in rayservices.get(namespace=NS, label_selector=f"{C.LABEL_SERVICE}=clf").items
            if not r.metadata.deletionTimestamp
        ]

    names = wait_until(
        lambda: (n := live()) and len(n) == 1 and n[0] != "clf-2" and n,
        180,
        "the controller switches to the new generation",
    )
    front = dyn.resources.get(api_version="v1", kind="Service").get(name="clf", namespace=NS)
    assert front.spec.selector[C.LABEL_SERVICE_GENERATION] == names[0].rsplit("-", 1)[1]
    tsvc = dyn.resources.get(api_version="tau.azure.com/v1alpha1", kind="TauService")
    recorded = wait_until(
        lambda: (
            (o := tsvc.get(name="clf", namespace=NS).to_dict().get("status") or {}).get("phase")
            == "Ready"
            and o.get("revision") == 1
            and o
        ),
        120,
        "the controller records revision 1 serving",
    )
    assert recorded["admitted"] is True
    assert recorded["timeline"] and recorded["timeline"][-1]["reason"] == "Ready"
    back = st(sandbox, "clf")
    assert (back["phase"], back["revision"]) == ("Ready", 1)
    kinds = [e["kind"] for e in st(sandbox, "clf")["events"]]
    assert kinds.count("switched") >= 2 and "rollback" in kinds

    # delete removes everything it owns
    res = serve(sandbox, "delete", "clf")
    assert res.returncode == 0, res.stderr
    assert "its RayService and pods are gone" in res.stderr
    rss = dyn.resources.get(api_version="ray.io/v1", kind="RayService").get(namespace=NS).items
    assert not [r.metadata.name for r in rss if r.metadata.name.startswith("clf-")]
    assert serve(sandbox, "status", "clf").returncode == 2
    wait_until(lambda: gpus_used(dyn) == before, 60, "quota free after delete")


def test_a_canary_on_the_cluster_ends_or_is_promoted(sandbox: Path, tmp_path: Path) -> None:
    """A canary's RayService (its share of the replicas, and the split) beside the serving one;
    the controller moves the stable Service to it and keeps the serving RayService; a canary
    with no room is refused with the numbers; rollback and promote leave one RayService."""
    dyn = admin(sandbox)
    v1 = register(sandbox, tmp_path / "m1", '{"w": 11}')
    v2 = register(sandbox, tmp_path / "m2", '{"w": 12}')
    assert tau(sandbox, "data", "model", "alias", "set", "clf", "prod", v1).returncode == 0
    folder = project(tmp_path / "svc", "cny", replicas=1)
    before = gpus_used(dyn)
    rayservices = dyn.resources.get(api_version="ray.io/v1", kind="RayService")
    services = dyn.resources.get(api_version="v1", kind="Service")
    tsvc = dyn.resources.get(api_version="tau.azure.com/v1alpha1", kind="TauService")

    def live() -> set[str]:
        return {
            r.metadata.name
            for r in rayservices.get(namespace=NS, label_selector=f"{C.LABEL_SERVICE}=cny").items
            if not r.metadata.deletionTimestamp
        }

    def selected() -> str:
        return str(services.get(name="cny", namespace=NS).spec.selector[C.LABEL_SERVICE_GENERATION])

    res = serve(sandbox, "deploy", str(folder), "--target", "kube", "-o", "json")
    assert res.returncode == 0 and json.loads(res.stdout)["phase"] == "Ready", res.stderr

    # (--no-wait, and no tau command looks: the controller routes the canary)
    res = serve(
        sandbox,
        "rollout",
        "cny",
        "--model",
        f"clf@{v2}",
        "--strategy",
        "canary",
        "--step",
        "50",
        "--no-wait",
        "-o",
        "json",
    )
    assert res.returncode == 0, res.stderr
    wait_until(lambda: selected() == "2", 180, "the controller moves the Service to the canary")
    assert live() == {"cny-1", "cny-2"}  # the serving RayService is kept
    cfg = rayservices.get(name="cny-2", namespace=NS).spec.serveConfigV2
    assert "cny.split" in cfg and "cny.canary" in cfg and "cny-1-serve-svc" in cfg
    canary = tsvc.get(name="cny", namespace=NS).to_dict()["spec"]["canary"]
    assert (canary["revision"], canary["percent"], canary["stableGeneration"]) == (2, 50, 1)
    # the ClusterQueue's usage is Kueue's status, written after it admits: waited for, not raced
    wait_until(lambda: gpus_used(dyn) == before + 2, 60, "Kueue to count the replicas' GPUs")
    now = st(sandbox, "cny")
    assert (now["phase"], now["revision"]) == ("Canary", 1), now["summary"]
    assert now["rollout"]["traffic"] == {"2": 50, "1": 50} and "simulated" in now["summary"]
    recorded = wait_until(
        lambda: (
            (o := tsvc.get(name="cny", namespace=NS).to_dict().get("status") or {}).get("phase")
            == "Canary"
            and o
        ),
        120,
        "the controller records the canary",
    )
    assert "takes 50% of requests" in recorded["summary"]
    # nothing else changes it meanwhile
    for args in (["rollout", "cny", "--model", f"clf@{v1}"], ["scale", "cny", "--replicas", "2"]):
        res = serve(sandbox, *args)
        assert res.returncode == 2 and "waits for the canary of revision 2" in res.stderr

    # rollback ends it: the Service back on revision 1's RayService, the canary's deleted
    back = json.loads(serve(sandbox, "rollback", "cny", "-o", "json").stdout)
    assert (back["phase"], back["revision"], back["rollout"]) == ("Ready", 1, None)
    assert selected() == "1"
    wait_until(lambda: live() == {"cny-1"}, 60, "the canary's RayService deleted")
    assert "canary" not in tsvc.get(name="cny", namespace=NS).to_dict()["spec"]
    wait_until(lambda: gpus_used(dyn) == before + 1, 60, "the canary's GPU back in the queue")

    # with the queue full, a canary is refused with the numbers, and nothing is sent
    hog = project(tmp_path / "hog", "hog", replicas=1)
    assert serve(sandbox, "deploy", str(hog), "--target", "kube", "--no-wait").returncode == 0
    wait_until(lambda: gpus_used(dyn) == before + 2, 120, "another service holds the last GPU")
    res = serve(sandbox, "rollout", "cny", "--model", f"clf@{v2}", "--strategy", "canary")
    assert res.returncode == 3, res.stderr
    assert "the canary of revision 2 needs 1 GPU(s)" in res.stderr and "0 free" in res.stderr
    assert live() == {"cny-1"} and st(sandbox, "cny")["rollout"] is None
    assert serve(sandbox, "delete", "hog").returncode == 0
    wait_until(lambda: gpus_used(dyn) == before + 1, 60, "the GPU free again")

    # promote: the canary takes every request, the old RayService goes (no more quota needed)
    res = serve(
        sandbox, "rollout", "cny", "--model", f"clf@{v2}", "--strategy", "canary", "-o", "json"
    )
    assert res.returncode == 0 and json.loads(res.stdout)["phase"] == "Canary", res.stderr
    assert len(json.loads(res.stdout)["revisions"]) == 2  # revision 2 again, not a third
    g = int(tsvc.get(name="cny", namespace=NS).to_dict()["spec"]["canary"]["generation"])
    assert g > 1 and selected() == str(g)
    res = serve(sandbox, "promote", "cny", "-o", "json")
    assert res.returncode == 0, res.stderr
    up = json.loads(res.stdout)
    assert (up["phase"], up["revision"], up["model"]) == ("Ready", 2, f"clf@{v2[:19]}")
    wait_until(lambda: live() == {f"cny-{g}"}, 60, "only the promoted RayService is left")
    assert selected() == str(g)
    spec = tsvc.get(name="cny", namespace=NS).to_dict()["spec"]
    assert (spec["revision"], spec["generation"], spec.get("canary")) == (2, g, None)
    wait_until(lambda: gpus_used(dyn) == before + 1, 60, "one GPU held")
    assert serve(sandbox, "delete", "cny").returncode == 0
