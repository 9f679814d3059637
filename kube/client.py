"""The client (lightkube): kubeconfig and context, the kinds tau uses, server-side apply, one
LIST per kind, and Kubernetes failures turned into clear errors (exit 4).

`KubeAPI` is the interface every user of the layer codes against (the kube backend, the
controller, the Python API); `Kube` implements it over lightkube, `taugrid.kube.fake.FakeKube`
in memory for unit tests. lightkube is imported only when a `Kube` is made: `tau --help` never
pays for it.
"""

from __future__ import annotations

import builtins
import os
import re
import threading
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from taugrid.api.errors import EXIT_PLATFORM, TauError, missing_extra
from taugrid.kube.kinds import KINDS, Kind

FIELD_MANAGER = "tau"
CONTEXT_ENV = "TAU_CONTEXT"  # the kubeconfig context (every cluster command's --context sets it)
CONNECT_TIMEOUT_S = 5.0
READ_TIMEOUT_S = 20.0


class KubeAPI(Protocol):
    """What tau asks of a cluster. Failures are TauErrors (exit 4); 403 is `Forbidden`."""

    context: str | None
    server: str
    user: str

    def apply(self, obj: dict[str, Any], manager: str = FIELD_MANAGER) -> dict[str, Any]: ...

    def create(
        self, obj: dict[str, Any], manager: str = FIELD_MANAGER
    ) -> dict[str, Any] | None: ...

    def apply_status(self, obj: dict[str, Any], manager: str) -> dict[str, Any]: ...

    def merge_patch(
        self,
        kind_name: str,
        name: str,
        namespace: str | None,
        patch: dict[str, Any],
        manager: str,
        status: bool = False,
    ) -> dict[str, Any]: ...

    def evict(self, pod: str, namespace: str) -> bool: ...

    def get(
        self, kind_name: str, name: str, namespace: str | None = None
    ) -> dict[str, Any] | None: ...

    def list(
        self,
        kind_name: str,
        namespace: str | None = None,
        labels: dict[str, Any] | None = None,
        fields: dict[str, Any] | None = None,
    ) -> list[dict[str, Any]]: ...

    def list_columns(self, kind_name: str, namespace: str) -> builtins.list[dict[str, Any]]: ...

    def delete(self, kind_name: str, name: str, namespace: str | None) -> bool: ...

    def log_lines(
        self, pod: str, namespace: str, container: str | None, follow: bool = False
    ) -> Iterator[str]: ...

    def watch(
        self, kind_name: str, namespace: str | None = None, labels: dict[str, str] | None = None
    ) -> Iterator[str]: ...

    def pending(self, namespace: str, queue: str) -> builtins.list[dict[str, Any]] | str: ...

    def whoami(self) -> str: ...

    def server_version(self) -> str: ...

    def can(self, verb: str, kind_name: str, namespace: str) -> bool: ...

    def service_request(
        self,
        namespace: str,
        service: str,
        path: str,
        headers: dict[str, str] | None = None,
        method: str = "GET",
        body: bytes | None = None,
        timeout_s: float | None = None,
    ) -> AbstractContextManager[Reply]: ...


@dataclass
class Reply:
    """An answer through the API server's service proxy: the service's own, or the API
    server's (a Kubernetes Status) when there is no such service or it could not reach one."""

    status: int
    headers: dict[str, str]
    chunks: Iterator[bytes]

    def read(self) -> bytes:
        return b"".join(self.chunks)


RETRIES = 5  # a request the API server turned away (429) is sent again, at most this often
RETRY_WAIT_MAX_S = 5.0
# a GET whose connection broke before an answer (a TLS alert, a reset) is sent again this often,
# after this long; a refused connection is not: the API server is not there, and saying so at
# once is the answer
BROKEN_RETRIES = 2
BROKEN_WAIT_S = 0.5


