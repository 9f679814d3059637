"""The client's reading of a Table response (the form `kubectl get` asks for)."""

from __future__ import annotations

from typing import Any

from taugrid.kube.client import objects_from_table

COLUMNS = {
    "Run": ".spec.runName",
    "Phase": ".status.phase",
    "User": r".metadata.annotations.tau\.azure\.com/cluster-user",
}


def table(names: list[str], *rows: list[Any]) -> dict[str, Any]:
    """A Table as the API server sends it with includeObject=None (meta.k8s.io/v1)."""
    return {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": {"resourceVersion": "7"},
        "columnDefinitions": [
            {"name": n, "type": "string", "format": "", "priority": 0} for n in names
        ],
        "rows": [{"cells": list(r)} for r in rows],
    }


def test_each_row_is_an_object_made_of_its_columns() -> None:
    got = objects_from_table(
        table(
            ["Name", "Run", "User", "Phase", "Age"],
            ["a-1", "a", "ada", "Running", "5m"],
            ["b-2", "b", None, None, "1s"],
        ),
        COLUMNS,
        "research",
    )
    assert got == [
        {
            "spec": {"runName": "a"},
            "status": {"phase": "Running"},
            "metadata": {
                "name": "a-1",
                "namespace": "research",
                "annotations": {"tau.azure.com/cluster-user": "ada"},
            },
        },
        {"spec": {"runName": "b"}, "metadata": {"name": "b-2", "namespace": "research"}},
    ]


def test_a_table_that_cannot_say_everything_is_not_read() -> None:
    """An older CRD (a column missing), rows that do not match the columns, or not a Table:
    None, and the caller reads whole objects instead."""
    assert (
        objects_from_table(table(["Name", "Run", "Phase"], ["a-1", "a", "x"]), COLUMNS, "n") is None
    )
    assert (
        objects_from_table(table(["Name", "Run", "User", "Phase"], ["a-1", "a"]), COLUMNS, "n")
        is None
    )
    assert objects_from_table({"kind": "TauRunList", "items": []}, COLUMNS, "n") is None
    assert objects_from_table([], COLUMNS, "n") is None
    assert objects_from_table(table(["Name", "Run", "User", "Phase"]), COLUMNS, "n") == []


# --- requests the API server turned away (429) are sent again ----------------------------------
class _Server:
    """An API server on 127.0.0.1 that turns the first `busy` requests away with 429."""

    def __init__(self, busy: int, html: bool = False) -> None:
        import json
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        self.busy, self.seen = busy, []  # type: ignore[var-annotated]
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *_a: Any) -> None:
                pass

            def answer(self) -> None:
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n) if n else b""
                outer.seen.append((self.command, self.path, body))
                if len(outer.seen) <= outer.busy:
                    code, doc = (
                        429,
                        {
                            "kind": "Status",
                            "apiVersion": "v1",
                            "status": "Failure",
                            "message": "storage is (re)initializing",
                            "reason": "TooManyRequests",
                            "code": 429,
                        },
                    )
                else:
                    code, doc = (
                        200,
                        {
                            "apiVersion": "v1",
                            "kind": "ConfigMap",
                            "metadata": {"name": "c", "namespace": "n"},
                        },
                    )
                data = json.dumps(doc).encode() if not html else b"<html>a login page</html>"
                self.send_response(code)
                self.send_header("Content-Type", "text/html" if html else "application/json")
                self.send_header("Content-Length", str(len(data)))
                if code == 429:
                    self.send_header("Retry-After", "0")
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = answer

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"


def _kube(server: _Server, tmp_path: Any, monkeypatch: Any) -> Any:
    import yaml

    from taugrid.kube.client import Kube

    kc = tmp_path / "kubeconfig"
    kc.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "c",
                "clusters": [{"name": "c", "cluster": {"server": server.url}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
            }
        )
    )
    monkeypatch.setenv("KUBECONFIG", str(kc))
    return Kube()


def test_a_request_turned_away_is_sent_again(tmp_path: Any, monkeypatch: Any) -> None:
    server = _Server(busy=2)
    try:
        kube = _kube(server, tmp_path, monkeypatch)
        assert kube.get("ConfigMap", "c", "n")["metadata"]["name"] == "c"
        assert len(server.seen) == 3
        server.busy, server.seen = 1, []
        kube.create(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": "c", "namespace": "n"},
                "data": {"k": "v"},
            }
        )
        (m1, _p1, b1), (m2, _p2, b2) = server.seen
        assert (m1, m2) == ("POST", "POST") and b1 == b2 and b'"k"' in b1  # the same body
    finally:
        server.httpd.shutdown()


