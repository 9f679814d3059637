"""TauGrid's CrossGuard policies: what every platform stack must satisfy, checked by the engine on
the resources it is about to create (`tau platform preview|up --policy-pack`, or `pulumi up
--policy-pack policies/` with the normal Pulumi CLI).

Each rule is a plain function over the engine's view of a resource (type, props, URN) that
returns its violations, so it is tested without an engine; the policies wrap them. The facts
(GPU VM sizes, the spot taint) come from `taugrid.api.platform`, the same table the program uses.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from pulumi_policy import (
    EnforcementLevel,
    ReportViolation,
    ResourceValidationArgs,
    ResourceValidationPolicy,
    StackValidationArgs,
    StackValidationPolicy,
)

from taugrid.api.platform import SPOT_TAINT, VM_SIZES

AGENT_POOL = "azure-native:containerservice:AgentPool"
MANAGED_CLUSTER = "azure-native:containerservice:ManagedCluster"
HELM_RELEASE = "kubernetes:helm.sh/v3:Release"
TAU_CLUSTER = "kubernetes:tau.azure.com/v1alpha1:TauCluster"
CLUSTER_QUEUE = "kubernetes:kueue.x-k8s.io/v1beta2:ClusterQueue"
COHORT = "kubernetes:kueue.x-k8s.io/v1beta2:Cohort"
GPU = "nvidia.com/gpu"
PROD_STACKS = ("prod", "production")
EXACT_VERSION = re.compile(r"^v?\d+\.\d+\.\d+(?:[-+][0-9A-Za-z.-]+)?$")


@dataclass(frozen=True)
class Resource:
    """The engine's view of one resource, as the rules read it."""

    type: str
    props: dict[str, Any]
    urn: str = ""
    name: str = ""

    @property
    def stack(self) -> str:
        """urn:pulumi:<stack>::<project>::...: the stack the resource belongs to."""
        parts = self.urn.split(":", 2)
        return parts[2].split("::", 1)[0] if len(parts) == 3 else ""


def _gpus(vm_size: str) -> int:
    return VM_SIZES.get(vm_size, (0, 0, 0, None))[2]


def _is_gpu_size(vm_size: str) -> bool:
    # unknown sizes: Azure's GPU families are N-series (NC, ND, NV)
    return _gpus(vm_size) > 0 or bool(re.match(r"^Standard_N[CDV]", vm_size or ""))


# --- the rules -------------------------------------------------------------------------------
def gpu_pools_tainted(r: Resource) -> list[str]:
    if r.type != AGENT_POOL or not _is_gpu_size(str(r.props.get("vmSize", ""))):
        return []
    taints = [str(t) for t in r.props.get("nodeTaints") or []]
    if any(t.endswith(":NoSchedule") or t.endswith(":NoExecute") for t in taints):
        return []
    return [
        f"GPU pool {r.name} ({r.props.get('vmSize')}) has no NoSchedule taint: any pod could "
        "land on its GPUs (e.g. sku=gpu:NoSchedule)"
    ]


def versions_pinned(r: Resource) -> list[str]:
    if r.type == HELM_RELEASE:
        version = str(r.props.get("version") or "")
        if not EXACT_VERSION.match(version):
            return [
                f"Helm release {r.props.get('name') or r.name} has version {version!r}: pin "
                "an exact version (x.y.z)"
            ]
    if r.type == TAU_CLUSTER:
        components = ((r.props.get("spec") or {}).get("components")) or {}
        return [
            f"component {name} has version {v!r} in the TauCluster's version lock: pin an "
            "exact version (x.y.z)"
            for name, v in sorted(components.items())
            if not EXACT_VERSION.match(str(v))
        ]
    return []


def prod_api_server_closed(r: Resource) -> list[str]:
    if r.type != MANAGED_CLUSTER or r.stack not in PROD_STACKS:
        return []
    profile = r.props.get("apiServerAccessProfile") or {}
    if profile.get("enablePrivateCluster") or profile.get("authorizedIPRanges"):
        return []
    return [
        f"the {r.stack} cluster's API server is public to the whole internet: set "
        "cluster.apiServer.private or cluster.apiServer.authorizedIpRanges"
    ]


