"""Workspace: Namespace, LocalQueues, researcher Role/RoleBinding, ServiceAccount, /data PVC,
TauWorkspace."""

from __future__ import annotations

import pulumi

from taugrid.api import naming
from taugrid.api.platform import PlatformConfig, WorkspaceSpec
from taugrid.components.kube import create_objects
from taugrid.components.manifests import workspace_objects


class Workspace(pulumi.ComponentResource):
    def __init__(
        self,
        name: str,
        cfg: PlatformConfig,
        ws: WorkspaceSpec,
        provider: pulumi.ProviderResource,
        depends_on: list[pulumi.Resource] | None = None,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__("taugrid:platform:Workspace", name, None, opts)
        objects = workspace_objects(cfg, ws)
        inside = [o for o in objects if o["metadata"].get("namespace") == ws.ns]
        others = [o for o in objects if o not in inside and o["kind"] != "Namespace"]
        (self.namespace,) = create_objects(
            [o for o in objects if o["kind"] == "Namespace"], self, provider, depends_on
        )
        after = [self.namespace, *(depends_on or [])]
        # What is in the namespace goes with it: deleting them one by one first would wait for
        # the runs' pods (a PVC in use is not deleted), which only the namespace's deletion stops.
        self.objects = [
            *create_objects(inside, self, provider, after, deleted_with=self.namespace),
            *create_objects(others, self, provider, after),
        ]
        self.register_outputs(
            {"namespace": ws.ns, "pvc": naming.workspace_pvc(ws.name), "queues": list(ws.queues)}
        )
