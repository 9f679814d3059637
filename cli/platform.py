"""`tau platform ...`: platform engineers inspect stacks offline (plan, diff, snapshot) and
apply them with the Pulumi engine (preview, up, destroy)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from taugrid.cli.options import JsonOpt, ReportFormat, StackOpt, StacksDirOpt
from taugrid.cli.output import dump_json, out, say

app = typer.Typer(
    help="Platform engineers: inspect stacks offline (plan, diff, snapshot: no credentials, no "
    "Pulumi CLI) and apply them with the Pulumi engine (preview, up, destroy).",
    no_args_is_help=True,
    rich_markup_mode=None,
)


def _plan_module() -> Any:
    from taugrid.client import platform

    return platform._plan()


@app.command("plan")
def platform_plan(
    stack: StackOpt, stacks_dir: StacksDirOpt = None, output: JsonOpt = ReportFormat.text
) -> None:
    """Every resource the stack would declare, with its key inputs (evaluated offline)."""
    from taugrid.client import platform

    inv = platform.plan(stack, stacks_dir)
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
    everything: Annotated[
        bool,
        typer.Option(
            "--all",
            help="The whole declaration difference (pools, queues, workspaces, the cluster: "
            "what promotion never moves)",
        ),
    ] = False,
) -> None:
    """What promoting SOURCE onto TARGET would change (offline): its version lock, and
    TARGET's resources that it changes."""
    from taugrid.client import platform

    d = platform.diff(source, target, stacks_dir, everything=everything)
    out(dump_json(d) if output is ReportFormat.json else "\n".join(_plan_module().format_diff(d)))


@app.command("snapshot")
def platform_snapshot(stack: StackOpt, stacks_dir: StacksDirOpt = None) -> None:
    """The stack's workload profiles as a snapshot file for `tau run render --profiles`."""
    from taugrid.api.yamlio import dump
    from taugrid.client import platform

    out(dump(platform.snapshot(stack, stacks_dir)))


