"""Rendering: every example -> objects that match the run contract and the real schemas."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from conftest import EXAMPLE_DIRS, PROFILES
from hypothesis import given, settings
from hypothesis import strategies as st
from k8s_schemas import crd_errors, k8s_errors, pod_template_errors

from taugrid.api import constants as C
from taugrid.api import naming
from taugrid.runs import codebundle, load, render, resolve


def render_example(folder: Path, **kw: Any) -> tuple[resolve.Resolved, list[dict[str, Any]]]:
    loaded = load.load_manifest(folder)
    snap = load.load_snapshot(PROFILES)
    r = resolve.resolve(loaded.manifest, snap, **kw)
    run_id = naming.new_run_id(loaded.manifest.run_id_stem)
    meta = render.RunMeta(run_id=run_id, submitter="alice@laptop", code_revision="abc123")
    return r, render.render(r, meta, codebundle.collect(loaded.folder))


def pod_templates(workload: dict[str, Any]) -> list[dict[str, Any]]:
    if workload["kind"] == "RayJob":
        spec = workload["spec"]["rayClusterSpec"]
        return [spec["headGroupSpec"]["template"]] + [
            g["template"] for g in spec["workerGroupSpecs"]
        ]
    return [workload["spec"]["template"]]


@pytest.fixture(params=EXAMPLE_DIRS, ids=lambda p: p.name)
def example(request: pytest.FixtureRequest) -> tuple[resolve.Resolved, list[dict[str, Any]]]:
    return render_example(request.param)


def test_every_example_is_present() -> None:
    names = {p.name for p in EXAMPLE_DIRS}
    assert {"quickstart", "cpu-multi-interest-ray", "batch-job", "multi-worker-gpu"} <= names


def test_objects_validate_against_upstream_and_kubernetes_schemas(
    example: tuple[resolve.Resolved, list[dict[str, Any]]], upstream_crds: Path
) -> None:
    _, objs = example
    cm, *between, workload = objs  # between: a multi-node torchrun job's Service
    assert cm["kind"] == "ConfigMap"
    assert k8s_errors(cm) == []
    assert [o["kind"] for o in between] in ([], ["Service"])
    assert all(k8s_errors(o) == [] for o in between)
    if workload["kind"] == "RayJob":
        assert crd_errors(workload, upstream_crds / "kuberay" / "ray.io_rayjobs.yaml", "v1") == []
    else:
        assert k8s_errors(workload) == []
    for tpl in pod_templates(workload):
        assert pod_template_errors(tpl) == []


def _code_files(objs: list[dict[str, Any]], volume: dict[str, Any]) -> dict[str, str]:
    """What a pod finds under /code: path -> content, read through the `code` volume's source
    from the ConfigMaps it names (a plain ConfigMap volume or a projected one)."""
    by_name = {o["metadata"]["name"]: o for o in objs if o["kind"] == "ConfigMap"}
    sources = volume["projected"]["sources"] if "projected" in volume else [volume]
    out: dict[str, str] = {}
    for src in sources:
        cm = by_name[src["configMap"]["name"]]
        for item in src["configMap"]["items"]:
            assert item["path"] not in out, f"{item['path']} laid out twice"
            out[item["path"]] = {**cm.get("data", {}), **cm.get("binaryData", {})}[item["key"]]
    return out


@pytest.mark.parametrize("folder", EXAMPLE_DIRS, ids=lambda p: p.name)
def test_shared_helpers_lay_out_the_same_code_folder(folder: Path, upstream_crds: Path) -> None:
    """With the helpers in a namespace's shared ConfigMap, every pod finds the same files under
    /code as with one ConfigMap per run; the run's holds the folder's files only, the shared one
    is named by its content, owned by no run, and every object is valid."""
    loaded = load.load_manifest(folder)
    r = resolve.resolve(loaded.manifest, load.load_snapshot(PROFILES))
    meta = render.RunMeta(run_id=naming.new_run_id(loaded.manifest.run_id_stem))
    bundle = codebundle.collect(loaded.folder)
    inline = render.render(r, meta, bundle)
    shared = render.render(r, meta, bundle, shared_helpers=True)
    helpers_cm, run_cm, *_ = shared
    assert render.is_shared(helpers_cm) and not render.is_shared(run_cm)
    assert not any(render.is_shared(o) for o in inline)
    assert "ownerReferences" not in helpers_cm["metadata"]
    helper_names = {f"{m}.py" for m in codebundle.HELPER_MODULES}
    assert set(helpers_cm["data"]) == helper_names  # (no example has a helper of its own)
    assert helpers_cm["metadata"]["name"].startswith("tau-helpers-")
    other = render.render(r, render.RunMeta(run_id="other-aaaaa"), bundle, shared_helpers=True)
    assert other[0] == helpers_cm  # the same for every run: one per namespace
    run_paths = {i["path"] for i in _run_items(shared, run_cm)}
    assert not run_paths & set(helpers_cm["data"])
    for a, b in zip(pod_templates(inline[-1]), pod_templates(shared[-1]), strict=True):
        va = next(v for v in a["spec"]["volumes"] if v["name"] == "code")
        vb = next(v for v in b["spec"]["volumes"] if v["name"] == "code")
        assert _code_files(inline, va) == _code_files(shared, vb)
        assert pod_template_errors(b) == []
    for obj in shared[:2]:
        assert k8s_errors(obj) == []
    if shared[-1]["kind"] == "RayJob":
        crd = upstream_crds / "kuberay" / "ray.io_rayjobs.yaml"
        assert crd_errors(shared[-1], crd, "v1") == []
    else:
        assert k8s_errors(shared[-1]) == []


def _run_items(objs: list[dict[str, Any]], run_cm: dict[str, Any]) -> list[dict[str, str]]:
    tpl = pod_templates(objs[-1])[0]
    code = next(v for v in tpl["spec"]["volumes"] if v["name"] == "code")
    return [
        i
        for s in code["projected"]["sources"]
        if s["configMap"]["name"] == run_cm["metadata"]["name"]
        for i in s["configMap"]["items"]
    ]


def test_a_folders_own_helper_wins_over_the_shared_one(tmp_path: Path) -> None:
    """A folder with its own tau_run.py: the shared ConfigMap leaves it out (another content,
    another name) and the pod finds the folder's copy."""
    src = EXAMPLE_DIRS[0]
    import shutil

    shutil.copytree(src, tmp_path / "p")
    (tmp_path / "p" / "tau_run.py").write_text("# mine\n")
    loaded = load.load_manifest(tmp_path / "p")
    r = resolve.resolve(loaded.manifest, load.load_snapshot(PROFILES))
    meta = render.RunMeta(run_id="mine-aaaaa")
    objs = render.render(r, meta, codebundle.collect(loaded.folder), shared_helpers=True)
    stock = render.render(
        *render_example(src)[:1], meta, codebundle.collect(src), shared_helpers=True
    )
    assert "tau_run.py" not in objs[0]["data"] and "tau_run.py" in stock[0]["data"]
    assert objs[0]["metadata"]["name"] != stock[0]["metadata"]["name"]
    tpl = pod_templates(objs[-1])[0]
    code = next(v for v in tpl["spec"]["volumes"] if v["name"] == "code")
    assert _code_files(objs, code)["tau_run.py"] == "# mine\n"


