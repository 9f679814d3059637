"""`tau sandbox ...`: a real Kubernetes control plane on this machine (127.0.0.1 only)."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from taugrid.cli.options import JsonOpt, ReportFormat, StacksDirOpt
from taugrid.cli.output import dump_json, out, say

app = typer.Typer(
    help="A local Kubernetes cluster with the platform on it (127.0.0.1 only), for trying the "
    "cluster path without a cloud.",
    no_args_is_help=True,
    rich_markup_mode=None,
)


def _usage(state: Any) -> str:
    return (
        f"sandbox: API server {state.api}, stack {state.stack}, {len(state.nodes)} KWOK nodes"
        + (
            f", {len(state.real_nodes)} real: {', '.join(state.real_nodes)}"
            if state.real_nodes
            else ""
        )
        + "\n"
        "  kubeconfig (admin):      tau sandbox kubeconfig\n"
        "  kubeconfig (researcher): tau sandbox kubeconfig --as researcher\n"
        + (
            ""
            if state.platform
            else f"  install the platform:    KUBECONFIG=$(tau sandbox kubeconfig) tau platform up "
            f"--stack {state.stack} --yes\n"
        )
        + "  what runs:               tau sandbox status\n"
        "  stop everything:         tau sandbox down"
    )


@app.command("up")
def sandbox_up(
    stack: Annotated[str, typer.Option("--stack", "-s", help="The stack it installs")] = "sandbox",
    stacks_dir: StacksDirOpt = None,
    no_platform: Annotated[
        bool,
        typer.Option(
            "--no-platform",
            help="The cluster only: `tau platform up --stack sandbox` "
            "installs the platform with the Pulumi engine",
        ),
    ] = False,
    real_nodes: Annotated[
        int | None,
        typer.Option(
            "--real-nodes",
            min=0,
            max=3,
            show_default=False,
            help="Real nodes (kubelet, containerd, runc; up to 3) for the stack's CPU pool, where "
            "CPU runs execute (needs root, containerd and `make images`). Default 1 where this "
            "machine can run it, else 0 with the reason in `tau sandbox status`; 0: KWOK only, "
            "the fastest start.",
        ),
    ] = None,
) -> None:
    """Start the sandbox (idempotent) and install the stack's platform objects."""
    from taugrid.sandbox import cluster as sandbox

    state, started = sandbox.up(
        say, stack, stacks_dir, platform=not no_platform, real_nodes=real_nodes
    )
    if not started:
        say("the sandbox is already up")
    for name, why in state.skipped.items():
        say(f"note: {name} does not run: {why}")
    out(_usage(state))


@app.command("down")
def sandbox_down() -> None:
    """Stop every process the sandbox started and remove its state."""
    from taugrid.sandbox import cluster as sandbox

    if sandbox.down(say) is None:
        out("the sandbox was not up")


@app.command("status")
def sandbox_status(output: JsonOpt = ReportFormat.text) -> None:
    """Each component of the sandbox, and whether it runs."""
    from taugrid.sandbox import cluster as sandbox

    state = sandbox.State.read()
    if state is None:
        if output is ReportFormat.json:
            out(dump_json({"up": False}))
        else:
            out("the sandbox is not up (tau sandbox up starts it)")
        raise typer.Exit(3)
    rows = sandbox.component_status(state)
    ready = sandbox.api_ready(state)
    if output is ReportFormat.json:
        out(
            dump_json(
                {
                    "up": ready,
                    "api": state.api,
                    "stack": state.stack,
                    "nodes": state.nodes,
                    "real_nodes": state.real_nodes,
                    "components": rows,
                }
            )
        )
    else:
        lines = [
            f"sandbox {'up' if ready else 'DOWN'}: API server {state.api} "
            f"({'ready' if ready else 'not answering'})"
        ]
        for r in rows:
            what = (
                "running" if r["running"] else f"not running{': ' + r['why'] if 'why' in r else ''}"
            )
            lines.append(
                f"  {r['component']:<24} {what}" + (f" (pid {r['pid']})" if "pid" in r else "")
            )
        lines.append(f"  KWOK nodes: {', '.join(state.nodes)}")
        if state.real_nodes:
            lines.append(f"  real nodes: {', '.join(state.real_nodes)}")
        out("\n".join(lines))
    if not ready:
        raise typer.Exit(4)


@app.command("kubeconfig")
def sandbox_kubeconfig(
    as_: Annotated[
        str, typer.Option("--as", help="admin, researcher, or a workspace member's name")
    ] = "admin",
) -> None:
    """Print the path of a kubeconfig for the sandbox (export KUBECONFIG=$(tau sandbox
    kubeconfig))."""
    from taugrid.sandbox import cluster as sandbox

    out(str(sandbox.kubeconfig(as_)))


@app.command("gpu")
def sandbox_gpu(
    node: Annotated[
        str, typer.Argument(help="A simulated GPU node (tau sandbox status lists them)")
    ],
    idle: Annotated[
        bool | None,
        typer.Option(
            "--idle/--busy",
            show_default=False,
            help="Its pods' GPUs report ~1% SM activity (a run holding GPUs, doing nothing)",
        ),
    ] = None,
    missing: Annotated[
        int | None,
        typer.Option(
            "--missing",
            min=0,
            show_default=False,
            help="Register that many GPUs fewer (capacity and exporter alike); 0 restores",
        ),
    ] = None,
    xid: Annotated[
        int | None,
        typer.Option(
            "--xid",
            min=0,
            show_default=False,
            help="An XID fault on GPU 0 (the exporter's last XID and NPD's GPUXidError "
            "condition); 0 clears it",
        ),
    ] = None,
    down: Annotated[
        bool | None,
        typer.Option("--down/--up", show_default=False, help="Its exporter stops answering"),
    ] = None,
    garbage: Annotated[
        bool | None,
        typer.Option(
            "--garbage/--sane", show_default=False, help="Its exporter answers not its format"
        ),
    ] = None,
    reset: Annotated[bool, typer.Option("--reset", help="Every knob back to normal")] = False,
    output: JsonOpt = ReportFormat.text,
) -> None:
    """Turn a simulated GPU node's knobs: its simulated DCGM exporter (and what the cluster shows
    of the node) then says so. With no knob: what is turned now."""
    from taugrid.api.kubetime import k8s_time
    from taugrid.sandbox import cluster as sandbox
    from taugrid.sandbox import dcgmsim

    changes: dict[str, Any] = {
        k: v
        for k, v in {
            "idle": idle,
            "missing": missing,
            "xid": xid,
            "down": down,
            "garbage": garbage,
        }.items()
        if v is not None
    }
    if reset:
        changes = {"idle": None, "missing": 0, "xid": 0, "down": None, "garbage": None}
    kube = sandbox.admin_kube()
    knobs = dcgmsim.set_knobs(kube, node, changes, k8s_time())
    if output is ReportFormat.json:
        out(dump_json({"node": node, "knobs": knobs}))
    else:
        said = ", ".join(f"{k}={v}" for k, v in knobs.items()) or "none (a healthy, busy node)"
        out(f"{node}: knobs {said}")
