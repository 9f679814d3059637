"""`tau platform ...`: platform engineers inspect stacks offline (plan, diff, snapshot) and
apply them with the Pulumi engine (preview, up, destroy)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from taugrid.api.errors import missing_extra
from taugrid.cli.options import JsonOpt, ReportFormat, StackOpt, StacksDirOpt
from taugrid.cli.output import dump_json, out, say

app = typer.Typer(
    help="Platform engineers: inspect stacks offline (plan, diff, snapshot: no credentials, no "
    "Pulumi CLI) and apply them with the Pulumi engine (preview, up, destroy).",
    no_args_is_help=True,
    rich_markup_mode=None,
)


def _plan_module() -> Any:
    try:
        from taugrid.infra import plan
    except ImportError as e:
        raise missing_extra("platform", f"Pulumi ({e.name})") from None
    return plan


def _evaluate(stack: str, stacks_dir: Path | None) -> Any:
    from taugrid.infra.stackfile import validated

    cfg = validated(stack, stacks_dir)
    return _plan_module().evaluate(stack, cfg)


@app.command("plan")
def platform_plan(
    stack: StackOpt, stacks_dir: StacksDirOpt = None, output: JsonOpt = ReportFormat.text
) -> None:
    """Every resource the stack would declare, with its key inputs (evaluated offline)."""
    inv = _evaluate(stack, stacks_dir)
    plan = _plan_module()
    if output is ReportFormat.json:
        out(dump_json(plan.inventory_doc(inv)))
    else:
        out("\n".join(plan.format_inventory(inv)))


@app.command("diff")
def platform_diff(
    source: Annotated[
        str, typer.Argument(help="Stack whose declaration is promoted (e.g. staging)")
    ],
    target: Annotated[str, typer.Argument(help="Stack it is promoted onto (e.g. prod)")],
    stacks_dir: StacksDirOpt = None,
    output: JsonOpt = ReportFormat.text,
) -> None:
    """What promoting SOURCE's declaration onto TARGET would change (offline)."""
    from taugrid.infra.stackfile import validated

    a = _evaluate(source, stacks_dir)
    b = _evaluate(target, stacks_dir)
    plan = _plan_module()
    d = plan.diff(a, b)
    promotes_to = validated(source, stacks_dir).promotesTo
    d["promotes_to"] = promotes_to
    d["warnings"] = (
        []
        if promotes_to == target
        else [
            f"{target} is not where {source} promotes to "
            f"({source}'s promotesTo is {promotes_to or 'not set'})"
        ]
    )
    out(dump_json(d) if output is ReportFormat.json else "\n".join(plan.format_diff(d)))


@app.command("snapshot")
def platform_snapshot(stack: StackOpt, stacks_dir: StacksDirOpt = None) -> None:
    """The stack's workload profiles as a snapshot file for `tau run render --profiles`."""
    from taugrid.api.platform import profile_snapshot
    from taugrid.infra.stackfile import validated
    from taugrid.runs.yamlio import dump

    out(dump(profile_snapshot(validated(stack, stacks_dir), stack)))


# --- the real engine -------------------------------------------------------------------------
YesOpt = Annotated[
    bool, typer.Option("--yes", "-y", help="Skip the confirmation (as `pulumi up --yes`)")
]


PolicyPackOpt = Annotated[
    list[Path] | None,
    typer.Option(
        "--policy-pack",
        help="A CrossGuard policy pack folder (repeatable); default: TauGrid's own (policies/)",
    ),
]
NoPoliciesOpt = Annotated[
    bool, typer.Option("--no-policies", help="Check no policy pack (not even TauGrid's own)")
]