def test_labels_on_workload_and_every_pod_template(
    example: tuple[resolve.Resolved, list[dict[str, Any]]],
) -> None:
    r, (*_, workload) = example
    run_id = workload["metadata"]["name"]
    want = {
        C.LABEL_RUN_ID: run_id,
        C.LABEL_RUN_NAME: r.manifest.name,
        C.LABEL_WORKSPACE: r.workspace.name,
        C.LABEL_PROFILE: r.profile.name,
        C.KUEUE_QUEUE_LABEL: r.profile.localQueue,
        C.KUEUE_PRIORITY_LABEL: r.profile.defaultPriority,
    }
    for labels in [workload["metadata"]["labels"]] + [
        t["metadata"]["labels"] for t in pod_templates(workload)
    ]:
        assert {k: labels.get(k) for k in want} == want
    ann = workload["metadata"]["annotations"]
    assert ann[C.ANN_CONFIG_HASH].startswith("sha256:")
    assert ann[C.ANN_SUBMITTER] == "alice@laptop"
    assert ann[C.ANN_CODE_REVISION] == "abc123"


def test_suspended_and_named_within_kuberay_limit(
    example: tuple[resolve.Resolved, list[dict[str, Any]]],
) -> None:
    _, (*_, workload) = example
    assert workload["spec"]["suspend"] is True
    assert len(workload["metadata"]["name"]) <= 47
    assert workload["metadata"]["namespace"] == "research"


