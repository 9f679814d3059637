"""Who used what (the contract and its arithmetic, no I/O): the usage ledger's rows, how one row
follows a run's Kueue Workload, and `tau usage`'s report over rows.

The ledger outlives the runs: the controller keeps one row per run in TauUsage objects in the
run's workspace namespace (`usage-YYYY-MM-B`, B one of LEDGER_BUCKETS by the run id), written when
the row changes (admitted, evicted, ended), never deleted with the TauRun. A row is about 400
bytes: 10,000 runs are about 4 MB in etcd, in 16 objects a month per workspace.

Admitted time is Kueue's: from a Workload's Admitted condition to its Finished condition (or to
its eviction); a run admitted twice (preempted, then admitted again) has two intervals, and the
first's GPU-hours are lost to preemption. Busy GPU-hours are admitted GPU-hours weighted by the
SM activity DCGM reported (when the run's GPU use was read).
"""

from __future__ import annotations

import csv
import hashlib
import io
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from taugrid.api.defaults import new_list
from taugrid.api.kubetime import k8s_time, parse_k8s_time
from taugrid.api.teams import PoolPrice

LEDGER_BUCKETS = 16
LEDGER_LABEL = "tau.azure.com/usage-month"
PREEMPTED = "Preempted"
FINISHED = "Finished"
GPU = "nvidia.com/gpu"


class _Model(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True, populate_by_name=True, defer_build=True)


class Interval(_Model):
    """One admission: [start, end) of Kueue's quota, and why it ended."""

    start: str = Field(json_schema_extra={"format": "date-time"})
    end: str | None = Field(None, json_schema_extra={"format": "date-time"})
    why: str | None = Field(None, description="Finished, Preempted, or Kueue's eviction reason")


class UsageRow(_Model):
    """One run in the ledger."""

    run: str = Field(description="The run id")
    name: str = ""
    workspace: str
    user: str | None = None
    profile: str | None = None
    experiment: str | None = None
    queue: str | None = Field(None, description="The ClusterQueue that admitted it")
    flavor: str | None = Field(None, description="The pool (ResourceFlavor) of its GPUs or CPUs")
    gpus: int = Field(0, ge=0, description="GPUs its admission holds")
    cpus: float = Field(0, ge=0, description="CPU cores its admission holds")
    created: str = Field(json_schema_extra={"format": "date-time"})
    admitted: list[Interval] = Field(default_factory=new_list)
    ended: str | None = Field(None, json_schema_extra={"format": "date-time"})
    phase: str | None = None
    busyGpuSeconds: float = Field(0, ge=0, description="GPU-seconds weighted by SM activity")
    busyAt: str | None = Field(None, description="Until when busyGpuSeconds is counted")
    busySm: float | None = Field(None, description="The SM activity last read (0..1)")


def ledger_name(run_id: str, created: str) -> str:
    """The TauUsage object a run's row lives in: by its creation month and a bucket of its id
    (so one object stays far below etcd's 1.5 MB at 60,000 runs a month per workspace)."""
    bucket = int(hashlib.sha256(run_id.encode()).hexdigest(), 16) % LEDGER_BUCKETS
    return f"usage-{created[:7]}-{bucket:02d}"


# --- following one run -----------------------------------------------------------------------
def _condition(wl: Mapping[str, Any], kind: str) -> Mapping[str, Any] | None:
    for c in (wl.get("status") or {}).get("conditions") or []:
        if c.get("type") == kind and c.get("status") == "True":
            return dict(c)
    return None


def admission_of(wl: Mapping[str, Any]) -> tuple[str | None, str | None, int, float]:
    """(queue, flavor, GPUs, CPU cores) of a Workload's current admission (Nones and 0s without
    one). The flavor is the GPUs' pool, or the CPUs' when it holds no GPU."""
    from taugrid.api.quantity import parse_cpu

    adm = (wl.get("status") or {}).get("admission") or {}
    gpus, cpus, flavor, cpu_flavor = 0, 0.0, None, None
    for ps in adm.get("podSetAssignments") or []:
        usage = ps.get("resourceUsage") or {}
        flavors = ps.get("flavors") or {}
        if GPU in usage:
            gpus += int(float(str(usage[GPU])))
            flavor = flavor or flavors.get(GPU)
        if "cpu" in usage:
            cpus += float(parse_cpu(str(usage["cpu"])))
            cpu_flavor = cpu_flavor or flavors.get("cpu")
    return adm.get("clusterQueue"), flavor or cpu_flavor, gpus, cpus


