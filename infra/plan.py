"""Offline inventory: evaluate the program under Pulumi's mock engine, no credentials, no CLI.

`tau platform plan --stack NAME` and `tau platform diff A B` use this, and so do the tests.
Cloud-assigned values (ids, kubeconfig contents, IPs) are unknown offline and shown as such.
"""

from __future__ import annotations

import base64
import json
import threading
from dataclasses import dataclass, field
from typing import Any

CONFIG_GROUP = "kubernetes:yaml/v2:ConfigGroup"
FAKE_KUBECONFIG = (
    "apiVersion: v1\nkind: Config\n# offline plan: the real kubeconfig is assigned by Azure\n"
)


@dataclass
class Resource:
    type: str
    name: str
    inputs: dict[str, Any]
    provider: str = ""
    parent: str = ""  # URN
    depends_on: list[str] = field(default_factory=list)  # URNs
    urn: str = ""

    @property
    def parent_name(self) -> str:
        return self.parent.rsplit("::", 1)[-1] if self.parent else ""

    def depends_on_names(self) -> set[str]:
        return {u.rsplit("::", 1)[-1] for u in self.depends_on}

    def key(self) -> str:
        return f"{self.type}::{self.name}"


@dataclass
class Inventory:
    stack: str
    resources: list[Resource] = field(default_factory=list)
    exports: dict[str, Any] = field(default_factory=dict)

    def by_key(self) -> dict[str, Resource]:
        return {r.key(): r for r in self.resources}


_lock = threading.Lock()
_current = threading.local()  # the resource being registered on this thread (mocks -> monitor)


def _whole_numbers(value: Any) -> Any:
    """Pulumi carries every number as a float; a node count of 8 is 8, not 8.0."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {k: _whole_numbers(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_whole_numbers(v) for v in value]
    return value


def _mocks(inv: Inventory) -> Any:
    import pulumi

    from taugrid.api import multicluster as MC

    class Mocks(pulumi.runtime.Mocks):
        def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str, dict[str, Any]]:
            _current.resource = Resource(
                args.typ, args.name, _whole_numbers(dict(args.inputs)), args.provider or ""
            )
            # Echo back only what the program reads (names); echoing every input costs a
            # full serialisation per resource.
            state: dict[str, Any] = {}
            if args.typ == "azure-native:containerservice:ManagedCluster":
                state["name"] = args.inputs.get("resourceName", args.name)
            if args.typ == "azure-native:resources:ResourceGroup":
                state["name"] = args.inputs.get("resourceGroupName", args.name)
            if args.typ == "pulumi:pulumi:StackReference":  # another stack: not readable here
                state["outputs"] = {
                    MC.KUBECONFIG_OUTPUT: FAKE_KUBECONFIG,
                    MC.SIGNATURE_OUTPUT: MC.OFFLINE,
                    MC.NAME_OUTPUT: MC.OFFLINE,
                }
            if (
                args.typ == "kubernetes:core/v1:Secret" and args.resource_id
            ):  # a read: the cluster's
                state["data"] = {"token": base64.b64encode(b"offline-token").decode()}
            return f"{args.name}-id", state

        def call(self, args: pulumi.runtime.MockCallArgs) -> Any:
            if args.token == "azure-native:containerservice:listManagedClusterUserCredentials":
                value = base64.b64encode(FAKE_KUBECONFIG.encode()).decode()
                return {"kubeconfigs": [{"name": "clusterUser", "value": value}]}
            return {}

    return Mocks()


def _monitor(inv: Inventory, mocks: Any) -> Any:
    """The SDK's mock monitor, also recording each resource's parent and dependencies."""
    from pulumi.runtime.mocks import MockMonitor

    from taugrid.components.kube import object_name, type_token

    class Monitor(MockMonitor):
        def RegisterResource(self, request: Any) -> Any:
            _current.resource = None
            response = super().RegisterResource(request)  # type: ignore[no-untyped-call]
            r: Resource | None = _current.resource
            if r is not None:
                r.parent = request.parent
                r.depends_on = list(request.dependencies)
                r.urn = response.urn
                found = [r]
                if r.type == CONFIG_GROUP:
                    # The provider expands a ConfigGroup into one resource per object: list them.
                    found += [
                        Resource(
                            type_token(o["apiVersion"], o["kind"]),
                            object_name(o),
                            o,
                            r.provider,
                            r.urn,
                            r.depends_on,
                        )
                        for o in r.inputs.get("objs") or []
                    ]
                with _lock:
                    inv.resources.extend(found)
            return response

    return Monitor(mocks)


def _need_event_loop() -> None:
    """Pulumi's mocks run on the thread's current event loop: a caller that ran `asyncio.run`
    before (a notebook, a service) has left none, and Pulumi would fail with "There is no
    current event loop"."""
    import asyncio
    import warnings

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            loop = asyncio.get_event_loop()
        if not loop.is_closed():
            return
    except RuntimeError:
        pass
    asyncio.set_event_loop(asyncio.new_event_loop())


