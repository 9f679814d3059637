"""The platform's Helm charts, one pattern: a pinned release whose values come from the stack.

Each chart is a row of `HELM` (which config key, the component's type, the release name, its
values and outputs); `HelmComponent` turns a row into a ComponentResource holding the release.
Versions come from api/platform.py's CHARTS unless the stack pins another.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pulumi

from taugrid.api import constants as C
from taugrid.api.platform import CHARTS, ComponentBase, PlatformConfig
from taugrid.components import controller_manifests as CM
from taugrid.components import manifests as M
from taugrid.components.kube import config_group, helm_release

Values = Callable[[PlatformConfig], dict[str, Any]]


def _nothing(cfg: PlatformConfig) -> dict[str, Any]:
    return {}


def _always(cfg: PlatformConfig) -> bool:
    return True


@dataclass(frozen=True)
class HelmSpec:
    key: str  # components.<key> in the stack config, and CHARTS[key]
    type_name: str  # taugrid:platform:<type_name>
    values: Values
    outputs: Values = _nothing
    installs: Callable[[PlatformConfig], bool] = field(default=_always)  # else: no release

    @property
    def release(self) -> str:
        """The Helm release (and component) name."""
        return CHARTS[self.key].release


HELM: dict[str, HelmSpec] = {
    s.key: s
    for s in (
        HelmSpec(
            "gpuOperator",
            "GpuOperator",
            M.gpu_operator_values,
            lambda cfg: {"installDriver": cfg.components.gpuOperator.installDriver},
        ),
        # The GPU Operator's own exporter, or the standalone chart (never both).
        HelmSpec(
            "dcgmExporter",
            "DcgmExporter",
            M.dcgm_exporter_values,
            lambda cfg: {"source": cfg.components.dcgmExporter.source},
            installs=lambda cfg: cfg.components.dcgmExporter.source == "standalone",
        ),
        HelmSpec(
            "nodeProblemDetector",
            "NodeProblemDetector",
            M.npd_values,
            lambda cfg: {"condition": C.XID_CONDITION},
        ),
        HelmSpec(
            "kueue",
            "Kueue",
            M.kueue_values,
            lambda cfg: {"clusterQueues": [q.name for q in cfg.queues.clusterQueues]},
        ),
        HelmSpec("kuberay", "KubeRayOperator", M.kuberay_values),
    )
}


class HelmComponent(pulumi.ComponentResource):
    """One chart of the platform (a row of HELM) as a component holding its release."""

    def __init__(
        self,
        spec: HelmSpec,
        cfg: PlatformConfig,
        provider: pulumi.ProviderResource,
        depends_on: list[pulumi.Resource] | None = None,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__(f"taugrid:platform:{spec.type_name}", spec.release, None, opts)
        version = cfg.components.version(spec.key)
        self.release = None
        component: ComponentBase = getattr(cfg.components, spec.key)
        if spec.installs(cfg) and component.install == "helm":
            self.release = helm_release(
                spec.release,
                CHARTS[spec.key],
                version,
                spec.values(cfg),
                self,
                provider,
                depends_on,
            )
        self.extend(cfg, provider)
        self.register_outputs({"version": version, **spec.outputs(cfg)})

    def extend(self, cfg: PlatformConfig, provider: pulumi.ProviderResource) -> None:
        """Objects that need the release first (none by default)."""


class Kueue(HelmComponent):
    """Kueue, then (once its webhooks are ready) flavors, cohorts, priorities and queues."""

    def __init__(
        self,
        cfg: PlatformConfig,
        provider: pulumi.ProviderResource,
        depends_on: list[pulumi.Resource] | None = None,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__(HELM["kueue"], cfg, provider, depends_on, opts)

    def extend(self, cfg: PlatformConfig, provider: pulumi.ProviderResource) -> None:
        # The release waits for the controller (and so its webhooks) before these are created.
        self.objects = config_group(
            "kueue-queues",
            [*M.kueue_objects(cfg), *CM.validation_objects(cfg)],
            self,
            provider,
            depends_on=[self.release] if self.release is not None else [],
        )
