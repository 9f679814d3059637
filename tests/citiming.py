"""Where a test run's time goes, for CI's budget (docs/ci.md).

With `TAU_TEST_TIMES=FILE` set, each pytest run appends one JSON line per test module to FILE
(the module's tests, its seconds: setup, call and teardown of its tests, module fixtures
included, its first start and last stop, the workers that ran it, and how many failed or were
skipped) and prints a table of its modules, slowest first. `.ci/run` reads FILE for its own
table. Under pytest-xdist the controller records what the workers report.

The e2e suite's workers (`make e2e`: pytest-xdist, one test module at a time per worker) take
the slowest modules first, by the seconds `tests/e2e/durations.json` keeps (refresh it from a
CI run's FILE with `python tests/citiming.py durations FILE`); each worker picks its servers'
ports from its own slice (`TAUGRID_PORT_RANGE`), so sandboxes started at once never collide.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest

TIMES_ENV = "TAU_TEST_TIMES"
DURATIONS = Path(__file__).parent / "e2e" / "durations.json"
# Ports: each xdist worker has its own slice of DEFAULT_LOW up to the last SERIAL_SLICE ports
# below the kernel's ephemeral range (32768 and up here); a session without workers (`make
# local`, which CI runs beside the e2e cluster tests) has those last ports. So no two sandboxes
# started at once pick the same port, and no outgoing connection takes one picked but not
# bound yet.
SERIAL_SLICE, MIN_SLICE = 2000, 100


# --- the workers: their ports and the order they take modules in ------------------------------
def worker_ports(worker_id: str | None, workers: int = 1) -> str:
    """The port slice of xdist worker `gwN` of `workers`, or of a session without workers
    (None), as TAUGRID_PORT_RANGE takes it."""
    from taugrid.host.ports import DEFAULT_LOW, default_range

    span = default_range()
    top = (span[1] if span else 32767) + 1
    serial_lo = top - SERIAL_SLICE
    if worker_id is None:
        return f"{serial_lo}-{top - 1}"
    n = int(worker_id.removeprefix("gw"))
    size = (serial_lo - DEFAULT_LOW) // max(workers, n + 1)
    if size < MIN_SLICE:
        raise pytest.UsageError(
            f"too many workers for the port slices: {workers} workers would have {size} ports "
            f"each of {DEFAULT_LOW}-{serial_lo - 1} (at least {MIN_SLICE}); use fewer (-n)"
        )
    lo = DEFAULT_LOW + n * size
    return f"{lo}-{lo + size - 1}"


def pytest_configure(config: pytest.Config) -> None:
    from taugrid.host.ports import PORT_RANGE_ENV

    worker = getattr(config, "workerinput", None)
    if worker is not None:
        os.environ[PORT_RANGE_ENV] = worker_ports(
            str(worker["workerid"]), int(worker.get("workercount", 1))
        )
    elif not os.environ.get(PORT_RANGE_ENV):
        os.environ[PORT_RANGE_ENV] = worker_ports(None)


def _known_seconds() -> dict[str, float]:
    try:
        return {str(k): float(v) for k, v in json.loads(DURATIONS.read_text()).items()}
    except (OSError, ValueError, AttributeError):
        return {}


def slowest_first(items: list[pytest.Item]) -> list[pytest.Item]:
    """`items` with their modules in order of known seconds, slowest first (a module not yet
    measured first of all: it may be the slowest), each module's tests in their own order."""
    known = _known_seconds()
    first_seen: dict[str, int] = {}
    for i, item in enumerate(items):
        first_seen.setdefault(_module(item.nodeid), i)

    def key(pair: tuple[int, pytest.Item]) -> tuple[float, int, int]:
        i, item = pair
        mod = _module(item.nodeid)
        return (-known.get(mod, float("inf")), first_seen[mod], i)

    return [item for _, item in sorted(enumerate(items), key=key)]


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # Under xdist the workers collect (each the same, in the same order) and the controller
    # hands out modules in that order.
    if getattr(config, "workerinput", None) is not None:
        items[:] = slowest_first(items)


