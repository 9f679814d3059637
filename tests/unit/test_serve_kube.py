"""A service on a cluster, rendered: the RayService validates against KubeRay's real CRD
(strict), its pods against Kubernetes' schemas, the TauService against TauGrid's CRD; placement
is the runs' own (profiles, bounds, queue), and a revision pins its model in the workers."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import EXAMPLES, PROFILES
from k8s_schemas import crd_errors, k8s_errors, pod_template_errors

from taugrid.api import constants as C
from taugrid.api import serve as S
from taugrid.api.crds import render_crds
from taugrid.api.errors import TauError
from taugrid.runs import codebundle, load, resolve
from taugrid.serve import kube as K
from taugrid.serve import kuberender as KR

PIN = S.ModelPin(ref="iris@prod", name="iris", version="sha256:" + "c" * 64)


def revision(spec: S.ServiceSpec, n: int = 2) -> S.Revision:
    return S.Revision(
        number=n,
        created_at="2026-12-02T00:00:00Z",
        created_by="alice@lab",
        config_hash="sha256:" + "d" * 64,
        code_digest="sha256:e",
        model=PIN,
        spec=spec,
        source="/p/tau.yaml",
    )


def rendered(replicas: int = 2, **service: Any) -> tuple[resolve.Resolved, list[dict[str, Any]]]:
    loaded = load.load_manifest(EXAMPLES / "serve-model", purpose="service")
    spec = loaded.manifest.service
    assert spec is not None
    spec = spec.model_copy(update=service)
    m = KR.placement(loaded.manifest, spec, replicas)
    r = resolve.resolve(
        m,
        load.load_snapshot(PROFILES),
        workspace="research",
        profile="cpu" if spec.gpus == 0 else None,
    )
    bundle = codebundle.collect(loaded.folder)
    return r, KR.render(r, "iris", "/iris", revision(spec), bundle, replicas, "rolling", 3)


def test_the_objects_validate_against_kuberay_kubernetes_and_taugrid_schemas(
    upstream_crds: Path, tmp_path: Path
) -> None:
    _, (owner, cm, rs, front) = rendered()
    assert crd_errors(rs, upstream_crds / "kuberay" / "ray.io_rayservices.yaml", "v1") == []
    assert k8s_errors(cm) == [] and k8s_errors(front) == []
    cluster = rs["spec"]["rayClusterConfig"]
    for tpl in [cluster["headGroupSpec"]["template"]] + [
        g["template"] for g in cluster["workerGroupSpecs"]
    ]:
        assert pod_template_errors(tpl) == []
    crd = next(c for c in render_crds() if c["spec"]["names"]["kind"] == "TauService")
    path = tmp_path / "tauservice-crd.yaml"
    path.write_text(yaml.safe_dump(crd))
    assert crd_errors(owner, path, C.VERSION) == []


def test_kueue_can_admit_it_and_the_queue_and_labels_are_the_workspace_s() -> None:
    r, (owner, cm, rs, front) = rendered(replicas=3)
    assert rs["metadata"]["labels"][C.KUEUE_QUEUE_LABEL] == r.queue
    assert rs["metadata"]["namespace"] == owner["metadata"]["namespace"] == r.namespace
    cluster = rs["spec"]["rayClusterConfig"]
    assert cluster["enableInTreeAutoscaling"] is False  # Kueue admits fixed sizes only
    (workers,) = cluster["workerGroupSpecs"]
    assert (workers["replicas"], workers["minReplicas"], workers["maxReplicas"]) == (3, 3, 3)
    assert 1 + len(cluster["workerGroupSpecs"]) <= 8  # Kueue: at most 8 pod sets
    for tpl in [cluster["headGroupSpec"]["template"], workers["template"]]:
        assert tpl["metadata"]["labels"][C.LABEL_SERVICE] == "iris"
        assert tpl["metadata"]["labels"][C.LABEL_SERVICE_REVISION] == "2"
        assert C.LABEL_RUN_ID not in tpl["metadata"]["labels"]  # not a run's pod
    assert cm["metadata"]["labels"][C.LABEL_SERVICE] == "iris"
    head = cluster["headGroupSpec"]["template"]["spec"]["containers"][0]
    assert {"containerPort": KR.SERVE_PORT, "name": "serve"} in head["ports"]  # KubeRay needs it
    assert owner["spec"]["replicas"] == 3 and owner["spec"]["modelVersion"] == PIN.version
    # one RayService per generation, never changed in place; the stable Service selects the
    # serving generation's head
    assert rs["metadata"]["name"] == "iris-3" and rs["spec"]["upgradeStrategy"] == {"type": "None"}
    assert front["metadata"]["name"] == "iris"
    assert front["spec"]["selector"] == {
        C.LABEL_SERVICE: "iris",
        C.LABEL_SERVICE_GENERATION: "3",
        "ray.io/node-type": "head",
    }
    assert (
        cluster["headGroupSpec"]["template"]["metadata"]["labels"][C.LABEL_SERVICE_GENERATION]
        == "3"
    )


def test_the_workers_lay_out_the_pinned_model_before_ray_starts() -> None:
    _, (_, _, rs, _) = rendered()
    pod = rs["spec"]["rayClusterConfig"]["workerGroupSpecs"][0]["template"]["spec"]
    (init,) = pod["initContainers"]
    assert init["command"] == ["python", "/code/tau_inputs.py"]
    env = {e["name"]: e["value"] for e in init["env"]}
    assert json.loads(env["TAU_INPUTS"]) == [
        {"kind": "model", "name": "iris", "version": PIN.version, "path": "iris"}
    ]
    assert env["TAU_REGISTRY_DIR"] == "/data/registry" and env["TAU_INPUT_DIR"] == KR.MODEL_DIR
    worker_env = {e["name"]: e["value"] for e in pod["containers"][0]["env"]}
    assert worker_env["TAU_MODEL_DIR"] == "/model/iris"
    assert worker_env["TAU_MODEL_VERSION"] == PIN.version
    assert worker_env["PYTHONPATH"] == "/code"
    mounts = {m["name"]: m for m in pod["containers"][0]["volumeMounts"]}
    assert mounts["model"]["readOnly"] is True
    serve = yaml.safe_load(rs["spec"]["serveConfigV2"])
    (app,) = serve["applications"]
    assert (app["name"], app["route_prefix"], app["import_path"]) == (
        "iris",
        "/iris",
        "serve_app:app",
    )


def test_gpus_per_replica_are_placed_by_the_profiles() -> None:
    r, (_, _, rs, _) = rendered(replicas=2, gpus=1)
    assert r.profile.name == "a100x1" and r.gpus == 1
    pod = rs["spec"]["rayClusterConfig"]["workerGroupSpecs"][0]["template"]["spec"]
    assert pod["containers"][0]["resources"]["limits"][r.gpu_resource] == "1"
    assert pod["nodeSelector"] == dict(r.profile.nodeSelector)
    with pytest.raises(TauError, match="gpus"):
        rendered(replicas=1, gpus=3)  # no profile gives 3 GPUs a worker


def test_scale_to_zero_and_autoscaling_become_fixed_sizes() -> None:
    assert KR.replicas_of(S.Scale(replicas=0)) == 0
    assert KR.replicas_of(S.Scale()) == 1
    assert KR.replicas_of(S.Scale(autoscaling=S.Autoscaling(min_replicas=0, max_replicas=3))) == 3
    _, (_, _, rs, _) = rendered(replicas=0)
    assert rs["spec"]["rayClusterConfig"]["workerGroupSpecs"][0]["replicas"] == 0
    assert KR.upgrade_gpus(2, 4) == 8


def tauservice(status: dict[str, Any] | None = None, generation: int = 2) -> dict[str, Any]:
    return {
        "metadata": {
            "name": "iris",
            "namespace": "research",
            "creationTimestamp": "2026-12-02T00:00:00Z",
        },
        "spec": {
            "serviceName": "iris",
            "workspace": "research",
            "profile": "a100x1",
            "revision": 3,
            "modelRef": "iris@prod",
            "modelVersion": PIN.version,
            "configHash": "sha256:x",
            "replicas": 2,
            "routePrefix": "/iris",
            "generation": generation,
        },
        "status": status or {},
    }


def test_the_controller_s_view_of_a_service_comes_from_its_tauservice() -> None:
    rec = K.record_of(tauservice(), serving=1)
    assert (rec.name, rec.namespace, rec.serving, rec.generation, rec.pending_generation) == (
        "iris",
        "research",
        3,
        1,
        2,
    )
    assert rec.current.model is not None and rec.current.model.short == f"iris@{PIN.version[:19]}"
    assert rec.endpoint == "http://iris.research.svc:8000/iris"
    assert K.record_of(tauservice(), serving=2).pending_generation is None


def test_the_status_is_written_only_when_it_changes_with_a_line_per_phase() -> None:
    from taugrid.serve.status import Observed, compute

    ready = Observed(
        head_up=True, exists=True, status="RUNNING", revision=3, wanted=2, running=2, admitted=True
    )
    st = compute(K.record_of(tauservice(generation=1), serving=1), ready)
    body = K.status_body(tauservice(generation=1), st, "2026-12-02T00:01:00Z")
    assert body is not None and body["status"]["phase"] == "Ready"
    assert body["status"]["timeline"] == [
        {"at": "2026-12-02T00:01:00Z", "reason": "Ready", "message": st.summary}
    ]
    again = tauservice(status=body["status"], generation=1)
    assert K.status_body(again, st, "2026-12-02T00:02:00Z") is None  # quiet: nothing changed
    fewer = compute(
        K.record_of(again, serving=1),
        Observed(
            head_up=True,
            exists=True,
            status="RUNNING",
            revision=3,
            wanted=2,
            running=1,
            admitted=True,
        ),
    )
    moved = K.status_body(again, fewer, "2026-12-02T00:03:00Z")
    assert moved is not None and moved["status"]["replicasReady"] == 1
    assert len(moved["status"]["timeline"]) == 1  # same phase: no new line


# --- a canary on a cluster -----------------------------------------------------------------------
def canary_rendered(percent: int = 20) -> tuple[resolve.Resolved, list[dict[str, Any]]]:
    loaded = load.load_manifest(EXAMPLES / "serve-model", purpose="service")
    spec = loaded.manifest.service
    assert spec is not None
    m = KR.placement(loaded.manifest, spec, 1)
    r = resolve.resolve(m, load.load_snapshot(PROFILES), workspace="research", profile="cpu")
    plan = KR.CanaryPlan(stable_generation=4, stable_revision=2, percent=percent)
    objects = KR.render(
        r,
        "iris",
        "/iris",
        revision(spec, 3),
        codebundle.collect(loaded.folder),
        1,
        "canary",
        5,
        plan,
    )
    KR.canary_spec(
        objects[0], revision(spec, 2), plan, revision(spec, 3), 5, "2026-12-02T00:00:00Z"
    )
    return r, objects


def test_a_canary_generation_runs_the_revision_and_the_split_and_validates(
    upstream_crds: Path, tmp_path: Path
) -> None:
    r, (owner, cm, rs, _front) = canary_rendered(percent=20)
    assert crd_errors(rs, upstream_crds / "kuberay" / "ray.io_rayservices.yaml", "v1") == []
    crd = next(c for c in render_crds() if c["spec"]["names"]["kind"] == "TauService")
    path = tmp_path / "tauservice-crd.yaml"
    path.write_text(yaml.safe_dump(crd))
    assert crd_errors(owner, path, C.VERSION) == []
    apps = {a["name"]: a for a in yaml.safe_load(rs["spec"]["serveConfigV2"])["applications"]}
    assert set(apps) == {"iris.canary", "iris.split"}
    # the split holds the service's route; the canary answers behind it, on this proxy
    assert apps["iris.split"]["route_prefix"] == "/iris"
    assert apps["iris.canary"]["route_prefix"] == S.hidden_route("iris", "canary")
    args = apps["iris.split"]["args"]
    assert (
        args["canary_url"] == f"http://127.0.0.1:{KR.SERVE_PORT}{S.hidden_route('iris', 'canary')}"
    )
    # the serving revision answers on its own RayService's Serve Service (KubeRay names it)
    assert args["stable_url"] == f"http://iris-4-serve-svc.{r.namespace}.svc:{KR.SERVE_PORT}/iris"
    assert (args["stable_revision"], args["canary_revision"]) == (2, 3)
    assert apps["iris.split"]["deployments"] == [
        {"name": "Split", "user_config": {"canary_percent": 20}}
    ]
    module, _, _attr = apps["iris.split"]["import_path"].partition(":")
    assert f"{module}.py" in carried_files(cm, rs)
    # the TauService still describes the serving revision, and names the canary beside it
    assert owner["spec"]["revision"] == 2 and owner["spec"]["generation"] == 5
    assert owner["spec"]["canary"]["revision"] == 3
    assert owner["spec"]["canary"]["stableGeneration"] == 4
    assert rs["metadata"]["name"] == "iris-5"


def carried_files(cm: dict[str, Any], rs: dict[str, Any]) -> dict[str, str]:
    """The code the pods see: the ConfigMap's keys at the paths the code volume gives them."""
    pod = rs["spec"]["rayClusterConfig"]["headGroupSpec"]["template"]["spec"]
    (vol,) = [
        v
        for v in pod["volumes"]
        if (v.get("configMap") or {}).get("name") == cm["metadata"]["name"]
    ]
    return {it["path"]: cm["data"][it["key"]] for it in vol["configMap"]["items"]}