def _busy_until(row: UsageRow, until: str, gpus: int) -> dict[str, Any]:
    """busyGpuSeconds carried forward to `until` at the last SM activity read."""
    if row.busySm is None or row.busyAt is None or until <= row.busyAt:
        return {}
    secs = _seconds(row.busyAt, until)
    return {"busyGpuSeconds": round(row.busyGpuSeconds + row.busySm * gpus * secs, 1)}


def _seconds(a: str, b: str) -> float:
    ta, tb = parse_k8s_time(a), parse_k8s_time(b)
    return max(0.0, (tb - ta).total_seconds()) if ta and tb else 0.0


def advance(
    row: UsageRow,
    workload: Mapping[str, Any] | None,
    phase: str | None,
    ended: str | None,
    sm_active: float | None,
    sm_since: str | None,
    now: datetime,
) -> UsageRow:
    """The row after one look at the run: its Workload (Kueue's admission, eviction, finish),
    its phase and end, and its GPUs' SM activity (since when). Idempotent: the same look again
    gives the same row, so the ledger is written only when something changed."""
    upd: dict[str, Any] = {}
    wl = workload or {}
    admitted = _condition(wl, "Admitted")
    evicted = _condition(wl, "Evicted")
    finished = _condition(wl, FINISHED)
    intervals = list(row.admitted)
    open_ = intervals[-1] if intervals and intervals[-1].end is None else None
    queue, flavor, gpus, cpus = admission_of(wl)
    if queue:
        upd.update(queue=queue, flavor=flavor, gpus=gpus, cpus=round(cpus, 3))
    if admitted and not finished:
        start = str(admitted.get("lastTransitionTime") or k8s_time(now))
        if open_ is None and (not intervals or (intervals[-1].end or "") <= start):
            intervals.append(Interval(start=start))
            open_ = intervals[-1]
    end_at: str | None = None
    why: str | None = None
    if open_ is not None:
        if finished:
            end_at, why = (
                str(finished.get("lastTransitionTime") or ended or k8s_time(now)),
                FINISHED,
            )
        elif not admitted:
            if evicted:
                end_at = str(evicted.get("lastTransitionTime") or k8s_time(now))
                why = str(evicted.get("reason") or "Evicted")
            else:
                end_at, why = ended or k8s_time(now), FINISHED if ended else "Ended"
    if open_ is not None and end_at is not None:
        end_at = max(end_at, open_.start)
        # GPU use counts to the end of the admission, at the last activity read
        row = row.model_copy(update=_busy_until(row, end_at, row.gpus or gpus))
        intervals[-1] = Interval(start=open_.start, end=end_at, why=why)
        upd["busyAt"] = end_at
    if sm_active is not None and sm_since is not None and (intervals and intervals[-1].end is None):
        at = max(sm_since, intervals[-1].start)
        if row.busyAt is None or at > row.busyAt:
            row = row.model_copy(update=_busy_until(row, at, row.gpus or gpus))
            upd.update(busyAt=at, busySm=round(sm_active, 3))
    upd["admitted"] = intervals
    if ended and phase:
        upd.update(ended=ended, phase=phase)
    elif phase:
        upd["phase"] = phase
    return row.model_copy(update=upd)


# --- the report -----------------------------------------------------------------------------
By = Literal["workspace", "team", "user", "profile", "experiment", "queue"]
BY: tuple[str, ...] = ("workspace", "team", "user", "profile", "experiment", "queue")
_SINCE = re.compile(r"^([0-9]+)([hdw])$")


