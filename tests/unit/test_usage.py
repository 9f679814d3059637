"""Who used what (#42): a ledger row follows a run's Kueue Workload (admitted, preempted,
admitted again, finished; idempotently), the controller keeps rows across its restarts and
after the TauRun is gone, and the report adds them up per group against a hand-made truth."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from taugrid.api.crds import TauRunStatus
from taugrid.api.kubetime import k8s_time
from taugrid.api.usage import (
    Interval,
    PoolPrice,
    UsageRow,
    advance,
    as_csv,
    idle_quota_hours,
    ledger_name,
    parse_since,
    report,
)
from taugrid.controller.usage import UsageLedger
from taugrid.kube.fake import FakeKube

T0 = datetime(2026, 12, 1, 8, 0, tzinfo=UTC)


def at(minutes: float) -> str:
    return k8s_time(T0 + timedelta(minutes=minutes))


def workload(
    *conds: tuple[str, float, str], gpus: int = 2, cpu: str = "16", queue: str = "vision"
) -> dict[str, Any]:
    """A Kueue Workload with conditions (type, minute, reason) all True, and an admission."""
    status: dict[str, Any] = {
        "conditions": [
            {"type": t, "status": "True", "lastTransitionTime": at(m), "reason": r}
            for t, m, r in conds
        ]
    }
    if any(t == "Admitted" for t, _, _ in conds):
        status["admission"] = {
            "clusterQueue": queue,
            "podSetAssignments": [
                {
                    "name": "main",
                    "flavors": {"nvidia.com/gpu": "a100x1", "cpu": "a100x1"},
                    "resourceUsage": {"nvidia.com/gpu": str(gpus), "cpu": cpu},
                    "count": gpus,
                }
            ],
        }
    return {"status": status}


def row0(**kw: Any) -> UsageRow:
    return UsageRow(run="r1", workspace="cv", created=at(0), **kw)


def test_a_row_follows_admission_to_finish_and_is_idempotent() -> None:
    now = T0 + timedelta(minutes=70)
    r = advance(row0(), workload(("Admitted", 5, "Admitted")), "Running", None, None, None, now)
    assert r.admitted == [Interval(start=at(5))] and (r.gpus, r.cpus, r.queue) == (2, 16, "vision")
    assert advance(r, workload(("Admitted", 5, "Admitted")), "Running", None, None, None, now) == r
    done = workload(("Admitted", 5, "Admitted"), ("Finished", 65, "Succeeded"))
    r2 = advance(r, done, "Succeeded", at(65), None, None, now)
    assert r2.admitted == [Interval(start=at(5), end=at(65), why="Finished")]
    assert (r2.ended, r2.phase) == (at(65), "Succeeded")
    assert advance(r2, done, "Succeeded", at(65), None, None, now) == r2


def test_a_preempted_admission_is_kept_beside_the_next() -> None:
    now = T0 + timedelta(hours=2)
    r = advance(row0(), workload(("Admitted", 5, "")), "Running", None, None, None, now)
    evicted = workload(("Evicted", 35, "Preempted"))
    r = advance(r, evicted, "Queued", None, None, None, now)
    assert r.admitted == [Interval(start=at(5), end=at(35), why="Preempted")]
    r = advance(r, workload(("Admitted", 50, "")), "Running", None, None, None, now)
    assert [iv.start for iv in r.admitted] == [at(5), at(50)] and r.admitted[1].end is None
    # a stale look at the eviction (Kueue has not cleared it yet) changes nothing
    assert (
        advance(
            r,
            workload(("Admitted", 50, ""), ("Evicted", 35, "Preempted")),
            "Running",
            None,
            None,
            None,
            now,
        )
        == r
    )


def test_busy_gpu_seconds_follow_sm_activity_to_the_end() -> None:
    now = T0 + timedelta(hours=2)
    wl = workload(("Admitted", 0, ""), gpus=4)
    r = advance(row0(), wl, "Running", None, 0.5, at(0), now)
    r = advance(r, wl, "Running", None, 0.25, at(10), now)  # 10 min at 50% of 4 GPUs
    assert r.busyGpuSeconds == pytest.approx(0.5 * 4 * 600)
    end = workload(("Admitted", 0, ""), ("Finished", 30, ""), gpus=4)
    r = advance(r, end, "Succeeded", at(30), 0.25, at(10), now)  # then 20 min at 25%
    assert r.busyGpuSeconds == pytest.approx(0.5 * 4 * 600 + 0.25 * 4 * 1200)


def rows_truth() -> list[UsageRow]:
    """A hand-made month: vision ran 2x 1 h on 2 GPUs (one preempted after 30 min and run
    again), nlp 1x 2 h on 1 GPU waiting 10 min; a CPU run of 4 cores for 1 h."""
    return [
        UsageRow(
            run="a",
            workspace="cv",
            user="ana",
            gpus=2,
            cpus=16,
            queue="vision",
            flavor="a100x1",
            created=at(0),
            admitted=[Interval(start=at(0), end=at(60), why="Finished")],
        ),
        UsageRow(
            run="b",
            workspace="cv",
            user="ana",
            gpus=2,
            cpus=16,
            queue="vision",
            flavor="a100x1",
            created=at(0),
            admitted=[
                Interval(start=at(20), end=at(50), why="Preempted"),
                Interval(start=at(90), end=at(150), why="Finished"),
            ],
        ),
        UsageRow(
            run="c",
            workspace="text",
            user="bo",
            gpus=1,
            cpus=8,
            queue="nlp",
            flavor="a100x1",
            created=at(0),
            busyGpuSeconds=3600,
            busySm=0.5,
            busyAt=at(130),
            admitted=[Interval(start=at(10), end=at(130), why="Finished")],
        ),
        UsageRow(
            run="d",
            workspace="text",
            user="bo",
            gpus=0,
            cpus=4,
            queue="cpu",
            flavor="cpu",
            created=at(0),
            admitted=[Interval(start=at(0), end=at(60), why="Finished")],
        ),
    ]


PRICES = {
    "a100x1": PoolPrice(vmSize="Standard_NC24ads_A100_v4", perNodeHour=3.6, gpusPerNode=1),
    "cpu": PoolPrice(vmSize="Standard_D4s_v5", perNodeHour=0.2, cpusPerNode=4),
}


def test_the_report_adds_up_to_the_truth_per_team() -> None:
    teams = {"cv": "vision", "text": "nlp"}
    got = {
        r.group: r
        for r in report(rows_truth(), "team", T0, T0 + timedelta(days=1), teams, PRICES, "USD")
    }
    v, n = got["vision"], got["nlp"]
    assert v.runs == 2 and v.gpuHours == pytest.approx(2 * 1 + 2 * 0.5 + 2 * 1)
    assert v.lostGpuHours == pytest.approx(1.0) and v.preemptions == 1
    assert v.cost == pytest.approx(5 * 3.6) and v.currency == "USD"
    assert v.busyGpuHours is None  # no GPU use read: not 0
    assert n.gpuHours == pytest.approx(2.0) and n.busyGpuHours == pytest.approx(1.0)
    assert n.cpuHours == pytest.approx(8 * 2 + 4 * 1)
    assert n.cost == pytest.approx(2 * 3.6 + 0.2 / 4 * 4 * 1)
    assert n.waitP50s == 0.0 and n.waitP95s == 600.0  # c waited 10 min, d none


def test_the_window_clips_admissions_and_open_ones_count_to_its_end() -> None:
    rows = [*rows_truth(), row0(gpus=4, admitted=[Interval(start=at(100))])]
    by_user = {
        r.group: r
        for r in report(rows, "user", T0 + timedelta(minutes=30), T0 + timedelta(minutes=120), {})
    }
    # a: 30 min x 2; b: 20 (preempted part) + 30 min x 2
    assert by_user["ana"].gpuHours == pytest.approx(2 * 0.5 + 2 * (20 + 30) / 60, rel=1e-4)
    assert by_user["(none)"].gpuHours == pytest.approx(4 * 20 / 60, rel=1e-4)
    assert by_user["ana"].cost is None


def test_idle_quota_is_nominal_less_what_anyone_held_of_it() -> None:
    # 3 h: vision holds 5 GPU-hours on a100x1 with 4 GPUs of its own (12 h nominal: 7 unused);
    # nlp holds 2 GPU-hours with none of its own (borrowed), the spare queue lends 2 GPUs (6 h)
    nominal = {
        ("vision", "a100x1"): 4,
        ("nlp", "a100x1"): 0,
        ("spare", "a100x1"): 2,
        ("cpu", "cpu"): 0,
    }
    idle = idle_quota_hours(nominal, rows_truth(), T0, T0 + timedelta(hours=3))
    # the 2 borrowed GPU-hours come from vision's 7 and spare's 6 unused, 7:6
    assert idle == {
        "vision": pytest.approx(7 - 2 * 7 / 13, abs=1e-3),
        "spare": pytest.approx(6 - 2 * 6 / 13, abs=1e-3),
    }


def test_csv_has_a_header_and_a_line_per_group() -> None:
    text = as_csv(report(rows_truth(), "workspace", T0, T0 + timedelta(days=1), {}))
    lines = text.splitlines()
    assert lines[0].startswith("group,runs,gpuHours") and len(lines) == 3


@pytest.mark.parametrize(
    ("text", "needle"),
    [("yesterday", "is not a time"), ("30 d", "is not a time"), ("2027-01-01", "in the future")],
)
def test_bad_since(text: str, needle: str) -> None:
    with pytest.raises(ValueError, match=needle):
        parse_since(text, T0)


def test_since_forms() -> None:
    assert parse_since("30d", T0) == T0 - timedelta(days=30)
    assert parse_since("12h", T0) == T0 - timedelta(hours=12)
    assert parse_since("2026-11-01", T0) == datetime(2026, 11, 1, tzinfo=UTC)


def test_ledger_names_spread_by_month_and_bucket() -> None:
    names = {ledger_name(f"run-{i}", "2026-12-01T00:00:00Z") for i in range(200)}
    assert len(names) == 16 and all(n.startswith("usage-2026-12-") for n in names)
    assert ledger_name("x", "2027-01-03T00:00:00Z").startswith("usage-2027-01-")


async def direct(fn: Any, *a: Any) -> Any:
    return fn(*a)


def taurun(run: str = "r1") -> dict[str, Any]:
    return {
        "metadata": {
            "name": run,
            "namespace": "cv",
            "creationTimestamp": at(0),
            "annotations": {"tau.azure.com/cluster-user": "ana"},
        },
        "spec": {
            "runId": run,
            "runName": "train",
            "workspace": "cv",
            "profile": "a100x1",
            "manifest": {"experiment": {"name": "sweep"}},
        },
    }


def test_the_controllers_ledger_survives_a_restart_and_the_taurun() -> None:
    kube = FakeKube()
    woke: list[int] = []
    ledger = UsageLedger(kube, lambda: woke.append(1))
    ledger.load()
    now = T0 + timedelta(hours=1)
    running = TauRunStatus.model_validate({"phase": "Running"})
    ledger.note(("cv", "r1"), taurun(), workload(("Admitted", 5, "")), running, now)
    asyncio.run(ledger.flush(direct))
    ledger.note(("cv", "r1"), taurun(), workload(("Evicted", 20, "Preempted")), running, now)
    asyncio.run(ledger.flush(direct))
    (obj,) = kube.list("TauUsage", "cv")
    row = obj["spec"]["runs"]["r1"]
    assert (row["user"], row["experiment"], row["profile"]) == ("ana", "sweep", "a100x1")
    assert row["admitted"] == [{"start": at(5), "end": at(20), "why": "Preempted"}]
    assert obj["metadata"]["name"] == ledger_name("r1", at(0)) and woke
    # a new controller reads the ledger back and goes on from it
    again = UsageLedger(kube, lambda: None)
    again.load()
    again.note(("cv", "r1"), taurun(), workload(("Admitted", 30, "")), running, now)
    asyncio.run(again.flush(direct))
    (obj,) = kube.list("TauUsage", "cv")
    assert [iv["start"] for iv in obj["spec"]["runs"]["r1"]["admitted"]] == [at(5), at(30)]


def test_an_unchanged_run_writes_nothing_and_a_failed_write_is_kept() -> None:
    kube = FakeKube()
    ledger = UsageLedger(kube, lambda: None)
    ledger.load()
    running = TauRunStatus.model_validate({"phase": "Running"})
    wl = workload(("Admitted", 5, ""))
    ledger.note(("cv", "r1"), taurun(), wl, running, T0)
    asyncio.run(ledger.flush(direct))
    ledger.note(("cv", "r1"), taurun(), wl, running, T0)
    assert ledger.pending == {}

    async def broken(fn: Any, *a: Any) -> Any:
        raise RuntimeError("apiserver down")

    ledger.note(("cv", "r1"), taurun(), workload(("Evicted", 9, "Preempted")), running, T0)
    assert asyncio.run(ledger.flush(broken)) == 5.0 and ("cv", "r1") in ledger.pending


def test_a_ledger_not_read_records_nothing() -> None:
    """Before the ledger is read back (or without its CRD), rows are not made from scratch:
    that would overwrite what was kept."""
    ledger = UsageLedger(FakeKube(), lambda: None)
    running = TauRunStatus.model_validate({"phase": "Running"})
    ledger.note(("cv", "r1"), taurun(), workload(("Admitted", 5, "")), running, T0)
    assert ledger.pending == {} and ledger.rows == {}
