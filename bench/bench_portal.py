"""Budgets of `tau portal` (issue #24, docs/portal.md), with generated run records in a fresh
TAU_HOME (sealed local runs, each with a few metric rows; one with 100,000):

- the runs page with 10,000 runs: p95 server time <= 150 ms (after the first load);
- a run with 100,000 metric points <= 300 ms; compare 20 runs <= 1 s;
- the portal process's peak memory <= 300 MB.

Server time is measured in process through the ASGI test client (no network).

    .venv/bin/python bench/bench_portal.py [--runs N] [--points P]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

BUDGETS = {
    "runs_page_p95_ms": 150.0,
    "run_100k_points_ms": 300.0,
    "compare_20_ms": 1000.0,
    "peak_rss_mb": 300.0,
    "runs_page_in_chromium_ms": 1000.0,
}


def make_runs(home: Path, n: int, points: int) -> list[str]:
    from taugrid.api.evidence import RunRecord
    from taugrid.api.vocabulary import Phase
    from taugrid.runs.evidence import RunDir

    ids = []
    for i in range(n):
        run_id = f"bench{i % 7}-{i:06d}"
        rd = RunDir(home / "data" / "runs" / run_id)
        (rd.path / "logs").mkdir(parents=True)
        (rd.path / "config").mkdir()
        (rd.path / "config" / "tau.yaml").write_text(f"run: {{entrypoint: t.py}}\nlr: {i / n}\n")
        rec = RunRecord.model_validate(
            dict(
                run_id=run_id,
                name=f"bench{i % 7}",
                workspace="local",
                profile="local",
                workload_kind="job",
                handle={"target": "local"},
                submitter="b@h",
                code_folder="/x",
                code_revision="u",
                code_digest="d",
                config_hash="h",
                image="i",
                entrypoint="t.py",
                created_at=f"2026-12-01T{i // 3600 % 24:02d}:{i // 60 % 60:02d}:{i % 60:02d}Z",
            )
        )
        rd.create(rec)
        rows = points if i == 0 else 20
        with rd.metrics_path.open("w") as f:
            for step in range(rows):
                f.write(json.dumps({"step": step, "ts": step, "loss": 1 / (step + 1)}) + "\n")
        rd.driver_log.write_text("started\nfinished\n")
        rd.transition(Phase.Running, "started")
        rd.transition(
            Phase.Succeeded if i % 5 else Phase.Failed, "ended", exit_code=0 if i % 5 else 1
        )
        ids.append(run_id)
    return ids


def timed(client: object, url: str) -> float:
    t0 = time.perf_counter()
    res = client.get(url)  # type: ignore[attr-defined]
    dt = (time.perf_counter() - t0) * 1000
    assert res.status_code == 200, (url, res.status_code, res.text[:300])
    return dt


def in_chromium(app: object, path: str) -> float | None:
    """Median of 5 loads of `path` in headless Chromium, served by uvicorn on loopback, until
    the page's load event (None: no chromium or playwright here)."""
    import shutil
    import socket
    import threading

    chromium = shutil.which("chromium")
    try:
        import uvicorn
        from playwright.sync_api import sync_playwright
    except ImportError:
        return None
    if not chromium:
        return None
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))  # type: ignore[arg-type]
    threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True).start()
    while not server.started:
        time.sleep(0.05)
    times = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        page = browser.new_page()
        for _ in range(6):
            t0 = time.perf_counter()
            page.goto(f"http://127.0.0.1:{port}{path}", wait_until="load")
            times.append((time.perf_counter() - t0) * 1000)
        browser.close()
    server.should_exit = True
    return statistics.median(times[1:])


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=10_000)
    ap.add_argument("--points", type=int, default=100_000)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        os.environ["TAU_HOME"] = str(home)
        os.environ.pop("KUBECONFIG", None)
        t0 = time.perf_counter()
        ids = make_runs(home, args.runs, args.points)
        print(f"generated {len(ids)} runs in {time.perf_counter() - t0:.0f}s", file=sys.stderr)
        from starlette.testclient import TestClient

        from taugrid.portal.app import Settings, create_app

        web = TestClient(create_app(Settings()), base_url="http://127.0.0.1")
        out: dict[str, float] = {"runs_first_load_ms": timed(web, "/runs")}
        pages = [
            timed(web, u)
            for u in [
                "/runs",
                "/runs?page=7",
                "/runs?phase=Failed",
                "/runs?q=bench3",
                "/runs?sort=name&order=asc",
            ]
            * 4
        ]
        out["runs_page_p50_ms"] = statistics.median(pages)
        out["runs_page_p95_ms"] = sorted(pages)[int(len(pages) * 0.95) - 1]
        out["run_100k_points_ms"] = statistics.median(
            timed(web, f"/runs/{ids[0]}") for _ in range(3)
        )
        compare = "/compare?metric=loss&" + "&".join(f"run={r}" for r in ids[:20])
        out["compare_20_ms"] = statistics.median(timed(web, compare) for _ in range(3))
        out["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        loaded = in_chromium(web.app, "/runs")
        if loaded is not None:
            out["runs_page_in_chromium_ms"] = loaded
    for k, v in out.items():
        b = BUDGETS.get(k)
        mark = "" if b is None else f"  <= {b:g}  {'ok' if v <= b else 'OVER'}"
        print(f"{k:24s} {v:10.1f}{mark}")
    print(json.dumps({k: round(v, 1) for k, v in out.items()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
