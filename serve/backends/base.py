"""The service backend interface: what every serving target does, the order of each change
written once (`ServiceTemplate`), and the registry. The runs' shape (`runs/backends/base.py`):
`taugrid.client.serve` checks a command's arguments, pins the model and decides the target once
(`get`, `for_record`); the backend does the target's part; nothing walks back up.

The record comes first. A deploy writes the service's record before anything is sent or
applied (a deploy cut short is a service tau knows, or nothing at all when nothing reached the
target); a change writes the record before it is sent, and puts the record back when the send
fails (the status never claims a revision that was not sent).

Adding a target: a module with a class that satisfies `ServiceBackend` (most simply a
`ServiceTemplate`), and one line in `REGISTRY`.
"""

from __future__ import annotations

import importlib
import os
import shutil
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TextIO, runtime_checkable

from taugrid.api import serve as S
from taugrid.api.errors import EXIT_USAGE, TauError

if TYPE_CHECKING:
    from taugrid.serve.records import ServiceDir
    from taugrid.serve.status import Observed

Say = Callable[[str], None]


def quiet(_: str) -> None:
    """A `say` that says nothing."""


@dataclass(frozen=True)
class Placement:
    """Where a new service goes: the cluster's options (`--context`, `--workspace`,
    `--profile`) and the local head's (`--port`); a target refuses the ones it has not."""

    context: str | None = None
    workspace: str | None = None
    profile: str | None = None
    port: int | None = None


@dataclass(frozen=True)
class NewService:
    """A deploy, checked and pinned, not yet recorded."""

    name: str
    spec: S.ServiceSpec
    manifest: Any  # the tau.yaml's Manifest (a cluster resolves its workspace and profile)
    source: Path  # the tau.yaml
    pin: S.ModelPin | None
    route: str
    placement: Placement
    created: str
    who: str


@dataclass(frozen=True)
class Started:
    """What a backend made ready to send: the target's fields of the record, the event's words
    on where it goes, and the backend's own plan (what `send` needs)."""

    fields: dict[str, Any]
    where: str = ""
    plan: Any = None


@dataclass(frozen=True)
class Answer:
    """One answer of a service to one request (`tau serve invoke`)."""

    status: int
    body: bytes
    seconds: float
    url: str

    def json(self) -> Any:
        import json

        return json.loads(self.body)

    @property
    def text(self) -> str:
        return self.body.decode(errors="replace")


@dataclass(frozen=True)
class Request:
    """One request to a service: POST with `data`, else GET (or `method`)."""

    data: bytes | None = None
    path: str = ""
    method: str | None = None
    content_type: str = "application/json"
    timeout_s: float = 60.0

    @property
    def verb(self) -> str:
        return self.method or ("POST" if self.data is not None else "GET")

    @property
    def suffix(self) -> str:
        return self.path if not self.path or self.path.startswith("/") else "/" + self.path

    @property
    def headers(self) -> dict[str, str]:
        return {"Content-Type": self.content_type} if self.data is not None else {}


