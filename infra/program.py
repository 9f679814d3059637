"""The Pulumi program as a function: stack config -> Platform + exports (used by __main__ and plan)."""

from __future__ import annotations

from typing import Any

import pulumi

from taugrid.api.manifest import Issue
from taugrid.api.platform import (
    CONFIG_KEY,
    PlatformConfig,
    invariants,
    parse_platform,
    workspace_refs,
)
from taugrid.components.manifests import profile_snapshot
from taugrid.components.platform import Platform

PLATFORM_EXAMPLES = {
    "cluster": "cluster: {provider: aks, name: prod, location: eastus2, kubernetesVersion: '1.36'}",
    "gpuPools": "gpuPools: [{name: a100x1, vmSize: Standard_NC24ads_A100_v4, maxCount: 8}]",
    "cpuPools": "cpuPools: [{name: cpu, vmSize: Standard_D16s_v5, maxCount: 4}]",
    "queues.clusterQueues": "clusterQueues: [{name: gpu, flavors: [{pool: a100x1, nominalQuota: {nvidia.com/gpu: 8}}]}]",
    "workspaces": "workspaces: [{name: research, queues: [gpu], members: [{kind: Group, name: team}]}]",
    "workspaces.storage.size": "storage: {size: 1Ti}",
    "components": "components: {gpuOperator: {installDriver: true}, nodeProblemDetector: {enabled: true}}",
}


class PlatformConfigError(Exception):
    def __init__(self, issues: list[Issue]) -> None:
        self.issues = issues
        lines = [
            f"{CONFIG_KEY}.{i.path} = {i.value!r}: {i.message}"
            + (f"\n  example: {i.example}" if i.example else "")
            for i in issues
        ]
        super().__init__("\n".join(lines))


def validate(data: Any) -> PlatformConfig:
    """Validate the stack config; every problem (schema or cross-component) at once."""
    from pydantic import ValidationError

    from taugrid.cli.load import issues_from_validation

    try:
        cfg = parse_platform(data)
    except ValidationError as e:
        raise PlatformConfigError(
            issues_from_validation(PlatformConfig, e, PLATFORM_EXAMPLES, None)
        ) from None
    problems = invariants(cfg)
    if problems:
        raise PlatformConfigError(problems)
    return cfg


def build(
    cfg: PlatformConfig, stack: str, kubeconfig_secret: pulumi.Input[str] | None = None
) -> Platform:
    platform = Platform("taugrid", cfg, stack, kubeconfig_secret=kubeconfig_secret)
    if platform.kubeconfig is not None:
        pulumi.export("kubeconfig", platform.kubeconfig)
    pulumi.export("profiles", platform.profile.profiles)
    pulumi.export("workspaceNamespaces", {w.name: w.namespace for w in workspace_refs(cfg)})
    pulumi.export("profileSnapshot", profile_snapshot(cfg, stack))
    pulumi.export(
        "versions",
        {
            n: cfg.components.version(n)
            for n in ("gpuOperator", "dcgmExporter", "nodeProblemDetector", "kueue", "kuberay")
        },
    )
    if cfg.promotesTo:
        pulumi.export("promotesTo", cfg.promotesTo)
    return platform
