"""What the controller changes of kopf to watch a large cluster on little memory, and reads of
its indexes: objects slimmed as they come off a watch, no diff base, quiet toggles (each
installed by module attribute and checked by a test against the installed kopf)."""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from typing import Any

import kopf
from kopf._cogs.aiokits import aiotoggles

from taugrid.api import constants as C

_DROP_META = ("managedFields", "ownerReferences")


_WORKLOAD_SPEC = ("queueName", "priorityClassRef", "priorityClassName", "priority", "active")


def first_of(store: Any) -> dict[str, Any] | None:
    for v in store or ():
        return dict(v)
    return None


class ByUid(Mapping[str, dict[str, Any]]):
    """A kopf index keyed by UID, read as a mapping UID -> object (no copy of the index)."""

    def __init__(self, index: Any) -> None:
        self._index = index

    def __getitem__(self, uid: str) -> dict[str, Any]:
        got = first_of(self._index.get(uid))
        if got is None:
            raise KeyError(uid)
        return got

    def __iter__(self) -> Any:
        return iter(self._index)

    def __len__(self) -> int:
        return len(self._index)


def plain(body: Mapping[str, Any]) -> dict[str, Any]:
    """An object as the API serves it, without its managed fields."""
    meta = {k: v for k, v in dict(body.get("metadata") or {}).items() if k != "managedFields"}
    return {**dict(body), "metadata": meta}


def slim(body: Mapping[str, Any]) -> dict[str, Any]:
    """What the controller keeps of an object: no managed fields, no pod spec but its node (and
    its containers' memory limits), no Workload pod templates (with 1,000 runs those were most
    of a restarted controller's memory)."""
    meta = {k: v for k, v in dict(body.get("metadata") or {}).items() if k not in _DROP_META}
    if body.get("kind") == "Workload" or body.get("metadata", {}).get("ownerReferences"):
        meta["ownerReferences"] = [
            {"kind": r.get("kind"), "name": r.get("name")}
            for r in body["metadata"].get("ownerReferences") or []
        ]
    out: dict[str, Any] = {
        "apiVersion": body.get("apiVersion"),
        "kind": body.get("kind"),
        "metadata": meta,
        "status": dict(body.get("status") or {}),
    }
    spec = dict(body.get("spec") or {})
    if body.get("kind") == "Pod":  # its node, and each container's memory limit (OOM's words)
        # and GPUs (whose GPUs DCGM reports)
        limits = [
            {"name": c.get("name"), "resources": {"limits": only}}
            for c in spec.get("containers") or []
            if (
                only := {
                    k: v
                    for k, v in ((c.get("resources") or {}).get("limits") or {}).items()
                    if k in ("memory", C.GPU_RESOURCE)
                }
            )
        ]
        spec = {"nodeName": spec.get("nodeName"), **({"containers": limits} if limits else {})}
    elif body.get("kind") in ("Job", "RayJob"):  # and who runs it (MultiKueue on a manager)
        spec = {"suspend": spec.get("suspend"), **{k: spec[k] for k in ("managedBy",) if k in spec}}
    elif body.get("kind") == "Workload":  # its queue and priority; not its pod templates
        spec = {k: spec[k] for k in _WORKLOAD_SPEC if k in spec}
    out["spec"] = spec
    for k in (
        "type",
        "reason",
        "message",
        "count",
        "firstTimestamp",
        "lastTimestamp",
        "eventTime",
        "involvedObject",
    ):
        if k in body:
            out[k] = body[k]
    kept: dict[str, Any] = _interned(out)
    return kept