def refused(err: BaseException) -> bool:
    """Whether a transport error is (caused by) a refused connection."""
    seen: BaseException | None = err
    while seen is not None:
        if isinstance(seen, ConnectionRefusedError) or "Connection refused" in str(seen):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def retry_wait(status: int, method: str, retry_after: str | None, attempt: int) -> float | None:
    """How long to wait before sending a request again, or None: do not. The API server
    answers 429 to a request it did not start (its priority and fairness limits under load;
    "storage is (re)initializing" just after a CRD changed) and says when to come back; a GET
    that met a 5xx with Retry-After is safe to repeat too (client-go does the same)."""
    if attempt >= RETRIES:
        return None
    if status != 429 and not (status >= 500 and method == "GET" and retry_after is not None):
        return None
    try:
        wait = float(retry_after) if retry_after else 1.0
    except ValueError:
        wait = 1.0
    return min(max(wait, 0.0), RETRY_WAIT_MAX_S)


def retrying(inner: Any) -> Any:
    """An HTTP transport that sends a turned-away request again, as `retry_wait` says."""
    import time

    import httpx2

    class Retrying(httpx2.BaseTransport):
        def handle_request(self, request: httpx2.Request) -> httpx2.Response:
            attempt = broken = 0
            while True:
                try:
                    resp = inner.handle_request(request)
                except httpx2.TransportError as e:
                    if request.method != "GET" or broken >= BROKEN_RETRIES or refused(e):
                        raise
                    broken += 1
                    time.sleep(BROKEN_WAIT_S)  # a connection broken on the way: once more
                    continue
                wait = retry_wait(
                    resp.status_code, request.method, resp.headers.get("Retry-After"), attempt
                )
                if wait is None:
                    return resp  # type: ignore[no-any-return]
                resp.close()
                time.sleep(wait)  # what the server asked for (a backoff, bounded above)
                attempt += 1

        def close(self) -> None:
            inner.close()

    return Retrying()


# the Table form of a LIST (printer columns only): `kubectl get`'s
TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io, application/json"


# What a kubelet writes INTO a log's body (HTTP 200) when the container or its log file is gone
# (removed after its pod ended, garbage-collected): `kubectl logs` prints it as if the program had.
_KUBELET_LOG_GONE = (
    re.compile(r"unable to retrieve container logs for [a-z0-9.-]+://[0-9a-f]+\s*"),
    re.compile(r"failed to try resolving symlinks in path \S+: .*no such file or directory\s*"),
)


def checked_log(lines: Iterator[str], pod: str) -> Iterator[str]:
    """A container's log lines, or a TauError when the first is the kubelet saying the log is
    gone: a caller that has a copy elsewhere then reads that, and nobody takes it for output."""
    first = next(lines, None)
    if first is None:
        return
    if any(p.fullmatch(first) for p in _KUBELET_LOG_GONE):
        raise TauError(
            f"the node no longer has the log of pod {pod} (the kubelet says: {first.strip()})",
            exit_code=EXIT_PLATFORM,
        )
    yield first
    yield from lines


def objects_from_table(
    table: Any, columns: dict[str, str], namespace: str
) -> builtins.list[dict[str, Any]] | None:
    """The objects of a Table response (meta.k8s.io/v1), each made of its name, namespace and
    the given columns (name -> JSONPath). None: not a Table, or one without all the columns."""
    from taugrid.api.crds import nested, path_keys

    if not isinstance(table, dict) or table.get("kind") != "Table":
        return None
    names = [str(c.get("name")) for c in table.get("columnDefinitions") or []]
    if not names or any(n not in names for n in columns):
        return None
    at = [(names.index(n), path_keys(path)) for n, path in columns.items()]
    out = []
    for row in table.get("rows") or []:
        cells = row.get("cells") or []
        if len(cells) != len(names):
            return None
        obj = nested((keys, cells[i]) for i, keys in at)
        obj.setdefault("metadata", {}).update(name=cells[0], namespace=namespace)
        out.append(obj)
    return out


# what httpcore2 would import for HTTP/2 (marked absent by _without_http2)
HTTP2_MODULES = ("h2", "h2.config", "h2.connection", "h2.events", "h2.exceptions", "h2.settings")