def spot_pools_tolerated(resources: Iterable[Resource]) -> list[str]:
    rs = list(resources)
    spot = {
        r.name
        for r in rs
        if r.type == AGENT_POOL and str(r.props.get("scaleSetPriority") or "").lower() == "spot"
    }
    out = []
    for tc in (r for r in rs if r.type == TAU_CLUSTER):
        for p in (tc.props.get("spec") or {}).get("workloadProfiles") or []:
            if p.get("flavor") not in spot:
                continue
            tolerated = any(
                t.get("key") == SPOT_TAINT.key and t.get("effect") in (None, "", "NoSchedule")
                for t in p.get("tolerations") or []
            )
            if not tolerated:
                out.append(
                    f"profile {p.get('name')} runs on spot pool {p.get('flavor')} but does "
                    f"not tolerate its taint {SPOT_TAINT.render()}: its runs never schedule"
                )
    return out


_WHOLE = re.compile(r"^[0-9]+$")
_CPU = re.compile(r"^[0-9]+(\.[0-9]+)?m?$")
_MEMORY = re.compile(r"^[0-9]+(\.[0-9]+)?([EPTGMk]i?)?$")


def quotas_are_quantities(r: Resource) -> list[str]:
    """Every quota and limit of a ClusterQueue is a quantity >= 0; GPUs and other devices are
    whole numbers (Kueue itself accepts -2 and goes Active with it). Existing clusters too."""
    if r.type != CLUSTER_QUEUE:
        return []
    out = []
    for group in (r.props.get("spec") or {}).get("resourceGroups") or []:
        for flavor in group.get("flavors") or []:
            for res in flavor.get("resources") or []:
                name = str(res.get("name"))
                pattern = (
                    _CPU
                    if name == "cpu"
                    else _MEMORY
                    if name in ("memory", "ephemeral-storage")
                    else _WHOLE
                )
                for field in ("nominalQuota", "borrowingLimit", "lendingLimit"):
                    value = res.get(field)
                    if value is not None and not pattern.match(str(value)):
                        out.append(
                            f"ClusterQueue {r.name}: {field} of {name} in flavor "
                            f"{flavor.get('name')} is {value!r}: use a quantity >= 0"
                            + (" (whole GPUs)" if pattern is _WHOLE else "")
                        )
    return out


def quotas_within_capacity(resources: Iterable[Resource]) -> list[str]:
    """Per pool (ResourceFlavor), the GPUs every ClusterQueue may use nominally <= the pool's
    nodes x GPUs per node. Stacks without AgentPools (existing clusters) are not checked."""
    rs = list(resources)
    capacity = {
        r.name: int(r.props.get("maxCount") or r.props.get("count") or 0)
        * _gpus(str(r.props.get("vmSize", "")))
        for r in rs
        if r.type == AGENT_POOL
    }
    quota: dict[str, float] = {}
    for cq in (r for r in rs if r.type == CLUSTER_QUEUE):
        for group in (cq.props.get("spec") or {}).get("resourceGroups") or []:
            for flavor in group.get("flavors") or []:
                for res in flavor.get("resources") or []:
                    value = str(res.get("nominalQuota") or 0)
                    if res.get("name") == GPU and _WHOLE.match(
                        value
                    ):  # else: quotas-are-quantities
                        quota[flavor["name"]] = quota.get(flavor["name"], 0) + float(value)
    return [
        f"ClusterQueues may use {q:g} GPUs of pool {pool}, which has {capacity[pool]} "
        "(max nodes x GPUs per node): lower the quotas or grow the pool"
        for pool, q in sorted(quota.items())
        if pool in capacity and q > capacity[pool]
    ]


_WEIGHT = re.compile(r"^[0-9]+(\.[0-9]+)?m?$")


