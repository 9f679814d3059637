"""The Pulumi program as a function: stack config -> Platform + exports (used by __main__ and
plan)."""

from __future__ import annotations

import pulumi

from taugrid.api import multicluster as MC
from taugrid.api.platform import PlatformConfig
from taugrid.api.published import (
    profile_snapshot,
    queue_signature,
    workspace_refs,
    workspace_registries,
)
from taugrid.components.helm import HELM
from taugrid.components.platform import Platform


def build(
    cfg: PlatformConfig, stack: str, kubeconfig_secret: pulumi.Input[str] | None = None
) -> Platform:
    platform = Platform("taugrid", cfg, stack, kubeconfig_secret=kubeconfig_secret)
    if platform.kubeconfig is not None:
        pulumi.export("kubeconfig", platform.kubeconfig)
    pulumi.export("profiles", platform.profile.profiles)
    pulumi.export("workspaceNamespaces", {w.name: w.namespace for w in workspace_refs(cfg)})
    pulumi.export("profileSnapshot", profile_snapshot(cfg, stack))
    if cfg.teams:
        pulumi.export("teams", {t.name: t.weight for t in cfg.teams})
    # what a MultiKueue manager compares before it wires this cluster, and how it reaches it
    pulumi.export(MC.SIGNATURE_OUTPUT, queue_signature(cfg))
    pulumi.export(MC.REGISTRIES_OUTPUT, workspace_registries(cfg))
    if platform.multikueue_kubeconfig is not None:
        pulumi.export(MC.KUBECONFIG_OUTPUT, platform.multikueue_kubeconfig)
        pulumi.export(MC.NAME_OUTPUT, cfg.multiCluster.name)
    # what this stack runs: a disabled component has no version here
    pulumi.export(
        "versions",
        {n: cfg.components.version(n) for n in HELM if getattr(cfg.components, n).enabled},
    )
    if cfg.promotesTo:
        pulumi.export("promotesTo", cfg.promotesTo)
    return platform