# --- the real engine -------------------------------------------------------------------------
YesOpt = Annotated[
    bool, typer.Option("--yes", "-y", help="Skip the confirmation (as `pulumi up --yes`)")
]
RefreshOpt = Annotated[
    bool,
    typer.Option(
        "--refresh",
        help="Read the cluster as it is first: objects deleted or changed "
        "out of band are seen (and put back by up), as `pulumi up --refresh`",
    ),
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
    from taugrid.client import platform

    return platform.packs(packs, none, say)


def _print_outcome(outcome: Any, output: ReportFormat) -> None:
    if output is ReportFormat.json:
        out(dump_json(outcome.doc()))
        return
    counts = ", ".join(f"{v} {k}" for k, v in outcome.summary.items() if v)
    out(f"{outcome.operation} {outcome.stack}: {counts or 'nothing'} ({outcome.seconds:.1f}s)")


def _confirm(what: str) -> bool:
    import sys

    from taugrid.api.errors import EXIT_USAGE, TauError

    if not sys.stdin.isatty():
        raise TauError(
            f"{what}: confirmation needed, and there is no terminal to ask",
            exit_code=EXIT_USAGE,
            hint="pass --yes",
        )
    return bool(typer.confirm(f"{what}?", default=False, err=True))


@app.command("preview")
def platform_preview(
    stack: StackOpt,
    stacks_dir: StacksDirOpt = None,
    policy_pack: PolicyPackOpt = None,
    no_policies: NoPoliciesOpt = False,
    output: JsonOpt = ReportFormat.text,
    refresh: RefreshOpt = False,
) -> None:
    """What `up` would change in the stack's cluster (the engine's own preview), checked
    against the policy packs (a mandatory violation exits 4)."""
    from taugrid.client import platform

    packs = _packs(policy_pack, no_policies)
    got = platform.preview(
        stack,
        stacks_dir=stacks_dir,
        policy_packs=packs,
        refresh=refresh,
        say=say if output is ReportFormat.text else None,
    )
    _print_outcome(got, output)


@app.command("refresh")
def platform_refresh(
    stack: StackOpt, stacks_dir: StacksDirOpt = None, output: JsonOpt = ReportFormat.text
) -> None:
    """Read the stack's objects from its cluster: report the drift (each object deleted or
    changed out of band) and record it in the stack's state; `up` then puts it back."""
    from taugrid.client import platform

    got = platform.refresh(
        stack, stacks_dir=stacks_dir, say=say if output is ReportFormat.text else None
    )
    if output is ReportFormat.json:
        out(dump_json({**got.doc(), "drift": [s for s in got.steps if s.get("drift")]}))
        return
    drift = [s for s in got.steps if s.get("drift")]
    out(
        f"{len(drift)} object(s) drifted"
        + (f": run `tau platform up --stack {stack}` to put them back" if drift else "")
    )


@app.command("up")
def platform_up(
    stack: StackOpt,
    stacks_dir: StacksDirOpt = None,
    yes: YesOpt = False,
    policy_pack: PolicyPackOpt = None,
    no_policies: NoPoliciesOpt = False,
    output: JsonOpt = ReportFormat.text,
    refresh: RefreshOpt = False,
) -> None:
    """Create or update the stack's platform (preview first; --yes skips the question). A
    mandatory policy violation stops it before anything changes (exit 4)."""
    from taugrid.client import platform

    packs = _packs(policy_pack, no_policies)
    quiet = output is ReportFormat.json

    def confirm(preview: Any) -> bool:
        _print_outcome(preview, ReportFormat.text)
        return _confirm(f"apply these changes to stack {stack}")

    got = platform.up(
        stack,
        stacks_dir=stacks_dir,
        policy_packs=packs,
        refresh=refresh,
        confirm=None if yes else confirm,
        say=None if quiet else say,
    )
    if got.update is None:
        if not got.confirmed:
            raise typer.Exit(1)
        if got.preview is not None:
            _print_outcome(got.preview, output)
        return
    _print_outcome(got.update, output)


@app.command("destroy")
def platform_destroy(
    stack: StackOpt,
    stacks_dir: StacksDirOpt = None,
    yes: YesOpt = False,
    output: JsonOpt = ReportFormat.text,
) -> None:
    """Delete every resource of the stack from its cluster (the stack's state stays)."""
    from taugrid.client import platform

    if not yes and not _confirm(f"destroy every resource of stack {stack}"):
        raise typer.Exit(1)
    got = platform.destroy(
        stack, stacks_dir=stacks_dir, say=None if output is ReportFormat.json else say
    )
    _print_outcome(got, output)


@app.command("promote")
def platform_promote(
    source: Annotated[str, typer.Argument(help="The stack whose tested version lock moves")],
    target: Annotated[str, typer.Argument(help="Its promotesTo stack")],
    stacks_dir: StacksDirOpt = None,
    yes: YesOpt = False,
    output: JsonOpt = ReportFormat.text,
) -> None:
    """Move SOURCE's verified version lock (component versions, the AKS Kubernetes version;
    never pools, queues or workspaces) into TARGET's stack file, after showing the change and
    TARGET's offline preview. Refused when TARGET is not SOURCE's promotesTo or the lock has no
    recorded verification (`tau platform ci down ID --passed`)."""
    from taugrid.client import platform

    p, preview = platform.promotion(source, target, stacks_dir)
    doc = {**p.doc(), "written": False}
    if output is not ReportFormat.json:
        out("\n".join(p.lines()))
        if preview:
            out(f"{target}'s resources that change (offline preview):")
            out("\n".join(preview))
    if not p.changes:
        if output is ReportFormat.json:
            out(dump_json(doc))
        return
    if not yes and not _confirm(f"write these versions into {p.dst_file.name}"):
        raise typer.Exit(1)
    platform.promote(source, target, stacks_dir=stacks_dir)
    if output is ReportFormat.json:
        out(dump_json({**doc, "written": True}))
    else:
        out(f"wrote {p.dst_file}; next: tau platform preview --stack {target}, then up")


# --- disposable CI clusters ------------------------------------------------------------------
ci_app = typer.Typer(
    help="Disposable CI clusters: stack ci-<id> from the ci stack file, one per pipeline.",
    no_args_is_help=True,
    rich_markup_mode=None,
)
app.add_typer(ci_app, name="ci")


@ci_app.command("up")
def ci_up(
    name: Annotated[
        str | None,
        typer.Option(
            "--name",
            help="The pipeline's id (default: CI_PIPELINE_ID / GITHUB_RUN_ID, else random)",
        ),
    ] = None,
    ttl: Annotated[
        str, typer.Option("--ttl", help="When `ci reap` may destroy it (30m, 2h, 1d)")
    ] = "2h",
    source: Annotated[
        str | None,
        typer.Option(
            "--from", help="Run this stack's version lock (what `ci down --passed` then records)"
        ),
    ] = None,
    stacks_dir: StacksDirOpt = None,
    policy_pack: PolicyPackOpt = None,
    no_policies: NoPoliciesOpt = False,
    output: JsonOpt = ReportFormat.text,
) -> None:
    """Create (or update) the CI cluster ci-<id>; prints its id."""
    from taugrid.infra import ci

    ci_id = ci.new_id(name)
    outcome = ci.up(
        ci_id,
        ci.parse_ttl(ttl),
        source,
        say if output is ReportFormat.text else (lambda _m: None),
        stacks_dir,
        _packs(policy_pack, no_policies),
    )
    if output is ReportFormat.json:
        out(dump_json({"id": ci_id, **outcome.doc()}))
    else:
        _print_outcome(outcome, output)
        out(ci_id)


@ci_app.command("down")
def ci_down(
    ci_id: Annotated[str, typer.Argument(help="The id `ci up` printed")],
    passed: Annotated[
        bool,
        typer.Option(
            "--passed",
            help="The pipeline's tests passed: record that the lock it ran (--from) is verified",
        ),
    ] = False,
    stacks_dir: StacksDirOpt = None,
    output: JsonOpt = ReportFormat.text,
) -> None:
    """Destroy the CI cluster ci-<id> and remove its stack."""
    from taugrid.infra import ci

    _print_outcome(ci.down(ci_id, passed, say, stacks_dir), output)


@ci_app.command("list")
def ci_list(output: JsonOpt = ReportFormat.text) -> None:
    """The CI stacks in the backend, with their expiry."""
    from taugrid.infra import ci

    stacks = ci.list_ci()
    if output is ReportFormat.json:
        out(dump_json([s.doc() for s in stacks]))
        return
    for s in stacks:
        state = "expired" if s.expired else f"expires {s.expires}"
        out(f"{ci.PREFIX}{s.id}  {state}{f'  from {s.source} ({s.lock})' if s.source else ''}")
    if not stacks:
        out("no CI stacks")


@ci_app.command("reap")
def ci_reap(output: JsonOpt = ReportFormat.text) -> None:
    """Destroy every expired CI cluster."""
    from taugrid.infra import ci

    gone = ci.reap(say)
    out(
        dump_json({"reaped": gone})
        if output is ReportFormat.json
        else f"reaped {len(gone)} CI stack(s){': ' + ', '.join(gone) if gone else ''}"
    )
