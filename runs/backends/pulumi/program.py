"""A run's objects as a Pulumi program: the TauRun first, then the code ConfigMap and the
workload, owned by it (so the cluster's garbage collector still cleans up after a cancel)."""

from __future__ import annotations

from typing import Any

from taugrid.api.naming import owner_reference


def run_program(taurun: dict[str, Any], objects: list[dict[str, Any]], context: str | None) -> None:
    import pulumi
    import pulumi_kubernetes as k8s

    from taugrid.components.kube import KubeObject, object_name

    provider = k8s.Provider("k8s", context=context, enable_server_side_apply=True)

    def resource(obj: dict[str, Any], depends: list[pulumi.Resource]) -> Any:
        meta = dict(obj["metadata"])
        # Kueue keeps the workload suspended until it admits it: never wait for it here
        meta["annotations"] = {**meta.get("annotations", {}), "pulumi.com/skipAwait": "true"}
        obj = {**obj, "metadata": meta}
        return KubeObject(
            object_name(obj), obj, pulumi.ResourceOptions(provider=provider, depends_on=depends)
        )

    owner = resource(taurun, [])
    uid = owner.metadata.apply(lambda m: m["uid"])
    for obj in objects:
        ref = owner_reference("TauRun", taurun["metadata"]["name"], uid, taurun["apiVersion"])
        obj = {**obj, "metadata": {**obj["metadata"], "ownerReferences": [ref]}}
        resource(obj, [owner])
    pulumi.export("runId", taurun["metadata"]["name"])