def _env(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}


def test_env_contract_and_data_volume(
    example: tuple[resolve.Resolved, list[dict[str, Any]]],
) -> None:
    r, (cm, *_, workload) = example
    run_id = workload["metadata"]["name"]
    for tpl in pod_templates(workload):
        spec = tpl["spec"]
        vols = {v["name"]: v for v in spec["volumes"]}
        assert vols["data"]["persistentVolumeClaim"]["claimName"] == r.workspace.pvc
        assert vols["code"]["configMap"]["name"] == cm["metadata"]["name"]
        for c in spec["containers"]:
            mounts = {m["mountPath"]: m["name"] for m in c["volumeMounts"]}
            assert mounts["/data"] == "data"
            env = _env(c)
            assert env["TAU_RUN_ID"] == run_id
            assert env["TAU_RUN_NAME"] == r.manifest.name
            assert env["TAU_WORKSPACE"] == "research"
            assert env["TAU_DATA_DIR"] == "/data"
            assert env["TAU_RUN_DIR"] == f"/data/runs/{run_id}"
            assert env["TAU_CHECKPOINT_DIR"].startswith(f"/data/runs/{run_id}/")
            assert env["TAU_OUTPUT_DIR"].startswith(f"/data/runs/{run_id}/")
            assert env["TAU_METRICS_FILE"] == f"/data/runs/{run_id}/metrics.jsonl"
            assert env["TAU_NUM_WORKERS"] == str(r.manifest.compute.workers)
            assert env["TAU_GPUS_PER_WORKER"] == str(r.manifest.compute.gpus)
            assert "TAU_RESUME_FROM" not in env


