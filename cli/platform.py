"""`tau platform ...`: platform engineers inspect stacks offline (no credentials, no CLI)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from taugrid.api.errors import missing_extra
from taugrid.cli.options import JsonOpt, ReportFormat, StackOpt, StacksDirOpt
from taugrid.cli.output import dump_json, out

app = typer.Typer(
    help="Platform engineers: inspect stacks offline (no credentials, no Pulumi CLI).",
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
