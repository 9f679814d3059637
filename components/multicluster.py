"""MultiKueue wired by the platform program (#43): a manager reads each worker's stack (its
kubeconfig for MultiKueue, its queue signature), refuses a worker whose queues differ, and makes
MultiKueue's objects; a worker makes the ServiceAccount MultiKueue acts as and publishes a
kubeconfig for it. The objects themselves are `components/multikueue.py`'s (pure)."""

from __future__ import annotations

import base64
import os
from collections.abc import Mapping
from pathlib import Path
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
        registries: dict[str, Any] = {}
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
            registries[w.name] = ref.get_output(MC.REGISTRIES_OUTPUT)
        # each worker's registry per workspace (a stack made before it exported them: none)
        self.registries: pulumi.Output[dict[str, dict[str, str]]] = pulumi.Output.all(
            **registries
        ).apply(lambda found: {k: dict(v or {}) for k, v in found.items()})
        self.objects = create_objects(
            MK.manager_objects(cfg, kubeconfigs), self, provider, depends_on
        )
        self.register_outputs({})


def server_of(kubeconfig: str, context: str | None = None) -> str:
    """The API server of a kubeconfig's context (its current one when none is named); "" when
    it has no such context."""
    doc = yaml.safe_load(kubeconfig) or {}
    wanted = context or doc.get("current-context")
    ctx = next((c for c in doc.get("contexts") or [] if c.get("name") == wanted), None)
    name = (ctx or {}).get("context", {}).get("cluster")
    cluster = next((c for c in doc.get("clusters") or [] if c.get("name") == name), None)
    if cluster is None:
        if context:  # no such context (or its cluster): never another cluster's server
            return ""
        cluster = (doc.get("clusters") or [{}])[0]
    return str((cluster.get("cluster") or {}).get("server") or "")


def context_server(context: str | None, environ: Mapping[str, str] | None = None) -> str:
    """The API server of a context (None: the current one) in the kubeconfig files the
    Kubernetes provider reads (KUBECONFIG's files in order, else ~/.kube/config): the first file
    that names it wins, as kubectl merges them. "" when none does."""
    env = os.environ if environ is None else environ
    paths = [p for p in (env.get("KUBECONFIG") or "").split(os.pathsep) if p] or [
        str(Path.home() / ".kube" / "config")
    ]
    for path in paths:
        try:
            server = server_of(Path(path).read_text(), context)
        except (OSError, yaml.YAMLError):
            continue
        if server:
            return server
    return ""


TOKEN_AT_UP = "(read at up: the token its cluster puts in the ServiceAccount's Secret)"


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
        # the token Secret after its ServiceAccount: the cluster's token controller deletes a
        # token Secret whose account does not exist yet (seen with the real engine: up waited
        # for ever on a Secret that was gone)
        wanted = MK.worker_objects(cfg)
        account = create_objects(
            [m for m in wanted if m["kind"] != "Secret"], self, provider, depends_on
        )
        (secret,) = create_objects(
            [m for m in wanted if m["kind"] == "Secret"], self, provider, [*depends_on, *account]
        )
        objs = [*account, secret]
        if pulumi.runtime.is_dry_run():
            # a preview reads nothing live: on a new cluster the token Secret is not there yet
            self.kubeconfig = pulumi.Output.secret(TOKEN_AT_UP)
            self.register_outputs({"kubeconfig": self.kubeconfig})
            return
        # read once the Secret was created and awaited (pulumi.com/waitFor: its token): its id
        # is known only then (depends_on alone does not order a read after a create)
        token = k8s.core.v1.Secret.get(
            "multikueue-token",
            secret.id,
            opts=pulumi.ResourceOptions(parent=self, provider=provider, depends_on=objs),
        )

        def kubeconfig(args: list[Any]) -> str:
            data, srv = args
            data = data or {}
            if not data.get("token"):
                raise pulumi.RunError(
                    f"worker {cfg.multiCluster.name}: the token Secret "
                    f"{MK.KUEUE_NAMESPACE}/{MC.WORKER_SERVICE_ACCOUNT}-token has no token: is the "
                    "cluster's token controller (kube-controller-manager) running? pulumi up again"
                )
            raw = base64.b64decode(data["token"]).decode()
            return MK.worker_kubeconfig(cfg.cluster.name, srv, data.get("ca.crt") or "", raw)

        self.kubeconfig = pulumi.Output.secret(
            pulumi.Output.all(token.data, server).apply(kubeconfig)
        )
        self.register_outputs({"kubeconfig": self.kubeconfig})
