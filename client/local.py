"""The local Ray head that local runs and services use (`tau local ...`): whether it runs and
where, starting it now (stage by stage, as a first local run would), and stopping it."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class LocalHead:
    """The local Ray head (`running` False: none; the other fields are then None)."""

    running: bool
    pid: int | None = None
    address: str | None = None
    dashboard: str | None = None
    cpus: int | None = None
    gpus: int | None = None
    uptime_s: int | None = None
    standby_ready: int | None = None  # standby jobs ready for the next run

    def as_json(self) -> dict[str, object]:
        return {k: v for k, v in asdict(self).items() if v is not None or k == "running"}


@dataclass(frozen=True)
class Started:
    """`start`: the head, whether this call started it (False: it was running), and how long
    this call took."""

    head: LocalHead
    started: bool
    took_s: float


@dataclass(frozen=True)
class Stopped:
    """`stop`: the head's pid (None: none was running) and the local services it served."""

    pid: int | None
    services: list[str]


def status() -> LocalHead:
    from taugrid.runs.backends.local import rayhead, standby

    head = rayhead.read_head()
    if not (head and rayhead.healthy(head)):
        return LocalHead(running=False)
    return LocalHead(
        running=True,
        pid=head.pid,
        address=head.address,
        dashboard=head.dashboard,
        cpus=head.num_cpus,
        gpus=head.num_gpus,
        uptime_s=round(time.time() - head.started_at),
        standby_ready=standby.standby_count(head),
    )


def start(say: Callable[[str], None] = lambda _m: None) -> Started:
    """The running head, or a new one started now (each stage said through `say`; up to
    TAU_LOCAL_START_TIMEOUT seconds)."""
    from taugrid.runs.backends.local import rayhead
    from taugrid.runs.backends.local.backend import detect_gpus

    before = rayhead.read_head()
    was_up = bool(before and rayhead.healthy(before))
    t0 = time.monotonic()
    head = rayhead.ensure_head(num_gpus=detect_gpus(), say=say)
    took = round(time.monotonic() - t0, 1)
    here = LocalHead(
        running=True,
        pid=head.pid,
        address=head.address,
        dashboard=head.dashboard,
        cpus=head.num_cpus,
        gpus=head.num_gpus,
    )
    return Started(here, started=not was_up, took_s=took)


def stop(say: Callable[[str], None] = lambda _m: None) -> Stopped:
    """Stop the head (its runs stop too), and return once every process of it has ended and
    its ports are closed (its Serve proxy's too); the local services it served are named."""
    from taugrid.client import serve
    from taugrid.runs.backends.local import rayhead

    head = rayhead.stop_head(say)
    return Stopped(head.pid if head else None, serve.local_services() if head else [])
