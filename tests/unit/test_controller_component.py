"""The controller as the platform deploys it: Deployment, least-privilege RBAC, kopf peering,
image pinned with the other versions (and promoted with them), the Dockerfile it comes from,
quota approval RBAC for platform admins only, and the controller's settings."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import ROOT
from k8s_schemas import crd_errors, k8s_errors

from taugrid.api.platform import CONTROLLER_VERSION
from taugrid.api.versionlock import version_lock
from taugrid.infra.stackfile import validated

pytest.importorskip("pulumi", reason="the platform extra (pulumi) is not installed")
from taugrid.components import controller_manifests as CM
from taugrid.components import manifests as M
from taugrid.infra import plan


def prod() -> Any:
    return validated("prod", ROOT / "stacks")


def test_prod_deploys_the_controller_with_its_rbac_and_peering() -> None:
    inv = plan.evaluate("prod", prod())
    kinds = {
        (r.inputs.get("kind"), (r.inputs.get("metadata") or {}).get("name")) for r in inv.resources
    }
    for obj in CM.controller_objects(prod()):
        assert (obj["kind"], obj["metadata"]["name"]) in kinds
    comps = [r for r in inv.resources if r.type == "taugrid:platform:TauController"]
    assert len(comps) == 1


def test_the_sandbox_runs_it_out_of_cluster_instead() -> None:
    from taugrid.sandbox.cluster import PACKAGED_STACKS

    cfg = validated("sandbox", PACKAGED_STACKS)
    assert cfg.components.controller.install == "external"
    inv = plan.evaluate("sandbox", cfg)
    assert not [r for r in inv.resources if r.type == "taugrid:platform:TauController"]


def test_objects_are_valid_kubernetes() -> None:
    for obj in CM.controller_objects(prod()):
        if obj["kind"] == "ClusterKopfPeering":
            continue  # its schema is the CRD beside it (preserves unknown fields)
        assert k8s_errors(obj) == [], obj["kind"]
    for obj in M.quota_approver_objects(prod()):
        assert k8s_errors(obj) == []


def test_the_image_is_pinned_and_promoted_with_the_other_versions() -> None:
    cfg = prod()
    dep = next(o for o in CM.controller_deployment(cfg) if o["kind"] == "Deployment")
    (container,) = dep["spec"]["template"]["spec"]["containers"]
    assert container["image"].endswith(f":{CONTROLLER_VERSION}")
    assert version_lock(cfg)["components.controller.version"] == CONTROLLER_VERSION
    assert dep["spec"]["strategy"]["type"] == "Recreate"  # never two reconcilers in a rollout
    assert "--in-cluster" in container["args"]
    assert dep["spec"]["template"]["spec"]["serviceAccountName"] == CM.CONTROLLER


def test_its_memory_is_the_stacks_and_too_little_is_refused() -> None:
    """A cluster that keeps many runs sizes the controller (it holds what it watches of every
    run): the limit is the stack's, the request half of it; below 256Mi is a config error."""
    from pydantic import ValidationError

    base = prod()
    ctl = base.components.controller.model_copy(update={"memory": "1536Mi"})
    cfg = base.model_copy(
        update={"components": base.components.model_copy(update={"controller": ctl})}
    )
    dep = next(o for o in CM.controller_deployment(cfg) if o["kind"] == "Deployment")
    (container,) = dep["spec"]["template"]["spec"]["containers"]
    assert container["resources"]["limits"]["memory"] == "1536Mi"
    assert container["resources"]["requests"]["memory"] == "768Mi"
    assert k8s_errors(dep) == []
    for bad in ("128Mi", "a lot"):
        with pytest.raises(ValidationError, match=r"256Mi|memory quantity"):
            type(cfg.components.controller).model_validate({"memory": bad})


def test_its_settings_are_the_stacks_remediation_config() -> None:
    from taugrid.controller.config import ControllerConfig

    cfg = prod()
    cm = next(o for o in CM.controller_deployment(cfg) if o["kind"] == "ConfigMap")
    settings = ControllerConfig.model_validate(yaml.safe_load(cm["data"]["controller.yaml"]))
    assert settings.remediation == cfg.components.controller.remediation


def _rules() -> dict[tuple[str, str], set[str]]:
    out: dict[tuple[str, str], set[str]] = {}
    for r in CM.CONTROLLER_RULES:
        for g in r["apiGroups"]:
            for res in r["resources"]:
                out.setdefault((g, res), set()).update(r["verbs"])
    return out


