"""Workspace: Namespace, LocalQueues, researcher Role/RoleBinding, ServiceAccount, /data PVC, TauWorkspace."""

from __future__ import annotations

import pulumi

from taugrid.api import naming
from taugrid.api.platform import PlatformConfig, WorkspaceSpec
from taugrid.components.kube import config_group
from taugrid.components.manifests import workspace_objects


class Workspace(pulumi.ComponentResource):
    def __init__(self, name: str, cfg: PlatformConfig, ws: WorkspaceSpec, provider: pulumi.ProviderResource,
                 depends_on: list[pulumi.Resource] | None = None, opts: pulumi.ResourceOptions | None = None) -> None:  # fmt: skip
        super().__init__("taugrid:platform:Workspace", name, None, opts)
        # One group: the provider creates the namespace before the objects in it.
        self.objects = config_group(
            f"workspace-{ws.name}", workspace_objects(cfg, ws), self, provider, depends_on
        )
        self.register_outputs(
            {"namespace": ws.ns, "pvc": naming.workspace_pvc(ws.name), "queues": list(ws.queues)}
        )