def weights_are_positive(r: Resource) -> list[str]:
    """A ClusterQueue's or Cohort's fair-sharing weight is a quantity > 0 (Kueue takes 0: that
    queue would never get a share of what others leave unused), and a TauCluster's teams have
    positive weights and every workspace's team is one of them."""
    if r.type in (CLUSTER_QUEUE, COHORT):
        weight = ((r.props.get("spec") or {}).get("fairSharing") or {}).get("weight")
        if weight is None:
            return []
        text = str(weight)
        if not _WEIGHT.match(text) or float(text.rstrip("m") or 0) == 0:
            kind = "ClusterQueue" if r.type == CLUSTER_QUEUE else "Cohort"
            name = (r.props.get("metadata") or {}).get("name") or r.name
            return [f"{kind} {name}: fair-sharing weight {weight!r}: use a number > 0, e.g. 1"]
        return []
    if r.type != TAU_CLUSTER:
        return []
    spec = r.props.get("spec") or {}
    teams = {str(t.get("name")): t.get("weight") for t in spec.get("teams") or []}
    out = [
        f"team {name}: weight {w!r}: use a number > 0, e.g. 1"
        for name, w in teams.items()
        if isinstance(w, bool) or not isinstance(w, int | float) or w <= 0
    ]
    for ws in spec.get("workspaces") or []:
        team = ws.get("team")
        if team is not None and team not in teams:
            out.append(
                f"workspace {ws.get('name')}: team {team} is not declared (known: "
                f"{', '.join(sorted(teams)) or 'none'}): declare it under teams"
            )
    return out


# --- as CrossGuard policies ------------------------------------------------------------------
def _resource(args: Any) -> Resource:
    return Resource(args.resource_type, dict(args.props or {}), args.urn, args.name)


def _per_resource(rule: Callable[[Resource], list[str]]) -> Callable[..., None]:
    def validate(args: ResourceValidationArgs, report: ReportViolation) -> None:
        for message in rule(_resource(args)):
            report(message, None)

    return validate


def _per_stack(rule: Callable[[Iterable[Resource]], list[str]]) -> Callable[..., None]:
    def validate(args: StackValidationArgs, report: ReportViolation) -> None:
        for message in rule(_resource(r) for r in args.resources):
            report(message, None)

    return validate


MANDATORY = EnforcementLevel.MANDATORY
POLICIES: list[Any] = [
    ResourceValidationPolicy(
        name="gpu-pools-tainted",
        description="GPU node pools carry a NoSchedule taint",
        validate=_per_resource(gpu_pools_tainted),
        enforcement_level=MANDATORY,
    ),
    ResourceValidationPolicy(
        name="versions-pinned",
        description="Helm charts and the TauCluster's component versions are exact",
        validate=_per_resource(versions_pinned),
        enforcement_level=MANDATORY,
    ),
    ResourceValidationPolicy(
        name="prod-api-server-closed",
        description="A prod cluster's API server is private or limited to authorized IP ranges",
        validate=_per_resource(prod_api_server_closed),
        enforcement_level=MANDATORY,
    ),
    ResourceValidationPolicy(
        name="quotas-are-quantities",
        description="Every quota and limit of a ClusterQueue is a quantity >= 0 (whole GPUs)",
        validate=_per_resource(quotas_are_quantities),
        enforcement_level=MANDATORY,
    ),
    ResourceValidationPolicy(
        name="fair-sharing-weights",
        description="Fair-sharing weights are > 0 and every workspace's team is declared",
        validate=_per_resource(weights_are_positive),
        enforcement_level=MANDATORY,
    ),
    StackValidationPolicy(
        name="spot-pools-tolerated",
        description="Profiles on spot pools tolerate the spot taint",
        validate=_per_stack(spot_pools_tolerated),
        enforcement_level=MANDATORY,
    ),
    StackValidationPolicy(
        name="quotas-within-capacity",
        description="GPU quotas fit the pools",
        validate=_per_stack(quotas_within_capacity),
        enforcement_level=MANDATORY,
    ),
]