def _interned(value: Any) -> Any:
    """The same value with every mapping key one shared string: each watch event is its own
    JSON document, so each object had its own copy of every key ("metadata", each label's and
    annotation's name, each status field). Measured on 1,300 TauRuns, 1,000 Jobs and 500
    Workloads of the 10x run: ~30% of what the controller keeps of each object."""
    if isinstance(value, Mapping):
        return {sys.intern(k) if isinstance(k, str) else k: _interned(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_interned(v) for v in value]
    return value


class NoDiffBase(kopf.DiffBaseStorage):
    """kopf's "last handled" essence is for its change handlers (on.create/update/field), which
    this controller has none of (it reacts to events and reads indexes). kopf builds it all the
    same, a deep copy of every object of every event (Workloads carry whole pod templates):
    this store builds nothing and keeps nothing."""

    def build(self, *, body: Any, extra_fields: Any = None) -> Any:
        return {}

    def fetch(self, *, body: Any) -> None:
        return None

    def store(self, *, body: Any, patch: Any, essence: Any) -> None:
        return None


class QuietToggleSet(aiotoggles.ToggleSet):
    """kopf's set of "not indexed yet" toggles, waking its waiters only when the set's own state
    changes. At start, every object's worker indexes its object, drops its toggle and waits for
    the whole set ("every object of every kind indexed") before its handlers run; kopf's set
    wakes every waiter on every drop, and each re-checks: with 5,000 objects (1,000 runs' TauRuns,
    workloads, pods and events) a restarted controller took minutes before its first handler, the
    cost growing with the square of the objects. Same semantics, one wake-up per waiter."""

    async def make_toggle(self, __val: bool = False, *, name: str | None = None) -> Any:
        toggle = aiotoggles.Toggle(__val, name=name, condition=self._condition)
        async with self._condition:
            before = self.is_on()
            self._toggles.add(toggle)
            if self.is_on() != before:
                self._condition.notify_all()
        return toggle

    async def drop_toggle(self, toggle: Any) -> None:
        await self.drop_toggles((toggle,))

    async def drop_toggles(self, toggles: Any) -> None:
        async with self._condition:
            before = self.is_on()
            self._toggles.difference_update(toggles)
            if self.is_on() != before:
                self._condition.notify_all()


# The kinds a run has many of: their objects are slimmed as they come off the watch.
SLIMMED_KINDS = frozenset(
    {
        ("", "pods"),
        ("", "events"),
        ("batch", "jobs"),
        ("ray.io", "rayjobs"),
        ("kueue.x-k8s.io", "workloads"),
        (C.GROUP, "runs"),
    }
)


_OBJECT_EVENTS = (None, "ADDED", "MODIFIED", "DELETED")


def slimmed_watch(watch: Callable[..., Any]) -> Callable[..., Any]:
    """kopf's watch of a kind (its LIST, then its WATCH), with each object of a run's kinds
    slimmed (`slim`) as it comes: kopf holds every object of every kind until all are indexed,
    and with 1,000 runs the whole objects (managed fields, pod templates) were most of a
    restarted controller's memory (280 MB). An ERROR event (kopf reads its code) and what is not
    an object event pass as they are."""

    async def watch_slimmed(*, resource: Any, **kw: Any) -> Any:
        stream = watch(resource=resource, **kw)
        slims = (resource.group, resource.plural) in SLIMMED_KINDS
        try:
            async for event in stream:
                if (
                    slims
                    and isinstance(event, dict)
                    and event.get("type") in _OBJECT_EVENTS
                    and isinstance(event.get("object"), dict)
                ):
                    event = {**event, "object": slim(event["object"])}
                yield event
        finally:
            await stream.aclose()

    watch_slimmed.tau_slimmed = True  # type: ignore[attr-defined]
    return watch_slimmed


def install_slimmed_watches() -> None:
    """kopf's queueing starts each kind's watch through the module attribute (checked by a
    test against the installed kopf)."""
    from kopf._cogs.clients import watching

    if not getattr(watching.infinite_watch, "tau_slimmed", False):
        watching.infinite_watch = slimmed_watch(watching.infinite_watch)


def install_quiet_toggles() -> None:
    """kopf makes its toggle sets by module attribute when the operator starts (checked by a
    test against the installed kopf)."""
    aiotoggles.ToggleSet = QuietToggleSet  # type: ignore[misc]


def reacts_to_changes(registry: kopf.OperatorRegistry) -> bool:
    """Whether any handler needs kopf's diff base (change or daemon handlers)."""
    return bool(registry._changing.get_all_handlers() or registry._spawning.get_all_handlers())


def connection_info(kube: Any) -> kopf.ConnectionInfo:
    """kopf's connection: the same kubeconfig context (or service account) as our client."""
    cfg = kube.config
    cl = cfg.cluster
    from lightkube.config.models import User

    user = cfg.user or User()
    token = user.token
    if token is None and getattr(user, "token_file", None):
        with open(str(user.token_file)) as f:
            token = f.read().strip()
    return kopf.ConnectionInfo(
        server=str(cl.server),
        ca_path=cl.certificate_auth,
        ca_data=cl.certificate_auth_data,
        insecure=cl.insecure or None,
        certificate_path=user.client_cert,
        certificate_data=user.client_cert_data,
        private_key_path=user.client_key,
        private_key_data=user.client_key_data,
        token=token,
        username=user.username,
        password=user.password,
        default_namespace=cfg.namespace,
    )
