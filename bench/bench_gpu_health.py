"""Budgets of GPU node validation (#41): passive validation of 100 GPU nodes <= 60 s (here: the
report `tau cluster validate nodes` makes, over an in-memory cluster of 100 8-GPU nodes, verdicts
kept on each); a node that registers 7 of its 8 GPUs named (its failed verdict written) <= 60 s
after it registers: here, the controller's pass over 100 nodes that carry the validating taint.
Against a real cluster the API server's round trips add to both (one LIST, one PATCH a node).

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


def main() -> None:
    import logging

    logging.getLogger("taugrid.controller").setLevel(logging.ERROR)
    report = statistics.median(report_of_100() for _ in range(5))
    passes = statistics.median(controller_pass_of_100() for _ in range(5))
    print(
        json.dumps(
            {
                "nodes": NODES,
                "validate_nodes_report_s": round(report, 4),
                "controller_validation_pass_s": round(passes, 4),
                "budget_s": 60,
            }
        )
    )


if __name__ == "__main__":
    main()
