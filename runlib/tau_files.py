"""tau_files: a workspace volume, read-only, over HTTP (stdlib only).

The platform runs one per workspace (the `tau-files` Deployment and Service, docs/cluster.md),
mounting the workspace's /data read-only; tau reaches it through the API server's service proxy
with the researcher's own credentials, so what a run wrote on the volume (its progress, metrics,
logs, checkpoints, outputs, the sealed record) can be read from any machine that may use the
workspace, after the run's pods are gone. It never writes, and serves nothing outside its root.

    python tau_files.py --root /data --port 8080

    GET /healthz                      ok
    GET /progress/<dir>?checkpoints=SUB&outputs=SUB
                                      a run's progress (tau_evidence.progress) and the server's
                                      clock
    GET /tree/<dir>                   every file under <dir> (dotfiles excepted): path, size, mtime
    GET /file/<path>                  the file's bytes; `Range: bytes=N-` or `bytes=N-M` honoured
    GET /sha256/<path>                {"sha256", "size"} of the file, hashed where it is (a
                                      checkpoint checked against its run's manifest without its
                                      bytes leaving the cluster)

`respond()` is the whole server as a function of (root, request path, headers): the HTTP handler
writes what it returns, and tests call it directly.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import re
import signal
import sys
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

CHUNK = 1 << 20
MAX_TREE = 200_000  # files listed at most (a tree larger than this says so)
RANGE = re.compile(r"^bytes=(\d+)-(\d*)$")


@dataclass
class Reply:
    status: int
    headers: dict[str, str] = field(default_factory=dict)
    body: Iterator[bytes] = field(default_factory=lambda: iter(()))


def _json(status: int, doc: Any) -> Reply:
    data = json.dumps(doc, separators=(",", ":")).encode()
    return Reply(
        status,
        {"Content-Type": "application/json", "Content-Length": str(len(data))},
        iter((data,)),
    )


def _error(status: int, message: str) -> Reply:
    return _json(status, {"error": message})


def resolve(root: Path, rel: str) -> Path | None:
    """`rel` under `root`, or None when it is not (`..`, an absolute path, a link leaving it)."""
    parts = [p for p in unquote(rel).split("/") if p not in ("", ".")]
    if any(p == ".." or "\x00" in p for p in parts):
        return None
    real_root = root.resolve()
    target = (real_root.joinpath(*parts)).resolve()
    if target != real_root and real_root not in target.parents:
        return None
    return target


def _tree(base: Path) -> dict[str, Any]:
    files: list[dict[str, Any]] = []
    truncated = False
    for dirpath, dirnames, filenames in os.walk(base):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        for name in sorted(filenames):
            if name.startswith("."):
                continue
            p = Path(dirpath) / name
            try:
                st = p.stat()
            except OSError:
                continue  # removed while listed
            files.append(
                {"path": p.relative_to(base).as_posix(), "size": st.st_size, "mtime": st.st_mtime}
            )
            if len(files) >= MAX_TREE:
                truncated = True
                break
        if truncated:
            break
    return {"files": files, "truncated": truncated, "now": time.time()}


def _file(path: Path, headers: Mapping[str, str]) -> Reply:
    try:
        f = path.open("rb")
    except OSError as e:
        return _error(404, f"cannot open: {e.strerror}")
    size = os.fstat(f.fileno()).st_size
    start, end = 0, size - 1
    status = 200
    want = headers.get("Range") or headers.get("range")
    if want:
        m = RANGE.match(want.strip())
        if not m:
            f.close()
            return _error(416, f"only one range of the form bytes=N- or bytes=N-M: {want}")
        start = int(m.group(1))
        end = min(int(m.group(2)), size - 1) if m.group(2) else size - 1
        if start > end and not (start == size and size == 0):
            f.close()
            if start >= size:  # nothing left to send: the whole file is already there
                return Reply(416, {"Content-Range": f"bytes */{size}", "Content-Length": "0"})
            return _error(416, f"bad range {want}")
        status = 206
    length = max(0, end - start + 1)

    def chunks() -> Iterator[bytes]:
        try:
            f.seek(start)
            left = length
            while left > 0:
                data = f.read(min(CHUNK, left))
                if not data:
                    return  # the file shrank while read: the length check tells the client
                left -= len(data)
                yield data
        finally:
            f.close()

    out = {
        "Content-Type": "application/octet-stream",
        "Content-Length": str(length),
        "X-File-Size": str(size),
    }
    if status == 206:
        out["Content-Range"] = f"bytes {start}-{end}/{size}"
    return Reply(status, out, chunks())


def _digest(path: Path) -> Reply:
    h = hashlib.sha256()
    size = 0
    try:
        with path.open("rb") as f:
            while data := f.read(CHUNK):
                h.update(data)
                size += len(data)
    except OSError as e:
        return _error(404, f"cannot read: {e.strerror}")
    return _json(200, {"sha256": h.hexdigest(), "size": size})


def respond(root: Path, target: str, headers: Mapping[str, str] | None = None) -> Reply:
    """The reply to `GET target` (a path with its query) for a volume mounted at `root`."""
    headers = headers or {}
    url = urlsplit(target)
    verb, _, rel = url.path.lstrip("/").partition("/")
    if verb == "healthz":
        return _json(200, {"ok": True})
    if verb not in ("progress", "tree", "file", "sha256"):
        return _error(404, f"no such endpoint: /{verb} (progress, tree, file, sha256, healthz)")
    path = resolve(root, rel)
    if path is None:
        return _error(400, f"not a path under the volume: {rel}")
    shown = "/" + path.relative_to(root.resolve()).as_posix()
    if verb in ("file", "sha256"):
        if not path.is_file():
            return _error(404, f"{shown} is not a file on the volume")
        return _file(path, headers) if verb == "file" else _digest(path)
    if not path.is_dir():
        return _error(404, f"{shown} is not a folder on the volume")
    if verb == "tree":
        return _json(200, _tree(path))
    import tau_evidence

    query = parse_qs(url.query)
    subs = {k: query.get(k, [k])[0] for k in ("checkpoints", "outputs")}
    if any(resolve(path, v) is None for v in subs.values()):
        return _error(400, "checkpoints and outputs are folders under the run's")
    doc = tau_evidence.progress(path, subs["checkpoints"], subs["outputs"])
    return _json(200, {**doc, "now": time.time()})


class Handler(BaseHTTPRequestHandler):
    root = Path("/data")
    protocol_version = "HTTP/1.1"

    def _reply(self, head_only: bool) -> None:
        try:
            reply = respond(self.root, self.path, dict(self.headers.items()))
        except Exception as e:  # a bug must not end the server: say it to the caller
            reply = _error(500, f"{type(e).__name__}: {e}")
        self.send_response(reply.status)
        for k, v in reply.headers.items():
            self.send_header(k, v)
        self.end_headers()
        if head_only:
            close = getattr(reply.body, "close", None)
            if close:
                close()
            return
        try:
            for chunk in reply.body:
                self.wfile.write(chunk)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    def do_GET(self) -> None:
        self._reply(head_only=False)

    def do_HEAD(self) -> None:
        self._reply(head_only=True)

    def _refuse(self) -> None:
        self.send_error(405, "read-only: GET and HEAD only")

    do_POST = do_PUT = do_DELETE = do_PATCH = _refuse

    def log_message(self, format: str, *args: Any) -> None:
        if os.environ.get("TAU_FILES_VERBOSE"):
            super().log_message(format, *args)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="a workspace volume, read-only, over HTTP")
    ap.add_argument("--root", default="/data")
    ap.add_argument("--port", type=int, default=8080)
    ap.add_argument("--bind", default="0.0.0.0")  # in its pod: the pod's own address
    args = ap.parse_args(argv)
    Handler.root = Path(args.root)
    server = ThreadingHTTPServer((args.bind, args.port), Handler)
    server.daemon_threads = True
    # SIGTERM ends it at once: as its container's first process it would otherwise ignore it,
    # and a pod being replaced (a drain, a rollout) would wait out its whole grace period
    signal.signal(signal.SIGTERM, _interrupt)
    # (said inside: a SIGTERM sent as soon as it is read must find the interrupt caught)
    with contextlib.suppress(KeyboardInterrupt):
        print(f"tau_files: serving {args.root} read-only on {args.bind}:{args.port}", flush=True)
        server.serve_forever()
    server.server_close()
    return 0


def _interrupt(_signum: int, _frame: Any) -> None:
    raise KeyboardInterrupt


if __name__ == "__main__":
    sys.exit(main())
