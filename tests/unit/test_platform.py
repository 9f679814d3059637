"""The platform program under pulumi.runtime.set_mocks: every stack, the inputs that matter."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from conftest import EXAMPLES, ROOT
from k8s_schemas import as_json_schema, crd_errors

from taugrid.api import constants as C
from taugrid.api.crds import render_crds
from taugrid.api.platform import CHARTS, derive_profiles
from taugrid.api.profiles import ProfileSnapshot
from taugrid.infra.stackfile import validated
from taugrid.runs import codebundle, load, render, resolve

pulumi = pytest.importorskip("pulumi", reason="the platform extra (pulumi) is not installed")
from taugrid.components import manifests  # noqa: E402
from taugrid.infra import plan  # noqa: E402

STACKS = sorted(p.name.split(".")[1] for p in (ROOT / "stacks").glob("Pulumi.*.yaml"))


@cache
def inventory(stack: str) -> plan.Inventory:
    return plan.evaluate(stack, validated(stack))


def of_type(inv: plan.Inventory, suffix: str) -> list[plan.Resource]:
    return [r for r in inv.resources if r.type.endswith(suffix)]


def k8s_kind(inv: plan.Inventory, kind: str) -> list[dict[str, Any]]:
    return [
        r.inputs
        for r in inv.resources
        if r.type.startswith("kubernetes:") and r.type.endswith(f":{kind}")
    ]


def one(items: list[Any]) -> Any:
    assert len(items) == 1, items
    return items[0]


def test_the_stacks_exist() -> None:
    assert STACKS == ["ci", "dev", "prod", "sandbox", "staging"]
    # the sandbox stack ships with tau (for `tau sandbox up` anywhere); stacks/ links to it
    from taugrid.sandbox.cluster import PACKAGED_STACKS

    assert (ROOT / "stacks" / "Pulumi.sandbox.yaml").resolve() == (
        PACKAGED_STACKS / "Pulumi.sandbox.yaml"
    ).resolve()


@pytest.mark.parametrize("stack", STACKS)
def test_every_stack_evaluates_with_explicit_providers_and_parents(stack: str) -> None:
    inv = inventory(stack)
    assert len(inv.resources) > 30
    platform = one([r for r in inv.resources if r.type == "taugrid:platform:Platform"])
    for r in inv.resources:
        if r is platform:
            continue
        assert r.parent, f"{r.key()} is not parented"
        if r.type.startswith(("kubernetes:", "azure-native:")) and not r.type.startswith(
            "pulumi:providers"
        ):
            assert r.provider, f"{r.key()} uses a default provider"
    assert {"profiles", "workspaceNamespaces", "profileSnapshot", "versions"} <= set(inv.exports)
    aks = bool(of_type(inv, "containerservice:ManagedCluster"))
    assert ("kubeconfig" in inv.exports) == aks


def test_prod_pools_vm_sizes_taints_labels_driver() -> None:
    inv = inventory("prod")
    pools = {r.name: r.inputs for r in of_type(inv, "containerservice:AgentPool")}
    assert set(pools) == {"h100x8", "a100x1", "a100x2", "cpu"}
    h100 = pools["h100x8"]
    assert h100["vmSize"] == "Standard_ND96isr_H100_v5"
    assert (h100["minCount"], h100["maxCount"], h100["enableAutoScaling"]) == (0, 4, True)
    # a GPU node registers kept from work until the controller has validated it
    assert h100["nodeTaints"] == ["sku=gpu:NoSchedule", f"{C.VALIDATING_TAINT}=passive:NoSchedule"]
    assert h100["nodeLabels"] == {C.LABEL_POOL: "h100x8", C.LABEL_GPU_CLASS: "h100-80gb"}
    assert h100["gpuProfile"] == {"driver": "None"}  # the GPU Operator installs the driver
    assert pools["a100x1"]["availabilityZones"] == ["1", "2", "3"]
    assert "gpuProfile" not in pools["cpu"]
    assert pools["cpu"].get("nodeTaints", []) == []
    mc = one(of_type(inv, "containerservice:ManagedCluster")).inputs
    assert (
        mc["kubernetesVersion"] == "1.36"
        and mc["agentPoolProfiles"][0]["vmSize"] == "Standard_D8s_v5"
    )


def test_staging_spot_pool() -> None:
    pool = one([r for r in of_type(inventory("staging"), "AgentPool") if r.name == "a100spot"])
    assert pool.inputs["scaleSetPriority"] == "Spot" and pool.inputs["spotMaxPrice"] == -1
    assert pool.inputs["scaleSetEvictionPolicy"] == "Delete"


def test_existing_cluster_declares_no_azure_resources() -> None:
    inv = inventory("dev")
    assert not [r for r in inv.resources if r.type.startswith("azure-native:")]
    k8s_provider = one([r for r in inv.resources if r.type == "pulumi:providers:kubernetes"])
    assert k8s_provider.inputs["context"] == "dev-cluster"


def test_charts_and_versions_pinned_in_one_place() -> None:
    releases = {r.name: r.inputs for r in of_type(inventory("prod"), "helm.sh/v3:Release")}
    assert set(releases) == {"gpu-operator", "node-problem-detector", "kuberay-operator", "kueue"}
    for name, key in (
        ("gpu-operator", "gpuOperator"),
        ("kueue", "kueue"),
        ("kuberay-operator", "kuberay"),
        ("node-problem-detector", "nodeProblemDetector"),
    ):
        assert releases[name]["version"] == CHARTS[key].version
        assert releases[name]["chart"] == CHARTS[key].chart
        assert releases[name]["namespace"] == CHARTS[key].namespace
    assert CHARTS["kueue"].version == "0.19.2" and CHARTS["kuberay"].version == "1.7.0"
    assert CHARTS["gpuOperator"].version == "v26.7.0"
    assert (
        releases["gpu-operator"]["repositoryOpts"]["repo"] == "https://helm.ngc.nvidia.com/nvidia"
    )


def test_helm_values_that_matter() -> None:
    releases = {r.name: r.inputs for r in of_type(inventory("prod"), "helm.sh/v3:Release")}
    gpu = releases["gpu-operator"]["values"]
    assert gpu["driver"]["enabled"] is True and gpu["dcgmExporter"]["enabled"] is True
    tolerated = {t["key"] for t in gpu["daemonsets"]["tolerations"]}
    assert {"sku", C.GPU_RESOURCE} <= tolerated
    kueue_cfg = json.loads(
        releases["kueue"]["values"]["managerConfig"]["controllerManagerConfigYaml"]
    )
    assert kueue_cfg["integrations"]["frameworks"] == [
        "batch/job",
        "ray.io/rayjob",
        "ray.io/raycluster",
        "ray.io/rayservice",  # tau serve --target kube: Kueue admits the RayService
    ]
    assert kueue_cfg["waitForPodsReady"]["timeout"] == "45m"
    assert (
        kueue_cfg["managedJobsNamespaceSelector"]["matchExpressions"][0]["key"] == C.LABEL_WORKSPACE
    )
    npd = releases["node-problem-detector"]["values"]["settings"]
    monitor = json.loads(npd["custom_monitor_definitions"][manifests.XID_MONITOR_FILE])
    assert npd["log_monitors"] == [f"/custom-config/{manifests.XID_MONITOR_FILE}"]
    assert (
        monitor["conditions"][0]["type"] == "GPUXidError" and "79" in monitor["rules"][1]["pattern"]
    )


def test_dcgm_exporter_never_twice() -> None:
    cfg = validated("prod").model_copy(deep=True)
    data = json.loads(cfg.model_dump_json())
    data["components"]["dcgmExporter"]["source"] = "standalone"
    from taugrid.api.platform import validate_platform as validate

    inv = plan.evaluate("prod-standalone", validate(data))
    releases = {r.name: r.inputs for r in of_type(inv, "helm.sh/v3:Release")}
    assert "dcgm-exporter" in releases
    assert releases["gpu-operator"]["values"]["dcgmExporter"]["enabled"] is False


def test_kueue_quotas_and_flavors() -> None:
    inv = inventory("prod")
    cqs = {o["metadata"]["name"]: o["spec"] for o in k8s_kind(inv, "ClusterQueue")}
    research = cqs["research"]
    # each queue sits in its grant cohort (the controller's quota grants), a child of the
    # declared cohort, so borrowing between queues works as declared
    assert research["cohortName"] == "tau-grants-research"
    cohorts = {o["metadata"]["name"]: o["spec"] for o in k8s_kind(inv, "Cohort")}
    # the grant cohort is its team's member of the declared cohort: the team's weight is there
    assert cohorts["tau-grants-research"] == {"parentName": "prod", "fairSharing": {"weight": "1"}}
    assert cohorts["prod"] == {}
    assert "resourceGroups" not in cohorts["tau-grants-llm"]  # the controller's field
    group = one(research["resourceGroups"])
    assert group["coveredResources"] == ["cpu", "memory", C.GPU_RESOURCE]
    a100 = next(f for f in group["flavors"] if f["name"] == "a100x1")
    gpu = next(r for r in a100["resources"] if r["name"] == C.GPU_RESOURCE)
    # canonical quantity strings: Kueue re-writes its spec in this form (else fields change hands)
    assert gpu["nominalQuota"] == "8" and gpu["borrowingLimit"] == "0"
    llm_gpu = next(
        r
        for f in cqs["llm"]["resourceGroups"][0]["flavors"]
        if f["name"] == "h100x8"
        for r in f["resources"]
        if r["name"] == C.GPU_RESOURCE
    )
    assert llm_gpu["lendingLimit"] == "8"
    flavors = {o["metadata"]["name"]: o["spec"] for o in k8s_kind(inv, "ResourceFlavor")}
    assert flavors["h100x8"]["nodeTaints"][0]["key"] == "sku"
    assert "nodeTaints" not in flavors["cpu"]
    assert {o["metadata"]["name"]: o["value"] for o in k8s_kind(inv, "WorkloadPriorityClass")} == {
        "low": 100,
        "normal": 1000,
        "high": 10000,
    }


def test_workspace_rbac_and_storage() -> None:
    inv = inventory("prod")
    roles = [o for o in k8s_kind(inv, "Role") if o["metadata"]["name"] == "tau-researcher"]
    assert {r["metadata"]["namespace"] for r in roles} == {"research", "llm"}
    rules = {
        (g, res): set(r["verbs"])
        for r in roles[0]["rules"]
        for g in r["apiGroups"]
        for res in r["resources"]
    }
    assert {"create", "delete"} <= rules[("ray.io", "rayjobs")]
    assert "create" in rules[(C.GROUP, "runs")] and "create" in rules[(C.GROUP, "quotarequests")]
    assert rules[("", "pods")] == {"get", "list", "watch"}
    binding = next(
        o
        for o in k8s_kind(inv, "RoleBinding")
        if o["metadata"].get("namespace") == "llm" and o["metadata"]["name"] == "tau-researcher"
    )
    assert {(s["kind"], s["name"]) for s in binding["subjects"]} == {
        ("Group", "team-llm"),
        ("User", "alice@example.com"),
    }
    pvcs = {o["metadata"]["name"]: o["spec"] for o in k8s_kind(inv, "PersistentVolumeClaim")}
    assert pvcs["llm-data"]["resources"]["requests"]["storage"] == "10Ti"
    assert pvcs["llm-data"]["storageClassName"] == "azurefile-csi-premium"
    assert pvcs["llm-data"]["accessModes"] == ["ReadWriteMany"]
    lqs = {
        (o["metadata"]["namespace"], o["metadata"]["name"]): o["spec"]["clusterQueue"]
        for o in k8s_kind(inv, "LocalQueue")
    }
    assert lqs[("llm", "llm")] == "llm" and ("research", "llm") not in lqs


def test_dependency_ordering() -> None:
    inv = inventory("prod")
    by_name = {
        r.name: r
        for r in inv.resources
        if r.type.startswith("kubernetes:") and "helm" not in r.type
    }
    release = one([r for r in of_type(inv, "helm.sh/v3:Release") if r.name == "kueue"])
    release_deps = release.depends_on_names()
    assert {"h100x8", "a100x1", "cpu"} <= release_deps  # pools before charts
    queue_objs = [
        r
        for r in inv.resources
        if r.type.startswith("kubernetes:kueue.x-k8s.io") and r.parent_name == "kueue-queues"
    ]
    assert len(queue_objs) >= 8
    for r in queue_objs:
        assert "kueue" in r.depends_on_names(), r.key()  # created after the release: webhooks ready
    lq = by_name["localqueue-llm-llm"]
    assert {
        "kueue",
        "kueue-queues",
        "taugrid-crds",
    } <= lq.depends_on_names()  # queues and CRDs first
    # the namespace first; what is in it goes with it (deletedWith, checked on the engine in e2e)
    assert "namespace-llm" in lq.depends_on_names()
    assert by_name["namespace-llm"].parent == lq.parent and lq.parent_name == "llm"
    tc = by_name["taucluster-cluster"]
    assert {
        "taugrid-crds",
        "kueue-queues",
    } <= tc.depends_on_names()  # CRDs and queues before profiles
    pool = next(r for r in inv.resources if r.type.endswith("AgentPool") and r.name == "h100x8")
    assert {"cluster", "cluster-rg"} <= pool.depends_on_names()  # the cluster before its pools


@pytest.mark.parametrize("stack", STACKS)
def test_kueue_objects_validate_against_upstream_crds(stack: str, upstream_crds: Path) -> None:
    inv = inventory(stack)
    files = {
        "ClusterQueue": "clusterqueues",
        "LocalQueue": "localqueues",
        "ResourceFlavor": "resourceflavors",
        "Cohort": "cohorts",
        "WorkloadPriorityClass": "workloadpriorityclasses",
    }
    checked = 0
    for kind, plural in files.items():
        crd = upstream_crds / "kueue" / f"kueue.x-k8s.io_{plural}.yaml"
        for obj in k8s_kind(inv, kind):
            assert crd_errors(obj, crd, "v1beta2") == [], (kind, obj["metadata"]["name"])
            checked += 1
    assert checked >= 8


def test_tau_objects_validate_against_generated_crds() -> None:
    import jsonschema

    schemas = {
        c["spec"]["names"]["kind"]: as_json_schema(
            c["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
        )
        for c in render_crds()
    }
    inv = inventory("prod")
    for kind in ("TauCluster", "TauWorkspace"):
        objs = k8s_kind(inv, kind)
        assert objs
        for obj in objs:
            jsonschema.validate(obj, schemas[kind])


def test_quickstart_renders_against_prod_profiles(tmp_path: Path) -> None:
    snap = ProfileSnapshot.model_validate(inventory("prod").exports["profileSnapshot"])
    assert snap.profileSetHash and {p.name for p in snap.profiles} == {
        "h100x8",
        "a100x1",
        "a100x2",
        "cpu",
    }
    loaded = load.load_manifest(EXAMPLES / "quickstart")
    r = resolve.resolve(loaded.manifest, snap, workspace="research")
    assert r.profile.name == "a100x1" and r.queue == "research" and r.namespace == "research"
    _, rayjob = render.render(
        r, render.RunMeta(run_id="tau-aks-gpu-quickstart-abcde"), codebundle.collect(loaded.folder)
    )
    worker = rayjob["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["template"]["spec"]
    assert worker["nodeSelector"] == {C.LABEL_POOL: "a100x1", C.LABEL_GPU_CLASS: "a100-80gb"}
    assert rayjob["metadata"]["labels"][C.KUEUE_QUEUE_LABEL] == "research"
    # The published TauCluster carries the same profiles (and the hash) as the snapshot.
    tc = one(k8s_kind(inventory("prod"), "TauCluster"))
    assert tc["metadata"]["annotations"][C.ANN_PROFILE_SET_HASH] == snap.profileSetHash
    assert [p["name"] for p in tc["spec"]["workloadProfiles"]] == [
        p.name for p in derive_profiles(validated("prod"))
    ]


def test_profiles_are_the_cli_snapshot(capsys: pytest.CaptureFixture[str]) -> None:
    import yaml

    from taugrid.cli.app import main

    assert main(["platform", "snapshot", "--stack", "prod"]) == 0
    doc = yaml.safe_load(capsys.readouterr().out)
    snap = ProfileSnapshot.model_validate(doc)  # hash verified on load
    assert snap.cluster == "prod" and snap.workspace("llm") is not None


def test_plan_and_diff_commands(capsys: pytest.CaptureFixture[str]) -> None:
    from taugrid.cli.app import main

    assert main(["platform", "plan", "--stack", "ci", "-o", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["offline"] is True and "kubeconfig" not in doc["exports"]
    assert any(
        r["type"] == "azure-native:containerservice:AgentPool" and r["name"] == "t4"
        for r in doc["resources"]
    )
    assert main(["platform", "plan", "--stack", "ci"]) == 0
    assert "offline plan" in capsys.readouterr().out
    assert main(["platform", "diff", "staging", "prod", "--all", "-o", "json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert "azure-native:containerservice:AgentPool::h100x8" in d["only_in_prod"]
    changed = {c["resource"]: c for c in d["changed"]}
    mc = changed["azure-native:containerservice:ManagedCluster::cluster"]
    assert any(
        f["field"] == "location" and f["prod"] == "eastus2" and f["staging"] == "westus3"
        for f in mc["changes"]
    )
    assert main(["platform", "plan", "--stack", "nope"]) == 2
    assert "stacks: ci, dev, prod, sandbox, staging" in capsys.readouterr().err


def test_diff_text_is_per_field_and_warns_off_the_promotion_path(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from taugrid.cli.app import main

    assert main(["platform", "diff", "staging", "prod", "--all"]) == 0
    out = capsys.readouterr().out
    assert "warning" not in out  # staging promotes to prod
    # The cluster's location, as a field of its resource: old (prod) -> new (staging).
    block = out.split("~ containerservice:ManagedCluster cluster\n", 1)[1].split("\n~ ", 1)[0]
    assert "\n    location: eastus2 -> westus3\n" in "\n" + block + "\n"
    # Keys with dots (annotations) stay one key.
    assert "tau.azure.com/profile-set-hash: sha256:" in out
    assert main(["platform", "diff", "dev", "prod"]) == 0
    out = capsys.readouterr().out
    assert "warning: prod is not where dev promotes to (dev's promotesTo is staging)" in out
    assert main(["platform", "diff", "dev", "prod", "-o", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["warnings"]


def test_diff_shows_what_promotion_moves_and_the_rest_behind_all(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`platform diff SRC DST` ("what promotion would change") showed the whole declaration
    difference, deleting the AKS cluster, pools and workspaces included; promotion moves only
    the version lock."""
    import shutil

    from taugrid.cli.app import main

    folder = tmp_path / "stacks"
    shutil.copytree(ROOT / "stacks", folder)
    staging = folder / "Pulumi.staging.yaml"
    staging.write_text(
        staging.read_text().replace(
            "      nodeProblemDetector: {enabled: true}\n",
            "      nodeProblemDetector: {enabled: true}\n      kueue: {version: 0.19.3}\n",
            1,
        )
    )
    assert (
        main(["platform", "diff", "staging", "prod", "--stacks-dir", str(folder), "-o", "json"])
        == 0
    )
    d = json.loads(capsys.readouterr().out)
    assert d["lock"] == [{"path": "components.kueue.version", "old": "0.19.2", "new": "0.19.3"}]
    assert d["only_in_staging"] == [] and d["only_in_prod"] == []  # nothing deleted or added
    changed = {c["resource"] for c in d["changed"]}
    assert "kubernetes:helm.sh/v3:Release::kueue" in changed  # the chart version moves
    assert not [r for r in changed if "containerservice" in r or "ClusterQueue" in r], changed
    assert main(["platform", "diff", "staging", "prod", "--stacks-dir", str(folder)]) == 0
    out = capsys.readouterr().out
    assert "its version lock" in out and "components.kueue.version: 0.19.2 -> 0.19.3" in out
    assert "AgentPool" not in out and "h100x8" not in out
    assert main(["platform", "diff", "staging", "prod", "--stacks-dir", str(folder), "--all"]) == 0
    assert "h100x8" in capsys.readouterr().out


