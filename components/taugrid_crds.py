"""TauGridCrds: TauCluster, TauWorkspace, TauQuotaRequest, TauRun (generated from the api/
models)."""

from __future__ import annotations

import pulumi

from taugrid.components.kube import config_group
from taugrid.components.manifests import tau_crds


class TauGridCrds(pulumi.ComponentResource):
    def __init__(
        self,
        name: str,
        provider: pulumi.ProviderResource,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__("taugrid:platform:TauGridCrds", name, None, opts)
        crds = tau_crds()
        self.objects = config_group("taugrid-crds", crds, self, provider)
        self.register_outputs({"crds": [c["metadata"]["name"] for c in crds]})