# --- the record ------------------------------------------------------------------------------
def _module(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


class Times:
    """Per module: tests, seconds, first start, last stop, workers, failed, skipped."""

    def __init__(self) -> None:
        self.modules: dict[str, dict[str, Any]] = {}

    def add(self, report: pytest.TestReport) -> None:
        m = self.modules.setdefault(
            _module(report.nodeid),
            {
                "tests": 0,
                "seconds": 0.0,
                "start": report.start,
                "stop": report.stop,
                "workers": set(),
                "failed": 0,
                "skipped": 0,
            },
        )
        m["seconds"] += report.duration
        m["start"] = min(m["start"], report.start)
        m["stop"] = max(m["stop"], report.stop)
        if report.when == "call" or (report.when == "setup" and not report.passed):
            m["tests"] += 1
        m["failed"] += int(report.failed)
        m["skipped"] += int(report.skipped)
        node = getattr(report, "node", None)  # xdist: the worker that ran it
        gateway = getattr(node, "gateway", None)
        if gateway is not None:
            m["workers"].add(str(gateway.id))

    def rows(self, suite: str) -> list[dict[str, Any]]:
        return sorted(
            (
                {
                    "suite": suite,
                    "module": mod,
                    **{k: v for k, v in m.items() if k != "workers"},
                    "seconds": round(m["seconds"], 1),
                    "workers": sorted(m["workers"]),
                }
                for mod, m in self.modules.items()
            ),
            key=lambda r: -float(r["seconds"]),
        )


_TIMES = Times()


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if os.environ.get(TIMES_ENV) and not _in_worker():
        _TIMES.add(report)


def _in_worker() -> bool:
    return bool(os.environ.get("PYTEST_XDIST_WORKER"))


def _suite(config: pytest.Config) -> str:
    """What the run selected: its paths (relative) and its -m expression, e.g.
    `tests/unit [not e2e and not browser and not torch]` or `[e2e and engine and not alone]`."""
    paths = " ".join(str(a) for a in config.args if not str(a).startswith("-"))
    marks = getattr(config.option, "markexpr", "") or ""
    return " ".join(x for x in (paths, f"[{marks}]" if marks else "") if x) or "all"


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    path = os.environ.get(TIMES_ENV)
    if not path or _in_worker() or not _TIMES.modules:
        return
    rows = _TIMES.rows(_suite(config))
    with open(path, "a") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")
    shown = rows if len(rows) <= 30 else rows[:20]
    terminalreporter.write_sep("-", f"seconds per module, slowest first ({TIMES_ENV}={path})")
    for line in table(shown):
        terminalreporter.write_line(line)
    if len(shown) < len(rows):
        rest = sum(float(r["seconds"]) for r in rows[len(shown) :])
        terminalreporter.write_line(f"... {len(rows) - len(shown)} more modules, {rest:.0f} s")


def table(rows: Iterable[dict[str, Any]]) -> list[str]:
    out = [f"{'seconds':>8} {'tests':>5} {'failed':>6} {'skipped':>7} {'worker':<8} module"]
    for r in rows:
        out.append(
            f"{float(r['seconds']):8.1f} {r['tests']:5d} {r['failed']:6d} {r['skipped']:7d} "
            f"{','.join(r['workers']) or '-':<8} {r['module']}"
        )
    return out


def durations(times_file: Path) -> dict[str, float]:
    """The e2e modules' seconds from a times file, for DURATIONS: a module in two parts of the
    suite (test_e2e_kube.py: its cluster tests, its engine test) counts its longest."""
    out: dict[str, float] = {}
    for line in times_file.read_text().splitlines():
        row = json.loads(line)
        module = str(row["module"])
        if module.startswith("tests/e2e/"):
            out[module] = max(out.get(module, 0.0), float(row["seconds"]))
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))


if __name__ == "__main__":  # python tests/citiming.py durations FILE > tests/e2e/durations.json
    if len(sys.argv) != 3 or sys.argv[1] != "durations":
        sys.exit("usage: python tests/citiming.py durations TIMES_FILE")
    print(json.dumps(durations(Path(sys.argv[2])), indent=2))