OFFLINE_SERVER = "https://offline.invalid"


def _offline(cfg: Any) -> Any:
    """A worker's address is read where `up` runs (its kubeconfig context); offline, a stand-in."""
    mc = cfg.multiCluster
    if mc.role != "worker" or mc.server:
        return cfg
    return cfg.model_copy(update={"multiCluster": mc.model_copy(update={"server": OFFLINE_SERVER})})


def evaluate(stack: str, cfg: Any) -> Inventory:
    """Run the program for one validated config under mocks; return what it declares."""
    import pulumi

    from taugrid.infra.program import build

    inv = Inventory(stack=stack)
    cfg = _offline(cfg)
    _need_event_loop()
    mocks = _mocks(inv)
    pulumi.runtime.set_mocks(
        mocks, project="taugrid", stack=stack, preview=False, monitor=_monitor(inv, mocks)
    )
    captured: dict[str, Any] = {}
    original_export = pulumi.export

    def capture(name: str, value: Any) -> None:
        captured[name] = value

    @pulumi.runtime.test  # type: ignore[untyped-decorator]
    def program() -> Any:
        pulumi.export = capture
        try:
            build(cfg, stack, kubeconfig_secret=pulumi.Output.secret(FAKE_KUBECONFIG))
        finally:
            pulumi.export = original_export
        names = sorted(captured)
        return pulumi.Output.all(*[captured[n] for n in names]).apply(
            lambda values: inv.exports.update(dict(zip(names, values, strict=True)))
        )

    program()
    return inv


KEY_INPUTS: dict[str, tuple[str, ...]] = {
    "azure-native:containerservice:ManagedCluster": (
        "resourceName",
        "location",
        "kubernetesVersion",
    ),
    "azure-native:containerservice:AgentPool": (
        "vmSize",
        "minCount",
        "maxCount",
        "scaleSetPriority",
        "nodeTaints",
        "gpuProfile",
        "availabilityZones",
    ),
    "azure-native:resources:ResourceGroup": ("resourceGroupName", "location"),
    "kubernetes:helm.sh/v3:Release": ("chart", "version", "namespace"),
}


def summary(r: Resource) -> str:
    keys = KEY_INPUTS.get(r.type)
    if keys:
        parts = [
            f"{k}={_short(r.inputs[k])}"
            for k in keys
            if k in r.inputs and r.inputs[k] not in (None, [], {})
        ]
        return " ".join(parts)
    if r.type.startswith("kubernetes:") and "metadata" in r.inputs:
        meta = r.inputs.get("metadata") or {}
        ns = meta.get("namespace")
        name = f"{ns}/{meta.get('name')}" if ns else str(meta.get("name", ""))
        weight = ((r.inputs.get("spec") or {}).get("fairSharing") or {}).get("weight")
        return f"{name} weight={weight}" if weight is not None else name
    return ""


def _short(v: Any) -> str:
    if isinstance(v, (dict, list)):
        return json.dumps(v, separators=(",", ":"), sort_keys=True)
    return str(v)


Path = tuple[str, ...]


def flatten(value: Any, prefix: Path = ()) -> dict[Path, Any]:
    """Leaves by path; list items by their `name` when they have one, else by position."""
    if isinstance(value, dict) and value:
        out: dict[Path, Any] = {}
        for k, v in value.items():
            out.update(flatten(v, (*prefix, str(k))))
        return out
    if isinstance(value, list) and value and all(isinstance(x, dict) for x in value):
        named = all("name" in x for x in value)
        out = {}
        for i, x in enumerate(value):
            out.update(flatten(x, (*prefix, f"[{x['name'] if named else i}]")))
        return out
    return {prefix: value}