def parse_since(text: str, now: datetime) -> datetime:
    """`--since`: 30d, 12h, 2w, or a date/time (2026-11-01, 2026-11-01T08:00:00Z); ValueError
    with the forms when unreadable or in the future."""
    t = text.strip()
    m = _SINCE.match(t)
    if m:
        n, unit = int(m[1]), m[2]
        start = now - timedelta(hours=n) * {"h": 1, "d": 24, "w": 168}[unit]
    else:
        try:
            start = datetime.fromisoformat(t.replace("Z", "+00:00"))
        except ValueError:
            raise ValueError(
                f"--since {text!r} is not a time: use 30d, 12h, 2w or a date like 2026-11-01"
            ) from None
        if start.tzinfo is None:
            start = start.replace(tzinfo=UTC)
    if start > now:
        raise ValueError(f"--since {text!r} is in the future ({start:%Y-%m-%d %H:%M} UTC)")
    return start


class UsageReport(_Model):
    """One row of `tau usage` (one group)."""

    group: str
    runs: int
    gpuHours: float = Field(description="GPU-hours admitted (admission to end)")
    cpuHours: float
    busyGpuHours: float | None = Field(None, description="GPU-hours busy (SM activity)")
    lostGpuHours: float = Field(0, description="GPU-hours of admissions ended by preemption")
    preemptions: int = 0
    waitP50s: float | None = Field(None, description="Queue wait p50 (creation to admission)")
    waitP95s: float | None = None
    cost: float | None = None
    currency: str | None = None


def _clip(iv: Interval, start: datetime, end: datetime) -> float:
    a = parse_k8s_time(iv.start)
    b = parse_k8s_time(iv.end) if iv.end else end
    if a is None or b is None:
        return 0.0
    return max(0.0, (min(b, end) - max(a, start)).total_seconds())


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def busy_seconds(row: UsageRow, until: datetime) -> float:
    """Its busy GPU-seconds, an open admission counted on to `until` at the last reading."""
    extra = 0.0
    if row.admitted and row.admitted[-1].end is None and row.busySm is not None and row.busyAt:
        at = parse_k8s_time(row.busyAt)
        if at is not None and until > at:
            extra = row.busySm * row.gpus * (until - at).total_seconds()
    return row.busyGpuSeconds + extra


def _pct(xs: list[float], p: float) -> float | None:
    if not xs:
        return None
    s = sorted(xs)
    k = max(0, math.ceil(p * len(s)) - 1)
    return round(s[k], 1)


def group_key(row: UsageRow, by: str, teams: Mapping[str, str]) -> str:
    if by == "team":
        return teams.get(row.workspace, "(no team)")
    value = getattr(row, by, None)
    return str(value) if value else "(none)"


@dataclass
class _Group:
    runs: int = 0
    gpu: float = 0.0
    cpu: float = 0.0
    busy: float = 0.0
    busy_known: bool = False
    lost: float = 0.0
    preempt: int = 0
    cost: float = 0.0
    waits: list[float] = field(default_factory=new_list)

    def add(
        self,
        row: UsageRow,
        secs: list[float],
        end: datetime,
        inside: bool,
        prices: Mapping[str, PoolPrice] | None,
    ) -> None:
        """One run's admissions (`secs`: each one's seconds inside the window)."""
        self.runs += 1
        total = sum(secs)
        self.gpu += row.gpus * total / 3600
        self.cpu += row.cpus * total / 3600
        if row.busySm is not None or row.busyGpuSeconds:
            self.busy_known = True
            # busy GPU-seconds cover all its admissions: the window's part of them
            whole = sum(_clip(iv, _EPOCH, end) for iv in row.admitted)
            self.busy += busy_seconds(row, end) * (total / whole if whole else 0.0) / 3600
        for iv, s in zip(row.admitted, secs, strict=True):
            if iv.why == PREEMPTED:
                self.preempt += 1
                self.lost += row.gpus * s / 3600
        if row.admitted and inside:
            self.waits.append(_seconds(row.created, row.admitted[0].start))
        p = prices.get(row.flavor) if prices is not None and row.flavor else None
        if p is not None:
            if p.gpusPerNode and row.gpus:
                self.cost += p.perNodeHour / p.gpusPerNode * row.gpus * total / 3600
            else:
                self.cost += p.perNodeHour / max(1, p.cpusPerNode) * row.cpus * total / 3600

    def report(self, group: str, currency: str | None, priced: bool) -> UsageReport:
        return UsageReport(
            group=group,
            runs=self.runs,
            gpuHours=round(self.gpu, 4),
            cpuHours=round(self.cpu, 4),
            busyGpuHours=round(self.busy, 4) if self.busy_known else None,
            lostGpuHours=round(self.lost, 4),
            preemptions=self.preempt,
            waitP50s=_pct(self.waits, 0.5),
            waitP95s=_pct(self.waits, 0.95),
            cost=round(self.cost, 2) if priced else None,
            currency=currency if priced else None,
        )


