"""Budgets of teams (#42), on the sandbox: `tau usage` over 10,000 runs <= 2 s and within 1% of
the ground truth; `tau quota status` <= 0.5 s. Each is the whole command as a user runs it (a
new process, the API server's round trips), median of 5.

The ledger is filled as the controller keeps it (api/usage.py: TauUsage objects per workspace,
month and bucket) with 10,000 runs of known GPUs and admitted seconds (some preempted once);
the truth is their sum. Also said: what 10,000 runs cost in etcd (the objects' JSON size).

    .venv/bin/python bench/bench_teams.py
"""

from __future__ import annotations

import json
import random
import statistics
import sys
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from benchkit import control_plane_built, sandbox, tau

RUNS = 10_000
USAGE_BUDGET_S = 2.0
QUOTA_BUDGET_S = 0.5
WORKSPACES = ("vision", "nlp", "speech", "research", "llm")


def rows(now: datetime) -> tuple[dict[str, list[dict[str, Any]]], float]:
    """Ledger rows per workspace over the last 20 days, and their GPU-hours (the truth)."""
    from taugrid.api.kubetime import k8s_time

    rng = random.Random(42)
    out: dict[str, list[dict[str, Any]]] = {ws: [] for ws in WORKSPACES}
    truth = 0.0
    for i in range(RUNS):
        ws = WORKSPACES[i % len(WORKSPACES)]
        created = now - timedelta(days=20) + timedelta(seconds=rng.uniform(0, 19 * 86400))
        start = created + timedelta(seconds=rng.uniform(0, 600))
        gpus = rng.choice((1, 1, 2, 4, 8))
        held = rng.uniform(60, 6 * 3600)
        admitted = []
        if i % 10 == 0:  # preempted once after a while, then admitted again
            cut = start + timedelta(seconds=held / 3)
            admitted.append({"start": k8s_time(start), "end": k8s_time(cut), "why": "Preempted"})
            start = cut + timedelta(seconds=120)
        end = start + timedelta(seconds=held * (2 / 3 if i % 10 == 0 else 1))
        admitted.append({"start": k8s_time(start), "end": k8s_time(end), "why": "Finished"})
        truth += (
            gpus
            * sum(
                (
                    datetime.fromisoformat(a["end"]) - datetime.fromisoformat(a["start"])
                ).total_seconds()
                for a in admitted
            )
            / 3600
        )
        out[ws].append(
            {
                "run": f"{ws}-{i:05d}",
                "name": "train",
                "workspace": ws,
                "user": f"u{i % 37}",
                "profile": "t4x1",
                "queue": ws,
                "flavor": "t4x1",
                "gpus": gpus,
                "cpus": 3.0 * gpus,
                "created": k8s_time(created),
                "admitted": admitted,
                "ended": k8s_time(end),
                "phase": "Succeeded",
            }
        )
    return out, truth


def fill(kube: Any, by_ws: dict[str, list[dict[str, Any]]]) -> int:
    """The ledger objects, as the controller writes them; their total JSON size."""
    from taugrid.api import constants as C
    from taugrid.api.usage import LEDGER_LABEL, ledger_name

    size = 0
    for ws, items in by_ws.items():
        objs: dict[str, dict[str, Any]] = {}
        for r in items:
            name = ledger_name(r["run"], r["created"])
            month = r["created"][:7]
            obj = objs.setdefault(
                name,
                {
                    "apiVersion": C.API_VERSION,
                    "kind": "TauUsage",
                    "metadata": {"name": name, "namespace": ws, "labels": {LEDGER_LABEL: month}},
                    "spec": {"month": month, "runs": {}},
                },
            )
            obj["spec"]["runs"][r["run"]] = r
        for obj in objs.values():
            kube.create(obj)
            size += len(json.dumps(obj))
    return size


def timed(env: dict[str, str], *args: str, n: int = 5) -> tuple[float, str]:
    times, out = [], ""
    for _ in range(n):
        t = time.perf_counter()
        res = tau(env, *args)
        times.append(time.perf_counter() - t)
        assert res.returncode == 0, res.stderr
        out = res.stdout
    return statistics.median(times), out


def main() -> int:
    if not control_plane_built():
        return 0
    with sandbox("--real-nodes", "0") as box:
        env = box.env
        from taugrid.kube.client import Kube

        now = datetime.now(UTC)
        by_ws, truth = rows(now)
        t = time.perf_counter()
        size = fill(Kube(None, kubeconfig=box.admin), by_ws)
        fill_s = time.perf_counter() - t
        usage_s, out = timed(env, "usage", "--by", "team", "--since", "30d", "-o", "json")
        doc = json.loads(out)
        total = sum(r["gpuHours"] for r in doc["rows"])
        user_s, _ = timed(env, "usage", "--by", "user", "--since", "30d")
        quota_s, _ = timed(env, "quota", "status")
    off = abs(total - truth) / truth
    print(f"ledger of {RUNS:,} runs: {size / 1e6:.1f} MB of JSON in etcd ({fill_s:.1f} s to write)")
    print(
        f"tau usage --by team over {doc['runs']:,} runs: {usage_s:.2f} s "
        f"(budget {USAGE_BUDGET_S} s); GPU-hours {total:,.1f} vs truth {truth:,.1f} "
        f"({off:.4%} off, budget 1%)"
    )
    print(f"tau usage --by user (table): {user_s:.2f} s")
    print(f"tau quota status: {quota_s:.2f} s (budget {QUOTA_BUDGET_S} s)")
    ok = usage_s <= USAGE_BUDGET_S and quota_s <= QUOTA_BUDGET_S and off <= 0.01
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
