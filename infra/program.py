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
        raise PlatformConfigError(issues_from_validation(PlatformConfig, e)) from None
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