def test_the_split_carried_to_a_cluster_is_the_one_tau_runs_locally() -> None:
    _, (_, cm, rs, _) = canary_rendered()
    carried = carried_files(cm, rs).get(f"{S.SPLIT_MODULE}.py")
    local = (Path(K.__file__).with_name("split.py")).read_text()
    assert carried == local


def test_the_controller_keeps_a_canary_s_serving_generation_and_reads_the_canary() -> None:
    doc = tauservice(generation=5)
    doc["spec"]["canary"] = {
        "revision": 4,
        "percent": 30,
        "generation": 5,
        "stableGeneration": 2,
        "startedAt": "2026-12-02T00:00:00Z",
    }
    before = K.record_of(doc, serving=2)
    assert before.canary is not None and before.canary.routed is False
    assert (before.generation, before.pending_generation) == (2, None)
    after = K.record_of(doc, serving=5)
    assert after.canary is not None and after.canary.routed is True and after.serving == 3


@pytest.mark.parametrize(
    ("conditions", "admitted", "says"),
    [
        ([], None, ""),  # Kueue has not looked at it yet: not a refusal
        (
            [
                {
                    "type": "QuotaReserved",
                    "status": "True",
                    "message": "Quota reserved in ClusterQueue gpu",
                }
            ],
            None,
            "",
        ),  # being admitted
        (
            [{"type": "QuotaReserved", "status": "True"}, {"type": "Admitted", "status": "True"}],
            True,
            "",
        ),
        (
            [
                {
                    "type": "QuotaReserved",
                    "status": "False",
                    "reason": "Pending",
                    "message": "couldn't assign flavors to pod set workers: insufficient unused "
                    "quota for "
                    "nvidia.com/gpu in flavor a100x1, 1 more needed",
                }
            ],
            False,
            "1 more GPU",
        ),
    ],
)
def test_a_service_waits_only_when_kueue_said_it_cannot_admit_it(
    conditions: list[dict[str, str]], admitted: bool | None, says: str
) -> None:
    """`tau serve` stops waiting on "Waiting": only Kueue's refusal may say so, never a workload
    Kueue has not evaluated yet (a race CI found: a scale gave up on a service about to start)."""
    rs = {"metadata": {"name": "clf-3"}}
    workload = {
        "metadata": {"name": "w", "ownerReferences": [{"kind": "RayService", "name": "clf-3"}]},
        "status": {"conditions": conditions},
    }
    got, why = K.KubeServe._admission(None, rs, [workload], "research")  # type: ignore[arg-type]
    assert got is admitted and (says in why) and (bool(why) == (admitted is False))