def test_a_server_that_keeps_turning_requests_away_is_said_in_words(
    tmp_path: Any, monkeypatch: Any
) -> None:
    import pytest

    from taugrid.api.errors import TauError
    from taugrid.kube.client import RETRIES

    server = _Server(busy=10_000)
    try:
        kube = _kube(server, tmp_path, monkeypatch)
        with pytest.raises(TauError) as e:
            kube.get("ConfigMap", "c", "n")
        assert "429" in str(e.value) and "storage is (re)initializing" in str(e.value)
        assert len(server.seen) == RETRIES + 1
    finally:
        server.httpd.shutdown()


def test_what_is_sent_again_and_after_how_long() -> None:
    from taugrid.kube.client import RETRIES, RETRY_WAIT_MAX_S, retry_wait

    assert retry_wait(429, "POST", "2", 0) == 2.0  # never started: safe for any verb
    assert retry_wait(429, "GET", None, 0) == 1.0
    assert retry_wait(429, "GET", "soon", 0) == 1.0
    assert retry_wait(429, "GET", "600", 0) == RETRY_WAIT_MAX_S
    assert retry_wait(429, "GET", "1", RETRIES) is None  # enough
    assert retry_wait(503, "GET", "1", 0) == 1.0
    assert retry_wait(503, "POST", "1", 0) is None  # it may have been done
    assert retry_wait(503, "GET", None, 0) is None
    assert retry_wait(404, "GET", "1", 0) is None
    assert retry_wait(409, "POST", None, 0) is None


def test_a_listing_answered_with_something_else_than_json_is_said_in_words(
    tmp_path: Any, monkeypatch: Any
) -> None:
    """A proxy's login page instead of the API server's answer: a TauError, not a traceback."""
    import pytest

    from taugrid.api.errors import TauError

    server = _Server(busy=0, html=True)
    try:
        kube = _kube(server, tmp_path, monkeypatch)
        with pytest.raises(TauError) as e:
            kube.list_columns("TauRun", "research")
        assert "not JSON" in str(e.value) and e.value.exit_code == 4
        assert "includeObject=None" in server.seen[0][1]
    finally:
        server.httpd.shutdown()


class _Breaking:
    """An inner transport that fails with the given errors first, then answers 200."""

    def __init__(self, *errors: Exception) -> None:
        self.errors = list(errors)
        self.sent = 0

    def handle_request(self, request: Any) -> Any:
        import httpx2

        self.sent += 1
        if self.errors:
            raise self.errors.pop(0)
        return httpx2.Response(200, json={"kind": "Namespace"})

    def close(self) -> None:
        pass


def test_a_get_whose_connection_broke_is_sent_again_and_a_refused_one_is_not(
    monkeypatch: Any,
) -> None:
    import httpx2
    import pytest

    from taugrid.kube import client as C

    monkeypatch.setattr(C, "BROKEN_WAIT_S", 0.0)
    tls = httpx2.ConnectError("[SSL: TLSV1_ALERT_DECODE_ERROR] tlsv1 alert decode error")
    get = httpx2.Request("GET", "https://127.0.0.1:6443/api/v1/namespaces/x")
    inner = _Breaking(tls, httpx2.ReadError("reset"))
    assert C.retrying(inner).handle_request(get).status_code == 200 and inner.sent == 3
    # broken every time: the error, after BROKEN_RETRIES more tries
    inner = _Breaking(*[httpx2.ReadError("reset")] * (C.BROKEN_RETRIES + 1))
    with pytest.raises(httpx2.ReadError):
        C.retrying(inner).handle_request(get)
    assert inner.sent == C.BROKEN_RETRIES + 1
    # refused: nobody listens, said at once
    refused = httpx2.ConnectError("[Errno 111] Connection refused")
    inner = _Breaking(refused)
    with pytest.raises(httpx2.ConnectError):
        C.retrying(inner).handle_request(get)
    assert inner.sent == 1
    # a write may have been done: never sent twice
    post = httpx2.Request("POST", "https://127.0.0.1:6443/api/v1/namespaces")
    inner = _Breaking(httpx2.ReadError("reset"))
    with pytest.raises(httpx2.ReadError):
        C.retrying(inner).handle_request(post)
    assert inner.sent == 1
