"""An open-loop load of a service, shared by the local serve tests and `bench/bench_serve.py`.

Request i is due at start + i / rate and sent then by a pool of senders; its latency counts from
when it was due, so a request that waited for a free sender (the service, or this machine, did
not keep up) is measured as late, never left out. This is what a client sees (a closed-loop
client that starts each request's clock when a thread picks it up hides the queueing)."""

from __future__ import annotations

import json
import os
import statistics
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from typing import Any

BODY = json.dumps({"features": [6.5, 3.0, 5.5, 2.0]}).encode()


class Load:
    """`rate` POSTs a second, open loop, until stopped (and for at least `at_least_s`): every
    answer is counted by revision, every failure kept, every latency measured from due."""

    def __init__(
        self,
        url: str,
        rate: float,
        at_least_s: float = 0.0,
        timeout_s: float = 60.0,
        senders: int = 64,
    ) -> None:
        self.url, self.rate, self.at_least_s = url, rate, at_least_s
        self.timeout_s, self.senders = timeout_s, senders
        self.started = time.monotonic()
        self.answers: Counter[str] = Counter()
        self.failures: list[str] = []
        self.latencies: list[float] = []  # seconds from due to answer (answered ones)
        self.sent = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self._lock = threading.Lock()

    def _one(self, due: float) -> None:
        req = urllib.request.Request(
            self.url, data=BODY, method="POST", headers={"Content-Type": "application/json"}
        )
        try:
            with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
                revision = json.loads(resp.read())["revision"]
            with self._lock:
                self.answers[revision] += 1
                self.latencies.append(time.monotonic() - due)
        except (urllib.error.URLError, OSError, ValueError) as e:
            with self._lock:
                self.failures.append(repr(e))

    def _run(self) -> None:
        with ThreadPoolExecutor(max_workers=self.senders) as pool:
            start, n = time.monotonic(), 0
            while not self.stop.is_set():
                due = start + n / self.rate
                pool.submit(self._one, due)
                n += 1
                self.sent = n
                self.stop.wait(max(0.0, start + n / self.rate - time.monotonic()))

    def __enter__(self) -> Load:
        self.started = time.monotonic()
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        # the load runs for the whole window it was asked for (a duration, not a wait for an event)
        self.stop.wait(max(0.0, self.started + self.at_least_s - time.monotonic()))
        self.stop.set()
        self.thread.join()

    def summary(self, late_s: float = 5.0) -> dict[str, Any]:
        """What a client saw: requests, failures, latency from due (p50/p95/p99/max), how many
        answered later than `late_s`, and this machine's load average meanwhile."""
        lat = sorted(self.latencies)

        def q(f: float) -> float:
            return lat[min(len(lat) - 1, int(f * len(lat)))] if lat else float("nan")

        return {
            "sent": self.sent,
            "answered": len(lat),
            "failed": len(self.failures),
            "p50_s": round(statistics.median(lat), 3) if lat else None,
            "p95_s": round(q(0.95), 3),
            "p99_s": round(q(0.99), 3),
            "max_s": round(lat[-1], 3) if lat else None,
            f"later_than_{late_s:g}s": sum(1 for x in lat if x > late_s),
            "loadavg_1m": round(os.getloadavg()[0], 2),
        }
