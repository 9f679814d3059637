"""GPU use from DCGM's exporter, per run (pure: exposition text and pods in, use per run out).

dcgm-exporter on each GPU node labels every GPU's metrics with the pod that holds it (its
Kubernetes mapping reads the kubelet's pod-resources socket on the node: no cluster-wide pod
read). The fields read are the ones that tell a busy GPU from an allocated one: the profiling
fields DCGM_FI_PROF_SM_ACTIVE and DCGM_FI_PROF_GR_ENGINE_ACTIVE (fractions of time, 0..1; the
device's GPU_UTIL is a 0/100 signal of "a kernel ran", kept only as a fallback), framebuffer
used, and power. A run's use is the mean over the GPUs its pods hold; a run whose SM activity
stays under a threshold for a window is "allocated but idle" (`IdleWatch`).

prometheus_client's parser reads the text format (escaping, types, comments): the exporter's
output is not TauGrid's to guess at.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

SM_ACTIVE = "DCGM_FI_PROF_SM_ACTIVE"
GR_ENGINE_ACTIVE = "DCGM_FI_PROF_GR_ENGINE_ACTIVE"
GPU_UTIL = "DCGM_FI_DEV_GPU_UTIL"  # percent; a coarse fallback where profiling is off
FB_USED = "DCGM_FI_DEV_FB_USED"  # MiB
POWER = "DCGM_FI_DEV_POWER_USAGE"  # W
XID = "DCGM_FI_DEV_XID_ERRORS"  # the last XID seen (0: none)
R = TypeVar("R", bound=Hashable)
FIELDS = (SM_ACTIVE, GR_ENGINE_ACTIVE, GPU_UTIL, FB_USED, POWER, XID)


class ExpositionError(ValueError):
    """The exporter's answer is not its text format."""


@dataclass
class Gpu:
    """One GPU of one node as the exporter reports it now."""

    node: str
    index: str
    uuid: str = ""
    model: str = ""
    namespace: str | None = None  # the pod that holds it (None: no pod does)
    pod: str | None = None
    values: dict[str, float] = field(default_factory=dict)

    @property
    def busy(self) -> float | None:
        """The fraction of time its SMs were active (profiling), else the engine's, else the
        coarse utilisation / 100; None when the exporter reports none of them."""
        for name, scale in ((SM_ACTIVE, 1.0), (GR_ENGINE_ACTIVE, 1.0), (GPU_UTIL, 100.0)):
            if name in self.values:
                return max(0.0, min(1.0, self.values[name] / scale))
        return None


def parse(text: str, node: str) -> list[Gpu]:
    """The GPUs in one exporter's answer, the exporter of `node` (the node it was found on: its
    own Hostname label is the pod's host name in some versions, and was renamed `hostname` in
    others). Only the fields above are kept: other lines are dropped before parsing, which is
    most of the cost (an 8-GPU node prints ~40 fields a GPU)."""
    from prometheus_client.parser import text_string_to_metric_families

    if not isinstance(text, str) or ("\x00" in text):
        raise ExpositionError("not DCGM exporter's text format (binary)")
    kept = "\n".join(line for line in text.splitlines() if _wanted(line))
    gpus: dict[str, Gpu] = {}
    try:
        for family in text_string_to_metric_families(kept + "\n"):
            for s in family.samples:
                idx = s.labels.get("gpu")
                if s.name not in FIELDS or idx is None:
                    continue
                g = gpus.setdefault(
                    idx,
                    Gpu(
                        node=node,
                        index=idx,
                        uuid=s.labels.get("UUID", ""),
                        model=s.labels.get("modelName", ""),
                    ),
                )
                if s.labels.get("pod"):
                    g.namespace, g.pod = s.labels.get("namespace"), s.labels["pod"]
                g.values[s.name] = float(s.value)
    except (ValueError, TypeError, IndexError, KeyError) as e:
        raise ExpositionError(f"not DCGM exporter's text format ({e})") from None
    if not gpus and text.strip() and not text.lstrip().startswith(("#", "DCGM_")):
        raise ExpositionError("not DCGM exporter's text format (no DCGM field in it)")
    return [gpus[k] for k in sorted(gpus, key=_index)]


def _wanted(line: str) -> bool:
    """A sample of one of FIELDS, or its HELP/TYPE line."""
    if line.startswith("#"):
        parts = line.split(None, 3)
        return len(parts) >= 3 and parts[1] in ("HELP", "TYPE") and parts[2] in FIELDS
    return line.startswith(FIELDS)


def _index(k: str) -> tuple[int, str]:
    return (int(k), "") if k.isdigit() else (1 << 30, k)


@dataclass(frozen=True)
class GpuUse:
    """A run's GPUs now: how many the exporters report under its pods, their mean activity,
    framebuffer used in all, power in all."""

    gpus: int
    busy: float | None  # mean fraction of SM activity, 0..1
    fb_used_mib: float
    power_w: float
    nodes: tuple[str, ...]


def per_run(
    gpus: Iterable[Gpu], run_of: Mapping[tuple[str, str], R]
) -> tuple[dict[R, GpuUse], list[Gpu]]:
    """Each run's use, joined through the pod that holds each GPU (`run_of`: (namespace, pod)
    -> run id); and the GPUs held by a pod that is no run's (or by none), for the caller to say."""
    held: dict[R, list[Gpu]] = {}
    strays = []
    for g in gpus:
        run = run_of.get((g.namespace or "", g.pod or "")) if g.pod else None
        if run is None:
            strays.append(g)
        else:
            held.setdefault(run, []).append(g)
    out = {}
    for run, mine in held.items():
        busy = [b for b in (g.busy for g in mine) if b is not None]
        out[run] = GpuUse(
            gpus=len(mine),
            busy=sum(busy) / len(busy) if busy else None,
            fb_used_mib=sum(g.values.get(FB_USED, 0.0) for g in mine),
            power_w=sum(g.values.get(POWER, 0.0) for g in mine),
            nodes=tuple(sorted({g.node for g in mine})),
        )
    return out, strays


@dataclass
class IdleWatch:
    """Runs whose GPUs stay under `threshold` activity for `window_s`: "allocated but idle".
    Fed each scrape's use; a run is idle from its first quiet sample on, once quiet for the
    whole window (a run seen busy, or not seen, starts again)."""

    threshold: float = 0.05
    window_s: float = 1800.0
    quiet_since: dict[Hashable, float] = field(default_factory=dict)

    def observe(self, use: Mapping[Any, GpuUse], now: float) -> dict[Any, float]:
        """The runs idle now, each with when its quiet began."""
        for run in list(self.quiet_since):
            if run not in use:
                del self.quiet_since[run]
        for run, u in use.items():
            if u.busy is not None and u.busy < self.threshold:
                self.quiet_since.setdefault(run, now)
            else:
                self.quiet_since.pop(run, None)
        return {r: t for r, t in self.quiet_since.items() if now - t >= self.window_s}
