"""Budgets of `tau serve` (issue #23, docs/serve.md), on a fresh TAU_HOME and a local Ray head:

- request latency p50/p99 and throughput through a service deployed by `tau serve deploy`, vs
  the same application (same code, same model files) deployed with Ray Serve's own CLI
  (`serve deploy`) on the same head, paired and interleaved: TauGrid adds <= 5%;
- `tau serve deploy` to the first answered request on a warm head: <= 10 s;
- `tau serve rollback` to the first request answered by the old revision: <= 10 s;
- a rollout and a rollback under 20 requests/s, open loop (each request's latency from when it
  was due, `tests/servekit.py`): failed requests, p50/p95/p99/max, and the machine's load.

    .venv/bin/python bench/bench_serve.py [--requests N] [--seconds S]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
TAU = str(BIN / "tau")
BODY = json.dumps({"features": [6.5, 3.0, 5.5, 2.0]}).encode()
BUDGETS = {
    "overhead_p50_pct": 5.0,
    "overhead_throughput_pct": 5.0,
    "deploy_to_answer_s": 10.0,
    "rollback_to_old_s": 10.0,
}


def tau(*args: str) -> subprocess.CompletedProcess[str]:
    res = subprocess.run(
        [TAU, *args],
        capture_output=True,
        text=True,
        env=os.environ.copy(),
        check=False,
        timeout=600,
    )
    if res.returncode != 0:
        raise SystemExit(f"tau {' '.join(args)}: {res.stderr}")
    return res


def post(url: str) -> dict[str, object]:
    req = urllib.request.Request(
        url, data=BODY, method="POST", headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=30) as resp:
        return dict(json.loads(resp.read()))


def latencies(url: str, n: int) -> list[float]:
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        post(url)
        out.append((time.perf_counter() - t0) * 1000)
    return out


def throughput(url: str, seconds: float, workers: int = 8) -> float:
    done = [0] * workers
    stop = time.monotonic() + seconds

    def loop(i: int) -> None:
        while time.monotonic() < stop:
            post(url)
            done[i] += 1

    threads = [threading.Thread(target=loop, args=(i,)) for i in range(workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sum(done) / seconds


def p(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(len(s) * q))]


def main() -> int:
    # Long because: a benchmark reads top to bottom as the scenario it measures (set
    # up, load, measure, report); its steps are used only here.
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=200, help="sequential requests per round")
    ap.add_argument("--seconds", type=float, default=4.0, help="throughput window per round")
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--rate", type=float, default=20.0, help="requests/s during the rollout")
    args = ap.parse_args()
    out: dict[str, float] = {}
    under_load: dict[str, object] = {}
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["TAU_HOME"] = str(Path(tmp) / "home")
        folder = Path(tmp) / "serve-model"
        shutil.copytree(ROOT / "examples" / "serve-model", folder)
        try:
            run = tau("run", str(folder))
            run_id = re.search(r"run (iris-\w+)", run.stderr).group(1)  # type: ignore[union-attr]
            versions = []
            for which in ("best", "latest"):
                reg = tau(
                    "data",
                    "model",
                    "register",
                    "iris",
                    "--from-run",
                    run_id,
                    "--checkpoint",
                    which,
                    "-o",
                    "json",
                )
                versions.append(json.loads(reg.stdout)["version"])
            tau("data", "model", "alias", "set", "iris", "prod", versions[0])
            from taugrid.host.ports import free_port
            from taugrid.runs.backends.local import rayhead

            head = rayhead.ensure_head(num_gpus=0)  # (a `job` run needs none; the warm head)
            # the same app with Ray Serve's own CLI first (its declarative deploy replaces every
            # application; tau's deploy after it keeps this one)
            model_dir = Path(tmp) / "model"
            tau("data", "model", "pull", f"iris@{versions[0]}", str(model_dir))
            cfg = Path(tmp) / "plain.yaml"
            cfg.write_text(
                json.dumps(
                    {
                        "proxy_location": "HeadOnly",
                        "http_options": {"host": "127.0.0.1", "port": free_port()},
                        "applications": [
                            {
                                "name": "plain",
                                "route_prefix": "/plain",
                                "import_path": "serve_app:app",
                                "runtime_env": {
                                    "working_dir": f"local://{folder}",
                                    "env_vars": {"TAU_MODEL_DIR": str(model_dir)},
                                },
                                "deployments": [
                                    {
                                        "name": "Classifier",
                                        "num_replicas": 1,
                                        "ray_actor_options": {"num_cpus": 0.5},
                                    }
                                ],
                            }
                        ],
                    }
                )
            )
            subprocess.run(
                [str(BIN / "serve"), "deploy", str(cfg), "-a", head.dashboard],
                check=True,
                capture_output=True,
                env=rayhead.loopback_env(),
            )
            t0 = time.perf_counter()
            dep = json.loads(tau("serve", "deploy", str(folder), "-o", "json").stdout)
            url = str(dep["endpoint"])
            post(url)
            out["deploy_to_answer_s"] = time.perf_counter() - t0
            plain = url.rsplit("/", 1)[0] + "/plain"
            for _ in range(60):  # the plain app's replica is up (it answers)
                try:
                    post(plain)
                    break
                except OSError:
                    time.sleep(0.5)
            latencies(url, 50), latencies(plain, 50)  # warm both
            # paired rounds, the order alternating; the overhead is the median of the rounds'
            # ratios (a busy second on a 2-core machine moves one round, not the result)
            lat: dict[str, list[float]] = {"tau": [], "plain": []}
            ratios: dict[str, list[float]] = {"p50": [], "p99": [], "rps": []}
            for r in range(args.rounds):
                order = [("tau", url), ("plain", plain)][:: 1 if r % 2 == 0 else -1]
                got = {who: latencies(u, args.requests) for who, u in order}
                rps = {who: throughput(u, args.seconds) for who, u in order}
                for who in got:
                    lat[who] += got[who]
                ratios["p50"].append(
                    statistics.median(got["tau"]) / statistics.median(got["plain"])
                )
                ratios["p99"].append(p(got["tau"], 0.99) / p(got["plain"], 0.99))
                ratios["rps"].append(rps["plain"] / rps["tau"])
                out.setdefault("tau_rps", 0.0)
                out["tau_rps"] += rps["tau"] / args.rounds
                out.setdefault("plain_rps", 0.0)
                out["plain_rps"] += rps["plain"] / args.rounds
            for who in ("tau", "plain"):
                out[f"{who}_p50_ms"] = statistics.median(lat[who])
                out[f"{who}_p99_ms"] = p(lat[who], 0.99)
            out["overhead_p50_pct"] = 100 * (statistics.median(ratios["p50"]) - 1)
            out["overhead_p99_pct"] = 100 * (statistics.median(ratios["p99"]) - 1)
            out["overhead_throughput_pct"] = 100 * (statistics.median(ratios["rps"]) - 1)
            # rollout to the second version, then rollback: until the old revision answers
            tau("serve", "rollout", "iris", "--model", f"iris@{versions[1]}")
            proc = subprocess.Popen(
                [TAU, "serve", "rollback", "iris"],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                env=os.environ.copy(),
            )
            t0 = time.perf_counter()
            while post(url).get("model_version") != versions[0]:
                time.sleep(0.05)
            out["rollback_to_old_s"] = time.perf_counter() - t0
            proc.wait(timeout=300)
            # a rollout and a rollback under 20 requests/s, open loop: each request's latency
            # from when it was due (what a client sees; docs/serve.md reports these figures)
            sys.path.insert(0, str(ROOT / "tests"))
            from servekit import Load

            with Load(url, args.rate, at_least_s=10.0) as load:
                tau("serve", "rollout", "iris", "--model", f"iris@{versions[1]}")
                tau("serve", "rollback", "iris")
            under_load = load.summary()
            under_load["rate_per_s"] = args.rate
        finally:
            subprocess.run(
                [TAU, "local", "stop"], capture_output=True, env=os.environ.copy(), check=False
            )
    for k, v in out.items():
        b = BUDGETS.get(k)
        mark = "" if b is None else f"  <= {b:g}  {'ok' if v <= b else 'OVER'}"
        print(f"{k:26s} {v:10.2f}{mark}")
    print(json.dumps({k: round(v, 2) for k, v in out.items()}))
    print("rollout and rollback under load (open loop, latency from due):", json.dumps(under_load))
    return 0


if __name__ == "__main__":
    sys.exit(main())
