"""`tau local ...`: the local Ray head that `tau run --target local` uses."""

from __future__ import annotations

import typer

from taugrid.cli.options import JsonOpt, ReportFormat
from taugrid.cli.output import dump_json, out

app = typer.Typer(
    help="The local Ray head that `tau run --target local` uses.",
    no_args_is_help=True,
    rich_markup_mode=None,
)


@app.command("status")
def local_status(output: JsonOpt = ReportFormat.text) -> None:
    """Is the local Ray head running, and where."""
    from taugrid.client import local

    head = local.status()
    if output is ReportFormat.json:
        out(dump_json(head.as_json()))
    elif head.running:
        out(
            f"running: pid {head.pid}, {head.address}, dashboard {head.dashboard}, "
            f"up {head.uptime_s}s\nstandby jobs ready for the next run: {head.standby_ready}"
        )
    else:
        out("not running (the next local rayjob starts it)")


@app.command("start")
def local_start(output: JsonOpt = ReportFormat.text) -> None:
    """Start the local Ray head now (the first local run or service otherwise starts it),
    showing each stage as it comes up; the running one is kept. A busy machine may need
    longer than the default 600 s: TAU_LOCAL_START_TIMEOUT (seconds)."""
    from taugrid.cli.output import say
    from taugrid.client import local

    got = local.start(say)
    head = got.head
    if output is ReportFormat.json:
        doc = {"started": got.started, **head.as_json(), "took_s": got.took_s}
        doc.pop("running", None)
        out(dump_json(doc))
    elif not got.started:
        out(f"already running: pid {head.pid}, {head.address}, dashboard {head.dashboard}")
    else:
        out(f"started in {got.took_s}s: pid {head.pid}, {head.address}, dashboard {head.dashboard}")


@app.command("stop")
def local_stop() -> None:
    """Stop the local Ray head (runs on it are stopped too); returns once every process of it
    has ended and its ports are closed."""
    from taugrid.cli.output import say
    from taugrid.client import local

    got = local.stop(say=say)
    out(
        f"stopped the local Ray head (pid {got.pid})"
        if got.pid
        else "the local Ray head was not running"
    )
    if got.services:
        out(
            f"its services stopped too: {', '.join(got.services)} (`tau serve rollout NAME` "
            "puts one back on a new head; `tau serve delete NAME` forgets it)"
        )
