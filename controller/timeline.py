"""A run's condensed timeline (pure): what happened, in order, short enough to read.

Entries come from phase changes, Kueue's conditions, pod scheduling and Warning events. They
are merged with what TauRun.status already holds (events expire after about an hour; the
timeline does not), repeats of the same thing in a row fold into one entry with a count and
the last time, and a long timeline keeps its beginning and its end with one entry saying how
many were folded in between.
"""

from __future__ import annotations

from collections.abc import Iterable

from taugrid.api.vocabulary import TimelineEntry

MAX_ENTRIES = 30
KEEP_HEAD = 5
FOLDED = "Folded"


def _key(e: TimelineEntry) -> tuple[str, str, str]:
    return (e.at, e.reason, e.message)


# Within one second, entries go in the order a run's life has them (then by name): a fixed
# order, never the order they happened to be observed in (which differs between passes).
_LIFE = (
    "Pending",
    "Queued",
    "KueueQuotaReserved",
    "KueueAdmitted",
    "Scheduled",
    "Starting",
    "Running",
    "Retrying",
)
_RANK = {r: i for i, r in enumerate(_LIFE)}


def _order(e: TimelineEntry) -> tuple[str, int, str, str]:
    return (e.at, _RANK.get(e.reason, len(_LIFE)), e.reason, e.message)


def _covers(s: TimelineEntry, e: TimelineEntry) -> bool:
    """`e` was already counted in `s`: a repeat folded into it, or an entry folded away."""
    end = s.last or s.at
    if s.reason == FOLDED:
        return s.at <= e.at <= end
    return (s.reason, s.message) == (e.reason, e.message) and s.at <= e.at <= end


def condense(
    old: Iterable[TimelineEntry], new: Iterable[TimelineEntry], limit: int = MAX_ENTRIES
) -> list[TimelineEntry]:
    """`old` (as stored) joined with `new` (as observed now), deduplicated, folded, capped.

    Idempotent: condensing the result with the same observations again gives the same result
    (an entry already counted in a stored one is not counted again), so the status written
    from it changes only when something new is seen."""
    stored = list(old)
    folds = [e for e in stored if e.reason == FOLDED]
    kept: dict[tuple[str, str, str], TimelineEntry] = {
        _key(e): e for e in stored if e.reason != FOLDED
    }
    for e in new:
        k = _key(e)
        was = kept.get(k)
        if was is not None:  # the same event seen again (its count may have grown)
            kept[k] = was.model_copy(
                update={"count": max(was.count, e.count), "last": _latest(was.last, e.last)}
            )
        elif not any(_covers(s, e) for s in (*kept.values(), *folds)):
            kept[k] = e
    # the stored folds stay where they are: what they hold separates the entries around them
    merged = _merge(sorted([*kept.values(), *folds], key=_order))
    # capping can bring two repeats next to each other: they merge too (the cap still holds)
    return _merge(cap(merged, limit))


def _merge(entries: list[TimelineEntry]) -> list[TimelineEntry]:
    """Repeats in a row (same reason and message) fold into one entry with a count."""
    out: list[TimelineEntry] = []
    for e in entries:
        prev = out[-1] if out else None
        same = prev is not None and (prev.reason, prev.message) == (e.reason, e.message)
        if prev is not None and same and e.reason != FOLDED:
            out[-1] = prev.model_copy(
                update={
                    "count": prev.count + e.count,
                    "last": _latest(prev.last or prev.at, e.last or e.at),
                }
            )
        else:
            out.append(e)
    return out


def cap(entries: list[TimelineEntry], limit: int) -> list[TimelineEntry]:
    """At most `limit` entries: the first KEEP_HEAD, one Folded entry (what earlier folds held
    and what is folded now), the newest. A timeline within the limit is left as it is."""
    if len(entries) <= limit:
        return entries
    folds = [e for e in entries if e.reason == FOLDED]
    items = [e for e in entries if e.reason != FOLDED]
    tail_n = limit - KEEP_HEAD - 1
    head, middle, tail = items[:KEEP_HEAD], items[KEEP_HEAD:-tail_n], items[-tail_n:]
    n = sum(f.count for f in folds) + sum(e.count for e in middle)
    starts = [f.at for f in folds] + [e.at for e in middle]
    ends = [f.last or f.at for f in folds] + [e.last or e.at for e in middle]
    fold = TimelineEntry(
        at=min(starts), reason=FOLDED, message=f"{n} entries folded", count=n, last=max(ends)
    )
    return sorted([*head, fold, *tail], key=_order)


def _latest(a: str | None, b: str | None) -> str | None:
    if a is None:
        return b
    if b is None:
        return a
    return max(a, b)
