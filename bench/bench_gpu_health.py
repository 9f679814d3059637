"""Budgets of GPU node validation (#41): passive validation of 100 GPU nodes <= 60 s (here: the
report `tau cluster validate nodes` makes, over an in-memory cluster of 100 8-GPU nodes, verdicts
kept on each); a node that registers 7 of its 8 GPUs named (its failed verdict written) <= 60 s
after it registers: here, the controller's pass over 100 nodes that carry the validating taint.
Against a real cluster the API server's round trips add to both (one LIST, one PATCH a node).

Reading DCGM for 100 GPU nodes <= 0.1 core: one pass of the controller's GPU-use worker over 100
8-GPU nodes whose exporters (another process, on loopback) print dcgm-exporter's default counter
set (~30 fields a GPU), every GPU held by a run: its CPU time per pass over the scrape interval.

    .venv/bin/python bench/bench_gpu_health.py
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import statistics
import time
from typing import Any

NODES = 100


def node(i: int, gpus: str = "8") -> dict[str, Any]:
    from taugrid.api import constants as C
    from taugrid.api import gpuhealth as G

    return {
        "metadata": {
            "name": f"nd96-{i:03d}",
            "resourceVersion": "1",
            "labels": {
                C.LABEL_POOL: "nd96",
                G.GFD_PRODUCT: "NVIDIA-A100-SXM4-40GB",
                G.GFD_COUNT: "8",
                G.GFD_DRIVER_MAJOR: "550",
            },
        },
        "spec": {"taints": [{"key": C.VALIDATING_TAINT, "value": "passive"}]},
        "status": {
            "capacity": {C.GPU_RESOURCE: "8"},
            "allocatable": {C.GPU_RESOURCE: gpus},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


POOL = {"name": "nd96", "vmSize": "Standard_ND96asr_v4", "gpusPerNode": 8, "gpuClass": "a100-40gb"}


def report_of_100() -> float:
    """`tau cluster validate nodes` over 100 nodes (an in-memory cluster), verdicts kept."""
    from taugrid.client import cluster
    from taugrid.kube.discovery import Discovery
    from taugrid.kube.fake import FakeKube

    fake = FakeKube(
        {
            "TauCluster": [
                {"metadata": {"name": "cluster"}, "spec": {"stack": "b", "pools": [POOL]}}
            ],
            "Node": [node(i, "7" if i == 50 else "8") for i in range(NODES)],
        }
    )
    cluster.discovery = lambda context=None: Discovery(fake)  # type: ignore[assignment]
    t = time.perf_counter()
    got = cluster.validate_nodes()
    took = time.perf_counter() - t
    assert len(got.verdicts) == NODES and not got.passed and got.kept
    return took


def controller_pass_of_100() -> float:
    """The controller's validation pass over 100 registering nodes (one degraded)."""
    from taugrid.controller.config import ControllerConfig
    from taugrid.controller.operator import Controller
    from taugrid.kube.fake import FakeKube

    nodes = [node(i, "7" if i == 50 else "8") for i in range(NODES)]
    fake = FakeKube({"Node": nodes})
    ctl = Controller(ControllerConfig(), fake)  # type: ignore[arg-type]
    ctl.nodes = {n["metadata"]["name"]: n for n in fake.list("Node")}
    ctl._indexes = {"clusters": {}}
    tc = {"metadata": {"name": "cluster"}, "spec": {"pools": [POOL]}}
    ctl._object = lambda kind, name: tc  # type: ignore[method-assign]
    t = time.perf_counter()
    asyncio.run(ctl.validate_nodes(dt.datetime.now(dt.UTC)))
    took = time.perf_counter() - t
    lifted = sum(1 for n in fake.list("Node") if not n["spec"].get("taints"))
    assert lifted == NODES - 1, lifted
    return took


# dcgm-exporter's default counters the controller does not read (it must skip them)
OTHER_FIELDS = [
    "DCGM_FI_DEV_MEM_CLOCK",
    "DCGM_FI_DEV_MEMORY_TEMP",
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
    "DCGM_FI_DEV_PCIE_REPLAY_COUNTER",
    "DCGM_FI_DEV_MEM_COPY_UTIL",
    "DCGM_FI_DEV_ENC_UTIL",
    "DCGM_FI_DEV_DEC_UTIL",
    "DCGM_FI_DEV_FB_FREE",
    "DCGM_FI_DEV_FB_RESERVED",
    "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL",
    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
    "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
    "DCGM_FI_DEV_ROW_REMAP_FAILURE",
    "DCGM_FI_DEV_VGPU_LICENSE_STATUS",
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
    "DCGM_FI_PROF_DRAM_ACTIVE",
    "DCGM_FI_PROF_PCIE_TX_BYTES",
    "DCGM_FI_PROF_PCIE_RX_BYTES",
    "DCGM_EXP_XID_ERRORS_COUNT",
    "DCGM_EXP_CLOCK_EVENTS_COUNT",
    "DCGM_EXP_GPU_HEALTH_STATUS",
]


