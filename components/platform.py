"""Platform: every component of one cluster stack, in dependency order, with explicit providers."""

from __future__ import annotations

import pulumi
import pulumi_azure_native as azure
import pulumi_kubernetes as k8s

from taugrid.api.platform import (
    SYSTEM_NAMESPACE,
    AksClusterSpec,
    ExistingClusterSpec,
    PlatformConfig,
    gpu_driver,
)
from taugrid.components.aks_cluster import AksCluster
from taugrid.components.controller import TauController
from taugrid.components.gpu_node_pool import CpuNodePool, GpuNodePool
from taugrid.components.helm import HELM, HelmComponent, Kueue
from taugrid.components.kube import create_objects
from taugrid.components.manifests import namespace
from taugrid.components.multicluster import (
    MultiKueueManager,
    MultiKueueWorker,
    context_server,
    server_of,
)
from taugrid.components.tau_cluster_profile import TauClusterProfile
from taugrid.components.taugrid_crds import TauGridCrds
from taugrid.components.workspace import Workspace


class Platform(pulumi.ComponentResource):
    kubeconfig: pulumi.Output[str] | None

    def __init__(
        self,
        name: str,
        cfg: PlatformConfig,
        stack: str,
        kubeconfig_secret: pulumi.Input[str] | None = None,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__("taugrid:platform:Platform", name, None, opts)
        me = pulumi.ResourceOptions(parent=self)
        self.kubeconfig = None
        if isinstance(cfg.cluster, AksClusterSpec):
            provider, pools = self._aks(cfg, cfg.cluster, me)
        else:
            provider, pools = self._existing(cfg.cluster, kubeconfig_secret, me), []
        self.provider = provider

        (self.system_ns,) = create_objects([namespace(SYSTEM_NAMESPACE)], self, provider)
        self.crds = TauGridCrds("taugrid-crds", provider, opts=me)
        self._node_components(cfg, provider, pools, me)
        c = cfg.components
        queue_deps: list[pulumi.Resource] = []
        if c.kueue.enabled:
            self.kueue = Kueue(cfg, provider, depends_on=pools, opts=me)
            queue_deps.append(self.kueue)
        self._multicluster(cfg, provider, queue_deps, me)
        self.profile = TauClusterProfile(
            "tau-cluster",
            cfg,
            stack,
            provider,
            depends_on=[self.crds, *queue_deps],
            worker_registries=self.worker_registries,
            opts=me,
        )
        ctl = c.controller
        if ctl.enabled and ctl.install == "helm":  # "helm": this stack deploys it
            self.controller = TauController(
                "taugrid-controller",
                cfg,
                provider,
                depends_on=[self.crds, self.system_ns, *queue_deps],
                opts=me,
            )
        self.workspaces = [
            Workspace(
                ws.name,
                cfg,
                ws,
                provider,
                depends_on=[self.crds, self.system_ns, *queue_deps],
                opts=me,
            )
            for ws in cfg.workspaces
        ]
        self.register_outputs(
            {"profiles": self.profile.profiles, "workspaces": [w.ns for w in cfg.workspaces]}
        )

    def _multicluster(
        self,
        cfg: PlatformConfig,
        provider: k8s.Provider,
        queue_deps: list[pulumi.Resource],
        me: pulumi.ResourceOptions,
    ) -> None:
        """MultiKueue: a manager wires its workers (their stacks read); a worker publishes the
        kubeconfig the manager uses."""
        self.multikueue_kubeconfig: pulumi.Output[str] | None = None
        self.worker_registries: pulumi.Output[dict[str, dict[str, str]]] | None = None
        role = cfg.multiCluster.role
        if role == "manager":
            self.worker_registries = MultiKueueManager(
                cfg, provider, queue_deps, opts=me
            ).registries
        elif role == "worker":
            server: pulumi.Input[str]
            if cfg.multiCluster.server:
                server = cfg.multiCluster.server
            elif self.kubeconfig is not None:
                server = self.kubeconfig.apply(server_of)
            else:
                server = self._context_server(cfg)
            worker = MultiKueueWorker(cfg, provider, server, queue_deps, opts=me)
            self.multikueue_kubeconfig = worker.kubeconfig

    @staticmethod
    def _context_server(cfg: PlatformConfig) -> str:
        """A worker reached by a kubeconfig context: the manager reaches it where that context
        does (the address the provider itself uses), unless multiCluster.server says otherwise."""
        context = getattr(cfg.cluster, "context", None)
        server = context_server(context)
        if not server:
            which = f"context {context!r}" if context else "current context"
            raise ValueError(
                f"worker {cfg.multiCluster.name}: no kubeconfig {which} to read its "
                "API server from (KUBECONFIG, else ~/.kube/config); set multiCluster.server to "
                "the address the manager reaches it at"
            )
        return server

    def _node_components(
        self,
        cfg: PlatformConfig,
        provider: k8s.Provider,
        pools: list[pulumi.Resource],
        me: pulumi.ResourceOptions,
    ) -> None:
        """The charts that run on the nodes: the GPU Operator, DCGM's exporter after it (GPU
        pools only), Node Problem Detector and the KubeRay operator."""
        c = cfg.components
        gpu_stack: list[pulumi.Resource] = []
        if c.gpuOperator.enabled and cfg.gpuPools:
            self.gpu_operator = HelmComponent(
                HELM["gpuOperator"], cfg, provider, depends_on=pools, opts=me
            )
            gpu_stack.append(self.gpu_operator)
        if c.dcgmExporter.enabled and cfg.gpuPools:
            self.dcgm = HelmComponent(
                HELM["dcgmExporter"], cfg, provider, depends_on=[*pools, *gpu_stack], opts=me
            )
        if c.nodeProblemDetector.enabled:
            self.npd = HelmComponent(
                HELM["nodeProblemDetector"], cfg, provider, depends_on=pools, opts=me
            )
        if c.kuberay.enabled:
            self.kuberay = HelmComponent(HELM["kuberay"], cfg, provider, depends_on=pools, opts=me)

    def _aks(
        self, cfg: PlatformConfig, cluster: AksClusterSpec, me: pulumi.ResourceOptions
    ) -> tuple[k8s.Provider, list[pulumi.Resource]]:
        """The AKS cluster and its GPU and CPU pools; a provider for what runs on it."""
        azure_provider = azure.Provider("azure", location=cluster.location, opts=me)
        self.aks = AksCluster("cluster", cluster, azure_provider, opts=me)
        self.kubeconfig = self.aks.kubeconfig
        rg = self.aks.resource_group.name
        pools: list[pulumi.Resource] = [
            GpuNodePool(
                gp.name, gp, gpu_driver(cfg, gp), self.aks.cluster, rg, azure_provider, opts=me
            )
            for gp in cfg.gpuPools
        ]
        pools += [
            CpuNodePool(cp.name, cp, self.aks.cluster, rg, azure_provider, opts=me)
            for cp in cfg.cpuPools
        ]
        provider = k8s.Provider(
            "k8s", kubeconfig=self.kubeconfig, enable_server_side_apply=True, opts=me
        )
        return provider, pools

    def _existing(
        self,
        cluster: ExistingClusterSpec,
        kubeconfig_secret: pulumi.Input[str] | None,
        me: pulumi.ResourceOptions,
    ) -> k8s.Provider:
        """A provider for a cluster made elsewhere: by a kubeconfig secret, else a context."""
        if cluster.kubeconfigSecret:
            if kubeconfig_secret is not None:
                self.kubeconfig = pulumi.Output.secret(kubeconfig_secret)
            return k8s.Provider(
                "k8s", kubeconfig=kubeconfig_secret, enable_server_side_apply=True, opts=me
            )
        return k8s.Provider("k8s", context=cluster.context, enable_server_side_apply=True, opts=me)
