"""`pulumi up` entry point: read `taugrid:platform`, validate it, build the Platform."""

from __future__ import annotations

import pulumi

from taugrid.api.platform import ExistingClusterSpec, PlatformConfigError, validate_platform
from taugrid.infra.program import build

config = pulumi.Config("taugrid")
try:
    cfg = validate_platform(config.require_object("platform"))
except PlatformConfigError as e:
    raise pulumi.RunError(
        f"invalid stack config (stacks/Pulumi.{pulumi.get_stack()}.yaml):\n{e}"
    ) from None

secret = None
if isinstance(cfg.cluster, ExistingClusterSpec) and cfg.cluster.kubeconfigSecret:
    secret = config.require_secret(cfg.cluster.kubeconfigSecret)
build(cfg, pulumi.get_stack(), kubeconfig_secret=secret)
