"""Kubernetes objects from plain dicts, as Pulumi resources (server-side applied by the
provider)."""

from __future__ import annotations

from typing import Any

import pulumi
import pulumi_kubernetes as k8s


def type_token(api_version: str, kind: str) -> str:
    """`v1` -> `core/v1`; groups keep their name: the kubernetes provider's resource tokens."""
    api = api_version if "/" in api_version else f"core/{api_version}"
    return f"kubernetes:{api}:{kind}"


class KubeObject(pulumi.CustomResource):
    """Any Kubernetes object, built-in or custom, from its manifest dict."""

    def __init__(self, name: str, manifest: dict[str, Any], opts: pulumi.ResourceOptions) -> None:
        props = dict(manifest)
        props.setdefault("metadata", {})
        opts = pulumi.ResourceOptions.merge(
            opts,
            pulumi.ResourceOptions(version=k8s._utilities.get_version()),
        )
        super().__init__(type_token(manifest["apiVersion"], manifest["kind"]), name, props, opts)


def object_name(manifest: dict[str, Any]) -> str:
    meta = manifest["metadata"]
    parts = [manifest["kind"].lower(), meta.get("namespace", ""), meta["name"]]
    return "-".join(p for p in parts if p)


def create_objects(
    manifests: list[dict[str, Any]],
    parent: pulumi.Resource,
    provider: pulumi.ProviderResource,
    depends_on: list[pulumi.Resource] | None = None,
    deleted_with: pulumi.Resource | None = None,
) -> list[KubeObject]:
    """One resource per object. `deleted_with` (their namespace): not deleted one by one when it
    goes too (its deletion takes them, in the order Kubernetes needs)."""
    opts = pulumi.ResourceOptions(
        parent=parent, provider=provider, depends_on=depends_on or [], deleted_with=deleted_with
    )
    return [KubeObject(object_name(m), m, opts) for m in manifests]


def config_group(
    name: str,
    manifests: pulumi.Input[list[dict[str, Any]]],
    parent: pulumi.Resource,
    provider: pulumi.ProviderResource,
    depends_on: list[pulumi.Resource] | None = None,
) -> k8s.yaml.v2.ConfigGroup:
    """A set of objects applied together. The provider orders them (CRDs and namespaces before
    what uses them) and each object is still its own resource in the stack's state."""
    return k8s.yaml.v2.ConfigGroup(
        name,
        objs=manifests,
        opts=pulumi.ResourceOptions(
            parent=parent, providers=[provider], depends_on=depends_on or []
        ),
    )


def helm_release(
    name: str,
    chart: Any,
    version: str,
    values: dict[str, Any],
    parent: pulumi.Resource,
    provider: pulumi.ProviderResource,
    depends_on: list[pulumi.Resource] | None = None,
) -> k8s.helm.v3.Release:
    """A Helm release that waits for its workloads (so dependents see ready webhooks and CRDs)."""
    repo = k8s.helm.v3.RepositoryOptsArgs(repo=chart.repo) if chart.repo else None
    return k8s.helm.v3.Release(
        name,
        name=name,
        chart=chart.chart,
        version=version,
        repository_opts=repo,
        namespace=chart.namespace,
        create_namespace=True,
        values=values,
        skip_await=False,
        timeout=900,
        atomic=True,
        opts=pulumi.ResourceOptions(parent=parent, provider=provider, depends_on=depends_on or []),
    )
