"""A service's record on this machine: `$TAU_HOME/services/<name>/`.

`service.json` (the `ServiceRecord`: revisions, which one serves, the scale), `events.jsonl`
(one line per change, appended), `revisions/<N>/code/` (the code each revision runs, so a
rollback runs exactly what ran before). Every change is a read-modify-write under the
service's lock; a deleted service's folder moves to `services/.deleted/` (nothing is lost).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

from taugrid.api.errors import EXIT_USAGE, TauError
from taugrid.api.serve import Event, ServiceRecord
from taugrid.runs.paths import tau_home, write_atomic


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def services_root() -> Path:
    return tau_home() / "services"


class ServiceDir:
    def __init__(self, name: str) -> None:
        self.name = name
        self.path = services_root() / name

    @property
    def record_file(self) -> Path:
        return self.path / "service.json"

    @property
    def events_file(self) -> Path:
        return self.path / "events.jsonl"

    def code_dir(self, revision: int) -> Path:
        return self.path / "revisions" / str(revision) / "code"

    def exists(self) -> bool:
        return self.record_file.is_file()

    def read(self) -> ServiceRecord:
        try:
            raw = self.record_file.read_text()
        except FileNotFoundError:
            raise TauError(
                f"no service {self.name!r} on this machine" + _undone(self.name),
                exit_code=EXIT_USAGE,
                hint=_known_hint(),
            ) from None
        return ServiceRecord.model_validate_json(raw)

    def write(self, rec: ServiceRecord) -> None:
        write_atomic(self.record_file, rec.model_dump_json(indent=2).encode())

    def event(
        self, kind: str, message: str, revision: int | None = None, by: str | None = None
    ) -> Event:
        ev = Event(at=now(), kind=kind, message=message, revision=revision, by=by)
        self.path.mkdir(parents=True, exist_ok=True)
        with self.events_file.open("a") as f:
            f.write(ev.model_dump_json(exclude_none=True) + "\n")
        return ev

    def events(self, limit: int | None = None) -> list[Event]:
        try:
            lines = self.events_file.read_text().splitlines()
        except FileNotFoundError:
            return []
        out = []
        for line in lines[-limit:] if limit else lines:
            with contextlib.suppress(ValueError):
                out.append(Event.model_validate_json(line))
        return out

    @contextlib.contextmanager
    def lock(self) -> Iterator[None]:
        """One change at a time to this service (two `tau serve` commands never interleave)."""
        services_root().mkdir(parents=True, exist_ok=True)
        with open(services_root() / f".{self.name}.lock", "w") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(f, fcntl.LOCK_UN)

    def retire(self) -> Path:
        """Move the folder aside (a later service may take the name); returns where it went."""
        dest = services_root() / ".deleted" / f"{self.name}-{int(time.time())}"
        dest.parent.mkdir(parents=True, exist_ok=True)
        os.replace(self.path, dest)
        return dest

    def remove_revision_code(self, revision: int) -> None:
        shutil.rmtree(self.code_dir(revision).parent, ignore_errors=True)


def _undone(name: str) -> str:
    """What became of a service of this name that is gone: a first deploy that failed and was
    undone says why (its record was kept aside), so `status` and `logs` still tell."""
    kept = sorted(
        services_root().glob(f".deleted/{name}-*"), key=lambda p: p.name.rsplit("-", 1)[-1]
    )
    for folder in reversed(kept):
        if folder.name.rsplit("-", 1)[0] != name:
            continue
        try:
            last = (folder / "events.jsonl").read_text().splitlines()[-1]
            ev = Event.model_validate_json(last)
        except (OSError, IndexError, ValueError):
            return ""
        if ev.kind == "failed":
            return f" (its deploy failed at {ev.at} and was undone: {ev.message}; record: {folder})"
        return ""
    return ""


def all_services() -> list[ServiceDir]:
    root = services_root()
    if not root.is_dir():
        return []
    return [
        ServiceDir(p.name)
        for p in sorted(root.iterdir())
        if not p.name.startswith(".") and (p / "service.json").is_file()
    ]


def _known_hint() -> str:
    names = [d.name for d in all_services()]
    if not names:
        return "deploy one: tau serve deploy [tau.yaml]"
    return "services here: " + ", ".join(names) + " (tau serve list)"


def write_json(path: Path, doc: object) -> None:
    write_atomic(path, json.dumps(doc, indent=2, sort_keys=True).encode())