@runtime_checkable
class ServiceBackend(Protocol):
    """What `taugrid.client.serve` asks of a target."""

    name: str
    poll_s: float  # how often a wait looks again
    undo_failed_rollout: bool  # a rollout that does not serve is rolled back (else it waits)
    rollback_strategy: str | None  # how a kept revision comes back (None: the service's own)

    def check(self, spec: S.ServiceSpec, placement: Placement) -> None:
        """Refuse what this target cannot honour (TauError, exit 2), before anything."""
        ...

    def new_registry(self, manifest: Any, spec: S.ServiceSpec, placement: Placement) -> str | None:
        """The registry a new service's run checkpoint is registered into (None: this
        machine's)."""
        ...

    def registry(self, rec: S.ServiceRecord) -> str | None:
        """The registry a service's next revision's run checkpoint is registered into."""
        ...

    def deploy(self, sd: ServiceDir, new: NewService, say: Say) -> S.ServiceRecord: ...

    def change(
        self,
        sd: ServiceDir,
        rec: S.ServiceRecord,
        rev: S.Revision,
        *,
        new: bool,
        kind: str,
        message: str,
        strategy: str | None,
        say: Say,
    ) -> S.ServiceRecord: ...

    def revision(
        self,
        sd: ServiceDir,
        rec: S.ServiceRecord,
        spec: S.ServiceSpec,
        source: Path,
        pin: S.ModelPin | None,
        reason: str,
    ) -> tuple[S.Revision, bool]: ...

    def restore(self, sd: ServiceDir, rec: S.ServiceRecord, say: Say) -> bool: ...

    def canary(
        self,
        sd: ServiceDir,
        spec: S.ServiceSpec,
        source: Path,
        pin: S.ModelPin | None,
        percent: int,
        timeout_s: float,
        say: Say,
    ) -> None: ...

    def end_canary(self, sd: ServiceDir, back: int, why: str, say: Say) -> None: ...

    def promote(self, sd: ServiceDir, timeout_s: float, say: Say) -> None: ...

    def scale(self, sd: ServiceDir, new: S.Scale, say: Say) -> tuple[S.ServiceRecord, bool]: ...

    def delete(self, sd: ServiceDir, timeout_s: float, say: Say) -> S.ServiceRecord: ...

    def observe(self, recs: Sequence[S.ServiceRecord]) -> list[Observed]: ...

    def settle(self, sd: ServiceDir, rec: S.ServiceRecord, obs: Observed) -> S.ServiceRecord: ...

    def probe(self, rec: S.ServiceRecord, obs: Observed) -> tuple[bool | None, int | None]: ...

    def undo_first(self, sd: ServiceDir, st: S.ServiceStatus) -> None: ...

    def invoke(self, rec: S.ServiceRecord, request: Request) -> Answer: ...

    def logs(
        self, rec: S.ServiceRecord, out: TextIO, *, follow: bool, poll_s: float, tail: int | None
    ) -> None: ...