def exporter_text(name: str, pods: list[dict[str, Any]]) -> str:
    """What an 8-GPU node's exporter prints: the simulated one's fields and the others."""
    from taugrid.sandbox.dcgmsim import exposition

    base = exposition(node_named(name), pods)
    extra = []
    for line in base.splitlines():
        if line.startswith("DCGM_FI_PROF_SM_ACTIVE{"):
            labels = line[len("DCGM_FI_PROF_SM_ACTIVE") : line.rindex("}") + 1]
            extra += [f"{f}{labels} 1" for f in OTHER_FIELDS]
    heads = [f"# HELP {f} {f}.\n# TYPE {f} gauge" for f in OTHER_FIELDS]
    return base + "\n".join(heads + extra) + "\n"


def node_named(name: str) -> dict[str, Any]:
    n = node(int(name.rsplit("-", 1)[1]))
    n["metadata"]["name"] = name
    return n


def run_pods(i: int) -> list[dict[str, Any]]:
    return [
        {
            "metadata": {
                "name": f"run{i:03d}-worker",
                "namespace": "research",
                "creationTimestamp": "2026-12-01T00:00:00Z",
            },
            "spec": {
                "nodeName": f"nd96-{i:03d}",
                "containers": [{"name": "w", "resources": {"limits": {"nvidia.com/gpu": 8}}}],
            },
            "status": {"phase": "Running"},
        }
    ]


def _serve(port: Any, texts: dict[str, bytes]) -> None:
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class H(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = texts[self.path.split("/")[2]]
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a: Any) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), H)
    port.value = server.server_address[1]
    server.serve_forever()


def dcgm_passes_of_100(passes: int = 5) -> tuple[float, int]:
    """The GPU-use worker's CPU seconds per pass over 100 nodes (median), and the bytes read."""
    import multiprocessing as mp

    from taugrid.controller.config import ControllerConfig
    from taugrid.controller.gpuwatch import GpuWatch
    from taugrid.kube.fake import FakeKube

    names = [f"nd96-{i:03d}" for i in range(NODES)]
    texts = {n: exporter_text(n, run_pods(i)).encode() for i, n in enumerate(names)}
    port = mp.Value("i", 0)
    server = mp.get_context("fork").Process(target=_serve, args=(port, texts), daemon=True)
    server.start()
    try:
        while not port.value:
            time.sleep(0.01)
        url = f"http://127.0.0.1:{port.value}/nodes/{{node}}/metrics"
        fake = FakeKube({"Node": [node_named(n) for n in names]})
        cfg = ControllerConfig.model_validate({"exporters": {"url": url}})
        kw = {
            "pod_idx": {("research", f"run{i:03d}"): run_pods(i) for i in range(NODES)},
            "taurun_idx": {},
            "kueue_idx": {},
            "kueue_uid_idx": {},
        }

        class Host:
            def __init__(self) -> None:
                self.cfg, self.kube = cfg, fake
                self.nodes = {n["metadata"]["name"]: n for n in fake.list("Node")}

            def clock(self) -> dt.datetime:
                return dt.datetime.now(dt.UTC)

            async def _io(self, fn: Any, *args: Any) -> Any:
                return fn(*args)

            def run_indexes(self) -> dict[str, Any]:
                return kw

            async def record_soon(self, key: Any) -> None:
                return None

        watch = GpuWatch(Host())  # type: ignore[arg-type]
        cpu = []

        async def go() -> None:
            try:
                for _ in range(passes):
                    t = time.process_time()
                    await watch()
                    cpu.append(time.process_time() - t)
            finally:
                await watch.close()

        asyncio.run(go())
        assert len(watch.tracker.now_of) == NODES, len(watch.tracker.now_of)
        return statistics.median(cpu), sum(len(b) for b in texts.values())
    finally:
        server.kill()


def main() -> None:
    import logging

    logging.getLogger("taugrid.controller").setLevel(logging.ERROR)
    report = statistics.median(report_of_100() for _ in range(5))
    passes = statistics.median(controller_pass_of_100() for _ in range(5))
    dcgm_cpu, dcgm_bytes = dcgm_passes_of_100()
    scrape_s = 15  # gpuUse.scrapeSeconds' default
    print(
        json.dumps(
            {
                "nodes": NODES,
                "validate_nodes_report_s": round(report, 4),
                "controller_validation_pass_s": round(passes, 4),
                "budget_s": 60,
                "dcgm_pass_cpu_s": round(dcgm_cpu, 4),
                "dcgm_bytes_a_pass": dcgm_bytes,
                "dcgm_cores_at_15s": round(dcgm_cpu / scrape_s, 4),
                "dcgm_budget_cores": 0.1,
            }
        )
    )


if __name__ == "__main__":
    main()
