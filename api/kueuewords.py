"""Kueue's admission messages in TauGrid's words (pure).

Kueue says why a workload waits once per pod set and per flavor it tried, e.g.

    couldn't assign flavors to pod set head: flavor a100x1 doesn't match node affinity;
    couldn't assign flavors to pod set workers: insufficient quota for cpu in flavor cpu,
    request > maximum capacity (14 > 12), insufficient unused quota for nvidia.com/gpu in
    flavor a100x1, 1 more needed

`explain` keeps what matters to the researcher, once: a request above what the queue may ever
use ("can never start here"), then what is short now ("N more needed"); flavors that simply do
not match a pod set's placement are left out. Anything it does not recognise is returned as
Kueue wrote it (the raw text always stays in the signal's `detail`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_NEVER = re.compile(
    r"insufficient quota for (?P<res>[\w./-]+) in flavor (?P<flavor>[\w.-]+), "
    r"(?:.*?)request(?:s)?(?: \([^)]*\))? > maximum capacity \((?P<need>[^>]+?) > (?P<max>[^)]+)\)"
)
_SHORT = re.compile(
    r"insufficient unused quota for (?P<res>[\w./-]+) in flavor (?P<flavor>[\w.-]+), "
    r"(?P<more>[^,;]+?) more needed"
)
_NOISE = re.compile(r"doesn't match node affinity|untolerated taint|doesn't have the resource")

NEVER_HINT = "lower the run's compute, or ask for quota (tau quota request)"


def resource_words(res: str) -> str:
    """A resource as people say it (GPU, CPU, memory), in every message that names one."""
    return {"nvidia.com/gpu": "GPU", "cpu": "CPU", "memory": "memory"}.get(res, res)


@dataclass(frozen=True)
class Words:
    text: str  # the sentence for people
    never: bool  # the request is above what the queue may use at most: it can never start


def explain(message: str, queue: str | None = None) -> Words | None:
    """The sentence for Kueue's message, or None when nothing in it is recognised."""
    where = f"queue {queue}" if queue else "the queue"
    never: list[str] = []
    short: list[str] = []
    for m in _NEVER.finditer(message):
        what = resource_words(m["res"])
        line = (
            f"needs {m['need'].strip()} {what}; {where} may use at most {m['max'].strip()} "
            f"in flavor {m['flavor']}"
        )
        if line not in never:
            never.append(line)
    for m in _SHORT.finditer(message):
        line = f"{m['more'].strip()} more {resource_words(m['res'])} needed in flavor {m['flavor']}"
        if line not in short:
            short.append(line)
    if never:
        return Words("; ".join(never) + f": it can never start here; {NEVER_HINT}", True)
    if short:
        return Words(f"waiting for quota in {where}: " + "; ".join(short), False)
    return None


_PREEMPTED = re.compile(
    r"Preempted to accommodate a workload \((?P<who>[^)]*)\)(?: due to (?P<why>[^;]+))?"
)


def evicted(reason: str, message: str) -> str:
    """Kueue's Evicted/Preempted condition in words: who took the quota (the kube layer has
    already put the run's name, workspace and priority in place of Kueue's UIDs), and why;
    Kueue's queue paths left out."""
    m = _PREEMPTED.search(message)
    if m is not None:
        who = m["who"].strip()
        if who.startswith("run "):
            run, _, rest = who.partition(", ")
            who = f"{run} ({rest})" if rest else run
        why = f", for {m['why'].strip()}" if m["why"] else ""
        return f"preempted by {who}{why}"
    text = re.split(r";\s*preempt(?:or|ee) path", message)[0].strip()
    return f"evicted by Kueue ({reason})" + (f": {text}" if text else "")


def without_noise(message: str) -> str:
    """Kueue's message without the clauses about flavors that do not fit a pod set anyway."""
    parts = [p.strip() for p in re.split(r";\s*", message)]
    kept = [p for p in parts if p and not _NOISE.search(p)]
    return "; ".join(dict.fromkeys(kept)) or message
