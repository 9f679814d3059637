"""Quota requests: the arithmetic of grants and their life (pure; no I/O).

A request is Pending until a platform admin decides (the decision lives in its status, which
researchers' RBAC cannot write). Approved requests become Active in the order they were approved
while there is room in the pool, and stay Active for their `duration`; then Expired. What an
active grant adds is capped so that base quota + grants never exceeds the pool's capacity (older
grants first). `plan()` is level-based: it derives every request's status and every queue's
total grant from the current objects and the time, so running it twice changes nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal

from taugrid.api.crds import (
    Condition,
    QuotaPhase,
    TauQuotaRequestSpec,
    TauQuotaRequestStatus,
)
from taugrid.api.kubetime import k8s_time as iso
from taugrid.api.kubetime import parse_k8s_time as parse_time
from taugrid.api.quantity import QuantityError, canonical, duration, parse_quantity

CONDITION_TYPES: tuple[QuotaPhase, ...] = ("Pending", "Approved", "Active", "Expired", "Denied")


@dataclass(frozen=True)
class Target:
    """Which quota a grant raises: a ClusterQueue's (flavor, resource)."""

    cluster_queue: str
    flavor: str
    resource: str


@dataclass(frozen=True)
class Request:
    """What the controller reads of one TauQuotaRequest."""

    namespace: str
    name: str
    generation: int
    created: datetime
    spec: TauQuotaRequestSpec
    status: TauQuotaRequestStatus
    target: Target | None  # None: unresolved (why: `problem`)
    problem: str | None = None

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True)
class Room:
    """What a target's pool allows: its capacity and the base quota Pulumi declared."""

    capacity: Decimal | None  # None: unknown (no grant is made)
    base: Decimal
    borrowing_limit: Decimal | None = None  # the queue's declared limit above nominal


@dataclass
class Plan:
    statuses: dict[str, TauQuotaRequestStatus] = field(default_factory=dict)  # key -> status
    grants: dict[Target, Decimal] = field(default_factory=dict)  # target -> total granted


def amount(spec: TauQuotaRequestSpec) -> Decimal:
    """The requested amount as a number (QuantityError if it is not a quantity or <= 0)."""
    value = parse_quantity(str(spec.requested))
    if value <= 0:
        raise QuantityError(f"requested {spec.requested!r} must be more than 0")
    return value


def _number(value: Decimal) -> int | str:
    return int(value) if value == value.to_integral_value() else canonical(str(value))


def plan(requests: Iterable[Request], rooms: Mapping[Target, Room], now: datetime) -> Plan:
    """Every request's status and every target's total grant, at `now`."""
    out = Plan()
    reqs = sorted(requests, key=lambda r: (r.created, r.key))
    used: dict[Target, Decimal] = {}
    # Active grants keep their place (oldest first); then approvals in the order they came.
    active = [r for r in reqs if _still_active(r, now)]
    waiting = [r for r in reqs if r not in active]
    waiting.sort(key=lambda r: (_decided_at(r) or r.created, r.key))
    active.sort(key=lambda r: (parse_time(r.status.activeSince) or r.created, r.key))
    for r in [*active, *waiting]:
        out.statuses[r.key] = _one(r, rooms, used, now)
    for target in {r.target for r in reqs if r.target is not None}:
        out.grants[target] = used.get(target, Decimal(0))
    return out


def _decided_at(r: Request) -> datetime | None:
    return parse_time(r.status.decision.at) if r.status.decision else None


def _still_active(r: Request, now: datetime) -> bool:
    since = parse_time(r.status.activeSince)
    if r.status.phase != "Active" or since is None or not _approved(r):
        return False
    return now < since + duration(r.spec.duration)


def _approved(r: Request) -> bool:
    d = r.status.decision
    return bool(
        d and d.verdict == "Approved" and (d.generation is None or d.generation == r.generation)
    )


def _one(
    r: Request, rooms: Mapping[Target, Room], used: dict[Target, Decimal], now: datetime
) -> TauQuotaRequestStatus:
    st = r.status
    d = st.decision
    base = TauQuotaRequestStatus(
        decision=d,
        clusterQueue=r.target.cluster_queue if r.target else None,
        observedGeneration=r.generation,
    )
    # Terminal phases stay.
    if st.phase == "Expired":
        return _with(
            base,
            st,
            "Expired",
            st.message or "expired",
            activeSince=st.activeSince,
            expiresAt=st.expiresAt,
            granted=0,
        )
    if d is not None and d.verdict == "Denied":
        why = f"denied by {d.by}" + (f": {d.note}" if d.note else "")
        return _with(base, st, "Denied", why)
    if st.phase == "Active" and st.activeSince and _approved(r):
        return _active(r, base, rooms, used, now)
    if d is None:
        return _with(
            base, st, "Pending", r.problem or "waiting for a platform admin: tau quota approve"
        )
    if not _approved(r):
        return _with(
            base,
            st,
            "Pending",
            "the request changed after it was approved: it needs a new decision",
        )
    # Approved, not active yet: active now if there is room.
    if r.problem is not None or r.target is None:
        return _with(base, st, "Approved", f"approved by {d.by}, not applied: {r.problem}")
    granted, note = _grant(r, rooms, used)
    if granted <= 0:
        return _with(base, st, "Approved", f"approved by {d.by}; waiting for room: {note}")
    ends = now + duration(r.spec.duration)
    return _with(
        base,
        st,
        "Active",
        note,
        activeSince=iso(now),
        expiresAt=iso(ends),
        granted=_number(granted),
    )


