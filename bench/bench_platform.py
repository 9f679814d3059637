"""Platform program evaluation under mocks: a generated 10-pool, 50-workspace stack (budget <= 5 s),
and smaller ones to show the cost grows linearly with pools and workspaces.

    .venv/bin/python bench/bench_platform.py
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
BUDGET_S = 5.0
SIZES = [(2, 10), (5, 25), (10, 50)]
GPU_SIZES = [
    "Standard_NC24ads_A100_v4",
    "Standard_NC48ads_A100_v4",
    "Standard_NC96ads_A100_v4",
    "Standard_ND96isr_H100_v5",
    "Standard_NC40ads_H100_v5",
    "Standard_NC4as_T4_v3",
    "Standard_ND96isr_H200_v5",
    "Standard_NV36ads_A10_v5",
    "Standard_ND96asr_v4",
    "Standard_NC80adis_H100_v5",
]


def generated(pools: int, workspaces: int) -> dict[str, Any]:
    gpu_pools = [
        {
            "name": f"gpu{i}",
            "vmSize": GPU_SIZES[i % len(GPU_SIZES)],
            "gpuClass": f"class{i}",
            "maxCount": 4,
        }
        for i in range(pools - 1)
    ]
    queues = [
        {"name": f"q{i}", "flavors": [{"pool": p["name"], "nominalQuota": {"nvidia.com/gpu": 1}}]}
        for i, p in enumerate(gpu_pools)
    ]
    queues.append(
        {"name": "cpu", "flavors": [{"pool": "cpu", "nominalQuota": {"cpu": 8, "memory": "32Gi"}}]}
    )
    return {
        "cluster": {
            "provider": "aks",
            "name": "bench",
            "location": "westus3",
            "kubernetesVersion": "1.36",
        },
        "gpuPools": gpu_pools,
        "cpuPools": [{"name": "cpu", "vmSize": "Standard_D16s_v5", "maxCount": 10}],
        "components": {"nodeProblemDetector": {"enabled": True}},
        "queues": {"clusterQueues": queues},
        "workspaces": [
            {
                "name": f"team{w}",
                "queues": [queues[w % len(queues)]["name"], "cpu"],
                "members": [{"kind": "Group", "name": f"team{w}"}],
            }
            for w in range(workspaces)
        ],
    }


def main() -> int:
    t0 = time.perf_counter()
    from taugrid.api.platform import validate_platform as validate
    from taugrid.infra import plan

    import_s = time.perf_counter() - t0
    plan.evaluate("warmup", validate(generated(2, 2)))
    rows = []
    for pools, workspaces in SIZES:
        cfg = validate(generated(pools, workspaces))
        t = time.perf_counter()
        inv = plan.evaluate("bench", cfg)
        elapsed = time.perf_counter() - t
        rows.append(
            {
                "pools": pools,
                "workspaces": workspaces,
                "resources": len(inv.resources),
                "seconds": elapsed,
                "ms_per_resource": 1000 * elapsed / len(inv.resources),
            }
        )
    out = ROOT / "bench" / "results"
    out.mkdir(parents=True, exist_ok=True)
    (out / "platform.json").write_text(json.dumps({"import_s": import_s, "runs": rows}, indent=2))
    print(f"imports (pulumi, providers, components): {import_s:.2f}s")
    print(f"{'pools':>5} {'workspaces':>10} {'resources':>9} {'seconds':>8} {'ms/resource':>11}")
    for r in rows:
        print(
            f"{r['pools']:>5} {r['workspaces']:>10} {r['resources']:>9} {r['seconds']:>8.2f} "
            f"{r['ms_per_resource']:>11.2f}"
        )
    big = rows[-1]
    print(
        f"10 pools, 50 workspaces: {big['seconds']:.2f}s  <= {BUDGET_S}s "
        f"{'ok' if big['seconds'] <= BUDGET_S else 'OVER'}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
