"""The platform, per stack: offline (plan, diff, snapshot) and through the Pulumi engine
(preview, up, destroy), and promotion of a tested version lock. The rules (preview with the
policy packs before up; promotion's checks and preview) are the platform layer's
(`taugrid.infra.deploy`, `taugrid.infra.promote`); these calls only join them."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from taugrid.api.errors import missing_extra
from taugrid.client.runs import Say, _quiet

if TYPE_CHECKING:
    from taugrid.infra.deploy import Applied
    from taugrid.infra.engine import Engine, Outcome
    from taugrid.infra.promote import Promotion


def _plan() -> Any:
    try:
        from taugrid.infra import plan
    except ImportError as e:
        raise missing_extra("platform", f"Pulumi ({e.name})") from None
    return plan


def engine(stack: str, stacks_dir: Path | None = None, say: Say | None = None) -> Engine:
    """The stack's engine; `say` is told first which backend and project it uses (the state
    `pulumi` shares)."""
    try:
        from taugrid.infra.deploy import platform_engine
    except ImportError as e:
        raise missing_extra("platform", f"Pulumi ({e.name})") from None
    eng = platform_engine(stack, stacks_dir)
    if say is not None:
        say(eng.where())
    return eng


def packs(
    policy_packs: list[Path] | None = None, no_policies: bool = False, say: Say = _quiet
) -> list[str]:
    from taugrid.infra.deploy import policy_packs as chosen

    return chosen(policy_packs, no_policies, say)


def plan(stack: str, stacks_dir: Path | None = None) -> Any:
    """Every resource the stack would declare, with its key inputs (offline, under mocks)."""
    from taugrid.infra.stackfile import validated

    return _plan().evaluate(stack, validated(stack, stacks_dir))


def diff(
    source: str, target: str, stacks_dir: Path | None = None, *, everything: bool = False
) -> dict[str, Any]:
    """What promoting SOURCE onto TARGET moves (offline): SOURCE's version lock onto TARGET
    (`lock`: path, old, new) and TARGET's resources that changes. With `everything`, the whole
    declaration difference instead (pools, queues, workspaces, the cluster: what promotion
    never moves). Both with promotion's warning."""
    from dataclasses import asdict

    from taugrid.api.versionlock import with_lock
    from taugrid.infra import promote
    from taugrid.infra.stackfile import find_stacks_dir, validated

    folder = stacks_dir or find_stacks_dir()
    src, dst = validated(source, folder), validated(target, folder)
    if everything:
        d: dict[str, Any] = _plan().diff(plan(source, folder), plan(target, folder))
        d["scope"] = "declaration"
    else:
        changes = promote.lock_changes(src, dst)
        before = _plan().evaluate(target, dst)
        after = _plan().evaluate(target, with_lock(dst, {c.path: c.new for c in changes}))
        after.stack = source  # the same resources, labelled as the promotion's
        d = _plan().diff(after, before)
        d["scope"] = "version lock"
        d["lock"] = [asdict(c) for c in changes]
    d["promotes_to"] = src.promotesTo
    d["warnings"] = (
        []
        if src.promotesTo == target
        else [
            f"{target} is not where {source} promotes to ({source}'s promotesTo is "
            f"{src.promotesTo or 'not set'})"
        ]
    )
    return d


def snapshot(stack: str, stacks_dir: Path | None = None) -> dict[str, Any]:
    """The stack's workload profiles as a snapshot document (no Pulumi needed)."""
    from taugrid.api.published import profile_snapshot
    from taugrid.infra.stackfile import validated

    return profile_snapshot(validated(stack, stacks_dir), stack)


def preview(
    stack: str,
    *,
    stacks_dir: Path | None = None,
    policy_packs: list[str] | None = None,
    say: Say | None = None,
    refresh: bool = False,
) -> Outcome:
    """What `up` would change (the engine's preview), checked against the policy packs (a
    mandatory violation: TauError, exit 4); `refresh`: against the cluster as it is now."""
    return engine(stack, stacks_dir, say).preview(
        say=say, policy_packs=policy_packs or [], refresh=refresh
    )


def up(
    stack: str,
    *,
    stacks_dir: Path | None = None,
    policy_packs: list[str] | None = None,
    confirm: Callable[[Outcome], bool] | None = None,
    say: Say | None = None,
    refresh: bool = False,
) -> Applied:
    """Preview with the policy packs, ask `confirm` (None: confirmed), then update;
    `refresh`: drift (objects changed or deleted out of band) is seen and repaired."""
    from taugrid.infra.deploy import apply

    return apply(engine(stack, stacks_dir, say), policy_packs or [], confirm, say, refresh)


def refresh(stack: str, *, stacks_dir: Path | None = None, say: Say | None = None) -> Outcome:
    """Read the stack's resources from the cluster into its state; the drift report is the
    Outcome's steps (each object gone or changed out of band)."""
    return engine(stack, stacks_dir, say).refresh(say=say)


def destroy(stack: str, *, stacks_dir: Path | None = None, say: Say | None = None) -> Outcome:
    """Delete every resource of the stack from its cluster (the stack's state stays)."""
    return engine(stack, stacks_dir, say).destroy(say=say)


def promotion(
    source: str, target: str, stacks_dir: Path | None = None
) -> tuple[Promotion, list[str]]:
    """The checked promotion of SOURCE's verified version lock onto TARGET (nothing written),
    and TARGET's resources that it changes (offline preview)."""
    from taugrid.infra import promote

    p = promote.plan_promotion(source, target, stacks_dir)
    return p, promote.preview_lines(p)


def promote(
    source: str,
    target: str,
    *,
    stacks_dir: Path | None = None,
    confirm: Callable[[Promotion, list[str]], bool] | None = None,
) -> Promotion | None:
    """Check, preview, confirm (None: confirmed), and write the promotion into TARGET's stack
    file. None: nothing to change, or not confirmed."""
    from taugrid.infra import promote as promote_

    p, lines = promotion(source, target, stacks_dir)
    if not p.changes or (confirm is not None and not confirm(p, lines)):
        return None
    promote_.write_promotion(p)
    return p