def test_the_controllers_role_is_least_privilege() -> None:
    rules = _rules()
    writes = {"create", "update", "patch", "delete", "deletecollection"}
    writable = {k for k, verbs in rules.items() if verbs & writes}
    # it writes only: status of TauGrid's objects, grant cohorts, node cordons/taints, events,
    # a service's switch to its new generation (the Service's selector, the old RayService),
    # an idle run's Workload deactivated (gpuUse.idleAction: requeue), the usage ledger, and a
    # MultiKueue manager's Job's pod counts or RayJob's deployment status when its worker was
    # lost (patch of the status only)
    assert writable == {
        ("batch", "jobs/status"),
        ("ray.io", "rayjobs/status"),
        ("tau.azure.com", "usages"),
        ("tau.azure.com", "runs/status"),
        ("tau.azure.com", "quotarequests/status"),
        ("tau.azure.com", "workspaces/status"),
        ("tau.azure.com", "clusters/status"),
        ("tau.azure.com", "tauservices/status"),
        ("kueue.x-k8s.io", "cohorts"),
        ("", "nodes"),
        ("", "events"),
        ("", "pods/eviction"),
        ("kopf.dev", "clusterkopfpeerings"),
        ("ray.io", "rayservices"),
        ("", "services"),
        ("kueue.x-k8s.io", "workloads"),
    }
    assert rules[("kueue.x-k8s.io", "workloads")] == {"get", "list", "watch", "patch"}
    assert rules[("batch", "jobs/status")] == {"patch"} and "patch" not in rules[("batch", "jobs")]
    assert rules[("ray.io", "rayjobs/status")] == {"patch"}
    assert "patch" not in rules[("ray.io", "rayjobs")]
    assert rules[("tau.azure.com", "usages")] == {"get", "list", "create", "patch"}  # no delete
    assert rules[("discovery.k8s.io", "endpointslices")] == {"get", "list"}  # the exporters
    deleting = {k for k, verbs in rules.items() if "delete" in verbs}
    assert deleting == {("ray.io", "rayservices")}  # a service's previous generation only
    assert "create" not in rules[("", "services")]
    assert not any("*" in g or "*" in r for g, r in rules)
    assert ("", "secrets") not in rules and ("kueue.x-k8s.io", "clusterqueues") in rules
    assert "patch" not in rules[("kueue.x-k8s.io", "clusterqueues")]  # Pulumi's, not ours


def test_only_platform_admins_may_decide_on_quota() -> None:
    role, binding = M.quota_approver_objects(prod())
    assert {r for rule in role["rules"] for r in rule["resources"]} >= {"quotarequests/status"}
    assert binding["subjects"] == [
        {
            "kind": "Group",
            "name": "taugrid-platform-admins",
            "apiGroup": "rbac.authorization.k8s.io",
        }
    ]
    researcher = {r for rule in M.RESEARCHER_RULES for r in rule["resources"]}
    assert "quotarequests" in researcher and "quotarequests/status" not in researcher


def test_the_peering_crd_is_structural(tmp_path: Path) -> None:
    crd, peering = CM.kopf_peering()
    path = tmp_path / "crd.yaml"
    path.write_text(yaml.safe_dump(crd))
    assert crd_errors(peering, path, "v1") == []


def test_the_dockerfile_builds_the_controller_from_this_package() -> None:
    text = (ROOT / "controller" / "Dockerfile").read_text()
    assert "taugrid.controller" in text and "[controller]" in text
    assert "USER 65532" in text
    for line in text.splitlines():
        if line.startswith("COPY "):
            src = line.split()[1]
            assert (ROOT / src).exists(), f"COPY {src}: not in the repository"


def test_the_controllers_settings_say_where_dcgms_exporters_answer() -> None:
    from taugrid.controller.config import ControllerConfig

    cfg = prod()
    got = ControllerConfig.model_validate(CM.controller_settings(cfg))
    assert (got.exporters.namespace, got.exporters.service, got.exporters.port) == (
        "gpu-operator",
        "nvidia-dcgm-exporter",
        9400,
    )
    assert got.gpuUse == cfg.components.controller.gpuUse and got.exporters.url is None

    def with_dcgm(**over: Any) -> Any:
        dcgm = cfg.components.dcgmExporter.model_copy(update=over)
        return cfg.model_copy(
            update={"components": cfg.components.model_copy(update={"dcgmExporter": dcgm})}
        )

    standalone = with_dcgm(source="standalone")
    assert CM.controller_settings(standalone)["exporters"]["service"] == "dcgm-exporter"
    none = with_dcgm(enabled=False)
    assert CM.controller_settings(none)["gpuUse"]["enabled"] is False  # nothing to read
    # the sandbox: no exporter installed, its simulated ones at a URL per node
    url = "http://127.0.0.1:9/nodes/{node}/metrics"
    sim = ControllerConfig.model_validate(CM.controller_settings(none, url))
    assert sim.gpuUse.enabled and sim.exporters.url == url
    # the Deployment's ConfigMap holds the same settings
    (config_map,) = [o for o in CM.controller_deployment(cfg) if o["kind"] == "ConfigMap"]
    assert yaml.safe_load(config_map["data"]["controller.yaml"]) == CM.controller_settings(cfg)