class ServiceTemplate(ABC):
    """The order of a deploy, of a change (rollout, rollback), of a canary and of a delete,
    written once; each backend fills in the steps."""

    name: str
    poll_s: float = 1.0
    undo_failed_rollout: bool = True
    rollback_strategy: str | None = "rolling"  # None: the service's own

    # --- deploy -------------------------------------------------------------------------------
    def deploy(self, sd: ServiceDir, new: NewService, say: Say) -> S.ServiceRecord:
        """Revision 1: its code snapshotted and checked -> the record -> sent. Under the
        service's lock. A deploy that sent nothing leaves nothing (not even the record)."""
        sent = False
        try:
            digest = snapshot_code(new.source.parent, sd.code_dir(1))
            rev = S.Revision(
                number=1,
                created_at=new.created,
                created_by=new.who,
                config_hash=S.config_hash(new.spec, new.pin, digest),
                code_digest=digest,
                model=new.pin,
                spec=new.spec,
                source=str(new.source.resolve()),
                reason="deploy",
                ingress=self.ingress(sd.code_dir(1), new.spec, say),
            )
            ready = self.prepare_first(sd, new, rev, say)
            rec = S.ServiceRecord(
                name=new.name,
                target=self.name,
                created_at=new.created,
                created_by=new.who,
                route_prefix=new.route,
                revisions=[rev],
                serving=1,
                strategy=new.spec.rollout.strategy,
                scale=S.scale_of(new.spec),
            ).model_copy(update=ready.fields)
            sd.write(rec)  # the record first: a deploy cut short is still a service tau knows
            sd.event("deploy", f"revision 1 ({_short(new.pin)}){ready.where}", 1, new.who)
            rec = self.send_first(sd, rec, ready.plan, say)
            sd.write(rec)
            sent = True
        finally:
            if not sent and not self.reached(sd):
                shutil.rmtree(sd.path, ignore_errors=True)
        return rec

    @abstractmethod
    def prepare_first(self, sd: ServiceDir, new: NewService, rev: S.Revision, say: Say) -> Started:
        """Check revision 1 against the target (nothing sent); the record's target fields."""

    @abstractmethod
    def send_first(
        self, sd: ServiceDir, rec: S.ServiceRecord, plan: Any, say: Say
    ) -> S.ServiceRecord:
        """Send the recorded revision 1; the record as it is then (e.g. with its endpoint)."""

    def reached(self, sd: ServiceDir) -> bool:
        """Whether a deploy whose sending failed left something on the target (then its record
        stays: `tau serve delete` removes what was sent)."""
        return False

    def undo_first(self, sd: ServiceDir, st: S.ServiceStatus) -> None:
        """A first revision that never served (its status `st`): what is left of it."""
        return None

    # --- changes ------------------------------------------------------------------------------
    def revision(
        self,
        sd: ServiceDir,
        rec: S.ServiceRecord,
        spec: S.ServiceSpec,
        source: Path,
        pin: S.ModelPin | None,
        reason: str,
    ) -> tuple[S.Revision, bool]:
        """What a change would run: the kept revision with the same code, config and model
        version (the snapshot just taken is removed), else a new one numbered next, its code
        snapshotted (True). Under the service's lock."""
        number = max(r.number for r in rec.revisions) + 1
        digest = snapshot_code(source.parent, sd.code_dir(number))
        h = S.config_hash(spec, pin, digest)
        kept = next((r for r in rec.revisions if r.config_hash == h), None)
        if kept is not None:
            sd.remove_revision_code(number)
            return kept, False
        return S.Revision(
            number=number,
            created_at=now(),
            created_by=who(),
            config_hash=h,
            code_digest=digest,
            model=pin,
            spec=spec,
            source=str(source.resolve()),
            reason=reason,
            ingress=self.ingress(sd.code_dir(number), spec, quiet),
        ), True

    def ingress(self, code_dir: Path, spec: S.ServiceSpec, say: Say) -> str | None:
        """The application's ingress deployment, when the target bounds requests there."""
        return None

    def change(
        self,
        sd: ServiceDir,
        rec: S.ServiceRecord,
        rev: S.Revision,
        *,
        new: bool,
        kind: str,
        message: str,
        strategy: str | None,
        say: Say,
    ) -> S.ServiceRecord:
        """Revision `rev` (new, or a kept one) takes over from the serving one: checked against
        the target (a new revision's code is removed when that fails) -> recorded -> sent; a
        send that fails puts the record back. Under the service's lock. `strategy` None: the
        service's own."""
        how = strategy or rec.strategy
        try:
            ready = self.prepare_change(sd, rec, rev, how, say)
        except BaseException:
            if new:
                sd.remove_revision_code(rev.number)
            raise
        moved = rec.model_copy(
            update={
                "revisions": [*rec.revisions, rev] if new else rec.revisions,
                "previous": rec.serving,
                "serving": rev.number,
                "rollout_started_at": now(),
                "rollout_done": False,
                **({"strategy": how} if strategy else {}),
                **ready.fields,
            }
        )
        sd.write(moved)
        sd.event(kind, message + ready.where, rev.number, who())
        try:
            moved = self.send_change(sd, moved, rev, ready.plan, say)
        except BaseException:
            sd.write(rec)
            sd.event("failed", f"revision {rev.number} was not sent; revision {rec.serving} stays")
            if new:
                sd.remove_revision_code(rev.number)
            raise
        sd.write(moved)
        return moved

    @abstractmethod
    def prepare_change(
        self, sd: ServiceDir, rec: S.ServiceRecord, rev: S.Revision, strategy: str, say: Say
    ) -> Started:
        """Check a change against the target (nothing sent); the record's target fields."""

    @abstractmethod
    def send_change(
        self, sd: ServiceDir, rec: S.ServiceRecord, rev: S.Revision, plan: Any, say: Say
    ) -> S.ServiceRecord:
        """Send the recorded change; the record as it is then."""

    def restore(self, sd: ServiceDir, rec: S.ServiceRecord, say: Say) -> bool:
        """The same config again: the serving revision put back if the target lost it. True
        when it ran unchanged."""
        return True

    # --- canaries -----------------------------------------------------------------------------
    def canary(
        self,
        sd: ServiceDir,
        spec: S.ServiceSpec,
        source: Path,
        pin: S.ModelPin | None,
        percent: int,
        timeout_s: float,
        say: Say,
    ) -> None:
        """A canary beside the serving revision: its revision (refused when it is the serving
        one) checked against the target -> recorded -> sent (the record put back when that
        fails) -> given its share of the requests (`route_canary`)."""
        with sd.lock():
            rec = sd.read()
            no_canary(rec, "a canary")
            self.check_canary(rec)
            rev, new = self.revision(sd, rec, spec, source, pin, "canary")
            if rev.number == rec.serving:
                raise TauError(
                    f"revision {rev.number} already serves this config and model: a "
                    "canary of it would compare it with itself",
                    exit_code=EXIT_USAGE,
                    hint="change the code, the config or --model",
                )
            try:
                ready = self.prepare_canary(sd, rec, rev, percent, say)
            except BaseException:
                if new:
                    sd.remove_revision_code(rev.number)
                raise
            with_canary = _record_canary(sd, rec, rev, new, percent, ready)
            try:
                self.send_canary(sd, with_canary, rev, ready.plan, say)
            except BaseException:
                sd.write(rec)
                sd.event("failed", f"the canary of revision {rev.number} was not sent")
                if new:
                    sd.remove_revision_code(rev.number)
                raise
        self.route_canary(sd, with_canary, rev, ready.plan, timeout_s, say)

    def check_canary(self, rec: S.ServiceRecord) -> None:
        """Refuse a canary the service's state does not allow on this target."""
        return None

    @abstractmethod
    def prepare_canary(
        self, sd: ServiceDir, rec: S.ServiceRecord, rev: S.Revision, percent: int, say: Say
    ) -> Started:
        """Check a canary against the target (nothing sent); the canary's target fields."""

    @abstractmethod
    def send_canary(
        self, sd: ServiceDir, rec: S.ServiceRecord, rev: S.Revision, plan: Any, say: Say
    ) -> None:
        """Send the recorded canary."""

    def route_canary(
        self,
        sd: ServiceDir,
        rec: S.ServiceRecord,
        rev: S.Revision,
        plan: Any,
        timeout_s: float,
        say: Say,
    ) -> None:
        """Give the sent canary its share of the requests (by default the target does, once
        it runs)."""
        return None

    # --- delete -------------------------------------------------------------------------------
    def delete(self, sd: ServiceDir, timeout_s: float, say: Say) -> S.ServiceRecord:
        """Removed from the target -> recorded as deleted -> its folder moved aside (nothing is
        lost; the name is free again). Refused, with nothing changed, when the target still
        lists it after `timeout_s`."""
        with sd.lock():
            rec = sd.read()
            where = self.remove(rec, timeout_s, say)
            rec = rec.model_copy(update={"deleted_at": now()})
            sd.write(rec)
            sd.event("delete", where, rec.serving, who())
            sd.retire()
        return rec

    @abstractmethod
    def remove(self, rec: S.ServiceRecord, timeout_s: float, say: Say) -> str:
        """Remove the service from the target and wait until it is gone; what was removed."""

    # --- looking ------------------------------------------------------------------------------
    def settle(self, sd: ServiceDir, rec: S.ServiceRecord, obs: Observed) -> S.ServiceRecord:
        """A rollout that has finished, recorded as such (any look moves a service forward)."""
        moved = self.advance(sd, rec)
        if moved is not None:
            return moved
        if (
            rec.rollout_done
            or rec.canary is not None
            or not obs.exists
            or obs.status != "RUNNING"
            or obs.revision != rec.serving
        ):
            return rec
        with sd.lock():
            rec = sd.read()
            if rec.rollout_done:
                return rec
            rec = rec.model_copy(update={"rollout_done": True})
            sd.write(rec)
            if rec.previous is not None:
                sd.event("rolled-out", f"revision {rec.serving} serves all traffic", rec.serving)
        return rec

    def advance(self, sd: ServiceDir, rec: S.ServiceRecord) -> S.ServiceRecord | None:
        """A step the target's own changes take when looked at (None: nothing to take)."""
        return None

    def probe(self, rec: S.ServiceRecord, obs: Observed) -> tuple[bool | None, int | None]:
        """Whether the service answers a request now, and its HTTP code (None: not asked)."""
        return None, None


