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


def condense(
    old: Iterable[TimelineEntry], new: Iterable[TimelineEntry], limit: int = MAX_ENTRIES
) -> list[TimelineEntry]:
    """`old` (as stored) joined with `new` (as observed now), deduplicated, folded, capped."""
    seen: dict[tuple[str, str, str], TimelineEntry] = {}
    folded_before = 0
    for e in old:
        if e.reason == FOLDED:
            folded_before += e.count
            continue
        seen[_key(e)] = e
    for e in new:
        k = _key(e)
        was = seen.get(k)
        if was is None:
            seen[k] = e
        else:  # the same event seen again (its count may have grown)
            seen[k] = was.model_copy(
                update={"count": max(was.count, e.count), "last": _latest(was.last, e.last)}
            )
    # by time; within one second, in the order seen (stored first, then as observed)
    ordered = sorted(seen.values(), key=lambda e: e.at)
    out: list[TimelineEntry] = []
    for e in ordered:
        prev = out[-1] if out else None
        if prev is not None and (prev.reason, prev.message) == (e.reason, e.message):
            out[-1] = prev.model_copy(
                update={
                    "count": prev.count + e.count,
                    "last": _latest(prev.last or prev.at, e.last or e.at),
                }
            )
        else:
            out.append(e)
    return cap(out, limit, folded_before)


def cap(entries: list[TimelineEntry], limit: int, folded_before: int = 0) -> list[TimelineEntry]:
    """At most `limit` entries: the first KEEP_HEAD, a Folded entry, the newest."""
    if len(entries) <= limit and not folded_before:
        return entries
    if len(entries) <= limit - 1:
        head, tail, middle = entries[:KEEP_HEAD], entries[KEEP_HEAD:], []
    else:
        tail_n = limit - KEEP_HEAD - 1
        head, middle, tail = entries[:KEEP_HEAD], entries[KEEP_HEAD:-tail_n], entries[-tail_n:]
    n = folded_before + sum(e.count for e in middle)
    if not n:
        return entries
    at = middle[0].at if middle else (tail[0].at if tail else head[-1].at)
    fold = TimelineEntry(at=at, reason=FOLDED, message=f"{n} entries folded", count=n)
    return [*head, fold, *tail]


def _latest(a: str | None, b: str | None) -> str | None:
    if a is None:
        return b
    if b is None:
        return a
    return max(a, b)
