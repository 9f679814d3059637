"""`tau serve ...`: serve a model from a run or the registry with Ray Serve
(taugrid.client.serve)."""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from taugrid.api.errors import EXIT_RUN_FAILED, EXIT_USAGE, TauError
from taugrid.cli.options import ContextOpt, FileArg, JsonOpt, ProfileOpt, ReportFormat, WorkspaceOpt
from taugrid.cli.output import columns, dump_json, out, say

if TYPE_CHECKING:
    from taugrid.api.serve import ServiceStatus

app = typer.Typer(
    no_args_is_help=True,
    help="Serve models: deploy, roll out, roll back, scale, "
    "invoke (Ray Serve; every deploy is a revision).",
)

NameArg = Annotated[str, typer.Argument(help="The service's name")]
NameOpt = Annotated[
    str | None, typer.Option("--name", help="Service name (default: tau.yaml's name)")
]
ModelOpt = Annotated[
    str | None,
    typer.Option("--model", help="NAME@ALIAS or NAME@sha256:VERSION (overrides service.model)"),
]
FromRunOpt = Annotated[
    str | None, typer.Option("--from-run", help="Serve a run's checkpoint (registered as a model)")
]
CheckpointOpt = Annotated[
    str | None, typer.Option("--checkpoint", help="With --from-run: latest or best")
]
ServeTargetOpt = Annotated[
    str, typer.Option("--target", "-t", help="local (Ray Serve on the local Ray head) or kube")
]
NoWaitOpt = Annotated[bool, typer.Option("--no-wait", help="Return once deployed, not ready")]
StrategyOpt = Annotated[
    str | None,
    typer.Option(
        "--strategy",
        help="rolling, blue-green or canary (default: the tau.yaml's service.rollout.strategy)",
    ),
]


def _show(st: ServiceStatus, output: ReportFormat) -> None:
    if output is ReportFormat.json:
        out(dump_json(st.model_dump(mode="json")))
        return
    lines = [
        f"{st.name}  {st.phase}  revision {st.revision}"
        + (f"  model {st.model}" if st.model else ""),
        f"  {st.summary}",
    ]
    if st.endpoint:
        lines.append(f"  endpoint: {st.endpoint}")
    r = st.replicas
    serving = {True: "yes (a request answered)", False: "no", None: "not asked"}[st.serving]
    lines.append(
        f"  replicas: {r.ready}/{r.wanted} ready"
        + (f", {r.starting} starting" if r.starting else "")
        + f"  ({st.scale})  healthy: {'yes' if st.healthy else 'no'}  serving: {serving}"
    )
    if st.admitted is not None:
        lines.append(f"  admitted by Kueue: {'yes' if st.admitted else 'no'}")
    if st.rollout:
        t = st.rollout["traffic"]
        lines.append(
            f"  rollout: revision {st.rollout['from']} -> {st.rollout['to']} "
            f"({st.rollout['strategy']}): {st.rollout['new_ready']} new replica(s) ready; "
            "traffic " + ", ".join(f"r{k} {v}%" for k, v in t.items())
        )
    if st.revisions:
        lines.append("  revisions:")
        for row in st.revisions[-5:]:
            mark = {"serving": "*", "previous": "<", "canary": "~"}.get(row["state"], " ")
            lines.append(
                f"   {mark} {row['revision']:>3}  {row['created_at'][:19]}  "
                f"{row['model'] or '-'}  {row['reason']} by {row['created_by']}"
            )
    if st.events:
        lines.append("  events:")
        lines += [f"    {e.at[:19]}  {e.kind:<10} {e.message}" for e in st.events[-6:]]
    out("\n".join(lines))


