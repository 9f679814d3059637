"""`tau local ...`: the local Ray head that `tau run --target local` uses."""

from __future__ import annotations

from typing import Any

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
    import time

    from taugrid.runs.backends.local import rayhead, standby

    head = rayhead.read_head()
    up = bool(head and rayhead.healthy(head))
    doc: dict[str, Any] = {"running": up}
    if head and up:
        doc.update(
            pid=head.pid,
            address=head.address,
            dashboard=head.dashboard,
            cpus=head.num_cpus,
            gpus=head.num_gpus,
            uptime_s=round(time.time() - head.started_at),
            standby_ready=standby.standby_count(head),
        )
    if output is ReportFormat.json:
        out(dump_json(doc))
    elif up:
        assert head is not None
        out(
            f"running: pid {head.pid}, {head.address}, dashboard {head.dashboard}, up {doc['uptime_s']}s"
            f"\nstandby jobs ready for the next run: {doc['standby_ready']}"
        )
    else:
        out("not running (the next local rayjob starts it)")


@app.command("start")
def local_start(output: JsonOpt = ReportFormat.text) -> None:
    """Start the local Ray head now (the first local run or service otherwise starts it),
    showing each stage as it comes up; the running one is kept. A busy machine may need
    longer than the default 600 s: TAU_LOCAL_START_TIMEOUT (seconds)."""
    import time

    from taugrid.cli.output import say
    from taugrid.runs.backends.local import rayhead
    from taugrid.runs.backends.local.backend import detect_gpus

    before = rayhead.read_head()
    was_up = bool(before and rayhead.healthy(before))
    t0 = time.monotonic()
    head = rayhead.ensure_head(num_gpus=detect_gpus(), say=say)
    doc: dict[str, Any] = {
        "started": not was_up,
        "pid": head.pid,
        "address": head.address,
        "dashboard": head.dashboard,
        "cpus": head.num_cpus,
        "gpus": head.num_gpus,
        "took_s": round(time.monotonic() - t0, 1),
    }
    if output is ReportFormat.json:
        out(dump_json(doc))
    elif was_up:
        out(f"already running: pid {head.pid}, {head.address}, dashboard {head.dashboard}")
    else:
        out(
            f"started in {doc['took_s']}s: pid {head.pid}, {head.address}, dashboard {head.dashboard}"
        )


@app.command("stop")
def local_stop() -> None:
    """Stop the local Ray head (runs on it are stopped too)."""
    from taugrid.runs.backends.local import rayhead

    head = rayhead.stop_head()
    out(
        f"stopped the local Ray head (pid {head.pid})"
        if head
        else "the local Ray head was not running"
    )
    if head:
        from taugrid.client import serve

        names = serve.local_services()
        if names:
            out(
                f"its services stopped too: {', '.join(names)} (`tau serve rollout NAME` puts one "
                "back on a new head; `tau serve delete NAME` forgets it)"
            )
