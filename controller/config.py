"""The controller's settings: a YAML file (the Deployment mounts it from a ConfigMap), then
command-line overrides. Validated like every other external input."""

from __future__ import annotations

from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from taugrid.api.errors import EXIT_USAGE, TauError
from taugrid.api.platform import SYSTEM_NAMESPACE, RemediationConfig

FIELD_MANAGER = "taugrid-controller"
PEERING = "taugrid-controller"


class ControllerConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    remediation: RemediationConfig = Field(default_factory=RemediationConfig)
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
