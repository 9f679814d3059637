"""Can a run ever be admitted by its queue? (pure: Kueue objects in, a sentence out)

A Kueue ClusterQueue may use, of each flavor and resource, its nominal quota plus what it may
borrow: at most its `borrowingLimit`, and never more than its cohort tree holds. A run that asks
for more than that can never start there, whatever else runs; Kueue would keep it pending for
ever ("request > maximum capacity"). `never_admittable` finds such runs before they are
submitted, from an upper bound of what the queue may use, so it refuses only runs that surely
cannot fit (a run it lets through may still wait for quota; Kueue then says why).

Two certain cases: one pod set needs more of a resource than any single flavor of the queue
may give (Kueue gives each pod set one flavor per resource group), or the whole run needs more
of a resource than all the queue's flavors together.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from taugrid.api.kueuewords import NEVER_HINT, resource_words
from taugrid.api.quantity import format_cpu, format_memory, parse_quantity

Key = tuple[str, str]  # (flavor, resource)


@dataclass(frozen=True)
class PodSet:
    name: str
    count: int
    requests: dict[str, Decimal]  # per pod

    def total(self, resource: str) -> Decimal:
        return self.requests.get(resource, Decimal(0)) * self.count


def _quota(groups: Iterable[Mapping[str, Any]], field: str) -> dict[Key, Decimal]:
    out: dict[Key, Decimal] = {}
    for g in groups:
        for f in g.get("flavors") or []:
            for r in f.get("resources") or []:
                if r.get(field) is not None:
                    key = (str(f.get("name")), str(r.get("name")))
                    out[key] = out.get(key, Decimal(0)) + parse_quantity(r[field])
    return out


def _groups(obj: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return list((obj.get("spec") or {}).get("resourceGroups") or [])


def _root(cohort: str | None, parents: Mapping[str, str | None]) -> str | None:
    seen: set[str] = set()
    while cohort is not None and cohort in parents and cohort not in seen:
        seen.add(cohort)
        parent = parents[cohort]
        if parent is None:
            break
        cohort = parent
    return cohort


def ceilings(
    queue: str, cluster_queues: Iterable[Mapping[str, Any]], cohorts: Iterable[Mapping[str, Any]]
) -> dict[Key, Decimal] | None:
    """At most what ClusterQueue `queue` may ever use, per (flavor, resource); None if unknown."""
    cqs = {c["metadata"]["name"]: c for c in cluster_queues}
    cq = cqs.get(queue)
    if cq is None:
        return None
    nominal = _quota(_groups(cq), "nominalQuota")
    limit = _quota(_groups(cq), "borrowingLimit")
    home = (cq.get("spec") or {}).get("cohortName") or (cq.get("spec") or {}).get("cohort")
    if not home:
        return nominal  # no cohort: nothing to borrow
    coh = {c["metadata"]["name"]: c for c in cohorts}
    parents = {n: (c.get("spec") or {}).get("parentName") for n, c in coh.items()}
    root = _root(home, parents)
    # Everything the tree holds: every queue's and every cohort's nominal quota under the root.
    tree: dict[Key, Decimal] = {}
    members = [
        c
        for c in cqs.values()
        if _root(
            (c.get("spec") or {}).get("cohortName") or (c.get("spec") or {}).get("cohort"), parents
        )
        == root
    ]
    members += [c for n, c in coh.items() if _root(n, parents) == root]
    for m in members:
        for key, q in _quota(_groups(m), "nominalQuota").items():
            tree[key] = tree.get(key, Decimal(0)) + q
    out: dict[Key, Decimal] = {}
    for key in nominal:  # a queue borrows only flavors and resources it lists itself
        own = nominal.get(key, Decimal(0))
        most = tree.get(key, own)
        if key in limit:
            most = min(most, own + limit[key])
        out[key] = max(own, most)
    return out


def _pod_requests(spec: Mapping[str, Any]) -> dict[str, Decimal]:
    out: dict[str, Decimal] = {}
    for c in spec.get("containers") or []:
        for res, q in ((c.get("resources") or {}).get("requests") or {}).items():
            out[res] = out.get(res, Decimal(0)) + parse_quantity(q)
    for c in spec.get("initContainers") or []:  # init containers run first: the larger counts
        for res, q in ((c.get("resources") or {}).get("requests") or {}).items():
            out[res] = max(out.get(res, Decimal(0)), parse_quantity(q))
    return out


def podsets(objects: Iterable[Mapping[str, Any]]) -> list[PodSet]:
    """The pod sets Kueue will see in rendered objects (a Job, or a RayJob's or RayService's head
    and worker groups)."""
    out: list[PodSet] = []
    for o in objects:
        spec = o.get("spec") or {}
        if o.get("kind") == "Job":
            pods = int(spec.get("parallelism") or 1)
            tmpl = (spec.get("template") or {}).get("spec") or {}
            out.append(PodSet("main", pods, _pod_requests(tmpl)))
        elif o.get("kind") in ("RayJob", "RayService"):
            rc = spec.get("rayClusterSpec") or spec.get("rayClusterConfig") or {}
            head = ((rc.get("headGroupSpec") or {}).get("template") or {}).get("spec") or {}
            out.append(PodSet("head", 1, _pod_requests(head)))
            for g in rc.get("workerGroupSpecs") or []:
                n = int(g.get("replicas") or 0) * int(g.get("numOfHosts") or 1)
                tmpl = (g.get("template") or {}).get("spec") or {}
                out.append(PodSet(str(g.get("groupName") or "workers"), n, _pod_requests(tmpl)))
    return out


def _num(q: Decimal, resource: str = "") -> str:
    """A quantity as tau writes it everywhere (64Gi, 500m, 12)."""
    if resource == "memory" or resource.endswith("storage"):
        return format_memory(int(q))
    if resource == "cpu":
        return format_cpu(q)
    return format(q.normalize(), "f")


def never_admittable(sets: list[PodSet], limits: Mapping[Key, Decimal], queue: str) -> str | None:
    """Why the run can never be admitted by `queue` (the numbers, TauGrid's words), or None."""
    resources = {r for s in sets for r in s.requests}
    lines: list[str] = []
    for res in sorted(resources):
        flavors = {f: q for (f, r), q in limits.items() if r == res}
        if not flavors:  # a resource the queue does not cover: Kueue's configuration decides
            continue
        best = max(flavors.values(), default=Decimal(0))
        for s in sets:
            need = s.total(res)
            if need > best:
                flavor = max(flavors, key=lambda f: flavors[f])
                lines.append(
                    f"pod set {s.name} needs {_num(need, res)} {resource_words(res)}; queue "
                    f"{queue} may use at most {_num(best, res)} in flavor {flavor}"
                )
                break
        else:
            need = sum((s.total(res) for s in sets), Decimal(0))
            have = sum(flavors.values(), Decimal(0))
            if need > have:
                lines.append(
                    f"needs {_num(need, res)} {resource_words(res)} in all; queue {queue} may use "
                    f"at most {_num(have, res)}"
                )
    if not lines:
        return None
    return "; ".join(lines) + f": it can never start here; {NEVER_HINT}"


def _usage(cq: Mapping[str, Any]) -> dict[Key, Decimal]:
    out: dict[Key, Decimal] = {}
    for f in (cq.get("status") or {}).get("flavorsUsage") or []:
        for r in f.get("resources") or []:
            out[(str(f.get("name")), str(r.get("name")))] = parse_quantity(r.get("total", "0"))
    return out


def room(
    queue: str, cluster_queues: Iterable[Mapping[str, Any]], cohorts: Iterable[Mapping[str, Any]]
) -> dict[Key, Decimal] | None:
    """What a ClusterQueue could still admit now, by flavor and resource: what it may use at
    most (its ceiling) less what it uses (None: the queue is unknown)."""
    cqs = list(cluster_queues)
    limits = ceilings(queue, cqs, cohorts)
    cq = next((c for c in cqs if c["metadata"]["name"] == queue), None)
    if limits is None or cq is None:
        return None
    used = _usage(cq)
    return {k: max(Decimal(0), v - used.get(k, Decimal(0))) for k, v in limits.items()}