def report(
    rows: Iterable[UsageRow],
    by: str,
    start: datetime,
    end: datetime,
    teams: Mapping[str, str],
    prices: Mapping[str, PoolPrice] | None = None,
    currency: str | None = None,
) -> list[UsageReport]:
    """`tau usage`: per group, what its runs' admissions held within [start, end). A run counts
    where its admissions overlap the window (an open admission up to `end`) or it was created
    in it (its queue wait); groups by GPU-hours, most first."""
    acc: dict[str, _Group] = {}
    for row in rows:
        secs = [_clip(iv, start, end) for iv in row.admitted]
        created = parse_k8s_time(row.created)
        inside = created is not None and start <= created < end
        if any(secs) or inside:
            acc.setdefault(group_key(row, by, teams), _Group()).add(row, secs, end, inside, prices)
    ordered = sorted(acc.items(), key=lambda kv: (-kv[1].gpu, kv[0]))
    return [g.report(k, currency, prices is not None) for k, g in ordered]


def idle_quota_hours(
    nominal_gpus: Mapping[tuple[str, str], int],
    rows: Iterable[UsageRow],
    start: datetime,
    end: datetime,
) -> dict[str, float]:
    """Per ClusterQueue: GPU-hours of its nominal quota that no run held in the window.

    Per flavor (pool), a queue's unused quota is its nominal GPUs x the window's hours less what
    its own runs held; what the cohort's queues borrowed on that flavor was drawn from the
    unused quota of all, in proportion to it (Kueue does not say from whom: the same attribution
    as `tau quota status`'s lent); what is left is idle. `nominal_gpus`: (queue, flavor) -> GPUs.
    """
    hours = (end - start).total_seconds() / 3600
    held: dict[tuple[str, str], float] = {}
    for row in rows:
        if row.queue and row.flavor and row.gpus:
            secs = sum(_clip(iv, start, end) for iv in row.admitted)
            key = (row.queue, row.flavor)
            held[key] = held.get(key, 0.0) + row.gpus * secs / 3600
    unused: dict[tuple[str, str], float] = {}
    borrowed: dict[str, float] = {}
    for key in {*nominal_gpus, *held}:
        own = nominal_gpus.get(key, 0) * hours
        unused[key] = max(0.0, own - held.get(key, 0.0))
        borrowed[key[1]] = borrowed.get(key[1], 0.0) + max(0.0, held.get(key, 0.0) - own)
    pool = {f: sum(u for (_, g), u in unused.items() if g == f) for f in borrowed}
    idle: dict[str, float] = {}
    for (queue, flavor), u in unused.items():
        if nominal_gpus.get((queue, flavor), 0) <= 0:
            continue  # a queue with no GPUs of its own on this flavor has none idle
        lent = borrowed[flavor] * u / pool[flavor] if pool[flavor] else 0.0
        idle[queue] = idle.get(queue, 0.0) + max(0.0, u - lent)
    return {q: round(h, 4) for q, h in sorted(idle.items())}


CSV_FIELDS = tuple(UsageReport.model_fields)


def as_csv(rows: Iterable[UsageReport]) -> str:
    out = io.StringIO()
    w = csv.DictWriter(out, fieldnames=CSV_FIELDS, lineterminator="\n")
    w.writeheader()
    for r in rows:
        w.writerow({k: "" if v is None else v for k, v in r.model_dump().items()})
    return out.getvalue()
