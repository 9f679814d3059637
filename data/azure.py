"""`az://ACCOUNT/CONTAINER[/PREFIX]`: the registry on Azure Blob Storage (no server of ours).

The same layout as the file store under PREFIX. Blobs and version records are written with
`If-None-Match: *` (create-if-absent: an upload that loses to another is the same bytes). The
alias document (`<kind>s/<name>/aliases.json`: aliases, their history, removed versions) is
read with its ETag and written back with `If-Match` (or `If-None-Match: *` when new): a lost
race re-reads and decides again, so a conditional move fails cleanly when someone moved the
alias first, and every successful move is in the history (the same write).

`gc` and writers exclude each other across machines through marker blobs under `locks/`: a
writer (a registration, a copy into the store) creates `locks/writer-<id>` and then looks for
`locks/gc`; gc creates `locks/gc` and then looks for writers. Each writes before it reads, so
at least one of any two sees the other (the storage account orders the requests): a writer that
sees gc removes its marker and waits; gc that sees a writer removes its own and refuses. A
marker is kept fresh every LOCK_REFRESH_S while its holder works; one not refreshed for
LOCK_STALE_S is a dead holder's and is ignored.

Credentials as the Azure SDK finds them: `AZURE_STORAGE_CONNECTION_STRING` (also how the tests
reach Azurite on 127.0.0.1), else the account's URL with DefaultAzureCredential (azure-identity).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from taugrid.api import constants as C
from taugrid.api.data import DIGEST_PREFIX, Created, FileEntry, Kind, Lineage, check_name
from taugrid.api.errors import EXIT_PLATFORM, EXIT_RUN_FAILED, EXIT_USAGE, TauError
from taugrid.data.store import CHUNK, Collected, Registered, Store, Stored

CONNECTION_ENV = "AZURE_STORAGE_CONNECTION_STRING"
# A store that cannot be reached is said within seconds (the SDK's default retries take minutes).
CLIENT_OPTIONS: dict[str, Any] = {"connection_timeout": 10}
RETRIES = 200  # alias-document writes lost to others before giving up (each re-reads first)
LOCK_REFRESH_S = 60.0  # a holder rewrites its marker this often
LOCK_STALE_S = 600.0  # a marker not rewritten for this long is a dead holder's
# a copy inside the account may take this long, plus its size at this many bytes a second
COPY_BASE_S, COPY_RATE = 60.0, 10e6


class _Marker:
    """A marker blob (`locks/...`) kept fresh by a daemon thread while its holder works."""

    def __init__(self, store: AzureStore, key: str) -> None:
        self.store, self.key = store, key
        self.client = store.container.get_blob_client(key)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def body(self) -> bytes:
        who = {"host": socket.gethostname(), "pid": os.getpid(), "since": time.time()}
        return json.dumps(who).encode()

    def create(self, overwrite: bool = False) -> bool:
        """False: it was there (only with overwrite=False)."""
        try:
            self.store._call(
                "write", lambda: self.client.upload_blob(self.body(), overwrite=overwrite)
            )
        except self.store._errors.ResourceExistsError:
            return False
        return True

    def keep_fresh(self) -> None:
        def loop() -> None:
            while not self._stop.wait(LOCK_REFRESH_S):
                with contextlib.suppress(Exception):  # a missed refresh: the next one tries
                    self.client.upload_blob(self.body(), overwrite=True)

        self._thread = threading.Thread(target=loop, name=f"tau-{self.key}", daemon=True)
        self._thread.start()

    def remove(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        with contextlib.suppress(self.store._errors.ResourceNotFoundError):
            self.store._call("delete", self.client.delete_blob)


def _writer(client: Any, data: bytes, etag: str | None, if_match: Any) -> Callable[[], Any]:
    """Create (If-None-Match: *) when there was no document, else replace only that version."""

    def write() -> Any:
        if etag is None:
            return client.upload_blob(data, overwrite=False)
        return client.upload_blob(data, overwrite=True, etag=etag, match_condition=if_match)

    return write


def _azure() -> Any:
    try:
        import azure.core.exceptions as errors
        import azure.storage.blob as blob
    except ImportError:
        raise TauError(
            "az:// registries need the Azure SDK: pip install 'taugrid[azure]'",
            exit_code=EXIT_USAGE,
        ) from None
    return blob, errors


def credential_account(conn: str) -> str | None:
    """The storage account a connection string is for (its AccountName; else the account in
    its BlobEndpoint's host or, for an emulator, its path); None when it says none."""
    from urllib.parse import urlparse

    fields = dict(part.split("=", 1) for part in conn.split(";") if "=" in part)
    name = fields.get("AccountName")
    if name:
        return name
    endpoint = fields.get("BlobEndpoint")
    if endpoint:
        u = urlparse(endpoint)
        host = u.hostname or ""
        if host.endswith(".blob.core.windows.net"):
            return host.split(".", 1)[0]
        path = u.path.strip("/")
        return path.split("/", 1)[0] or None
    return None


class AzureStore(Store):
    def __init__(self, url: str, stat_cache: Path | None = None) -> None:
        from taugrid.api.data import parse_registry

        where = parse_registry(url)
        if where.scheme != "az":
            raise TauError(
                f"registry {url}: expected az://ACCOUNT/CONTAINER[/PREFIX]", exit_code=EXIT_USAGE
            )
        self.account, self.container_name, self.prefix = (
            where.account,
            where.container,
            where.prefix,
        )
        url = where.url
        self.url, self.stat_cache = url, stat_cache
        blob, errors = _azure()
        self._errors = errors
        conn = os.environ.get(CONNECTION_ENV)
        options = {
            **CLIENT_OPTIONS,
            "retry_policy": blob.LinearRetry(backoff=0.5, random_jitter_range=0, retry_total=2),
        }
        if conn:
            owner = credential_account(conn)
            if owner is not None and owner != self.account:
                raise TauError(
                    f"registry {url}: the credential ({CONNECTION_ENV}) is for storage "
                    f"account {owner!r}, not {self.account!r}: nothing was read",
                    exit_code=EXIT_USAGE,
                    hint=f"use az://{owner}/..., or set {CONNECTION_ENV} to account "
                    f"{self.account!r}'s connection string",
                )
        try:
            if conn:
                service = blob.BlobServiceClient.from_connection_string(conn, **options)
            else:
                try:
                    from azure.identity import DefaultAzureCredential  # type: ignore[import-untyped]
                except ImportError:
                    raise TauError(
                        f"registry {url}: no credentials: set {CONNECTION_ENV}, or "
                        "install azure-identity for DefaultAzureCredential",
                        exit_code=EXIT_PLATFORM,
                    ) from None
                service = blob.BlobServiceClient(
                    f"https://{self.account}.blob.core.windows.net",
                    credential=DefaultAzureCredential(),
                    **options,
                )
        except ValueError as e:
            raise TauError(
                f"registry {url}: {CONNECTION_ENV} is not usable: {e}", exit_code=EXIT_PLATFORM
            ) from None
        self.container = service.get_container_client(self.container_name)
        self._check()

    def _call(self, what: str, fn: Callable[[], Any]) -> Any:
        """An SDK call with its failures as TauErrors: unreachable, refused credentials, no
        container (exit 4, with what to do)."""
        e = self._errors
        try:
            return fn()
        except e.ResourceNotFoundError as x:
            if "ContainerNotFound" in str(getattr(x, "error_code", "") or x):
                raise TauError(
                    f"registry {self.url}: container {self.container_name!r} does not exist",
                    exit_code=EXIT_PLATFORM,
                    hint=f"create it (az storage container create -n {self.container_name})",
                ) from None
            raise
        except e.ClientAuthenticationError as x:
            raise TauError(
                f"registry {self.url}: the storage account refused the credentials "
                f"({type(x).__name__})",
                exit_code=EXIT_PLATFORM,
                hint=f"check {CONNECTION_ENV} or your Azure login",
            ) from None
        except e.HttpResponseError as x:
            if getattr(x, "status_code", None) in (401, 403):
                raise TauError(
                    f"registry {self.url}: the storage account refused the credentials "
                    f"({getattr(x, 'error_code', None) or x.status_code})",
                    exit_code=EXIT_PLATFORM,
                    hint=f"check {CONNECTION_ENV} or your Azure login",
                ) from None
            if isinstance(
                x, e.ResourceExistsError | e.ResourceModifiedError | e.ResourceNotFoundError
            ):
                raise
            raise TauError(
                f"registry {self.url}: the storage account said {x.status_code} while trying to "
                f"{what}: {str(x).splitlines()[0][:200]}",
                exit_code=EXIT_PLATFORM,
            ) from None
        except e.ServiceRequestError as x:
            raise TauError(
                f"registry {self.url}: cannot reach the storage account while trying to "
                f"{what}: {str(x).splitlines()[0][:200]}",
                exit_code=EXIT_PLATFORM,
                hint="is it up (for tests: Azurite), and is the endpoint right?",
            ) from None

    def _check(self) -> None:
        self._call("read the container", self.container.get_container_properties)

    # --- a run's files in this container ----------------------------------------------------
    def beside(self, rel: str) -> str | None:
        """The key prefix of `rel` (e.g. runs/ID/checkpoints/step-9) on the workspace volume whose
        `registry` folder this registry is (the volume is this container, through Blob CSI); None
        when the registry is not such a folder, or nothing is there."""
        parts = self.prefix.strip("/").split("/")
        if parts[-1] != C.REGISTRY_SUBDIR:
            return None
        base = "/".join(parts[:-1])
        key = (f"{base}/" if base else "") + rel.strip("/") + "/"
        listed = self._call(
            "read", lambda: next(iter(self.container.list_blobs(name_starts_with=key)), None)
        )
        return key if listed is not None else None

    def register_copies(
        self,
        kind: Kind,
        name: str,
        source: str,
        files: list[tuple[str, int, str]],
        created: Created,
        *,
        purpose: str | None = None,
        description: str | None = None,
        tags: dict[str, str] | None = None,
        lineage: Lineage | None = None,
        progress: Callable[[int, int], None] | None = None,
    ) -> Registered:
        """Register files already in this container under the key prefix `source` (a run's
        checkpoint on its workspace volume): each one whose bytes the store lacks is copied
        inside the storage account, so nothing passes through this machine. `files`: (path
        under `source`, size, sha256), as checked where they are; a blob whose size is not the
        one checked is refused, naming it (exit 1)."""
        check_name(name)
        listed = {
            b.name[len(source) :]: b.size
            for b in self._call(
                "list", lambda: list(self.container.list_blobs(name_starts_with=source))
            )
        }
        wrong = [
            f"{rel} ({'missing' if rel not in listed else f'{listed[rel]} bytes, not {size}'})"
            for rel, size, _ in files
            if listed.get(rel) != size
        ]
        if wrong:
            raise TauError(
                f"{self.account}/{self.container_name}/{source}: not what was checked: "
                + ", ".join(wrong),
                exit_code=EXIT_RUN_FAILED,
            )
        total, done = sum(f[1] for f in files), 0
        with self._writing():
            for rel, size, sha in sorted(files):
                if not self._has_blob(sha):
                    self._copy_in(source + rel, sha, size)
                done += size
                if progress:
                    progress(done, total)
            entries = [FileEntry(rel, size, sha) for rel, size, sha in sorted(files)]
            return self._record_version(
                kind,
                name,
                entries,
                created,
                Stored(total, 0, [], {}),
                purpose=purpose,
                description=description,
                tags=tags,
                lineage=lineage,
            )

    def _copy_in(self, key: str, sha: str, size: int) -> None:
        """Copy blob `key` to the blob of `sha` inside the storage account (create-if-absent:
        nothing when another writer stored those bytes first), waiting until it is done."""
        dest = self.container.get_blob_client(self._blob_key(sha))
        url = self.container.get_blob_client(key).url
        try:
            got = self._call(
                "copy", lambda: dest.start_copy_from_url(url, headers={"If-None-Match": "*"})
            )
        except self._errors.ResourceExistsError:
            return
        status, why = got.get("copy_status"), ""
        deadline = time.monotonic() + COPY_BASE_S + size / COPY_RATE
        while status == "pending":  # a large blob: the account copies it in the background
            if time.monotonic() > deadline:
                self._call("abort", lambda: dest.abort_copy(got.get("copy_id")))
                status, why = "aborted", "it took longer than its size allows"
                break
            time.sleep(1.0)
            copy = self._call("read", dest.get_blob_properties).copy
            status, why = copy.status, copy.status_description or ""
        if status != "success":
            raise TauError(
                f"registry {self.url}: copying {key} inside the storage account ended "
                f"{status}{f' ({why})' if why else ''}: nothing was registered",
                exit_code=EXIT_PLATFORM,
                hint="run the registration again: what was copied is kept",
            )

    # --- names -------------------------------------------------------------------------------
    def _key(self, rel: str) -> str:
        return self.prefix + rel

    def _blob_key(self, sha: str) -> str:
        return self._key(f"blobs/sha256/{sha[:2]}/{sha[2:]}")

    def _record_key(self, kind: Kind, name: str, version: str) -> str:
        return self._key(
            f"{kind}s/{check_name(name)}/versions/{version[len(DIGEST_PREFIX) :]}.json"
        )

    def _aliases_key(self, kind: Kind, name: str) -> str:
        return self._key(f"{kind}s/{check_name(name)}/aliases.json")

    # --- primitives --------------------------------------------------------------------------
    def _exists(self, key: str) -> bool:
        return bool(self._call("read", self.container.get_blob_client(key).exists))

    def _create(self, key: str, data: Any, length: int | None = None) -> bool:
        """Upload if absent (If-None-Match: *). False: it was there."""
        client = self.container.get_blob_client(key)
        try:
            self._call("write", lambda: client.upload_blob(data, length=length, overwrite=False))
            return True
        except self._errors.ResourceExistsError:
            return False

    def _has_blob(self, sha: str) -> bool:
        return self._exists(self._blob_key(sha))

    def _store_file(self, path: Path, progress: Callable[[int], None]) -> str:
        """Hash (one streamed read), then upload if no blob has those bytes (a second read)."""
        h = hashlib.sha256()
        with path.open("rb") as f:
            while chunk := f.read(CHUNK):
                h.update(chunk)
        sha = h.hexdigest()
        if not self._has_blob(sha):
            with path.open("rb") as f:
                self._create(self._blob_key(sha), f, length=path.stat().st_size)
        progress(path.stat().st_size)
        return sha

    def _restore_blob(self, path: Path, sha: str) -> None:
        """Upload over a damaged blob, once the file is checked to hold `sha`."""
        h = hashlib.sha256()
        with path.open("rb") as f:
            while chunk := f.read(CHUNK):
                h.update(chunk)
        if h.hexdigest() != sha:
            raise TauError(
                f"{path} changed while it was read: nothing restored", exit_code=EXIT_PLATFORM
            )
        client = self.container.get_blob_client(self._blob_key(sha))
        with path.open("rb") as f:
            self._call(
                "write", lambda: client.upload_blob(f, length=path.stat().st_size, overwrite=True)
            )

    def _read_blob(self, sha: str) -> Iterator[bytes] | None:
        client = self.container.get_blob_client(self._blob_key(sha))
        try:
            stream = self._call("read", client.download_blob)
        except self._errors.ResourceNotFoundError:
            return None
        chunks: Iterator[bytes] = iter(stream.chunks())
        return chunks

    def _put_record(self, kind: Kind, name: str, version: str, data: bytes) -> bool:
        return self._create(self._record_key(kind, name, version), data)

    def _get_record(self, kind: Kind, name: str, version: str) -> bytes | None:
        client = self.container.get_blob_client(self._record_key(kind, name, version))
        try:
            return bytes(self._call("read", lambda: client.download_blob().readall()))
        except self._errors.ResourceNotFoundError:
            return None

    def _put_head(self, kind: Kind, name: str, version: str, data: bytes) -> None:
        self._create(self._record_key(kind, name, version)[: -len(".json")] + ".head", data)

    def _get_head(self, kind: Kind, name: str, version: str) -> bytes | None:
        key = self._record_key(kind, name, version)[: -len(".json")] + ".head"
        client = self.container.get_blob_client(key)
        try:
            return bytes(self._call("read", lambda: client.download_blob().readall()))
        except self._errors.ResourceNotFoundError:
            return None

    def _version_ids(self, kind: Kind, name: str) -> list[str]:
        start = self._key(f"{kind}s/{check_name(name)}/versions/")
        items = self._call("list", lambda: list(self.container.list_blobs(name_starts_with=start)))
        items.sort(key=lambda b: (b.creation_time, b.name))
        return [b.name[len(start) : -len(".json")] for b in items if b.name.endswith(".json")]

    def names(self, kind: Kind) -> list[str]:
        start = self._key(f"{kind}s/")
        found = self._call(
            "list", lambda: list(self.container.walk_blobs(name_starts_with=start, delimiter="/"))
        )
        return sorted(p.name[len(start) :].strip("/") for p in found if p.name.endswith("/"))

    def _read_doc(self, kind: Kind, name: str) -> tuple[dict[str, Any], str | None]:
        client = self.container.get_blob_client(self._aliases_key(kind, name))
        try:
            stream = self._call("read", client.download_blob)
        except self._errors.ResourceNotFoundError:
            return {}, None
        return dict(json.loads(stream.readall())), stream.properties.etag

    def _aliases_doc(self, kind: Kind, name: str) -> dict[str, Any]:
        return self._read_doc(kind, name)[0]

    def _update_aliases(
        self, kind: Kind, name: str, change: Callable[[dict[str, Any]], dict[str, Any]]
    ) -> dict[str, Any]:
        from azure.core import MatchConditions

        client = self.container.get_blob_client(self._aliases_key(kind, name))
        for _ in range(RETRIES):
            doc, etag = self._read_doc(kind, name)
            new = change(doc)  # may raise (a Conflict): nothing written
            data = json.dumps(new, indent=1, sort_keys=True).encode()
            try:
                self._call("write", _writer(client, data, etag, MatchConditions.IfNotModified))
                return new
            except (self._errors.ResourceExistsError, self._errors.ResourceModifiedError):
                continue  # someone wrote first: read again and decide again
        raise TauError(
            f"{self.url}: the aliases of {name} changed {RETRIES} times while moving one",
            exit_code=1,
            hint="try again",
        )

    def _drop_record(self, kind: Kind, name: str, version: str) -> None:
        key = self._record_key(kind, name, version)
        for k in (
            key[: -len(".json")] + ".head",
            key,
        ):  # the head first: never one without a record
            client = self.container.get_blob_client(k)
            with contextlib.suppress(self._errors.ResourceNotFoundError):
                self._call("delete", client.delete_blob)

    # --- writers and gc ----------------------------------------------------------------------
    def _now(self) -> Any:
        """The storage account's clock (its answer's Date), to which marker times are compared."""
        from email.utils import parsedate_to_datetime

        got: list[str] = []

        def hook(response: Any) -> None:
            got.append(response.http_response.headers.get("Date", ""))

        self._call("read", lambda: self.container.get_container_properties(raw_response_hook=hook))
        return parsedate_to_datetime(got[-1])

    def _live(self, prefix: str) -> list[Any]:
        """Markers under `locks/<prefix>` that their holders keep fresh."""
        start = self._key("locks/" + prefix)
        items = self._call("list", lambda: list(self.container.list_blobs(name_starts_with=start)))
        if not items:
            return []
        now = self._now()
        return [b for b in items if (now - b.last_modified).total_seconds() < LOCK_STALE_S]

    def _listed(self, under: str) -> list[str]:
        start = self._key(under)
        return [
            b.name
            for b in self._call(
                "list", lambda: list(self.container.list_blobs(name_starts_with=start))
            )
        ]

    def _holder(self, blob: Any) -> str:
        """Who holds a marker, as it says (host, pid, since when)."""
        try:
            raw = self.container.get_blob_client(blob.name).download_blob().readall()
            who = json.loads(raw)
            since = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(float(who["since"])))
            return f"{who['host']} pid {who['pid']}, since {since} UTC"
        except Exception:  # gone meanwhile, or not ours: its time is enough
            return f"written {blob.last_modified:%Y-%m-%d %H:%M:%S} UTC"

    @contextlib.contextmanager
    def _writing(self) -> Iterator[None]:
        """A writer's marker for as long as it writes; while gc runs, wait for it to end."""
        marker = _Marker(self, self._key(f"locks/writer-{uuid.uuid4().hex}"))
        while True:
            marker.create(overwrite=True)
            if not self._live("gc"):
                break
            marker.remove()
            marker = _Marker(self, marker.key)
            time.sleep(1.0)  # gc holds the store: polled (another machine's; nothing to await)
        marker.keep_fresh()
        try:
            yield
        finally:
            marker.remove()

    def gc(self, *, dry_run: bool = False, grace_s: float = 3600) -> Collected:
        """Blobs no version names and older than `grace_s` (by the account's clock). A killed
        registration leaves only such blobs (an upload is whole or absent; uncommitted blocks
        the account drops by itself). Refused while another gc runs or a writer writes."""
        marker = _Marker(self, self._key("locks/gc"))
        if not marker.create():
            held = self._live("gc")
            if held:
                raise TauError(
                    f"registry {self.url}: another gc is running ({self._holder(held[0])})",
                    exit_code=1,
                    hint="wait for it to end",
                )
            marker.create(overwrite=True)  # a dead gc's marker
        marker.keep_fresh()
        try:
            writers = self._live("writer-")
            if writers:
                raise TauError(
                    f"registry {self.url}: {len(writers)} registration(s) or copies are writing "
                    f"to it ({self._holder(writers[0])}): gc removes nothing while one does",
                    exit_code=1,
                    hint="run gc again when they are done",
                )
            if not dry_run:  # dead writers' markers
                for key in self._listed("locks/writer-"):
                    with contextlib.suppress(self._errors.ResourceNotFoundError):
                        self._call("delete", self.container.get_blob_client(key).delete_blob)
            return self._collect(dry_run, grace_s)
        finally:
            marker.remove()

    def _collect(self, dry_run: bool, grace_s: float) -> Collected:
        named = self._named_blobs()
        start = self._key("blobs/sha256/")
        items = self._call("list", lambda: list(self.container.list_blobs(name_starts_with=start)))
        now = self._now()
        blobs = freed = 0
        for b in items:
            sha = b.name[len(start) :].replace("/", "")
            if sha in named or (now - b.last_modified).total_seconds() < grace_s:
                continue
            blobs += 1
            freed += int(b.size or 0)
            if not dry_run:
                client = self.container.get_blob_client(b.name)
                with contextlib.suppress(self._errors.ResourceNotFoundError):
                    self._call("delete", client.delete_blob)
        return Collected(blobs, 0, 0, freed, dry_run)