def no_canary(rec: S.ServiceRecord, what: str) -> None:
    """Refuse `what` while a canary runs."""
    c = rec.canary
    if c is not None:
        raise TauError(
            f"{what} waits for the canary of revision {c.revision} "
            f"({c.percent}% of {rec.name}'s requests) to end",
            exit_code=EXIT_USAGE,
            hint=f"tau serve promote {rec.name} (it takes all), or tau serve rollback "
            f"{rec.name} (it is removed)",
        )


def snapshot_code(folder: Path, dest: Path) -> str:
    """The tau.yaml folder's code (the run's ignore rules) copied for one revision."""
    from taugrid.runs.codebundle import collect

    bundle = collect(folder, include_helper=False)
    tmp = dest.with_name(dest.name + ".part")
    shutil.rmtree(tmp, ignore_errors=True)
    for rel, blob in bundle.files:
        out = tmp / rel
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_bytes(blob)
    tmp.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(dest, ignore_errors=True)
    os.replace(tmp, dest)
    return bundle.digest


def now() -> str:
    """The time of a record's change (the records' own clock)."""
    from taugrid.serve.records import now as recorded_now

    return recorded_now()


def who() -> str:
    """Who makes a change (the runs' submitter)."""
    from taugrid.runs.provenance import submitter

    return submitter()


