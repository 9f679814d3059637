"""CI's budget tooling (docs/ci.md): the e2e workers' order and ports, the times per module, and
the end-of-run table that fails a run where a test was skipped."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import citiming
import pytest

ROOT = Path(__file__).resolve().parents[2]


def _items(*nodeids: str) -> list[Any]:
    return [SimpleNamespace(nodeid=n) for n in nodeids]


def test_the_slowest_known_module_goes_first_and_a_modules_tests_keep_their_order(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    durations = tmp_path / "durations.json"
    durations.write_text(json.dumps({"tests/e2e/a.py": 10.0, "tests/e2e/b.py": 500.0}))
    monkeypatch.setattr(citiming, "DURATIONS", durations)
    items = _items(
        "tests/e2e/a.py::t1",
        "tests/e2e/b.py::t2",
        "tests/e2e/a.py::t3",
        "tests/e2e/new.py::t4",
        "tests/e2e/b.py::t1",
    )
    order = [i.nodeid for i in citiming.slowest_first(items)]
    assert order == [
        "tests/e2e/new.py::t4",  # never measured: it may be the slowest
        "tests/e2e/b.py::t2",
        "tests/e2e/b.py::t1",
        "tests/e2e/a.py::t1",
        "tests/e2e/a.py::t3",
    ]


def test_without_a_durations_file_the_collection_order_stays(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(citiming, "DURATIONS", tmp_path / "none.json")
    ids = ["tests/e2e/b.py::x", "tests/e2e/a.py::y", "tests/e2e/b.py::z"]
    assert [i.nodeid for i in citiming.slowest_first(_items(*ids))] == [
        "tests/e2e/b.py::x",
        "tests/e2e/b.py::z",
        "tests/e2e/a.py::y",
    ]


@pytest.mark.parametrize("workers", [1, 3, 16])
def test_each_worker_and_a_serial_session_have_their_own_ports_below_the_ephemeral_range(
    workers: int,
) -> None:
    slices = [citiming.worker_ports(f"gw{n}", workers) for n in range(workers)]
    slices.append(citiming.worker_ports(None))
    spans = [tuple(int(x) for x in s.split("-")) for s in slices]
    ephemeral = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    assert all(20000 <= lo <= hi < ephemeral for lo, hi in spans), spans
    assert all(a[1] < b[0] for a, b in itertools.pairwise(spans)), spans
    assert all(hi - lo + 1 >= citiming.MIN_SLICE for lo, hi in spans), spans


def test_more_workers_than_the_ports_hold_is_refused_with_what_to_do() -> None:
    with pytest.raises(pytest.UsageError, match=r"too many workers.*use fewer"):
        citiming.worker_ports("gw0", 500)


def _report(nodeid: str, when: str, outcome: str, duration: float, start: float) -> Any:
    return SimpleNamespace(
        nodeid=nodeid,
        when=when,
        outcome=outcome,
        passed=outcome == "passed",
        failed=outcome == "failed",
        skipped=outcome == "skipped",
        duration=duration,
        start=start,
        stop=start + duration,
        node=SimpleNamespace(gateway=SimpleNamespace(id="gw1")),
    )


def test_a_modules_time_is_its_tests_setup_call_and_teardown_and_counts_failed_and_skipped() -> (
    None
):
    times = citiming.Times()
    for r in [
        _report("tests/e2e/m.py::a", "setup", "passed", 30.0, 100.0),  # the module's fixture
        _report("tests/e2e/m.py::a", "call", "passed", 2.0, 130.0),
        _report("tests/e2e/m.py::a", "teardown", "passed", 0.5, 132.0),
        _report("tests/e2e/m.py::b", "setup", "skipped", 0.1, 133.0),
        _report("tests/e2e/m.py::c", "setup", "passed", 0.1, 134.0),
        _report("tests/e2e/m.py::c", "call", "failed", 1.0, 134.1),
        _report("tests/e2e/n.py::a", "call", "passed", 1.0, 200.0),
    ]:
        times.add(r)
    rows = times.rows("e2e")
    assert [r["module"] for r in rows] == ["tests/e2e/m.py", "tests/e2e/n.py"]
    m = rows[0]
    assert (m["tests"], m["failed"], m["skipped"]) == (3, 1, 1)
    assert m["seconds"] == pytest.approx(33.7)
    assert (m["start"], m["stop"], m["workers"]) == (100.0, 135.1, ["gw1"])


def test_durations_keeps_each_e2e_modules_longest_part(tmp_path: Path) -> None:
    lines = [
        {"suite": "[e2e and not engine]", "module": "tests/e2e/a.py", "seconds": 5.0},
        {"suite": "tests/unit [not e2e]", "module": "tests/unit/u.py", "seconds": 99.0},
        {"suite": "[e2e and engine]", "module": "tests/e2e/b.py", "seconds": 50.0},
        {"suite": "[e2e and engine]", "module": "tests/e2e/a.py", "seconds": 7.0},
        {"suite": "[e2e and not engine]", "module": "tests/e2e/b.py", "seconds": 20.0},
    ]
    f = tmp_path / "times.jsonl"
    f.write_text("".join(json.dumps(x) + "\n" for x in lines))
    assert citiming.durations(f) == {"tests/e2e/b.py": 50.0, "tests/e2e/a.py": 7.0}


def _table(tmp_path: Path, rows: list[dict[str, Any]]) -> subprocess.CompletedProcess[str]:
    steps = tmp_path / "steps.tsv"
    steps.write_text("setup\t0\t180\t0\nunit\t200\t150\t0\ne2e-cluster\t900\t1300\t0\n")
    tests = tmp_path / "tests.jsonl"
    tests.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return subprocess.run(
        [sys.executable, str(ROOT / ".ci" / "table.py"), str(steps), str(tests), "2400", "75"],
        capture_output=True,
        text=True,
        check=False,
    )


def _row(module: str, skipped: int = 0) -> dict[str, Any]:
    return {
        "suite": "e2e and not engine and not alone",
        "module": module,
        "tests": 3,
        "seconds": 120.0,
        "start": 1000.0,
        "stop": 1120.0,
        "workers": ["gw0"],
        "failed": 0,
        "skipped": skipped,
    }


def test_the_ci_table_names_the_steps_the_modules_and_the_minutes_left(tmp_path: Path) -> None:
    res = _table(tmp_path, [_row("tests/e2e/test_e2e_x.py")])
    assert res.returncode == 0, res.stdout + res.stderr
    assert "e2e-cluster" in res.stdout and "tests/e2e/test_e2e_x.py" in res.stdout
    assert "total 40.0 min of the 75-minute budget: 35.0 min left" in res.stdout
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["left_s"] == 75 * 60 - 2400
    assert [s["step"] for s in summary["steps"]] == ["setup", "unit", "e2e-cluster"]


def test_a_skipped_test_anywhere_fails_the_ci_run_and_says_where(tmp_path: Path) -> None:
    res = _table(tmp_path, [_row("tests/e2e/test_e2e_x.py"), _row("tests/e2e/test_e2e_y.py", 2)])
    assert res.returncode == 1
    assert "2 skipped in tests/e2e/test_e2e_y.py" in res.stdout
    assert "test_e2e_x.py (" not in res.stdout.split("!!!", 1)[1]