def test_a_service_on_simulated_nodes_is_said_to_answer_nothing_one_on_real_nodes_is_not() -> None:
    """KWOK's nodes carry its annotation and run no container; the sandbox's real nodes (and any
    cluster's) do not: only there is the note left out."""
    from taugrid.kube.fake import FakeKube

    def pod(node: str) -> dict[str, Any]:
        return {
            "metadata": {"name": f"p-{node}", "namespace": "research"},
            "spec": {"nodeName": node},
        }

    nodes = [
        {"metadata": {"name": "a100x1-0", "annotations": {K.KWOK_NODE_ANNOTATION: "fake"}}},
        {"metadata": {"name": "cpu-0", "labels": {"type": "real"}}},
    ]
    ks = K.KubeServe(kube=FakeKube({"Node": nodes}))
    assert ks._simulated([pod("a100x1-0")]) is True
    assert ks._simulated([pod("cpu-0")]) is False
    assert ks._simulated([]) is False


def test_a_cluster_service_bounds_its_requests_at_the_ingress_it_was_found_to_have() -> None:
    """As locally: max_ongoing_requests and max_queued_requests on the ingress deployment (its
    name found by importing the application at deploy); a revision whose import could not be
    done here leaves Ray Serve's defaults rather than naming a deployment that may not exist."""
    spec = S.ServiceSpec(import_path="serve_app:app", max_ongoing_requests=7, max_queued_requests=3)
    found = revision(spec).model_copy(update={"ingress": "Classifier"})
    app = KR.serve_config("iris", "/iris", found)["applications"][0]
    assert app["deployments"] == [
        {"name": "Classifier", "max_ongoing_requests": 7, "max_queued_requests": 3}
    ]
    unknown = KR.serve_config("iris", "/iris", revision(spec))["applications"][0]
    assert "deployments" not in unknown