def _active(
    r: Request,
    base: TauQuotaRequestStatus,
    rooms: Mapping[Target, Room],
    used: dict[Target, Decimal],
    now: datetime,
) -> TauQuotaRequestStatus:
    """An active grant: expired at its end, else what of it fits now."""
    st = r.status
    assert st.activeSince is not None
    since = parse_time(st.activeSince)
    assert since is not None
    ends = since + duration(r.spec.duration)
    if now >= ends:
        return _with(
            base,
            st,
            "Expired",
            f"expired at {iso(ends)}; the quota is back to base",
            activeSince=st.activeSince,
            expiresAt=iso(ends),
            granted=0,
        )
    granted, note = _grant(r, rooms, used)
    return _with(
        base,
        st,
        "Active",
        note,
        activeSince=st.activeSince,
        expiresAt=iso(ends),
        granted=_number(granted),
    )


def _grant(
    r: Request, rooms: Mapping[Target, Room], used: dict[Target, Decimal]
) -> tuple[Decimal, str]:
    """How much of the request fits now (and the words for it); books it in `used`."""
    if r.target is None:
        return Decimal(0), r.problem or "no ClusterQueue for it"
    try:
        want = amount(r.spec)
    except QuantityError as e:
        return Decimal(0), str(e)
    room = rooms.get(r.target)
    if room is None or room.capacity is None:
        return Decimal(0), f"the capacity of flavor {r.target.flavor} is unknown"
    taken = used.get(r.target, Decimal(0))
    ceiling = room.capacity - room.base
    why = f"pool capacity {_number(room.capacity)}, base {_number(room.base)}"
    if room.borrowing_limit is not None and room.borrowing_limit < ceiling:
        ceiling = room.borrowing_limit
        why = f"the queue's borrowingLimit is {_number(room.borrowing_limit)}"
    got = max(Decimal(0), min(want, ceiling - taken))
    used[r.target] = taken + got
    res = r.target.resource
    where = f"{r.target.cluster_queue}/{r.target.flavor}"
    if got == want:
        return got, f"+{_number(got)} {res} on {where} (base {_number(room.base)})"
    return got, (
        f"+{_number(got)} of {_number(want)} {res} on {where}: {why}, grants {_number(taken + got)}"
    )


def _with(
    base: TauQuotaRequestStatus,
    old: TauQuotaRequestStatus,
    phase: QuotaPhase,
    message: str,
    **fields: object,
) -> TauQuotaRequestStatus:
    st = base.model_copy(update={"phase": phase, "message": message, **fields})
    st.conditions = conditions(old, phase, message, st)
    return st


def conditions(
    old: TauQuotaRequestStatus, phase: QuotaPhase, message: str, new: TauQuotaRequestStatus
) -> list[Condition]:
    """One condition per phase; True for those reached. Times of unchanged ones are kept."""
    reached: dict[str, tuple[bool, str, str | None]] = {}
    d = new.decision
    decided = (
        f"{d.verdict.lower()} by {d.by}" + (f": {d.note}" if d and d.note else "") if d else ""
    )
    reached["Pending"] = (phase == "Pending", message if phase == "Pending" else "decided", None)
    reached["Approved"] = (
        bool(d and d.verdict == "Approved") and phase != "Pending",
        decided,
        d.at if d else None,
    )
    reached["Denied"] = (phase == "Denied", decided, d.at if d else None)
    reached["Active"] = (
        phase == "Active",
        message if phase == "Active" else ("ended" if new.activeSince else "not active"),
        new.activeSince,
    )
    reached["Expired"] = (
        phase == "Expired",
        message if phase == "Expired" else "",
        new.expiresAt if phase == "Expired" else None,
    )
    prior = {c.type: c for c in old.conditions}
    out = []
    for kind in CONDITION_TYPES:
        is_true, msg, at = reached[kind]
        status = "True" if is_true else "False"
        was = prior.get(kind)
        when = (
            was.lastTransitionTime
            if was is not None and was.status == status
            else (at if is_true and at else None)
        )
        out.append(
            Condition(
                type=kind,
                status=status,
                reason=kind if is_true else f"Not{kind}",
                message=msg,
                lastTransitionTime=when or "",
            )
        )
    return out


def stamp(conds: list[Condition], now: datetime) -> list[Condition]:
    """Conditions without a transition time get `now` (a transition seen now)."""
    return [
        c if c.lastTransitionTime else c.model_copy(update={"lastTransitionTime": iso(now)})
        for c in conds
    ]


def next_change(statuses: Iterable[TauQuotaRequestStatus]) -> datetime | None:
    """When the earliest active grant expires (when to look again without any event)."""
    ends = [parse_time(s.expiresAt) for s in statuses if s.phase == "Active" and s.expiresAt]
    return min((e for e in ends if e is not None), default=None)


def cohort_quota(grants: Mapping[Target, Decimal], cluster_queue: str) -> list[dict[str, object]]:
    """The grant cohort's resourceGroups for one ClusterQueue: every granted (flavor, resource),
    each flavor listing every covered resource (Kueue's rule), never lent onwards."""
    mine = {t: v for t, v in grants.items() if t.cluster_queue == cluster_queue and v > 0}
    if not mine:
        return []
    resources = sorted({t.resource for t in mine})
    flavors = sorted({t.flavor for t in mine})
    return [
        {
            "coveredResources": resources,
            "flavors": [
                {
                    "name": f,
                    "resources": [
                        {
                            "name": res,
                            "nominalQuota": canonical(
                                str(mine.get(Target(cluster_queue, f, res), Decimal(0)))
                            ),
                            "lendingLimit": "0",
                        }
                        for res in resources
                    ],
                }
                for f in flavors
            ],
        }
    ]


__all__ = [
    "CONDITION_TYPES",
    "Plan",
    "Request",
    "Room",
    "Target",
    "amount",
    "cohort_quota",
    "iso",
    "next_change",
    "parse_time",
    "plan",
    "stamp",
]
