"""Teams and prices in the platform declaration (the contract, no I/O).

A team owns one or more ClusterQueues (its quota) and is one member of the cohort with a fair-
sharing weight: when teams compete for what is unused, Kueue gives each a share in proportion to
its weight (KEP-1714), and within a team's queues the workspaces' LocalQueues are ordered by
their decayed past usage (admission fair sharing, KEP-4136). Workspaces name their team; what a
team used is what its workspaces' runs used (`tau usage --by team`).

Prices are per VM size and node-hour, declared in the stack (no network calls): a run's cost is
its share of its nodes' price (GPUs of a GPU node; cores of a CPU node) x admitted hours.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from taugrid.api import naming
from taugrid.api.defaults import new_list
from taugrid.api.quantity import go_duration_seconds


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True, defer_build=True)


def positive_weight(v: Any) -> Any:
    """A fair-sharing weight: a number > 0 (no string, no bool), said with the fix."""
    if isinstance(v, bool) or not isinstance(v, int | float):
        raise ValueError(
            f"must be a number > 0 (a share weight, e.g. 2), not {type(v).__name__} {v!r}"
        )
    if v <= 0:
        raise ValueError(
            f"must be > 0, e.g. 1 (got {v}): a team of weight {v} would never get a share of "
            "what others leave unused; give it 1 or more, or remove the team"
        )
    if v > 1000:
        raise ValueError(f"must be at most 1000 (got {v}): weights are relative, e.g. 2 and 1")
    return v


class Team(_Model):
    name: str
    weight: float = Field(
        1,
        description="Its fair-sharing weight in the cohort: teams that all want more than is "
        "free get shares in proportion to their weights (e.g. 2 and 1)",
    )
    queues: list[str] = Field(
        default_factory=new_list,
        description="The ClusterQueues the team owns (its quota); default: the one named like "
        "the team",
    )
    description: str = ""

    _n = field_validator("name")(naming.dns_label)
    _w = field_validator("weight", mode="before")(positive_weight)

    def owned(self) -> list[str]:
        return list(self.queues) or [self.name]


class FairSharingSpec(_Model):
    """How Kueue shares between teams (on whenever teams are declared)."""

    usageHalfLife: str = Field(
        "168h",
        description="Admission fair sharing: past usage of a workspace's LocalQueue halves over "
        "this time (Kueue's usageHalfLifeTime)",
    )
    usageSamplingInterval: str = Field("5m", description="How often Kueue samples that usage")
    preemption: list[str] = Field(
        default_factory=lambda: ["LessThanOrEqualToFinalShare", "LessThanInitialShare"],
        description="Kueue's fair-sharing preemption strategies, in order: a team below its "
        "share takes back from one above it",
    )

    @field_validator("usageHalfLife", "usageSamplingInterval")
    @classmethod
    def _duration(cls, v: str) -> str:
        go_duration_seconds(v)
        return v

    @field_validator("preemption")
    @classmethod
    def _strategies(cls, v: list[str]) -> list[str]:
        allowed = (
            ["LessThanOrEqualToFinalShare"],
            ["LessThanInitialShare"],
            ["LessThanOrEqualToFinalShare", "LessThanInitialShare"],
        )
        if v not in allowed:
            raise ValueError(
                "Kueue accepts only [LessThanOrEqualToFinalShare], [LessThanInitialShare] or "
                "both in that order"
            )
        return v


class Prices(_Model):
    currency: str = Field("USD", min_length=1, max_length=8)
    perNodeHour: dict[str, float] = Field(
        description="VM size -> price of one node for one hour (list or negotiated); every "
        "pool's VM size needs one"
    )

    @field_validator("perNodeHour")
    @classmethod
    def _non_negative(cls, v: dict[str, float]) -> dict[str, float]:
        bad = [k for k, p in v.items() if p < 0]
        if bad:
            raise ValueError(f"a price is negative for {', '.join(sorted(bad))}: use >= 0")
        return v


class PoolPrice(_Model):
    """What one pool's node-hour costs, and what a node holds (to price a GPU or a core)."""

    vmSize: str
    perNodeHour: float = Field(ge=0)
    gpusPerNode: int = Field(0, ge=0)
    cpusPerNode: int = Field(1, ge=1)


class PriceTable(_Model):
    """Prices as the cluster is told (`TauCluster.spec.prices`): per pool (ResourceFlavor)."""

    currency: str = "USD"
    pools: dict[str, PoolPrice] = Field(default_factory=dict)


class TeamRef(_Model):
    """A team as the cluster is told (`TauCluster.spec.teams`): what `tau usage` and `tau quota
    status` read to group workspaces and queues."""

    name: str
    weight: float = 1
    queues: list[str] = Field(default_factory=new_list)
    workspaces: list[str] = Field(default_factory=new_list)