def test_node_counts_are_whole_numbers(capsys: pytest.CaptureFixture[str]) -> None:
    from taugrid.cli.app import main

    assert main(["platform", "plan", "--stack", "prod"]) == 0
    out = capsys.readouterr().out
    assert "maxCount=8 " in out and "maxCount=8.0" not in out


def test_stacks_come_from_the_project_of_the_current_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import shutil

    from taugrid.cli.app import main

    monkeypatch.chdir(tmp_path)
    assert main(["platform", "snapshot", "--stack", "prod"]) == 2
    err = capsys.readouterr().err
    assert "no Pulumi project in" in err and "--stacks-dir" in err
    project = tmp_path / "platform"
    (project / "envs").mkdir(parents=True)
    (project / "Pulumi.yaml").write_text("name: p\nruntime: python\nstackConfigDir: envs\n")
    shutil.copy(ROOT / "stacks" / "Pulumi.prod.yaml", project / "envs" / "Pulumi.mine.yaml")
    (project / "sub").mkdir()
    monkeypatch.chdir(project / "sub")  # from a subfolder, as the Pulumi CLI does
    assert main(["platform", "snapshot", "--stack", "mine"]) == 0
    assert "kind: TauWorkloadProfileSnapshot" in capsys.readouterr().out


def test_the_example_profiles_are_the_prod_stacks_snapshot(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """examples/profiles.yaml is generated (make profiles); it must not drift from the stack."""
    import yaml

    from taugrid.cli.app import main

    assert main(["platform", "snapshot", "--stack", "prod"]) == 0
    generated = yaml.safe_load(capsys.readouterr().out)
    committed = yaml.safe_load((ROOT / "examples" / "profiles.yaml").read_text())
    assert committed == generated, "run `make profiles` to regenerate examples/profiles.yaml"


def test_external_components_have_no_release_but_their_objects() -> None:
    """The sandbox runs Kueue and KubeRay out of cluster: no Helm release (no chart repository
    is reachable there), but the queues that need Kueue are still declared."""
    inv = inventory("sandbox")
    assert of_type(inv, "helm.sh/v3:Release") == []
    queues = {o["metadata"]["name"] for o in k8s_kind(inv, "ClusterQueue")}
    # the shared queues, the spare one the teams borrow from, the teams', and the validation one
    assert queues == {"gpu", "cpu", "spare", "vision", "nlp", "speech", "tau-validation"}
    assert one(of_type(inv, "taugrid:platform:Kueue"))
    cfg = validated("sandbox")
    assert cfg.components.kueue.install == "external"


def test_the_plan_evaluates_after_asyncio_run_left_no_event_loop() -> None:
    """A notebook or service that ran `asyncio.run` before leaves the thread no event loop;
    Pulumi's mocks then failed with "There is no current event loop"."""
    import asyncio

    asyncio.run(asyncio.sleep(0))
    inv = plan.evaluate("sandbox", validated("sandbox"))
    assert inv.resources


def test_the_versions_output_names_only_what_the_stack_runs() -> None:
    """`pulumi stack output versions` listed components the stack disables (the sandbox's GPU
    Operator, DCGM exporter and node problem detector)."""
    sandbox = set(inventory("sandbox").exports["versions"])
    assert not sandbox & {"gpuOperator", "dcgmExporter", "nodeProblemDetector"}, sandbox
    assert {"kueue", "kuberay"} <= sandbox
    assert {"gpuOperator", "dcgmExporter", "kueue"} <= set(inventory("prod").exports["versions"])


def test_a_preview_step_says_each_changed_field_with_old_and_new() -> None:
    """`preview` named the resource but not what changes (`"diffs": []`)."""
    from types import SimpleNamespace

    from taugrid.infra.engine import _meta

    def cq(gpus: str) -> dict[str, Any]:
        return {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "ClusterQueue",
            "metadata": {"name": "gpu"},
            "spec": {
                "resourceGroups": [
                    {
                        "flavors": [
                            {
                                "name": "a100",
                                "resources": [
                                    {"name": "cpu", "nominalQuota": "48"},
                                    {"name": "nvidia.com/gpu", "nominalQuota": gpus},
                                ],
                            }
                        ]
                    }
                ]
            },
        }

    meta = SimpleNamespace(
        op=SimpleNamespace(value="update"),
        type="kubernetes:kueue.x-k8s.io/v1beta2:ClusterQueue",
        urn="urn:pulumi:s::p::t::gpu",
        diffs=[],
        old=SimpleNamespace(inputs=cq("2")),
        new=SimpleNamespace(inputs=cq("3")),
    )
    step = _meta(meta)
    assert step["changes"] == [
        {
            "field": "spec.resourceGroups[0].flavors[a100].resources[nvidia.com/gpu].nominalQuota",
            "old": "2",
            "new": "3",
        }
    ]
    assert step["diffs"] == ["spec"]