def _packs(packs: list[Path] | None, none: bool) -> list[str]:
    from taugrid.api.errors import EXIT_USAGE, TauError

    if none:
        return []
    if packs:
        for p in packs:
            if not (p / "PulumiPolicy.yaml").is_file():
                raise TauError(f"{p} is not a policy pack (no PulumiPolicy.yaml in it)",
                               exit_code=EXIT_USAGE)  # fmt: skip
        return [str(p.resolve()) for p in packs]
    from taugrid.infra.deploy import bundled_policy_pack

    bundled = bundled_policy_pack()
    if bundled is None:
        say("note: no policy pack is checked: pulumi-policy is not installed "
            "(pip install 'taugrid[policy]')")  # fmt: skip
        return []
    return [bundled]


def _engine(stack: str, stacks_dir: Path | None) -> Any:
    try:
        from taugrid.infra.deploy import platform_engine
    except ImportError as e:
        raise missing_extra("platform", f"Pulumi ({e.name})") from None
    return platform_engine(stack, stacks_dir)


def _print_outcome(outcome: Any, output: ReportFormat) -> None:
    if output is ReportFormat.json:
        out(dump_json(outcome.doc()))
        return
    counts = ", ".join(f"{v} {k}" for k, v in outcome.summary.items() if v)
    out(f"{outcome.operation} {outcome.stack}: {counts or 'nothing'} ({outcome.seconds:.1f}s)")


def _confirm(what: str, yes: bool) -> None:
    import sys

    from taugrid.api.errors import EXIT_USAGE, TauError

    if yes:
        return
    if not sys.stdin.isatty():
        raise TauError(f"{what}: confirmation needed, and there is no terminal to ask",
                       exit_code=EXIT_USAGE, hint="pass --yes")  # fmt: skip
    if not typer.confirm(f"{what}?", default=False, err=True):
        raise typer.Exit(1)


@app.command("preview")
def platform_preview(
    stack: StackOpt,
    stacks_dir: StacksDirOpt = None,
    policy_pack: PolicyPackOpt = None,
    no_policies: NoPoliciesOpt = False,
    output: JsonOpt = ReportFormat.text,
) -> None:
    """What `up` would change in the stack's cluster (the engine's own preview), checked
    against the policy packs (a mandatory violation exits 4)."""
    eng = _engine(stack, stacks_dir)
    packs = _packs(policy_pack, no_policies)
    say(f"previewing stack {stack} ...")
    _print_outcome(
        eng.preview(say=say if output is ReportFormat.text else None, policy_packs=packs), output
    )


@app.command("up")
def platform_up(
    stack: StackOpt,
    stacks_dir: StacksDirOpt = None,
    yes: YesOpt = False,
    policy_pack: PolicyPackOpt = None,
    no_policies: NoPoliciesOpt = False,
    output: JsonOpt = ReportFormat.text,
) -> None:
    """Create or update the stack's platform (preview first; --yes skips the question). A
    mandatory policy violation stops it before anything changes (exit 4)."""
    eng = _engine(stack, stacks_dir)
    packs = _packs(policy_pack, no_policies)
    quiet = output is ReportFormat.json
    if not yes or packs:
        # the engine's `up` checks policies as it goes (resources before a violation would be
        # created): a preview with the packs first stops a violation before anything changes
        preview = eng.preview(say=None if quiet and yes else say, policy_packs=packs)
        if not quiet or not yes:
            _print_outcome(preview, ReportFormat.text)
        if not preview.changed():
            if quiet:
                _print_outcome(preview, output)
            return
        _confirm(f"apply these changes to stack {stack}", yes)
    say(f"updating stack {stack} ...")
    _print_outcome(eng.up(say=None if quiet else say, policy_packs=packs), output)


@app.command("destroy")
def platform_destroy(
    stack: StackOpt,
    stacks_dir: StacksDirOpt = None,
    yes: YesOpt = False,
    output: JsonOpt = ReportFormat.text,
) -> None:
    """Delete every resource of the stack from its cluster (the stack's state stays)."""
    eng = _engine(stack, stacks_dir)
    _confirm(f"destroy every resource of stack {stack}", yes)
    say(f"destroying stack {stack} ...")
    _print_outcome(eng.destroy(say=None if output is ReportFormat.json else say), output)