@app.command("deploy")
def deploy(
    file: FileArg = None,
    name: NameOpt = None,
    model: ModelOpt = None,
    from_run: FromRunOpt = None,
    checkpoint: CheckpointOpt = None,
    target: ServeTargetOpt = "local",
    port: Annotated[
        int | None,
        typer.Option(
            "--port", help="Local: the HTTP port of Ray Serve's proxy (default: a free one)"
        ),
    ] = None,
    context: ContextOpt = None,
    workspace: WorkspaceOpt = None,
    profile: ProfileOpt = None,
    no_wait: NoWaitOpt = False,
    output: JsonOpt = ReportFormat.text,
) -> None:
    """Deploy a new service (revision 1) from the tau.yaml's `service` block, and wait until it
    serves. The model reference is pinned to its exact version now. --target kube: a RayService
    in your workspace, admitted by Kueue."""
    from taugrid.client import serve

    st = serve.deploy(
        file,
        name=name,
        model=model,
        from_run=from_run,
        checkpoint=checkpoint,
        target=target,
        port=port,
        context=context,
        workspace=workspace,
        profile=profile,
        wait=not no_wait,
        say=say,
    )
    _show(st, output)


@app.command("rollout")
def rollout(
    name: NameArg,
    file: FileArg = None,
    model: ModelOpt = None,
    from_run: FromRunOpt = None,
    checkpoint: CheckpointOpt = None,
    strategy: StrategyOpt = None,
    step: Annotated[
        int | None, typer.Option("--step", help="canary: the new revision's traffic share, %")
    ] = None,
    no_wait: NoWaitOpt = False,
    output: JsonOpt = ReportFormat.text,
) -> None:
    """Roll out a new revision: the tau.yaml again (default: the one it was deployed from) and/or
    a new model. No request is dropped; a revision that fails to start is rolled back."""
    from taugrid.client import serve

    st = serve.rollout(
        name,
        file,
        model=model,
        from_run=from_run,
        checkpoint=checkpoint,
        strategy=strategy,
        step=step,
        wait=not no_wait,
        say=say,
    )
    _show(st, output)


@app.command("rollback")
def rollback(
    name: NameArg,
    to: Annotated[
        int | None,
        typer.Option("--to", help="The revision (default: the one before the last change)"),
    ] = None,
    no_wait: NoWaitOpt = False,
    output: JsonOpt = ReportFormat.text,
) -> None:
    """Serve a kept revision again: its code and its pinned model version, as they were."""
    from taugrid.client import serve

    _show(serve.rollback(name, to=to, wait=not no_wait, say=say), output)


@app.command("promote")
def promote(name: NameArg, no_wait: NoWaitOpt = False, output: JsonOpt = ReportFormat.text) -> None:
    """Give a canary revision all the requests: it becomes the serving revision (the one before
    stays for `tau serve rollback`)."""
    from taugrid.client import serve

    _show(serve.promote(name, wait=not no_wait, say=say), output)


@app.command("scale")
def scale(
    name: NameArg,
    replicas: Annotated[
        int | None, typer.Option("--replicas", help="A fixed count (0 stops every replica)")
    ] = None,
    min_replicas: Annotated[
        int | None, typer.Option("--min", help="Autoscaling: at least (0: scale to zero when idle)")
    ] = None,
    max_replicas: Annotated[int | None, typer.Option("--max", help="Autoscaling: at most")] = None,
    output: JsonOpt = ReportFormat.text,
) -> None:
    """Change the replica count or the autoscaling bounds (not a new revision)."""
    from taugrid.client import serve

    _show(
        serve.scale(
            name, replicas=replicas, min_replicas=min_replicas, max_replicas=max_replicas, say=say
        ),
        output,
    )


@app.command("status")
def status(
    name: NameArg,
    watch: Annotated[
        bool, typer.Option("--watch", "-w", help="Print each change until it settles")
    ] = False,
    output: JsonOpt = ReportFormat.text,
) -> None:
    """Phase, replicas ready, whether a request is answered, the rollout's progress, revisions."""
    from taugrid.client import serve

    if not watch:
        _show(serve.status(name), output)
        return
    for st in serve.watch(name):
        _show(st, output)


@app.command("list")
def list_(output: JsonOpt = ReportFormat.text) -> None:
    """This machine's services."""
    from taugrid.client import serve

    rows = serve.list_services()
    if output is ReportFormat.json:
        out(dump_json([st.model_dump(mode="json", exclude={"events", "revisions"}) for st in rows]))
        return
    if not rows:
        out("no services (tau serve deploy [tau.yaml])")
        return
    out(
        columns(
            ["NAME", "TARGET", "PHASE", "REV", "MODEL", "REPLICAS", "ENDPOINT"],
            [
                [
                    s.name,
                    s.target,
                    s.phase,
                    str(s.revision),
                    s.model or "-",
                    f"{s.replicas.ready}/{s.replicas.wanted}",
                    s.endpoint or "-",
                ]
                for s in rows
            ],
        )
    )


