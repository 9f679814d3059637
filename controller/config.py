"""The controller's settings: a YAML file (the Deployment mounts it from a ConfigMap), then
command-line overrides. Validated like every other external input."""

from __future__ import annotations

from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from taugrid.api.errors import EXIT_USAGE, TauError
from taugrid.api.gpuuse import GpuUseConfig
from taugrid.api.platform import SYSTEM_NAMESPACE, RemediationConfig

FIELD_MANAGER = "taugrid-controller"
PEERING = "taugrid-controller"


class Exporters(BaseModel):
    """Where DCGM's exporters answer: the pods behind a Service (found through its
    EndpointSlices, each with the node it runs on), or a URL per node (`url`, with `{node}`:
    the sandbox's simulated exporters on loopback, which no EndpointSlice may name)."""

    model_config = ConfigDict(extra="forbid")

    namespace: str = Field("gpu-operator", min_length=1)
    service: str = Field("nvidia-dcgm-exporter", min_length=1)
    port: int = Field(9400, ge=1, le=65535)
    path: str = Field("/metrics", pattern=r"^/")
    url: str | None = Field(None, pattern=r"^https?://.*\{node\}")
    timeout_s: float = Field(3.0, gt=0, le=30)


class ControllerConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    remediation: RemediationConfig = Field(default_factory=RemediationConfig)
    gpuUse: GpuUseConfig = Field(default_factory=GpuUseConfig)
    exporters: Exporters = Field(default_factory=Exporters)
    system_namespace: str = Field(SYSTEM_NAMESPACE, description="Where TauWorkspaces live")
    cluster_object: str = Field("cluster", description="The TauCluster's name")
    status_writes_per_s: float = Field(
        20.0,
        gt=0,
        le=1000,
        description="Run status writes a second at most, all runs together (one at a time)",
    )


def load(path: Path | None) -> ControllerConfig:
    if path is None:
        return ControllerConfig()
    try:
        data = yaml.safe_load(path.read_text()) or {}
        return ControllerConfig.model_validate(data)
    except OSError as e:
        raise TauError(
            f"cannot read the controller config {path}: {e}", exit_code=EXIT_USAGE
        ) from None
    except (yaml.YAMLError, ValidationError) as e:
        raise TauError(
            f"the controller config {path} is not valid:\n{e}", exit_code=EXIT_USAGE
        ) from None
