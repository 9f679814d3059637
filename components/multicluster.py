"""MultiKueue wired by the platform program (#43): a manager reads each worker's stack (its
kubeconfig for MultiKueue, its queue signature), refuses a worker whose queues differ, and makes
MultiKueue's objects; a worker makes the ServiceAccount MultiKueue acts as and publishes a
kubeconfig for it. The objects themselves are `components/multikueue.py`'s (pure)."""

from __future__ import annotations

import base64
from typing import Any

import pulumi
import pulumi_kubernetes as k8s
import yaml

from taugrid.api import multicluster as MC
from taugrid.api.multicluster import WorkerRef
from taugrid.api.platform import PlatformConfig
from taugrid.api.published import queue_signature
from taugrid.components import multikueue as MK
from taugrid.components.kube import create_objects


def checked_kubeconfig(args: list[Any], worker: WorkerRef, own: dict[str, Any]) -> str:
    """A worker's kubeconfig once its stack says its queues are the manager's (else the up
    fails naming each difference, before anything is wired)."""
    signature, kubeconfig, name = args
    if kubeconfig is None or signature is None:
        raise pulumi.RunError(
            f"worker {worker.name}: stack {worker.stack} has no {MC.KUBECONFIG_OUTPUT} output: "
            "set multiCluster.role: worker in it and pulumi up that stack first"
        )
    if name is not None and name != MC.OFFLINE and name != worker.name:
        raise pulumi.RunError(
            f"worker {worker.name}: stack {worker.stack} names itself {name!r} "
            "(multiCluster.name): a resumed run sent back to it selects nodes of "
            f"{worker.name!r}; give both the same name"
        )
    if signature != MC.OFFLINE:
        diffs = MC.queue_differences(own, signature, worker.name)
        if diffs:
            raise pulumi.RunError(
                "the worker's queues are not the manager's (wire it once they match: promote "
                "the same platform declaration to it):\n  " + "\n  ".join(diffs)
            )
    return str(kubeconfig)


def _checker(worker: WorkerRef, own: dict[str, Any]) -> Any:
    def check(args: list[Any]) -> str:
        return checked_kubeconfig(args, worker, own)

    return check


class MultiKueueManager(pulumi.ComponentResource):
    def __init__(
        self,
        cfg: PlatformConfig,
        provider: pulumi.ProviderResource,
        depends_on: list[pulumi.Resource],
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__("taugrid:platform:MultiKueueManager", "multikueue", None, opts)
        own = queue_signature(cfg)
        kubeconfigs: dict[str, Any] = {}
        for w in cfg.multiCluster.workers:
            ref = pulumi.StackReference(
                f"worker-{w.name}", stack_name=w.stack, opts=pulumi.ResourceOptions(parent=self)
            )
            both = pulumi.Output.all(
                ref.get_output(MC.SIGNATURE_OUTPUT),
                ref.get_output(MC.KUBECONFIG_OUTPUT),
                ref.get_output(MC.NAME_OUTPUT),
            )
            kubeconfigs[w.name] = pulumi.Output.secret(both.apply(_checker(w, own)))
        self.objects = create_objects(
            MK.manager_objects(cfg, kubeconfigs), self, provider, depends_on
        )
        self.register_outputs({})


def server_of(kubeconfig: str) -> str:
    """The API server of a kubeconfig's current context."""
    doc = yaml.safe_load(kubeconfig) or {}
    current = doc.get("current-context")
    ctx = next((c for c in doc.get("contexts") or [] if c.get("name") == current), None)
    name = (ctx or {}).get("context", {}).get("cluster")
    cluster = next((c for c in doc.get("clusters") or [] if c.get("name") == name), None)
    if cluster is None:
        clusters = doc.get("clusters") or [{}]
        cluster = clusters[0]
    return str((cluster.get("cluster") or {}).get("server") or "")


class MultiKueueWorker(pulumi.ComponentResource):
    kubeconfig: pulumi.Output[str]

    def __init__(
        self,
        cfg: PlatformConfig,
        provider: pulumi.ProviderResource,
        server: pulumi.Input[str],
        depends_on: list[pulumi.Resource],
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__("taugrid:platform:MultiKueueWorker", "multikueue", None, opts)
        objs = create_objects(MK.worker_objects(cfg), self, provider, depends_on)
        token = k8s.core.v1.Secret.get(
            "multikueue-token",
            f"{MK.KUEUE_NAMESPACE}/{MC.WORKER_SERVICE_ACCOUNT}-token",
            opts=pulumi.ResourceOptions(parent=self, provider=provider, depends_on=objs),
        )

        def kubeconfig(args: list[Any]) -> str:
            data, srv = args
            data = data or {}
            raw = base64.b64decode(data.get("token") or "").decode() if data.get("token") else ""
            return MK.worker_kubeconfig(cfg.cluster.name, srv, data.get("ca.crt") or "", raw)

        self.kubeconfig = pulumi.Output.secret(
            pulumi.Output.all(token.data, server).apply(kubeconfig)
        )
        self.register_outputs({"kubeconfig": self.kubeconfig})