@app.command("logs")
def logs(
    name: NameArg,
    follow: Annotated[bool, typer.Option("--follow", "-f", help="Keep printing new lines")] = False,
    tail: Annotated[int, typer.Option("--tail", help="Lines to show first (0: all)")] = 200,
) -> None:
    """The replicas' logs (each line prefixed with its replica)."""
    from taugrid.client import serve

    with contextlib.suppress(KeyboardInterrupt):  # ^C ends a follow
        serve.logs(name, sys.stdout, follow=follow, tail=tail or None)


def _body(data: str | None, raw: str | None) -> tuple[bytes | None, str]:
    """The request body and its content type: --data is JSON (text or @FILE), checked here
    (a typo is said with its place, never sent as a request the service cannot parse);
    --data-raw is sent as it is."""
    if data is not None and raw is not None:
        raise TauError("--data is JSON, --data-raw any bytes: give one", exit_code=EXIT_USAGE)
    given, flag = (data, "--data") if data is not None else (raw, "--data-raw")
    if given is None:
        return None, "application/json"
    body = given.encode()
    if given.startswith("@"):
        p = Path(given[1:])
        try:
            body = p.read_bytes()
        except OSError as e:
            raise TauError(
                f"{flag} {given}: cannot read {p} ({e.strerror or e})", exit_code=EXIT_USAGE
            ) from None
    if raw is not None:
        return body, "application/octet-stream"
    import json

    try:
        json.loads(body)
    except ValueError as e:  # UnicodeDecodeError too
        where = (
            f" (line {e.lineno}, column {e.colno})" if isinstance(e, json.JSONDecodeError) else ""
        )
        raise TauError(
            f"--data is not JSON{where}: {getattr(e, 'msg', e)}",
            exit_code=EXIT_USAGE,
            hint="quote it for the shell, e.g. --data '{\"features\": [1, 2]}'; "
            "--data-raw sends other bytes as they are",
        ) from None
    return body, "application/json"


@app.command("invoke")
def invoke(
    name: NameArg,
    data: Annotated[
        str | None,
        typer.Option("--data", "-d", help="Request body: JSON text, or @FILE (checked to be JSON)"),
    ] = None,
    data_raw: Annotated[
        str | None,
        typer.Option(
            "--data-raw",
            help="Request body sent as it is (text or @FILE), application/octet-stream",
        ),
    ] = None,
    path: Annotated[
        str, typer.Option("--path", help="Under the service's route, e.g. /predict")
    ] = "",
    output: JsonOpt = ReportFormat.text,
) -> None:
    """Send one request (POST with --data or --data-raw, else GET) and print the answer."""
    from taugrid.client import serve

    body, content_type = _body(data, data_raw)
    ans = serve.invoke(name, body, path=path, content_type=content_type)
    if output is ReportFormat.json:
        doc: dict[str, Any] = {
            "status": ans.status,
            "seconds": round(ans.seconds, 4),
            "url": ans.url,
        }
        try:
            doc["body"] = ans.json()
        except ValueError:
            doc["body"] = ans.text
        out(dump_json(doc))
    else:
        out(ans.text)
        say(f"HTTP {ans.status} in {ans.seconds * 1000:.0f} ms ({ans.url})")
    if ans.status >= 400:
        raise typer.Exit(EXIT_RUN_FAILED)


@app.command("delete")
def delete(name: NameArg, output: JsonOpt = ReportFormat.text) -> None:
    """Remove the service (its replicas stop; its record and revisions are kept aside)."""
    from taugrid.client import serve

    rec = serve.delete(name, say=say)
    if output is ReportFormat.json:
        out(
            dump_json(
                {"name": rec.name, "deleted_at": rec.deleted_at, "revisions": len(rec.revisions)}
            )
        )
    else:
        out(f"deleted {rec.name} ({len(rec.revisions)} revision(s) kept in the service's record)")
