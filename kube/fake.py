"""An in-memory `KubeAPI` for unit tests (the kube backend, the controller, the Python API).

It keeps objects by (kind, namespace, name), answers GET/LIST with label and field selectors,
applies as a merge (server-side apply's effect for the fields tau sends), records every call in
`calls`, and lets a test deny verbs (`forbid`), script logs (`logs`) and the visibility API
(`pending_items`) and services behind the API server's proxy (`services`). A test that needs a
scripted sequence subclasses it and overrides one method.
No Kubernetes library is imported.
"""

from __future__ import annotations

import builtins
import copy
import itertools
import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from taugrid.api.errors import TauError
from taugrid.api.kubetime import k8s_time
from taugrid.kube.client import FIELD_MANAGER, Forbidden, Reply, checked_log
from taugrid.kube.kinds import KINDS

NOT_SERVED = "Kueue's visibility API (pendingworkloads) is not served here"


def _merge(base: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        elif isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = _merge(out[k], v)
        else:
            out[k] = copy.deepcopy(v)
    return out


def _field(obj: dict[str, Any], path: str) -> Any:
    cur: Any = obj
    for part in path.split("."):
        cur = cur.get(part) if isinstance(cur, dict) else None
    return cur


class FakeKube:
    """Objects in memory; `calls` lists (verb, kind, namespace) in order."""

    def __init__(
        self,
        objects: dict[str, builtins.list[dict[str, Any]]] | None = None,
        *,
        user: str = "alice",
        context: str | None = "fake",
    ) -> None:
        self.context, self.server, self.user = context, "https://fake.invalid", user
        self.objects: dict[tuple[str, str | None, str], dict[str, Any]] = {}
        self.calls: builtins.list[tuple[str, str, str | None]] = []
        self.forbid: set[tuple[str, str, str | None]] = set()  # (verb, kind, namespace)
        self.not_served: set[str] = set()  # kinds whose CRD is "not installed"
        self.logs: dict[str, builtins.list[str]] = {}  # pod -> lines
        self.pending_items: dict[tuple[str, str], builtins.list[dict[str, Any]]] | None = None
        self.evicted: builtins.list[str] = []
        # (namespace, service) -> what answers its proxy: (path, headers) -> Reply
        self.services: dict[tuple[str, str], Callable[[str, dict[str, str]], Reply]] = {}
        self.requests: builtins.list[tuple[str, str, str, str, bytes | None]] = []  # sent to them
        self._status_owners: dict[tuple[str, str | None, str], dict[str, str]] = {}
        self._uid = itertools.count(1)
        self._rv = itertools.count(1)
        for kind, items in (objects or {}).items():
            for o in items:
                self.put(kind, o)

    # --- set-up helpers ------------------------------------------------------------------------
    def put(self, kind: str, obj: dict[str, Any]) -> dict[str, Any]:
        meta = obj.setdefault("metadata", {})
        meta.setdefault("uid", f"uid-{next(self._uid)}")
        meta.setdefault("creationTimestamp", k8s_time())
        meta.setdefault("generation", 1)
        meta["resourceVersion"] = str(next(self._rv))
        obj.setdefault("kind", kind)
        self.objects[(kind, meta.get("namespace"), meta["name"])] = obj
        return obj

    def _check(self, verb: str, kind: str, namespace: str | None) -> None:
        self.calls.append((verb, kind, namespace))
        if kind in self.not_served:
            raise TauError(f"this cluster does not serve {kind}", exit_code=4)
        for v, k, ns in self.forbid:
            if v in (verb, "*") and k in (kind, "*") and ns in (namespace, None):
                raise Forbidden(verb, KINDS[kind], namespace, "denied by the fake")

    # --- KubeAPI ---------------------------------------------------------------------------------
    def apply(self, obj: dict[str, Any], manager: str = FIELD_MANAGER) -> dict[str, Any]:
        kind, meta = obj["kind"], obj["metadata"]
        self._check("apply", kind, meta.get("namespace"))
        key = (kind, meta.get("namespace"), meta["name"])
        merged = _merge(self.objects.get(key, {}), copy.deepcopy(obj))
        return copy.deepcopy(self.put(kind, merged))

    def create(self, obj: dict[str, Any], manager: str = FIELD_MANAGER) -> dict[str, Any] | None:
        kind, meta = obj["kind"], obj["metadata"]
        self._check("create", kind, meta.get("namespace"))
        if (kind, meta.get("namespace"), meta["name"]) in self.objects:
            return None
        return copy.deepcopy(self.put(kind, copy.deepcopy(obj)))

    def apply_status(self, obj: dict[str, Any], manager: str) -> dict[str, Any]:
        kind, meta = obj["kind"], obj["metadata"]
        self._check("apply_status", kind, meta.get("namespace"))
        key = (kind, meta.get("namespace"), meta["name"])
        if key not in self.objects:
            raise TauError(f"{kind} {meta['name']} not found", exit_code=4)
        # Server-side apply, to the depth of status' top-level fields: this manager's fields
        # become what it sends (one it sent before and omits now goes); other managers' stay.
        cur = self.objects[key]
        sent = copy.deepcopy(obj.get("status") or {})
        owned = self._status_owners.setdefault(key, {})
        status = {
            k: v
            for k, v in (cur.get("status") or {}).items()
            if k in sent or owned.get(k, manager) != manager
        }
        status.update(sent)
        owned.update(dict.fromkeys(sent, manager))
        cur["status"] = status
        return copy.deepcopy(self.put(kind, cur))

    def merge_patch(
        self,
        kind_name: str,
        name: str,
        namespace: str | None,
        patch: dict[str, Any],
        manager: str,
        status: bool = False,
    ) -> dict[str, Any]:
        self._check("patch", kind_name, namespace)
        key = (kind_name, namespace, name)
        cur = self.objects.get(key)
        if cur is None:  # as the API server answers: 404, nothing made
            raise TauError(
                f"patch {KINDS[kind_name].plural}: 404 Not Found: {name!r} not found",
                exit_code=4,
            )
        return copy.deepcopy(self.put(kind_name, _merge(cur, patch)))

    def evict(self, pod: str, namespace: str) -> bool:
        self._check("evict", "Pod", namespace)
        self.evicted.append(pod)
        return self.objects.pop(("Pod", namespace, pod), None) is not None

    def get(self, kind_name: str, name: str, namespace: str | None = None) -> dict[str, Any] | None:
        self._check("get", kind_name, namespace)
        got = self.objects.get((kind_name, namespace, name))
        return copy.deepcopy(got) if got is not None else None

    def list(
        self,
        kind_name: str,
        namespace: str | None = None,
        labels: dict[str, Any] | None = None,
        fields: dict[str, Any] | None = None,
    ) -> builtins.list[dict[str, Any]]:
        self._check("list", kind_name, namespace)
        out = []
        for (kind, ns, _), obj in sorted(self.objects.items(), key=lambda kv: str(kv[0])):
            if kind != kind_name or (namespace is not None and ns != namespace):
                continue
            have = (obj.get("metadata") or {}).get("labels") or {}
            if labels and any(have.get(k) != v for k, v in labels.items()):
                continue
            if fields and any(_field(obj, k) != v for k, v in fields.items()):
                continue
            out.append(copy.deepcopy(obj))
        return out

    def list_columns(self, kind_name: str, namespace: str) -> builtins.list[dict[str, Any]]:
        """As the API server's Table: only the printer columns' fields of each object."""
        from taugrid.api.crds import thin

        return [thin(obj, kind_name) for obj in self.list(kind_name, namespace)]

    def delete(self, kind_name: str, name: str, namespace: str | None) -> bool:
        self._check("delete", kind_name, namespace)
        gone = self.objects.pop((kind_name, namespace, name), None)
        if gone is not None:  # the garbage collector: what it owned goes too
            uid = gone["metadata"].get("uid")
            for key, obj in builtins.list(self.objects.items()):
                refs = (obj.get("metadata") or {}).get("ownerReferences") or []
                if any(r.get("uid") == uid for r in refs):
                    self.objects.pop(key, None)
        return gone is not None

    def log_lines(
        self, pod: str, namespace: str, container: str | None, follow: bool = False
    ) -> Iterator[str]:
        self._check("log", "Pod", namespace)
        if pod not in self.logs:
            raise TauError(f"no log of pod {pod}", exit_code=4)
        yield from checked_log(iter(self.logs[pod]), pod)

    def watch(
        self, kind_name: str, namespace: str | None = None, labels: dict[str, str] | None = None
    ) -> Iterator[str]:
        self._check("watch", kind_name, namespace)
        yield from ()

    def pending(self, namespace: str, queue: str) -> builtins.list[dict[str, Any]] | str:
        self.calls.append(("pending", queue, namespace))
        if self.pending_items is None:
            return NOT_SERVED
        return copy.deepcopy(self.pending_items.get((namespace, queue), []))

    version = "v1.36.0"  # what server_version answers (a test may set another)

    def server_version(self) -> str:
        return self.version

    def whoami(self) -> str:
        return self.user

    @contextmanager
    def service_request(
        self,
        namespace: str,
        service: str,
        path: str,
        headers: dict[str, str] | None = None,
        method: str = "GET",
        body: bytes | None = None,
        timeout_s: float | None = None,
    ) -> Iterator[Reply]:
        self._check("get" if method in ("GET", "HEAD") else "create", "Service", namespace)
        self.requests.append((method, namespace, service, path, body))
        answer = self.services.get((namespace, service))
        if answer is None:  # what the API server says
            text = json.dumps(
                {
                    "kind": "Status",
                    "status": "Failure",
                    "reason": "NotFound",
                    "code": 404,
                    "message": f'services "{service}" not found',
                }
            ).encode()
            yield Reply(404, {"Content-Type": "application/json"}, iter((text,)))
            return
        yield answer(path, dict(headers or {}))

    def can(self, verb: str, kind_name: str, namespace: str) -> bool:
        try:
            self._check(verb, kind_name, namespace)
        except Forbidden:
            return False
        return True