def _field(path: Path) -> str:
    return "".join(p if p.startswith("[") else (f".{p}" if i else p) for i, p in enumerate(path))


def diff(a: Inventory, b: Inventory) -> dict[str, Any]:
    """What changes when stack A's declaration is promoted onto stack B (B -> A)."""
    ra, rb = a.by_key(), b.by_key()
    changed = []
    for key in sorted(set(ra) & set(rb)):
        fa, fb = flatten(ra[key].inputs), flatten(rb[key].inputs)
        fields = [
            {"field": _field(f), "path": list(f), b.stack: fb.get(f), a.stack: fa.get(f)}
            for f in sorted(set(fa) | set(fb))
            if fa.get(f) != fb.get(f)
        ]
        if fields:
            changed.append({"resource": key, "changes": fields})
    return {
        "from": a.stack,
        "to": b.stack,
        "only_in_" + a.stack: sorted(set(ra) - set(rb)),
        "only_in_" + b.stack: sorted(set(rb) - set(ra)),
        "changed": changed,
    }


def inventory_doc(inv: Inventory) -> dict[str, Any]:
    """`tau platform plan -o json`."""
    return {
        "stack": inv.stack,
        "offline": True,
        "resources": [{"type": r.type, "name": r.name, "inputs": r.inputs} for r in inv.resources],
        "exports": {k: v for k, v in inv.exports.items() if k != "kubeconfig"},
    }


def format_inventory(inv: Inventory) -> list[str]:
    """`tau platform plan`: one line per resource, with its key inputs."""
    lines = [
        f"stack {inv.stack}: {len(inv.resources)} resources "
        "(offline plan: cloud-assigned values such as ids and the kubeconfig are unknown)"
    ]
    width = max((len(r.type) for r in inv.resources), default=0)
    nwidth = max((len(r.name) for r in inv.resources), default=0)
    for r in inv.resources:
        lines.append(f"{r.type:<{width}}  {r.name:<{nwidth}}  {summary(r)}".rstrip())
    lines.append(f"profiles: {', '.join(inv.exports.get('profiles', []))}")
    teams = inv.exports.get("teams") or {}
    if teams:
        lines.append("teams: " + ", ".join(f"{t} (weight {w:g})" for t, w in teams.items()))
    return lines


def format_diff(d: dict[str, Any]) -> list[str]:
    """`tau platform diff`: per resource, the changed fields as a YAML-style tree
    (`key: old -> new`), then what promotion adds (+) and removes (-), grouped by type."""
    import yaml

    source, target = d["from"], d["to"]
    what = "the whole declaration" if d.get("scope") == "declaration" else "its version lock"
    lines = [f"promotion {source} -> {target}: {what} (offline; cloud-assigned values unknown)"]
    lines += [f"warning: {w}" for w in d.get("warnings", [])]
    for c in d.get("lock") or []:
        lines.append(f"  {c['path']}: {c['old']} -> {c['new']}")
    head = len(lines)

    def scalar(v: Any) -> str:
        if v is None:
            return "(absent)"
        text = yaml.safe_dump(v, default_flow_style=True, width=10**6).strip()
        return text.removesuffix("\n...").removesuffix(" ...")

    for c in d["changed"]:
        rtype, _, name = c["resource"].partition("::")
        lines.append(f"~ {rtype.split(':', 1)[-1]} {name}")
        shown: list[str] = []
        for f in c["changes"]:
            parts = f["path"]
            common = 0
            while common < min(len(parts) - 1, len(shown)) and shown[common] == parts[common]:
                common += 1
            for depth in range(common, len(parts) - 1):
                lines.append("    " + "  " * depth + f"{parts[depth]}:")
            shown = parts[:-1]
            pad = "    " + "  " * (len(parts) - 1)
            lines.append(f"{pad}{parts[-1]}: {scalar(f[target])} -> {scalar(f[source])}")
    for sign, key in (("+", f"only_in_{source}"), ("-", f"only_in_{target}")):
        by_type: dict[str, list[str]] = {}
        for k in d[key]:
            rtype, _, name = k.partition("::")
            by_type.setdefault(rtype.split(":", 1)[-1], []).append(name)
        for rtype, names in by_type.items():
            lines.append(f"{sign} {rtype}: {', '.join(names)}")
    if len(lines) == head:
        lines.append("  no differences")
    return lines
