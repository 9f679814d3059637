"""`tau platform up | preview | destroy`: a stack's platform program through the real engine.

The program is `infra.program.build`, the one `pulumi up` runs from `infra/__main__.py`; here it
runs inline (Automation API), with the stack's `taugrid:platform` declaration read from the
project's stack file and validated before the engine starts.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from taugrid.api.errors import EXIT_PLATFORM, EXIT_USAGE, TauError
from taugrid.api.platform import ExistingClusterSpec, PlatformConfig
from taugrid.infra.engine import Engine, Outcome
from taugrid.infra.stackfile import find_stacks_dir, project_dir, validated


def platform_engine(
    stack: str, stacks_dir: Path | None = None, cfg: PlatformConfig | None = None
) -> Engine:
    stacks_dir = stacks_dir or find_stacks_dir()
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

    # the project's own folder and stack file: the state, config and secrets `pulumi` uses
    return Engine(
        stack,
        program,
        project_dir=project_dir(stacks_dir),
        stack_file=stacks_dir / f"Pulumi.{stack}.yaml",
        preflight=_workers_exist(cfg) if cfg.multiCluster.role == "manager" else None,
    )


def _workers_exist(cfg: PlatformConfig) -> Callable[[Engine], None]:
    """A manager reads each worker's stack: every one of this project that the backend does not
    have is named, with the order that works, before the engine starts (it would stop at the
    first, in no fixed order). References to other projects are the engine's to resolve."""

    def check(eng: Engine) -> None:
        ours = [w for w in cfg.multiCluster.workers if _own_stack(w.stack, eng.project)]
        if not ours:
            return
        have = {name.rsplit("/", 1)[-1] for name in eng.list_stacks()}
        missing = [w for w in ours if w.stack.rsplit("/", 1)[-1] not in have]
        if missing:
            raise TauError(
                f"stack {eng.stack_name} is a MultiKueue manager whose worker stack(s) "
                f"{eng.backend.url} does not have: "
                + ", ".join(f"{w.name} (stack {w.stack})" for w in missing),
                exit_code=EXIT_PLATFORM,
                hint="pulumi up each worker's stack first (tau platform up --stack "
                f"{missing[0].stack.rsplit('/', 1)[-1]} --yes, with its cluster's kubeconfig "
                "context), then the manager's; or fix multiCluster.workers",
            )

    return check


def _own_stack(ref: str, project: str) -> bool:
    """A stack reference to this project: `stack`, or `org/project/stack`."""
    parts = ref.split("/")
    return len(parts) == 1 or (len(parts) == 3 and parts[1] == project)


def bundled_policy_pack() -> str | None:
    """TauGrid's own CrossGuard pack (policies/), when pulumi-policy is installed."""
    try:
        import pulumi_policy  # noqa: F401

        from taugrid import policies
    except ImportError:
        return None
    return str(Path(policies.__file__).resolve().parent)


Say = Callable[[str], None]
Confirm = Callable[[Outcome], bool]


def policy_packs(packs: list[Path] | None, none: bool, say: Say) -> list[str]:
    """The policy packs a preview or up checks: the ones named, else TauGrid's own (said when
    it cannot be checked), none with `none`."""
    if none:
        return []
    if packs:
        for p in packs:
            if not (p / "PulumiPolicy.yaml").is_file():
                raise TauError(
                    f"{p} is not a policy pack (no PulumiPolicy.yaml in it)", exit_code=EXIT_USAGE
                )
        return [str(p.resolve()) for p in packs]
    bundled = bundled_policy_pack()
    if bundled is None:
        say(
            "note: no policy pack is checked: pulumi-policy is not installed "
            "(pip install 'taugrid[policy]')"
        )
        return []
    return [bundled]


@dataclass(frozen=True)
class Applied:
    """What `apply` did: the preview it showed, and the update (None: nothing to do, or the
    change was not confirmed)."""

    preview: Outcome | None
    update: Outcome | None
    confirmed: bool = True


def apply(
    eng: Engine, packs: list[str], confirm: Confirm | None, say: Say | None, refresh: bool = False
) -> Applied:
    """The platform rule: preview with the policy packs, then confirm, then up. The engine's
    `up` checks policies as it goes (resources before a violation would be created), so a
    preview with the packs first stops a violation before anything changes. `confirm` None:
    confirmed in advance (`--yes`); with no packs and no question, straight to up. With
    `refresh`, both read the cluster as it is first: what was changed or deleted out of band
    is put back (never "nothing to do" from the state's memory)."""
    if confirm is None and not packs:
        return Applied(None, eng.up(say=say, policy_packs=packs, refresh=refresh))
    preview = eng.preview(say=say, policy_packs=packs, refresh=refresh)
    if not preview.changed():
        return Applied(preview, None)
    if confirm is not None and not confirm(preview):
        return Applied(preview, None, confirmed=False)
    return Applied(preview, eng.up(say=say, policy_packs=packs, refresh=refresh))