def test_rayjob_shape_quickstart() -> None:
    r, (_, rj) = render_example(Path(EXAMPLE_DIRS[0]).parent / "quickstart")
    spec = rj["spec"]
    assert spec["shutdownAfterJobFinishes"] is True
    assert spec["ttlSecondsAfterFinished"] == 0
    assert "clusterSelector" not in spec and "deletionStrategy" not in spec
    rc = spec["rayClusterSpec"]
    head = rc["headGroupSpec"]
    assert head["rayStartParams"]["num-gpus"] == "0"
    assert head["rayStartParams"]["num-cpus"] == "0"
    head_c = head["template"]["spec"]["containers"][0]
    assert C.GPU_RESOURCE not in head_c["resources"]["limits"]
    assert "tolerations" not in head["template"]["spec"]
    (group,) = rc["workerGroupSpecs"]
    assert group["groupName"] != "head"
    assert group["replicas"] == group["minReplicas"] == group["maxReplicas"] == 1
    worker_c = group["template"]["spec"]["containers"][0]
    # 1 GPU requested and limited; sized as written (cpus: 16, memory: 64Gi).
    assert worker_c["resources"]["limits"][C.GPU_RESOURCE] == "1"
    assert worker_c["resources"]["requests"][C.GPU_RESOURCE] == "1"
    assert worker_c["resources"]["requests"]["cpu"] == "16"
    assert worker_c["resources"]["requests"]["memory"] == "64Gi"
    tol = group["template"]["spec"]["tolerations"]
    assert {"key": "sku", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"} in tol
    assert group["template"]["spec"]["nodeSelector"][C.LABEL_GPU_CLASS] == "a100-80gb"
    assert r.profile.name == "a100x1"
    # pip goes to Ray's runtime env, quoted as YAML (items may contain '>' and ':').
    import yaml

    assert yaml.safe_load(spec["runtimeEnvYAML"]) == {"pip": ["torch>=2.4.0"]}
    assert _env(worker_c)["RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO"] == "0"


def test_rayjob_multi_worker_replicas_and_gpus() -> None:
    folder = EXAMPLE_DIRS[0].parent / "multi-worker-gpu"
    r, (_, rj) = render_example(folder)
    (group,) = rj["spec"]["rayClusterSpec"]["workerGroupSpecs"]
    assert group["replicas"] == group["minReplicas"] == group["maxReplicas"] == 2
    assert group["rayStartParams"]["num-gpus"] == "2"
    c = group["template"]["spec"]["containers"][0]
    assert c["resources"]["limits"][C.GPU_RESOURCE] == "2"
    assert c["resources"]["requests"]["cpu"] == "8"
    assert r.profile.name == "a100x2"
    env = _env(c)
    assert env["TAU_CHECKPOINT_DIR"].endswith("/checkpoints")
    assert env["TAU_WORLD_SIZE"] == "4"


def test_job_shape() -> None:
    folder = EXAMPLE_DIRS[0].parent / "batch-job"
    _r, (_, job) = render_example(folder)
    assert job["apiVersion"] == "batch/v1" and job["kind"] == "Job"
    spec = job["spec"]
    assert spec["backoffLimit"] == 0 and spec["completions"] == 1
    pod = spec["template"]["spec"]
    assert pod["restartPolicy"] == "Never"
    (c,) = pod["containers"]
    assert C.GPU_RESOURCE not in c["resources"]["limits"]
    assert "score.py" in c["command"][-1] and "--rows 5000" in c["command"][-1]
    assert _env(c)["SCORE_THRESHOLD"] == "0.5"


def test_code_configmap_carries_the_folder(
    example: tuple[resolve.Resolved, list[dict[str, Any]]],
) -> None:
    r, (cm, *_, workload) = example
    items = pod_templates(workload)[0]["spec"]["volumes"][1]["configMap"]["items"]
    paths = {i["path"] for i in items}
    assert r.manifest.entrypoint_path in paths
    assert {i["key"] for i in items} == set(cm["data"]) | set(cm.get("binaryData", {}))
    assert cm["immutable"] is True


def test_run_ids_are_unique_and_dns_safe() -> None:
    import re

    ids = {naming.new_run_id("tau-aks-gpu-quickstart") for _ in range(2000)}
    # 36^5 suffixes: a repeat among 2000 draws happens ~3% of the time (the birthday bound),
    # more than a handful essentially never; a broken generator repeats far more.
    assert len(ids) >= 1995
    assert all(re.fullmatch(r"tau-aks-gpu-quickstart-[a-z0-9]{5}", i) for i in ids)
    # every position draws from the whole alphabet (one missing among 2000: ~36 * e^-56)
    for pos in range(5):
        assert {i[-5 + pos] for i in ids} == set("abcdefghijklmnopqrstuvwxyz0123456789")


def test_longest_allowed_name_renders_within_47(tmp_path: Path) -> None:
    from taugrid.api.manifest import max_name_length

    name = "a" * max_name_length("tau")
    (tmp_path / "train.py").write_text("print('hi')\n")
    (tmp_path / "tau.yaml").write_text(
        f"schema_version: 1\nname: {name}\nresource_naming: {{prefix: tau}}\nrun: {{entrypoint: "
        "train.py}\n"
        "compute: {gpus: 1}\n"
    )
    loaded = load.load_manifest(tmp_path)
    r = resolve.resolve(loaded.manifest, load.load_snapshot(PROFILES))
    rid = naming.new_run_id(loaded.manifest.run_id_stem)
    objs = render.render(r, render.RunMeta(run_id=rid), codebundle.collect(tmp_path))
    assert len(objs[1]["metadata"]["name"]) == 47


def test_resume_sets_env_and_annotation() -> None:
    folder = EXAMPLE_DIRS[0].parent / "multi-worker-gpu"
    loaded = load.load_manifest(folder)
    r = resolve.resolve(loaded.manifest, load.load_snapshot(PROFILES))
    meta = render.RunMeta(
        run_id="multi-worker-gpu-zzzzz", resume_from="/data/runs/x/checkpoints/step-000010"
    )
    _, rj = render.render(r, meta, codebundle.collect(folder))
    assert rj["metadata"]["annotations"][C.ANN_RESUME_FROM].endswith("step-000010")
    for tpl in pod_templates(rj):
        assert _env(tpl["spec"]["containers"][0])["TAU_RESUME_FROM"].endswith("step-000010")


def test_secret_env_is_a_reference_only(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text("")
    (tmp_path / "tau.yaml").write_text(
        "schema_version: 1\nname: s\nrun: {entrypoint: train.py}\ncompute: {gpus: 1}\n"
        "runtime: {env_from_secret: {HF_TOKEN: 'hf:token'}}\n"
    )
    loaded = load.load_manifest(tmp_path)
    r = resolve.resolve(loaded.manifest, load.load_snapshot(PROFILES))
    _, job = render.render(r, render.RunMeta(run_id="s-aaaaa"), codebundle.collect(tmp_path))
    c = job["spec"]["template"]["spec"]["containers"][0]
    assert _env(c)["HF_TOKEN"] == {"secretKeyRef": {"name": "hf", "key": "token"}}


def test_oracles_reject_broken_objects(upstream_crds: Path) -> None:
    """The schema checks above can fail: misspelt fields and wrong types are caught."""
    import copy

    _, (cm, rj) = render_example(EXAMPLE_DIRS[0].parent / "quickstart")
    crd = upstream_crds / "kuberay" / "ray.io_rayjobs.yaml"
    bad = copy.deepcopy(rj)
    bad["spec"]["shutdownAfterJobFinished"] = True  # misspelt
    assert crd_errors(bad, crd, "v1")
    bad = copy.deepcopy(rj)
    bad["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["replicas"] = "one"
    assert crd_errors(bad, crd, "v1")
    tpl = copy.deepcopy(rj["spec"]["rayClusterSpec"]["headGroupSpec"]["template"])
    tpl["spec"]["containers"][0]["volumeMount"] = []
    assert pod_template_errors(tpl)
    bad_cm = copy.deepcopy(cm)
    bad_cm["data"] = {"f0": 3}
    assert k8s_errors(bad_cm)


@pytest.mark.parametrize(
    ("retry_on", "expected"),
    [
        # the default: node faults, evictions and preemptions are retried; code errors are not
        (None, {"DisruptionTarget": "Count", "137": "FailJob", "not 0": "FailJob"}),
        (["Failed"], {"DisruptionTarget": "FailJob", "137": "FailJob", "not 0": "Count"}),
        (
            ["OOMKilled", "NodeFailure"],
            {"DisruptionTarget": "Count", "137": "Count", "not 0": "FailJob"},
        ),
    ],
)
def test_a_jobs_retries_follow_resilience(
    tmp_path: Path, retry_on: list[str] | None, expected: dict[str, str]
) -> None:
    folder = EXAMPLE_DIRS[0].parent / "batch-job"
    text = (folder / "tau.yaml").read_text()
    res = {"max_retries": 3, **({"retry_on": retry_on} if retry_on is not None else {})}
    import yaml

    doc = yaml.safe_load(text)
    doc["resilience"] = res
    (tmp_path / "tau.yaml").write_text(yaml.safe_dump(doc))
    (tmp_path / "score.py").write_text("print(1)\n")
    _r, (_, job) = render_example(tmp_path)
    assert k8s_errors(job) == []
    spec = job["spec"]
    assert spec["backoffLimit"] == 3
    got = {}
    for rule in spec["podFailurePolicy"]["rules"]:
        if "onPodConditions" in rule:
            got[rule["onPodConditions"][0]["type"]] = rule["action"]
        elif rule["onExitCodes"]["operator"] == "In":
            got[str(rule["onExitCodes"]["values"][0])] = rule["action"]
        else:
            got["not 0"] = rule["action"]
    assert got == expected
    # the first matching rule decides: an evicted pod is judged as a disruption, not by its code
    assert "onPodConditions" in spec["podFailurePolicy"]["rules"][0]


def test_no_retries_no_failure_policy() -> None:
    _r, (_, job) = render_example(EXAMPLE_DIRS[0].parent / "batch-job")
    assert job["spec"]["backoffLimit"] == 0 and "podFailurePolicy" not in job["spec"]


# --- torchrun: a pod per node ---------------------------------------------------------------------
def torchrun(
    tmp_path: Path, nodes: int, extra: str = "", **kw: Any
) -> tuple[resolve.Resolved, list[dict[str, Any]]]:
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "train.py").write_text("print('ddp')\n")
    (tmp_path / "tau.yaml").write_text(
        f"schema_version: 1\nname: ddp\nrun: {{entrypoint: train.py, launcher: torchrun}}\n"
        f"compute: {{gpus: 1, workers: {nodes}}}\n{extra}"
    )
    return render_example(tmp_path, **kw)


def test_a_multi_node_torchrun_job_is_one_indexed_job_a_pod_per_host(tmp_path: Path) -> None:
    from taugrid.kube import ceiling

    r, objs = torchrun(tmp_path, 4)
    assert [o["kind"] for o in objs] == ["ConfigMap", "Service", "Job"]
    _, svc, job = objs
    assert k8s_errors(svc) == [] and k8s_errors(job) == []
    assert pod_template_errors(job["spec"]["template"]) == []
    spec = job["spec"]
    assert (spec["completionMode"], spec["completions"], spec["parallelism"]) == ("Indexed", 4, 4)
    assert spec["suspend"] is True  # Kueue admits it: all four pods, or none (one pod set)
    sets = ceiling.podsets([job])
    assert len(sets) == 1 and sets[0].count == 4
    pod = spec["template"]["spec"]
    run_id = job["metadata"]["name"]
    # one pod per host
    (term,) = pod["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert term["topologyKey"] == "kubernetes.io/hostname"
    assert term["labelSelector"]["matchLabels"] == {C.LABEL_RUN_ID: run_id}
    assert spec["template"]["metadata"]["labels"][C.LABEL_RUN_ID] == run_id
    # index 0 answers at a stable name through the headless Service
    assert svc["spec"]["clusterIP"] == "None" and svc["spec"]["publishNotReadyAddresses"] is True
    assert svc["spec"]["selector"] == {C.LABEL_RUN_ID: run_id}
    assert pod["subdomain"] == svc["metadata"]["name"]
    env = _env(pod["containers"][0])
    assert env["MASTER_ADDR"] == f"{run_id}-0.{svc['metadata']['name']}.{r.namespace}.svc"
    assert env["TAU_NODES"] == "4" and env["TAU_NPROC_PER_NODE"] == "1"
    assert env["TAU_WORLD_SIZE"] == "4"
    assert "tau_launch.py --torchrun -- train.py" in pod["containers"][0]["command"][-1]
    assert not any(k.startswith("kueue.x-k8s.io/") for k in svc["metadata"]["labels"])


def test_one_node_torchrun_is_a_plain_job_and_nodes_above_the_profile_are_refused(
    tmp_path: Path,
) -> None:
    from taugrid.api.errors import TauError

    _, objs = torchrun(tmp_path / "one", 1)
    assert [o["kind"] for o in objs] == ["ConfigMap", "Job"]
    assert objs[1]["spec"].get("completionMode") is None
    with pytest.raises(
        TauError, match=r"compute.workers=9 exceeds profile a100x1: at most 8 nodes"
    ):
        torchrun(tmp_path / "nine", 9, profile="a100x1")


def test_a_sweep_s_rayjob_runs_tau_s_driver_with_the_tune_block() -> None:
    import json

    folder = EXAMPLE_DIRS[0].parent / "tune-sweep"
    r, (_, rayjob) = render_example(folder)
    assert rayjob["kind"] == "RayJob"
    head = rayjob["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]["containers"][0]
    env = _env(head)
    assert env["TAU_LAUNCHER"] == "ray-tune" and env["TAU_RAY_FUNCTION"] == "objective"
    tune = json.loads(env["TAU_TUNE"])
    assert tune["metric"] == "loss" and tune["num_samples"] == 8 and tune["scheduler"] == "asha"
    assert tune["search_space"]["lr"] == {"loguniform": [0.001, 1.0]}
    assert (
        "tau_launch.py --container-log -- python tau_ray.py objective.py"
        in rayjob["spec"]["entrypoint"]
    )
    items = pod_templates(rayjob)[0]["spec"]["volumes"][1]["configMap"]["items"]
    assert "tau_ray.py" in {i["path"] for i in items}  # the driver travels with the code
    (workers,) = rayjob["spec"]["rayClusterSpec"]["workerGroupSpecs"]
    assert workers["replicas"] == r.workers == 2  # Tune's concurrency comes from compute


def test_the_original_s_execution_spellings_make_the_same_sweep(tmp_path: Path) -> None:
    from taugrid.api.manifest import Manifest

    base = {"schema_version": 1, "name": "x", "run": {"entrypoint": "o.py", "launcher": "ray-tune"}}
    mine = Manifest.model_validate(
        {
            **base,
            "tune": {
                "metric": "acc",
                "mode": "max",
                "num_samples": 4,
                "max_concurrent": 2,
                "search_space": {"lr": 0.1},
            },
        }
    )
    theirs = Manifest.model_validate(
        {
            **base,
            "execution": {
                "metric": "acc",
                "mode": "max",
                "num_samples": 4,
                "max_concurrent_trials": 2,
                "configs": {"lr": 0.1},
            },
        }
    )
    assert mine.sweep() == theirs.sweep() and theirs.workload_kind() == "rayjob"


@settings(max_examples=300, deadline=None)
@given(st.lists(st.text(max_size=40), max_size=5))
def test_pip_requirements_read_back_as_written(pip: list[str]) -> None:
    """Ray reads runtimeEnvYAML with a YAML parser: any list of requirements reads back as it
    was, whichever way it was written (as JSON strings, or by the YAML emitter)."""
    import yaml

    assert yaml.safe_load(render.pip_yaml(pip)) == {"pip": pip}


def test_submitter_is_the_user_at_the_host_socket_names(monkeypatch: pytest.MonkeyPatch) -> None:
    # The host is read from uname (no socket import on a render); it must be the name
    # socket.gethostname gives, the one the record always carried.
    import socket

    from taugrid.runs import provenance

    monkeypatch.setenv("LOGNAME", "alice")
    assert provenance.submitter() == f"alice@{socket.gethostname()}"


def test_the_ray_head_is_sized_as_the_platform_says_and_a_bad_size_is_refused() -> None:
    from pydantic import ValidationError

    from taugrid.api.platform import derive_profiles
    from taugrid.api.profiles import HeadSize, ProfileSnapshot, profile_set_hash
    from taugrid.infra.stackfile import validated
    from taugrid.sandbox.cluster import SANDBOX_HEAD, for_real_nodes

    folder = Path(EXAMPLE_DIRS[0]).parent / "quickstart"
    snap = load.load_snapshot(PROFILES)
    # a snapshot taken before the head was a setting keeps its hash (the default head is left out)
    assert all(p.head == HeadSize() for p in snap.profiles)
    assert snap.profileSetHash == profile_set_hash(list(snap.profiles))
    small = HeadSize(cpu="250m", memory="1Gi", cpuLimit=1, memoryLimit="2Gi")
    profiles = [p.model_copy(update={"head": small}) for p in snap.profiles]
    assert profile_set_hash(profiles) != profile_set_hash(list(snap.profiles))
    sized = ProfileSnapshot.model_validate(
        {
            **snap.model_dump(),
            "profiles": [p.model_dump() for p in profiles],
            "profileSetHash": None,
        }
    )
    loaded = load.load_manifest(folder)
    r = resolve.resolve(loaded.manifest, sized)
    meta = render.RunMeta(run_id="q-abcde", submitter="a@b", code_revision="abc")
    rj = render.render(r, meta, codebundle.collect(loaded.folder))[-1]
    head_c = rj["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]["containers"][0]
    assert head_c["resources"]["requests"] == {"cpu": "250m", "memory": "1Gi"}
    assert head_c["resources"]["limits"] == {"cpu": "1", "memory": "2Gi"}
    with pytest.raises(ValidationError, match="below the request"):
        HeadSize(cpu=2, cpuLimit=1)
    with pytest.raises(ValidationError, match="below the request"):
        HeadSize(memory="8Gi", memoryLimit="1Gi")
    with pytest.raises(ValidationError):
        HeadSize(cpu="lots")
    # the platform's rayHead reaches every profile; real sandbox nodes shrink only a default head
    cfg = validated("sandbox", Path(__file__).parents[2] / "stacks")
    assert {p.head for p in derive_profiles(cfg)} == {HeadSize()}
    assert {p.head for p in derive_profiles(for_real_nodes(cfg))} == {SANDBOX_HEAD}
    own = cfg.model_copy(update={"rayHead": small})
    own = own.model_validate(own.model_dump())  # as if the stack file set it
    assert {p.head for p in derive_profiles(for_real_nodes(own))} == {small}
