"""`tau platform up | preview | destroy`: a stack's platform program through the real engine.

The program is `infra.program.build`, the one `pulumi up` runs from `infra/__main__.py`; here it
runs inline (Automation API), with the stack's `taugrid:platform` declaration read from the
project's stack file and validated before the engine starts.
"""

from __future__ import annotations

from pathlib import Path

from taugrid.api.errors import EXIT_USAGE, TauError
from taugrid.api.platform import ExistingClusterSpec, PlatformConfig
from taugrid.infra.engine import Engine
from taugrid.infra.stackfile import validated


def platform_engine(stack: str, stacks_dir: Path | None = None,
                    cfg: PlatformConfig | None = None) -> Engine:  # fmt: skip
    cfg = cfg or validated(stack, stacks_dir)
    if isinstance(cfg.cluster, ExistingClusterSpec) and cfg.cluster.kubeconfigSecret:
        raise TauError(
            f"stack {stack} reads its kubeconfig from the secret config key "
            f"{cfg.cluster.kubeconfigSecret!r}, which only its own secrets provider can decrypt",
            exit_code=EXIT_USAGE,
            hint="run `pulumi up` for this stack, or declare `cluster.context` and set KUBECONFIG",
        )
    platform = cfg

    def program() -> None:
        from taugrid.infra.program import build

        build(platform, stack)

    return Engine(stack, program)


def bundled_policy_pack() -> str | None:
    """TauGrid's own CrossGuard pack (policies/), when pulumi-policy is installed."""
    try:
        import pulumi_policy  # noqa: F401

        from taugrid import policies
    except ImportError:
        return None
    return str(Path(policies.__file__).resolve().parent)
