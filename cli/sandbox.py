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
        + "".join(
            f"\n  MultiKueue worker {name}: API server {w['api']}, {len(w['nodes'])} KWOK nodes"
            + (f", real: {', '.join(w['real_nodes'])}" if w.get("real_nodes") else "")
            + f" (kubeconfig context {name})"
            for name, w in state.workers.items()
        )
        + "\n"
        "  kubeconfig (admin):      tau sandbox kubeconfig\n"
        "  kubeconfig (researcher): tau sandbox kubeconfig --as researcher\n"
        + ("" if state.platform else _platform_hint(state))
        + "  what runs:               tau sandbox status\n"
        "  stop everything:         tau sandbox down"
    )


def _platform_hint(state: Any) -> str:
    """How to put the platform on a sandbox made without it; with workers, the order that
    wires them (each worker's stack first, reached by its context, then the manager's)."""
    up = "KUBECONFIG=$(tau sandbox kubeconfig) tau platform up"
    if not state.workers:
        return f"  install the platform:    {up} --stack {state.stack} --yes\n"
    return (
        "  wire it with Pulumi:     each worker's stack first (multiCluster: {role: worker, "
        "name: W}, cluster.context: W),\n"
        f"                           then the manager's (role: manager, workers: [...]): {up} "
        "--stack S --yes\n"
        "                           (docs/multicluster.md)\n"
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
    clusters: Annotated[
        int,
        typer.Option(
            "--clusters",
            min=1,
            max=3,
            help="2 or 3: a MultiKueue manager (this sandbox's API server) and 1 or 2 workers, "
            "each its own control plane; runs submitted here are dispatched to the workers "
            "(with --real-nodes N, each worker gets N real nodes; default: KWOK only)",
        ),
    ] = 1,
) -> None:
    """Start the sandbox (idempotent) and install the stack's platform objects."""
    from taugrid.sandbox import cluster as sandbox

    state, started = sandbox.up(
        say, stack, stacks_dir, platform=not no_platform, real_nodes=real_nodes, clusters=clusters
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
                    "workers": {
                        n: {
                            "api": w["api"],
                            "nodes": w["nodes"],
                            "real_nodes": w.get("real_nodes") or [],
                        }
                        for n, w in state.workers.items()
                    },
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
        for name, w in state.workers.items():
            lines.append(
                f"  MultiKueue worker {name}: API server {w['api']}"
                + (f", real nodes: {', '.join(w['real_nodes'])}" if w.get("real_nodes") else "")
            )
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


def _knob(flag: str, why: str, count: bool = False) -> Any:
    """A knob of `tau sandbox gpu`: unset unless given."""
    if count:
        return typer.Option(flag, min=0, show_default=False, help=why)
    return typer.Option(flag, show_default=False, help=why)


IdleKnob = Annotated[
    bool | None,
    _knob("--idle/--busy", "Its pods' GPUs report ~1% SM activity (held, doing nothing)"),
]
MissingKnob = Annotated[
    int | None,
    _knob("--missing", "Register that many GPUs fewer (capacity and exporter); 0 restores", True),
]
XidKnob = Annotated[
    int | None,
    _knob(
        "--xid",
        "An XID fault on GPU 0 (the exporter's last XID and NPD's GPUXidError); 0 clears it",
        True,
    ),
]
DownKnob = Annotated[bool | None, _knob("--down/--up", "Its exporter stops answering")]
GarbageKnob = Annotated[bool | None, _knob("--garbage/--sane", "Its exporter answers garbage")]
DiagKnob = Annotated[
    bool | None, _knob("--diag-fail/--diag-pass", "DCGM's diagnostics fail on it (--active)")
]
NcclKnob = Annotated[
    float | None,
    _knob("--nccl-gbps", "The bus bandwidth its NCCL all-reduce reaches (--active); 0 resets"),
]


@app.command("gpu")
def sandbox_gpu(
    node: Annotated[str, typer.Argument(help="A simulated GPU node (tau sandbox status)")],
    idle: IdleKnob = None,
    missing: MissingKnob = None,
    xid: XidKnob = None,
    down: DownKnob = None,
    garbage: GarbageKnob = None,
    diag_fail: DiagKnob = None,
    nccl_gbps: NcclKnob = None,
    reset: Annotated[bool, typer.Option("--reset", help="Every knob back to normal")] = False,
    output: JsonOpt = ReportFormat.text,
) -> None:
    """Turn a simulated GPU node's knobs: its simulated DCGM exporter (and what the cluster shows
    of the node) then says so. With no knob: what is turned now."""
    from taugrid.api.kubetime import k8s_time
    from taugrid.sandbox import cluster as sandbox
    from taugrid.sandbox import dcgmsim

    given = {
        "idle": idle,
        "missing": missing,
        "xid": xid,
        "down": down,
        "garbage": garbage,
        "diag_fail": diag_fail,
        "nccl_gbps": nccl_gbps,
    }
    changes: dict[str, Any] = {k: v for k, v in given.items() if v is not None}
    if reset:
        changes = {k: None for k in given} | {"missing": 0, "xid": 0}
    knobs = dcgmsim.set_knobs(sandbox.admin_kube(), node, changes, k8s_time())
    if output is ReportFormat.json:
        out(dump_json({"node": node, "knobs": knobs}))
    else:
        said = ", ".join(f"{k}={v}" for k, v in knobs.items()) or "none (a healthy, busy node)"
        out(f"{node}: knobs {said}")
