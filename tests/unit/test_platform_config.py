"""Bad stack configs: exit code 2, the stack file and the key path, never a traceback."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from conftest import SMALL_PLATFORM

from taugrid.cli.app import main

pytest.importorskip("pulumi", reason="the platform extra (pulumi) is not installed")

GOOD: dict[str, object] = SMALL_PLATFORM


def variant(path: str, value: object) -> dict[str, object]:
    doc = yaml.safe_load(yaml.safe_dump(GOOD))
    node = doc
    parts = path.split(".")
    for p in parts[:-1]:
        node = node[int(p)] if p.isdigit() else node[p]
    last = parts[-1]
    if value is DELETE:
        del node[int(last) if last.isdigit() else last]
    elif last.isdigit():
        node[int(last)] = value
    else:
        node[last] = value
    return doc


DELETE = object()
BAD = [
    ("cluster.provider", "gke", "cluster", "aks"),
    ("cluster.kubernetesVersion", "latest", "cluster.aks.kubernetesVersion", "latest"),
    ("gpuPools.0.name", "A100_Pool", "gpuPools[0].name", "AKS pool name"),
    (
        "gpuPools.0.vmSize",
        "Standard_Weird_v9",
        "gpuPools[0].vmSize",
        "not in the VM size catalog",
    ),
    # a near miss of a catalog size: said once, with the size it probably means
    (
        "gpuPools.0.vmSize",
        "Standard_NC24ads_A100_v5",
        "gpuPools[0].vmSize",
        "did you mean Standard_NC24ads_A100_v4",
    ),
    ("cpuPools.0.vmSize", "Standard_NC24ads_A100_v4", "cpuPools[0].vmSize", "is a GPU size"),
    (
        "gpuPools.0.gpuDriver",
        "install",
        "gpuPools[0].gpuDriver",
        "GPU Operator installs the driver",
    ),
    ("gpuPools.0.minCount", 5, "gpuPools[0]", "minCount=5 is above maxCount=2"),
    ("gpuPools.0.gpusPerNode", 4, "gpuPools[0].gpusPerNode", "has 1 GPU"),
    ("gpuPools.0.migProfile", "MIG9g", "gpuPools[0].migProfile", "MIG1g"),
    ("gpuPools.0.spott", True, "gpuPools[0].spott", "did you mean 'gpuPools[0].spot'"),
    ("queues.clusterQueues.0.flavors.0.pool", "h100", "flavors[0].pool", "is not a pool"),
    (
        "queues.clusterQueues.0.flavors.0.nominalQuota",
        {"nvidia.com/gpu": 3},
        "queues.clusterQueues[0].flavors[0].nominalQuota.nvidia.com/gpu",
        "exceeds its maximum capacity 2",
    ),
    *[
        (
            "queues.clusterQueues.0.flavors.0.nominalQuota",
            {"nvidia.com/gpu": bad},
            "flavors[0].nominalQuota.nvidia.com/gpu",
            "whole number of GPUs >= 0",
        )
        for bad in (-2, "-2", "2 gpus", "1.5")
    ],
    (
        "queues.clusterQueues.0.flavors.0.nominalQuota",
        {"cpu": -48, "nvidia.com/gpu": 1},
        "flavors[0].nominalQuota.cpu",
        "greater than zero",
    ),
    (
        "queues.clusterQueues.0.flavors.0.borrowingLimit",
        {"nvidia.com/gpu": -1},
        "flavors[0].borrowingLimit.nvidia.com/gpu",
        "whole number of GPUs",
    ),
    ("queues.clusterQueues.0.name", "default", "clusterQueues[0].name", "captures every job"),
    ("workspaces.0.queues", ["cpu-only"], "workspaces[0].queues[0]", "is not a ClusterQueue"),
    ("workspaces.0.storage", {"size": "lots"}, "workspaces[0].storage.size", "storage size"),
    *[
        ("workspaces.0.storage", {"registry": bad}, "workspaces[0].storage.registry", needle)
        for bad, needle in [
            ("s3://bucket/x", "az://ACCOUNT/CONTAINER"),
            ("file://relative/dir", "names no host"),
            ("az://Team/data", "storage account 'Team'"),
            ("az://team/x", "container 'x'"),
            ("az://team/data/../up", "'..'"),
        ]
    ],
    (
        "workspaces.0.storage",
        {"storageClass": "azurefile-csi-premium", "registry": "az://team/data/registry"},
        "workspaces[0].storage",
        "Blob CSI storage class",
    ),
    ("components", {"kueue": {"version": ""}}, "components.kueue.version", "needs a version"),
    (
        "components",
        {"gpuOperator": {"enabled": False}},
        "components.dcgmExporter.source",
        "GPU Operator is disabled",
    ),
    (
        "cluster",
        {"provider": "existing", "name": "x", "context": "a", "kubeconfigSecret": "k"},
        "cluster.existing",
        "exactly one",
    ),
    ("workspaces", DELETE, None, None),
]


@pytest.mark.parametrize(
    ("path", "value", "key", "needle"),
    [b for b in BAD if b[2]],
    ids=[b[0] + "=" + str(b[1])[:12] for b in BAD if b[2]],
)
def test_bad_stack_config(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    path: str,
    value: object,
    key: str,
    needle: str,
) -> None:
    stack = tmp_path / "Pulumi.bad.yaml"
    stack.write_text(yaml.safe_dump({"config": {"taugrid:platform": variant(path, value)}}))
    code = main(["platform", "plan", "--stack", "bad", "--stacks-dir", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2, err
    assert str(stack) in err and "config.taugrid:platform." in err
    assert key in err and needle in err
    assert "Traceback" not in err


def test_duplicate_gpu_class_with_different_shapes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = variant(
        "gpuPools",
        [
            {"name": "a100a", "vmSize": "Standard_NC24ads_A100_v4", "maxCount": 2},
            {"name": "a100b", "vmSize": "Standard_NC48ads_A100_v4", "maxCount": 2},
        ],
    )
    doc["queues"]["clusterQueues"][0]["flavors"][0]["pool"] = "a100a"  # type: ignore[index]
    (tmp_path / "Pulumi.bad.yaml").write_text(yaml.safe_dump({"config": {"taugrid:platform": doc}}))
    assert main(["platform", "plan", "--stack", "bad", "--stacks-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "gpuPools[1].gpuClass" in err and "different shape" in err


def test_good_variant_plans(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "Pulumi.ok.yaml").write_text(yaml.safe_dump({"config": {"taugrid:platform": GOOD}}))
    assert main(["platform", "plan", "--stack", "ok", "--stacks-dir", str(tmp_path)]) == 0
    assert "profiles: a100" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("config: {}\n", "config.taugrid:platform"),
        ("not: [yaml\n", "not valid YAML"),
        ("", "is empty"),
        ("config:\n  taugrid:platform: 3\n", "must be a mapping"),
    ],
    ids=["missing-key", "not-yaml", "empty", "scalar"],
)
def test_bad_stack_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, needle: str
) -> None:
    (tmp_path / "Pulumi.bad.yaml").write_text(text)
    assert main(["platform", "plan", "--stack", "bad", "--stacks-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert needle in err and "Traceback" not in err


def test_an_unknown_vm_size_is_one_problem_and_no_false_capacity_problem() -> None:
    from taugrid.api.platform import PlatformConfig
    from taugrid.api.platform_rules import invariants

    cfg = PlatformConfig.model_validate(variant("gpuPools.0.vmSize", "Standard_NC24ads_A100_v5"))
    problems = invariants(cfg)
    assert [i.path for i in problems] == ["gpuPools[0].vmSize"], problems
    assert "Standard_NC24ads_A100_v4" in problems[0].message


def test_a_quota_above_capacity_says_how_to_fix_it() -> None:
    from taugrid.api.platform import PlatformConfig
    from taugrid.api.platform_rules import invariants

    cfg = PlatformConfig.model_validate(
        variant("queues.clusterQueues.0.flavors.0.nominalQuota", {"nvidia.com/gpu": 3})
    )
    (issue,) = [i for i in invariants(cfg) if "maximum capacity" in i.message]
    assert issue.path.endswith("flavors[0].nominalQuota.nvidia.com/gpu")
    assert issue.example and "raise maxCount" in issue.example and "to 3" in issue.example


def test_a_fleet_sized_quota_is_accepted_and_a_typo_sized_one_is_not() -> None:
    """A queue's quota is a fleet's: 50 A100 nodes are 1,100 cores and 10 TiB (the per-pod
    bounds, 1,024 cores and 64 TiB, refused them); a million and more cores is still a typo."""
    from taugrid.api.platform import PlatformConfig
    from taugrid.api.platform_rules import invariants

    fleet = variant("gpuPools.0.maxCount", 50)
    fleet["queues"]["clusterQueues"][0]["flavors"][0]["nominalQuota"] = {  # type: ignore[index]
        "nvidia.com/gpu": 50,
        "cpu": 1100,
        "memory": "9900Gi",
    }
    cfg = PlatformConfig.model_validate(fleet)
    assert not [i for i in invariants(cfg) if "cores" in i.message or "unit" in i.message]
    fleet["queues"]["clusterQueues"][0]["flavors"][0]["nominalQuota"]["cpu"] = 2_000_000  # type: ignore[index]
    problems = [i.message for i in invariants(PlatformConfig.model_validate(fleet))]
    assert any("more than 1000000 cores" in m for m in problems), problems


def test_plain_pulumi_reads_config_errors_as_tau_says_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Through plain `pulumi up` the program's errors had no line numbers and showed Python's
    `None`: now the stack file, key path, line, value and fix, as `tau platform` says them."""
    from taugrid.api.platform import PlatformConfigError, validate_platform
    from taugrid.infra.stackfile import program_error

    (tmp_path / "Pulumi.yaml").write_text(
        "name: taugrid\nruntime: python\nstackConfigDir: stacks\n"
    )
    (tmp_path / "stacks").mkdir()
    bad = variant("queues.clusterQueues.0.flavors.0.nominalQuota", {"nvidia.com/gpu": -2})
    stack_file = tmp_path / "stacks" / "Pulumi.bad.yaml"
    stack_file.write_text(yaml.safe_dump({"config": {"taugrid:platform": bad}}, sort_keys=False))
    monkeypatch.chdir(tmp_path)
    with pytest.raises(PlatformConfigError) as caught:
        validate_platform(bad)
    text = program_error("bad", caught.value).render()
    assert str(stack_file) in text and "(line " in text and "nvidia.com/gpu" in text
    assert "Decimal(" not in text
    missing = variant("gpuPools.0.maxCount", DELETE)
    stack_file.write_text(
        yaml.safe_dump({"config": {"taugrid:platform": missing}}, sort_keys=False)
    )
    with pytest.raises(PlatformConfigError) as caught_missing:
        validate_platform(missing)
    text = program_error("bad", caught_missing.value).render()
    assert "maxCount" in text and "(missing)" in text and "None" not in text
    # config that is not in a stack file of this project: the stack's config, still no repr
    monkeypatch.chdir(tmp_path / "stacks")
    (tmp_path / "Pulumi.yaml").unlink()
    text = program_error("bad", caught_missing.value).render()
    assert text.startswith("stack bad's config: config.taugrid:platform.gpuPools")
    assert "(missing)" in text and "None" not in text