def _short(pin: S.ModelPin | None) -> str:
    return pin.short if pin else "no model"


# target -> "module:Class"
REGISTRY: Mapping[str, str] = {
    "local": "taugrid.serve.backends.local:LocalServiceBackend",
    "kube": "taugrid.serve.backends.kube:KubeServiceBackend",
}
HINTS: Mapping[str, str] = {
    "local": "Ray Serve on the local Ray head",
    "kube": "a RayService in a cluster workspace",
}


def get(target: str) -> ServiceBackend:
    """The backend of a target (its module is imported now, not before)."""
    if target not in REGISTRY:
        raise TauError(
            f"--target {target}: not a target",
            exit_code=EXIT_USAGE,
            hint="; ".join(f"{t} ({HINTS[t]})" for t in REGISTRY),
        )
    module, _, cls = REGISTRY[target].partition(":")
    backend: ServiceBackend = getattr(importlib.import_module(module), cls)()
    return backend


def for_record(rec: S.ServiceRecord) -> ServiceBackend:
    """The backend that serves a recorded service."""
    return get(rec.target)


def _record_canary(
    sd: ServiceDir,
    rec: S.ServiceRecord,
    rev: S.Revision,
    new: bool,
    percent: int,
    ready: Started,
) -> S.ServiceRecord:
    """The canary written into the service's record (and its event), before it is sent."""
    canary = S.Canary.model_validate(
        {
            "revision": rev.number,
            "percent": percent,
            "started_at": now(),
            "by": who(),
            **ready.fields,
        }
    )
    with_canary = rec.model_copy(
        update={
            "revisions": [*rec.revisions, rev] if new else rec.revisions,
            "canary": canary,
        }
    )
    sd.write(with_canary)
    sd.event(
        "canary",
        f"revision {rev.number} ({_short(rev.model)}) beside revision {rec.serving}, "
        f"for {percent}% of the requests{ready.where}",
        rev.number,
        canary.by,
    )
    return with_canary
