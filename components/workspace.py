"""Workspace: Namespace, LocalQueues, researcher Role/RoleBinding, ServiceAccount, /data PVC, TauWorkspace."""

from __future__ import annotations

import pulumi

from taugrid.api.platform import PlatformConfig, WorkspaceSpec
from taugrid.components.kube import create_objects
from taugrid.components.manifests import workspace_objects


class Workspace(pulumi.ComponentResource):
    def __init__(self, name: str, cfg: PlatformConfig, ws: WorkspaceSpec, provider: pulumi.ProviderResource,
                 depends_on: list[pulumi.Resource] | None = None, opts: pulumi.ResourceOptions | None = None) -> None:  # fmt: skip
        super().__init__("taugrid:platform:Workspace", name, None, opts)
        objs = workspace_objects(cfg, ws)
        # The namespace first; everything else in it after.
        (self.namespace,) = create_objects(objs[:1], self, provider, depends_on)
        self.objects = create_objects(
            objs[1:], self, provider, [*(depends_on or []), self.namespace]
        )
        self.register_outputs(
            {"namespace": ws.ns, "pvc": f"{ws.name}-data", "queues": list(ws.queues)}
        )
