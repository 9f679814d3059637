"""`pulumi up` entry point: read `taugrid:platform`, validate it, build the Platform."""

from __future__ import annotations

import pulumi

from taugrid.api.platform import ExistingClusterSpec, PlatformConfigError, validate_platform
from taugrid.infra.program import build

config = pulumi.Config("taugrid")
try:
    cfg = validate_platform(config.require_object("platform"))
except PlatformConfigError as e:  # said as tau says it: file, key path, line, value, fix
    from taugrid.infra.stackfile import program_error

    raise pulumi.RunError(program_error(pulumi.get_stack(), e).render()) from None

secret = None
if isinstance(cfg.cluster, ExistingClusterSpec) and cfg.cluster.kubeconfigSecret:
    secret = config.require_secret(cfg.cluster.kubeconfigSecret)
build(cfg, pulumi.get_stack(), kubeconfig_secret=secret)