def _without_http2() -> None:
    """Tau speaks HTTP/1.1 to the API server (lightkube's default): the h2 library that the
    HTTP client would import anyway (lightkube depends on httpx2[http2]) costs ~80 ms of every
    cluster command, a third of `tau run status`'s budget (its Huffman table alone is 64 ms).
    Marked absent before the client is imported, so httpcore2 takes its HTTP/1.1-only path;
    asking for HTTP/2 would then fail loudly. Skipped when h2 is already imported."""
    import sys

    if "httpcore2" not in sys.modules:
        for name in HTTP2_MODULES:
            sys.modules.setdefault(name, None)  # type: ignore[arg-type]


# Kubernetes' own groups: lightkube's module of each (its typed classes)
BUILT_IN = {
    "": "core",
    "batch": "batch",
    "apps": "apps",
    "apiextensions.k8s.io": "apiextensions",
    "discovery.k8s.io": "discovery",
}
_RESOURCES: dict[Kind, Any] = {}
_RESOURCES_LOCK = threading.Lock()


def _resource(kind: Kind) -> Any:
    """lightkube's class for a kind: its own for built-in kinds, a generic one (made once) for
    custom resources."""
    with _RESOURCES_LOCK:
        if kind not in _RESOURCES:
            if kind.group in BUILT_IN:
                import importlib

                module = f"lightkube.resources.{BUILT_IN[kind.group]}_{kind.version}"
                res = getattr(importlib.import_module(module), kind.kind)
            else:
                from lightkube.generic_resource import (
                    create_global_resource,
                    create_namespaced_resource,
                )

                make = create_namespaced_resource if kind.namespaced else create_global_resource
                res = make(kind.group, kind.version, kind.kind, kind.plural)
            _RESOURCES[kind] = res
        return _RESOURCES[kind]


