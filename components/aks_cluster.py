"""AksCluster: a resource group and an AKS cluster with its system pool; exports a kubeconfig."""

from __future__ import annotations

import base64

import pulumi
import pulumi_azure_native as azure

from taugrid.api.platform import AksClusterSpec


class AksCluster(pulumi.ComponentResource):
    kubeconfig: pulumi.Output[str]

    def __init__(
        self,
        name: str,
        spec: AksClusterSpec,
        provider: pulumi.ProviderResource,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__("taugrid:platform:AksCluster", name, None, opts)
        child = pulumi.ResourceOptions(parent=self, provider=provider)
        self.resource_group = azure.resources.ResourceGroup(
            f"{name}-rg",
            resource_group_name=spec.resourceGroup or f"{spec.name}-rg",
            location=spec.location,
            tags=spec.tags,
            opts=child,
        )
        self.cluster = _managed_cluster(name, spec, self.resource_group, child)
        creds = azure.containerservice.list_managed_cluster_user_credentials_output(
            resource_group_name=self.resource_group.name,
            resource_name=self.cluster.name,
            opts=pulumi.InvokeOptions(provider=provider, parent=self),
        )
        self.kubeconfig = pulumi.Output.secret(
            creds.kubeconfigs[0].value.apply(lambda v: base64.b64decode(v).decode())
        )
        self.register_outputs(
            {
                "clusterName": self.cluster.name,
                "resourceGroup": self.resource_group.name,
                "kubeconfig": self.kubeconfig,
            }
        )


def _managed_cluster(
    name: str,
    spec: AksClusterSpec,
    rg: azure.resources.ResourceGroup,
    child: pulumi.ResourceOptions,
) -> azure.containerservice.ManagedCluster:
    """The AKS cluster: its system pool (tainted for critical add-ons only, autoscaled), a
    managed identity, OIDC issuer, and the API server's access as the spec declares."""
    sp = spec.systemPool
    return azure.containerservice.ManagedCluster(
        name,
        resource_name_=spec.name,
        resource_group_name=rg.name,
        location=spec.location,
        dns_prefix=spec.name,
        kubernetes_version=spec.kubernetesVersion,
        identity=azure.containerservice.ManagedClusterIdentityArgs(
            type=azure.containerservice.ResourceIdentityType.SYSTEM_ASSIGNED
        ),
        agent_pool_profiles=[
            azure.containerservice.ManagedClusterAgentPoolProfileArgs(
                name="system",
                mode=azure.containerservice.AgentPoolMode.SYSTEM,
                vm_size=sp.vmSize,
                count=sp.minCount,
                min_count=sp.minCount,
                max_count=sp.maxCount,
                enable_auto_scaling=True,
                os_type=azure.containerservice.OSType.LINUX,
                type=azure.containerservice.AgentPoolType.VIRTUAL_MACHINE_SCALE_SETS,
                node_taints=["CriticalAddonsOnly=true:NoSchedule"],
            )
        ],
        oidc_issuer_profile=azure.containerservice.ManagedClusterOIDCIssuerProfileArgs(
            enabled=True
        ),
        api_server_access_profile=azure.containerservice.ManagedClusterAPIServerAccessProfileArgs(
            enable_private_cluster=spec.apiServer.private,
            authorized_ip_ranges=spec.apiServer.authorizedIpRanges or None,
        ),
        tags=spec.tags,
        opts=child,
    )
