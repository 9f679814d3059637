"""A workspace's volume, read through its file server (`tau-files`, runlib/tau_files.py) and the
API server's service proxy, with the user's own credentials.

Every failure is one TauError (exit 4) that says which of these it is: the workspace has no file
server (an older platform, or `workspaceFiles.enabled: false`), it has no ready pod, the API
server cannot reach it, the user may not read it, or the file is not on the volume.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import quote, urlencode

from pydantic import ValidationError

from taugrid.api import naming
from taugrid.api.errors import EXIT_PLATFORM, TauError
from taugrid.api.observations import RunProgress, VolumeFile

if TYPE_CHECKING:
    from taugrid.kube.client import KubeAPI, Reply

ERROR_BODY_MAX = 4096
# a digest's wait: this long, plus its size at this many bytes a second (a slow volume's read)
HASH_BASE_S, HASH_RATE = 30.0, 20e6
T = TypeVar("T")


class NotOnVolume(TauError):
    """The file or folder is not on the workspace volume."""


class Unreachable(TauError):
    """The file server is there but has no ready pod, or the API server cannot reach it: a new
    pod (its Deployment replaces an evicted one) may answer in a moment."""


class VolumeFiles:
    """One workspace's volume (paths are relative to its /data). `patience_s`: how long a read
    waits for a file server that does not answer (0: not at all, as a status must not)."""

    def __init__(
        self,
        kube: KubeAPI,
        namespace: str,
        workspace: str,
        patience_s: float = 0,
        timeout_s: float | None = None,
    ) -> None:
        self.kube, self.namespace, self.workspace = kube, namespace, workspace
        self.patience_s = patience_s
        self.timeout_s = timeout_s  # each request's (None: the client's read timeout)

    def _patiently(self, read: Callable[[], T]) -> T:
        deadline = time.monotonic() + self.patience_s
        while True:
            try:
                return read()
            except Unreachable:
                if time.monotonic() >= deadline:
                    raise
                time.sleep(1.0)

    @property
    def server(self) -> str:
        where = f"{naming.FILES_SERVICE} in {self.namespace}"
        return f"the file server of workspace {self.workspace} ({where})"

    # --- the three reads ---------------------------------------------------------------------
    def progress(self, run_dir: str, checkpoints: str, outputs: str) -> RunProgress:
        query = urlencode({"checkpoints": checkpoints, "outputs": outputs})
        doc = self._json(f"progress/{_rel(run_dir)}?{query}", run_dir)
        try:
            return RunProgress.model_validate(doc)
        except ValidationError as e:
            raise self._bad(
                f"its progress of {run_dir} is not what tau expects ({e.error_count()} problem(s))"
            ) from None

    def tree(self, folder: str) -> list[VolumeFile]:
        doc = self._json(f"tree/{_rel(folder)}", folder)
        try:
            files = [VolumeFile.model_validate(f) for f in doc.get("files") or []]
        except ValidationError:
            raise self._bad(f"its listing of {folder} is not what tau expects") from None
        if doc.get("truncated"):
            raise TauError(
                f"{folder} holds more files than {self.server} lists at once",
                exit_code=EXIT_PLATFORM,
            )
        return files

    @contextmanager
    def open(self, path: str, offset: int = 0) -> Iterator[tuple[int, Iterator[bytes]]]:
        """(the file's whole size, its bytes from `offset`)."""
        headers = {"Range": f"bytes={offset}-"} if offset else {}
        deadline = time.monotonic() + self.patience_s
        while True:
            with ExitStack() as stack:
                r = stack.enter_context(
                    self.kube.service_request(
                        self.namespace, naming.FILES_SERVICE, f"file/{_rel(path)}", headers
                    )
                )
                if r.status == 416 and offset:  # nothing after offset: the file is that long
                    total = (_header(r, "Content-Range") or "*/0").rpartition("/")[2]
                    yield int(total) if total.isdigit() else offset, iter(())
                    return
                if r.status in (200, 206):
                    size = int(_header(r, "X-File-Size") or _header(r, "Content-Length") or 0)
                    yield size, r.chunks
                    return
                failure = self._failure(r, path)
            if not isinstance(failure, Unreachable) or time.monotonic() >= deadline:
                raise failure
            time.sleep(1.0)

    def text(self, path: str) -> str:
        with self.open(path) as (_size, chunks):
            return b"".join(chunks).decode("utf-8", "replace")

    def digest(self, path: str, size: int = 0) -> tuple[str, int]:
        """(sha256, size) of a file, hashed by the file server where the file is: its bytes
        stay in the cluster. `size` (when known) gives a large file's hash its time."""
        doc = self._patiently(
            lambda: self._json_once(
                f"sha256/{_rel(path)}", path, timeout_s=HASH_BASE_S + size / HASH_RATE
            )
        )
        sha, got = doc.get("sha256"), doc.get("size")
        if not isinstance(sha, str) or len(sha) != 64 or not isinstance(got, int):
            raise self._bad(f"its digest of {path} is not what tau expects")
        return sha, got

    # --- what went wrong, in words ----------------------------------------------------------
    def _json(self, target: str, shown: str) -> dict[str, Any]:
        return self._patiently(lambda: self._json_once(target, shown))

    def _json_once(self, target: str, shown: str, timeout_s: float | None = None) -> dict[str, Any]:
        with self.kube.service_request(
            self.namespace, naming.FILES_SERVICE, target, timeout_s=timeout_s or self.timeout_s
        ) as r:
            if r.status != 200:
                raise self._failure(r, shown)
            body = r.read()
        try:
            doc = json.loads(body)
        except ValueError:
            raise self._bad("its answer is not JSON") from None
        if not isinstance(doc, dict):
            raise self._bad("its answer is not a JSON object")
        return doc

    def _bad(self, what: str) -> TauError:
        return TauError(
            f"{self.server}: {what}",
            exit_code=EXIT_PLATFORM,
            hint="its version may differ from tau's: `tau platform up` updates it",
        )

    def _failure(self, r: Reply, shown: str) -> TauError:
        body = b""
        for chunk in r.chunks:
            body += chunk
            if len(body) > ERROR_BODY_MAX:
                break
        try:
            doc = json.loads(body)
        except ValueError:
            doc = None
        if isinstance(doc, dict) and "error" in doc:  # the file server's own answer
            if r.status == 404 and str(doc["error"]).startswith("no such endpoint"):
                return self._bad(f"it is older than this tau ({doc['error']})")
            if r.status == 404:
                return NotOnVolume(
                    f"{shown} is not on the volume of workspace {self.workspace}",
                    exit_code=EXIT_PLATFORM,
                )
            return TauError(
                f"{self.server} refused {shown}: {doc['error']}", exit_code=EXIT_PLATFORM
            )
        message = (
            str(doc.get("message") or "")
            if isinstance(doc, dict)
            else body[:300].decode("utf-8", "replace")
        )
        if r.status == 404 and "not found" in message:
            return TauError(
                f"workspace {self.workspace} has no file server (service {naming.FILES_SERVICE} in "
                f"{self.namespace}), so its volume cannot be read from here",
                exit_code=EXIT_PLATFORM,
                hint="the platform creates it (workspaceFiles.enabled, on by default): "
                "`tau platform up` applies it",
            )
        if "no endpoints available" in message:
            return Unreachable(
                f"{self.server} is not ready (no ready pod)",
                exit_code=EXIT_PLATFORM,
                hint=f"its pods: the Deployment {naming.FILES_SERVICE} in {self.namespace}",
            )
        # 502/503/504: the API server could not reach it (a pod being replaced)
        kind = Unreachable if r.status in (502, 503, 504) else TauError
        return kind(
            f"{self.server} does not answer: HTTP {r.status}: {message.strip() or 'no message'}",
            exit_code=EXIT_PLATFORM,
            hint="try again; if it stays, its pod's log says why",
        )


def _rel(path: str) -> str:
    return quote(path.lstrip("/"))


def _header(r: Reply, name: str) -> str | None:
    low = name.lower()
    for k, v in r.headers.items():
        if k.lower() == low:
            return v
    return None