class Kube:
    """A connection to one cluster (a kubeconfig context)."""

    def __init__(
        self,
        context: str | None = None,
        in_cluster: bool = False,
        kubeconfig: str | Path | None = None,
        doc: dict[str, Any] | None = None,
    ) -> None:
        _without_http2()
        try:
            import httpx2
            from lightkube import Client, KubeConfig
        except ImportError as e:
            raise missing_extra("kube", f"the Kubernetes client ({e.name})") from None
        from lightkube.core.exceptions import ConfigError

        from taugrid.kube.kubeconfig import HINT, kubeconfig_path, load

        context = context or os.environ.get(CONTEXT_ENV) or None
        path = str(kubeconfig if kubeconfig is not None else kubeconfig_path())
        try:
            if in_cluster:  # a pod's service account (the controller's Deployment)
                config = KubeConfig.from_service_account()
                path = "the service account"
            elif doc is not None:  # read from a Secret (a MultiKueue worker's), never a file
                config = KubeConfig.from_dict(doc)
                path = "the kubeconfig given"
            else:
                context, doc = load(Path(path), context)
                config = KubeConfig.from_dict(doc, fname=Path(path).expanduser())
            self.context = context or config.current_context
            single = config.get(context_name=self.context)
            if single is None:
                raise ValueError(f"no context {self.context!r}")
            self.config = single
        except (
            ConfigError,
            FileNotFoundError,
            OSError,
            KeyError,
            ValueError,
            TypeError,
            AttributeError,
        ) as e:
            raise TauError(
                f"no usable kubeconfig at {path}: {type(e).__name__}: {e}",
                exit_code=EXIT_PLATFORM,
                hint=HINT,
            ) from None
        self.server = str(self.config.cluster.server)
        import httpx2

        timeout = httpx2.Timeout(READ_TIMEOUT_S, connect=CONNECT_TIMEOUT_S)
        self.client = Client(self.config, field_manager=FIELD_MANAGER, timeout=timeout)
        http = self.client._client._client  # lightkube's httpx client: its transport retries
        http._transport = retrying(http._transport)
        self.user = str(self.config.context.user) if self.config.context else "?"

    # --- errors -----------------------------------------------------------------------------
    @contextmanager
    def errors(self, verb: str, kind: Kind, namespace: str | None = None) -> Iterator[None]:
        """Kubernetes and network failures as one clear TauError (exit 4)."""
        import httpx2
        from lightkube.core.exceptions import ApiError

        where = f" in namespace {namespace}" if namespace and kind.namespaced else ""
        try:
            yield
        except ApiError as e:
            code = e.status.code
            if code == 403:
                raise Forbidden(verb, kind, namespace, e.status.message or "") from None
            if code == 404 and kind.component and _kind_missing(e):
                raise _not_served(kind) from None
            raise TauError(
                f"{verb} {kind.plural}{where}: {code} {e.status.reason or ''}: {e.status.message}",
                exit_code=EXIT_PLATFORM,
            ) from None
        except httpx2.HTTPStatusError as e:  # not a Kubernetes Status body (an unknown API path)
            code = e.response.status_code
            if code == 404 and kind.component:
                raise _not_served(kind) from None
            raise TauError(
                f"{verb} {kind.plural}{where}: HTTP {code} from {self.server}",
                exit_code=EXIT_PLATFORM,
            ) from None
        except httpx2.TransportError as e:
            raise TauError(
                f"the Kubernetes API at {self.server} is unreachable ({type(e).__name__}: {e})",
                exit_code=EXIT_PLATFORM,
                hint="is the cluster up (tau sandbox status), and is this the right context "
                f"({self.context})?",
            ) from None

    # --- operations ---------------------------------------------------------------------------
    def apply(self, obj: dict[str, Any], manager: str = FIELD_MANAGER) -> dict[str, Any]:
        """Server-side apply (field manager `tau`); the object as the server has it."""
        kind = KINDS[obj["kind"]]
        res = _resource(kind)
        ns = obj.get("metadata", {}).get("namespace")
        with self.errors("apply", kind, ns):
            got = self.client.apply(  # type: ignore[call-overload]
                res.from_dict(obj), namespace=ns, force=True, field_manager=manager
            )
        return dict(got.to_dict())

    def apply_any(self, obj: dict[str, Any], manager: str = FIELD_MANAGER) -> dict[str, Any]:
        """Server-side apply of an object of any kind the cluster serves (a built-in kind, or
        one of its CRDs): what sets a cluster up (the sandbox) applies, beyond tau's kinds."""
        from lightkube import codecs
        from lightkube.core.exceptions import LoadResourceError
        from lightkube.generic_resource import load_in_cluster_generic_resources

        try:
            res = codecs.from_dict(obj)
        except LoadResourceError:  # a custom kind: the cluster's CRDs say what it is
            load_in_cluster_generic_resources(self.client)
            res = codecs.from_dict(obj)
        api_version, kind_name = obj["apiVersion"], obj["kind"]
        group, _, version = api_version.rpartition("/")
        kind = KINDS.get(kind_name) or Kind(group, version, kind_name, kind_name)  # (its words)
        ns = obj.get("metadata", {}).get("namespace")
        with self.errors("apply", kind, ns):
            got = self.client.apply(  # type: ignore[call-overload]
                res, namespace=ns, force=True, field_manager=manager
            )
        return dict(got.to_dict())

    def create(self, obj: dict[str, Any], manager: str = FIELD_MANAGER) -> dict[str, Any] | None:
        """Create (POST); None when an object of that name exists already (409): never a
        merge into someone else's object."""
        from lightkube.core.exceptions import ApiError

        kind = KINDS[obj["kind"]]
        res = _resource(kind)
        ns = obj.get("metadata", {}).get("namespace")
        with self.errors("create", kind, ns):
            try:
                got = self.client.create(res.from_dict(obj), namespace=ns, field_manager=manager)
            except ApiError as e:
                if e.status.code == 409:
                    return None
                raise
        return dict(got.to_dict())

    def apply_status(self, obj: dict[str, Any], manager: str) -> dict[str, Any]:
        """Server-side apply of the status subresource (only the fields in `obj["status"]`)."""
        kind = KINDS[obj["kind"]]
        res = _resource(kind)
        ns = obj.get("metadata", {}).get("namespace")
        with self.errors("apply the status of", kind, ns):
            got = self.client.apply(  # type: ignore[call-overload]
                res.Status.from_dict(obj), namespace=ns, force=True, field_manager=manager
            )
        return dict(got.to_dict())

    def merge_patch(
        self,
        kind_name: str,
        name: str,
        namespace: str | None,
        patch: dict[str, Any],
        manager: str,
        status: bool = False,
    ) -> dict[str, Any]:
        """A JSON merge patch (a resourceVersion in it makes it conditional: 409 if stale); with
        `status`, of the status subresource."""
        from lightkube.types import PatchType

        kind = KINDS[kind_name]
        with self.errors("patch", kind, namespace):
            res = _resource(kind)
            got = self.client.patch(
                res.Status if status else res,
                name,
                patch,
                namespace=namespace,
                patch_type=PatchType.MERGE,
                field_manager=manager,
            )
        return dict(got.to_dict())

    def evict(self, pod: str, namespace: str) -> bool:
        """The Eviction API (respects PodDisruptionBudgets; the pod gets DisruptionTarget).
        False: the pod was already gone."""
        from lightkube.core.exceptions import ApiError
        from lightkube.models.meta_v1 import ObjectMeta
        from lightkube.resources.core_v1 import Pod

        with self.errors("evict", KINDS["Pod"], namespace):
            try:
                self.client.create(
                    Pod.Eviction(metadata=ObjectMeta(name=pod, namespace=namespace)),
                    name=pod,
                    namespace=namespace,
                )
            except ApiError as e:
                if e.status.code == 404:
                    return False
                raise
        return True

    def get(self, kind_name: str, name: str, namespace: str | None = None) -> dict[str, Any] | None:
        from lightkube.core.exceptions import ApiError

        kind = KINDS[kind_name]
        with self.errors("get", kind, namespace):
            try:
                return dict(self.client.get(_resource(kind), name, namespace=namespace).to_dict())
            except ApiError as e:
                if e.status.code == 404 and not _kind_missing(e):
                    return None
                raise

    def list(
        self,
        kind_name: str,
        namespace: str | None = None,
        labels: dict[str, Any] | None = None,
        fields: dict[str, Any] | None = None,
    ) -> list[dict[str, Any]]:
        """One LIST call (a namespaced kind without a namespace: in every namespace)."""
        kind = KINDS[kind_name]
        where = namespace if namespace is not None or not kind.namespaced else "*"
        with self.errors("list", kind, namespace):
            selector: dict[str, Any] | None = dict(labels) if labels else None
            items = self.client.list(
                _resource(kind), namespace=where, labels=selector, fields=fields
            )
            return [dict(o.to_dict()) for o in items]

    def list_columns(self, kind_name: str, namespace: str) -> builtins.list[dict[str, Any]]:
        """The objects of a TauGrid kind, each holding only the fields of its printer columns
        (api.crds.row_columns), from one Table request: the server sends ~1/20 of the bytes of
        a LIST (no managedFields, no spec.manifest, no signals), and decodes nothing more.
        A server whose CRD lacks some of tau's columns (an older TauGrid): the whole objects,
        from a LIST (they hold the same fields, and more)."""
        import httpx2
        import msgspec
        from lightkube.core.generic_client import transform_exception

        from taugrid.api.crds import row_columns

        kind, wanted = KINDS[kind_name], row_columns(kind_name)
        url = f"/apis/{kind.group}/{kind.version}/namespaces/{namespace}/{kind.plural}"
        with self.errors("list", kind, namespace):
            http = self.client._client._client  # lightkube's httpx client (no public raw GET)
            resp = http.get(url, params={"includeObject": "None"}, headers={"Accept": TABLE})
            try:
                resp.raise_for_status()
            except httpx2.HTTPStatusError as e:
                raise transform_exception(e) from None
            try:
                table = msgspec.json.decode(resp.content)
            except msgspec.DecodeError as e:
                raise TauError(
                    f"list {kind.plural} in namespace {namespace}: the answer from "
                    f"{self.server} is not JSON ({e})",
                    exit_code=EXIT_PLATFORM,
                ) from None
        if isinstance(table, dict) and table.get("kind") != "Table" and "items" in table:
            return [dict(o) for o in table["items"]]  # a server that answered with a List
        thin = objects_from_table(table, wanted, namespace)
        return thin if thin is not None else self.list(kind_name, namespace)

    def delete(self, kind_name: str, name: str, namespace: str | None) -> bool:
        """Delete in the foreground (the owned objects go first). False: it was not there."""
        from lightkube.core.exceptions import ApiError

        kind = KINDS[kind_name]
        with self.errors("delete", kind, namespace):
            try:
                self.client.delete(
                    _resource(kind), name, namespace=namespace, cascade=_foreground()
                )
            except ApiError as e:
                if e.status.code == 404 and not _kind_missing(e):
                    return False
                raise
        return True

    def log_lines(
        self, pod: str, namespace: str, container: str | None, follow: bool = False
    ) -> Iterator[str]:
        """A container's log, line by line (follow: until the container ends)."""
        kind = KINDS["Pod"]
        with self.errors("get logs of", kind, namespace):
            raw = self.client.log(pod, namespace=namespace, container=container, follow=follow)
            yield from checked_log(iter(raw), pod)

    def watch(
        self, kind_name: str, namespace: str | None = None, labels: dict[str, str] | None = None
    ) -> Iterator[str]:
        """The watch API: one item (the event type) per change, reconnecting on errors."""
        from lightkube.types import on_error_retry

        kind = KINDS[kind_name]
        selector: dict[str, Any] | None = dict(labels) if labels else None
        with self.errors("watch", kind, namespace):
            for op, _obj in self.client.watch(
                _resource(kind), namespace=namespace, labels=selector, on_error=on_error_retry
            ):
                yield str(op)

    def pending(self, namespace: str, queue: str) -> builtins.list[dict[str, Any]] | str:
        """Kueue's visibility API: the pending workloads of a LocalQueue in order, or why it
        cannot say (not served, forbidden, ...)."""
        from lightkube.core.exceptions import ApiError

        kind = KINDS["PendingWorkloadsSummary"]
        try:
            with self.errors("get", kind, namespace):
                try:
                    got = self.client.get(
                        _resource(kind), f"{queue}/pendingworkloads", namespace=namespace
                    )
                except ApiError as e:
                    if e.status.code == 404:
                        raise _not_served(kind) from None
                    raise
        except Forbidden:
            # RBAC answers before the API exists: a 403 may mean "not served" too; discovery
            # (open to every user) tells which
            served = self.served(kind.group)
            if served is False:
                return "Kueue's visibility API (pendingworkloads) is not served here"
            if served is None:
                return "Kueue's visibility API is not served here, or your identity may not read it"
            return "your identity may not read Kueue's visibility API"
        except TauError:
            return "Kueue's visibility API (pendingworkloads) is not served here"
        items = dict(got.to_dict()).get("items") or []
        return [dict(i) for i in items]

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
        """A request to `path` of a Service (`NAME` or `NAME:PORT-NAME`) through the API
        server's service proxy, the answer streamed. Any HTTP status is returned (the caller
        knows the service's words); 403 is `Forbidden`, a network failure a TauError."""
        import httpx2

        kind = Kind("", "v1", "Service", "services/proxy")
        verb = "get" if method in ("GET", "HEAD") else "create"
        url = f"/api/v1/namespaces/{namespace}/services/{service}/proxy/{path.lstrip('/')}"
        http = self.client._client._client  # lightkube's httpx client (no public raw request)
        timeout = httpx2.Timeout(timeout_s or READ_TIMEOUT_S, connect=CONNECT_TIMEOUT_S)
        request = http.build_request(
            method, url, headers=headers or {}, content=body, timeout=timeout
        )
        with self.errors(verb, kind, namespace):
            try:
                resp = http.send(request, stream=True)
            except httpx2.TimeoutException:
                raise TauError(
                    f"the service {service} in {namespace} did not answer within "
                    f"{timeout.read:g} s (through the API server's proxy)",
                    exit_code=EXIT_PLATFORM,
                ) from None
            try:
                if resp.status_code == 403:
                    text = resp.read().decode("utf-8", "replace")
                    raise Forbidden(verb, kind, namespace, text[:300])
                try:
                    yield Reply(
                        resp.status_code, dict(resp.headers.items()), resp.iter_bytes(1 << 20)
                    )
                except httpx2.TransportError as e:
                    raise TauError(
                        f"the connection to the service {service} in {namespace} broke "
                        f"({type(e).__name__}: {e})",
                        exit_code=EXIT_PLATFORM,
                    ) from None
            finally:
                resp.close()

    def served(self, group: str) -> bool | None:
        """Whether the API server serves an API group (its discovery document; every user
        may read it). None: it could not be told."""
        try:
            http = self.client._client._client  # lightkube's httpx client (no public raw GET)
            resp = http.get(f"/apis/{group}")
        except Exception:
            return None
        if resp.status_code == 404:
            return False
        return True if resp.status_code == 200 else None

    def server_version(self) -> str:
        """The API server's Kubernetes version (GET /version: its gitVersion, e.g. v1.36.0)."""
        import httpx2

        http = self.client._client._client
        try:
            res = http.get("/version")
            res.raise_for_status()
            return str(res.json().get("gitVersion") or "?")
        except (httpx2.HTTPError, ValueError, AttributeError) as e:
            raise TauError(
                f"the Kubernetes API at {self.server} did not say its version ({e})",
                exit_code=EXIT_PLATFORM,
            ) from None

    def whoami(self) -> str:
        """The user as the API server sees them (SelfSubjectReview), else the kubeconfig's."""
        from lightkube.resources.authentication_v1 import SelfSubjectReview

        try:
            got = self.client.create(SelfSubjectReview())
            info = got.status.userInfo if got.status else None
            if info is not None and info.username:
                return str(info.username)
        except Exception:  # older servers, or not allowed: the kubeconfig's name will do
            pass
        return self.user

    def can(self, verb: str, kind_name: str, namespace: str) -> bool:
        """SelfSubjectAccessReview: may the current user do `verb` on the kind there?"""
        from lightkube.models.authorization_v1 import (
            ResourceAttributes,
            SelfSubjectAccessReviewSpec,
        )
        from lightkube.resources.authorization_v1 import SelfSubjectAccessReview

        kind = KINDS[kind_name]
        review = SelfSubjectAccessReview(
            spec=SelfSubjectAccessReviewSpec(
                resourceAttributes=ResourceAttributes(
                    group=kind.group, resource=kind.plural, verb=verb, namespace=namespace
                )
            )
        )
        with self.errors(
            "create",
            Kind(
                "authorization.k8s.io",
                "v1",
                "SelfSubjectAccessReview",
                "selfsubjectaccessreviews",
                namespaced=False,
            ),
        ):
            got = self.client.create(review)
        return bool(got.status and got.status.allowed)


def _not_served(kind: Kind) -> TauError:
    return TauError(
        f"this cluster does not serve {kind.kind} ({kind.api_version}): "
        f"{kind.component} is not installed",
        exit_code=EXIT_PLATFORM,
        hint="ask the platform team (pulumi up installs it; the sandbox has it)",
    )


def _foreground() -> Any:
    from lightkube.types import CascadeType

    return CascadeType.FOREGROUND


def _kind_missing(e: Any) -> bool:
    """A 404 for the resource type itself (its CRD is not installed), not for one object."""
    details = getattr(e.status, "details", None)
    return not (details and getattr(details, "name", None))


class Forbidden(TauError):
    """403: the verb, resource and namespace, so the caller can add which workspaces fit."""

    def __init__(self, verb: str, kind: Kind, namespace: str | None, message: str) -> None:
        where = f" in namespace {namespace}" if namespace else ""
        super().__init__(
            f"forbidden: you may not {verb} {kind.plural} ({kind.api_version}){where}",
            exit_code=EXIT_PLATFORM,
        )
        self.verb, self.kind, self.namespace, self.server_message = verb, kind, namespace, message
