"""GPU use per run: the stack's settings, what TauRun.status keeps, and how it reads (pure).

The controller reads DCGM's exporter on every GPU node (`controller/gpuuse.py`) and joins each
GPU to the run whose pod holds it; a run's use is kept in TauRun.status.gpuUse, rounded so that
the noise of a busy GPU costs no status write: SM activity to 5 points, framebuffer to GiB,
power to 10 W. `since` is when the values shown were first seen (not refreshed while they hold).
A run whose SM activity stays under `idleBelow` for `idleAfterSeconds` is "allocated but idle".
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from taugrid.api.constants import GPU_RESOURCE
from taugrid.api.defaults import new_list

IdleAction = Literal["none", "warn", "requeue"]
# The evidence a Progressing signal names when it comes from the GPUs (not the run's own output)
DCGM_EVIDENCE = "DCGM exporter (DCGM_FI_PROF_SM_ACTIVE, per GPU the run's pods hold)"
# A node's last DCGM reading as the controller saw it (JSON; written only when it changes)
DCGM_ANNOTATION = "tau.azure.com/dcgm"


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class GpuUseConfig(_Model):
    """The stack's settings for reading GPU use (components.controller.gpuUse)."""

    enabled: bool = Field(True, description="Read DCGM's exporter on the GPU nodes")
    scrapeSeconds: int = Field(15, ge=5, le=300, description="How often each exporter is read")
    idleBelow: float = Field(
        0.05,
        gt=0,
        le=1,
        description="SM activity (0..1, DCGM_FI_PROF_SM_ACTIVE) under which a run's GPUs are idle",
    )
    idleAfterSeconds: int = Field(
        1800, ge=30, description="How long a run's GPUs stay idle before it is 'allocated but idle'"
    )
    idleAction: IdleAction = Field(
        "none",
        description="What the controller does to an idle run: none (say it in its status), "
        "warn (also a Warning event on the TauRun), requeue (Kueue evicts it and queues it "
        "again: its GPUs go to the next run; it resumes from its checkpoint)",
    )


HISTORY_KEEP = 48  # the changes kept (the portal plots them; a steady run adds none)


class GpuSample(_Model):
    """One change of a run's GPU use: from `at` on, these values."""

    at: str = Field(json_schema_extra={"format": "date-time"})
    smActive: float | None = Field(None, ge=0, le=1)
    fbUsedMiB: int = Field(0, ge=0)
    powerW: int = Field(0, ge=0)


class GpuUseStatus(_Model):
    """TauRun.status.gpuUse: the GPUs the run's pods hold now, as DCGM reports them."""

    gpus: int = Field(ge=0, description="GPUs the exporters report under the run's pods")
    smActive: float | None = Field(
        None, ge=0, le=1, description="Mean SM activity of those GPUs (0..1, to 0.05)"
    )
    fbUsedMiB: int = Field(0, ge=0, description="Framebuffer used, all GPUs (to 1024 MiB)")
    powerW: int = Field(0, ge=0, description="Power drawn, all GPUs (to 10 W)")
    nodes: list[str] = Field(default_factory=new_list)
    since: str = Field(
        json_schema_extra={"format": "date-time"}, description="When these values were first seen"
    )
    idleSince: str | None = Field(
        None,
        json_schema_extra={"format": "date-time"},
        description="Under the idle threshold since then (None: busy, or not yet a window)",
    )
    unread: str | None = Field(None, description="Why some of its GPUs were not read")
    history: list[GpuSample] = Field(
        default_factory=new_list,
        max_length=HISTORY_KEEP,
        description="Its last changes, oldest first (each from its `at` on)",
    )

    def sampled(self) -> GpuUseStatus:
        """This status with its own values as the newest history point."""
        point = GpuSample(
            at=self.since, smActive=self.smActive, fbUsedMiB=self.fbUsedMiB, powerW=self.powerW
        )
        kept = [h for h in self.history if h.at < self.since][-(HISTORY_KEEP - 1) :]
        return self.model_copy(update={"history": [*kept, point]})


def container_gpus(container: Mapping[str, Any]) -> int:
    """The GPUs a container's limits ask for (0: none, or not a whole number)."""
    raw = str(((container.get("resources") or {}).get("limits") or {}).get(GPU_RESOURCE, "0"))
    return int(raw) if raw.isdigit() else 0


def pod_gpus(pod: Mapping[str, Any]) -> int:
    """The GPUs a pod's containers ask for."""
    return sum(container_gpus(c) for c in (pod.get("spec") or {}).get("containers") or [])


def rounded(
    gpus: int,
    busy: float | None,
    fb_used_mib: float,
    power_w: float,
    nodes: list[str],
) -> dict[str, Any]:
    """The values kept (rounded as the module says), without the times."""
    return {
        "gpus": gpus,
        "smActive": None if busy is None else round(round(busy * 20) / 20, 2),
        "fbUsedMiB": int(round(fb_used_mib / 1024) * 1024),
        "powerW": int(round(power_w / 10) * 10),
        "nodes": sorted(nodes),
    }


def describe(u: GpuUseStatus | Mapping[str, Any]) -> str:
    """One line: "8 GPUs, SM 65% active, 71 GiB used, 2.1 kW" (and idle / unread)."""
    g = u if isinstance(u, GpuUseStatus) else GpuUseStatus.model_validate(u)
    parts = [f"{g.gpus} GPU{'s' if g.gpus != 1 else ''}"]
    parts.append("SM activity unknown" if g.smActive is None else f"SM {g.smActive:.0%} active")
    parts.append(f"{g.fbUsedMiB / 1024:.0f} GiB used")
    parts.append(f"{g.powerW / 1000:.1f} kW" if g.powerW >= 1000 else f"{g.powerW} W")
    line = ", ".join(parts)
    if g.idleSince:
        line += f"; idle since {g.idleSince}"
    if g.unread:
        line += f" ({g.unread})"
    return line


def short(u: GpuUseStatus | Mapping[str, Any] | None) -> str:
    """The list column: "8×65%", "8×idle", or "" when nothing was read."""
    if u is None:
        return ""
    g = u if isinstance(u, GpuUseStatus) else GpuUseStatus.model_validate(u)
    if g.gpus == 0:
        return "unread" if g.unread else ""
    busy = "?" if g.smActive is None else f"{g.smActive:.0%}"
    return f"{g.gpus}×{'idle' if g.idleSince else busy}"
