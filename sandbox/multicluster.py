"""`tau sandbox up --clusters N`: a MultiKueue manager and N-1 workers, each its own control
plane (etcd, API server, controllers, KWOK, Kueue, KubeRay) on its own loopback ports, with the
same stack's platform applied to each, as the platform program would with `multiCluster` roles:
the workers make MultiKueue's scoped ServiceAccount, the manager gets a kubeconfig Secret for
each (its token, the worker's CA) and the MultiKueueClusters, config and AdmissionCheck. Every
identity's kubeconfig also reaches each worker by a context of the worker's name, which is how
`tau run logs` follows a dispatched run there."""

from __future__ import annotations

import base64
import json
import time
from pathlib import Path
from typing import Any

from taugrid.api import multicluster as MC
from taugrid.api.errors import EXIT_PLATFORM, TauError
from taugrid.api.platform import PlatformConfig

MAX_CLUSTERS = 3
# what the sandbox's manager waits for a worker that stopped answering before its runs go to
# another (a cluster's stack says 15m by default: here a test waits for it)
SANDBOX_WORKER_LOST = "45s"
TOKEN_TIMEOUT_S = 60.0


def worker_names(clusters: int) -> list[str]:
    return [f"worker-{i}" for i in range(1, clusters)]


def manager_config(cfg: PlatformConfig, names: list[str]) -> PlatformConfig:
    spec = MC.MultiClusterSpec(
        role="manager",
        workers=[MC.WorkerRef(name=n, stack=f"sandbox-{n}") for n in names],
        workerLostTimeout=SANDBOX_WORKER_LOST,
    )
    return cfg.model_copy(update={"multiCluster": spec})


def worker_config(cfg: PlatformConfig, server: str, name: str) -> PlatformConfig:
    """A worker runs what the manager sends it: the same queues and workspaces; no TauGrid
    controller of its own (the manager's keeps the runs' TauRuns), so its GPU nodes register
    without the validating taint only the controller would lift."""
    components = cfg.components.model_copy(
        update={"controller": cfg.components.controller.model_copy(update={"enabled": False})}
    )
    from taugrid.api.platform import with_cluster_label

    spec = MC.MultiClusterSpec(role="worker", server=server, name=name)
    return with_cluster_label(
        cfg.model_copy(update={"multiCluster": spec, "components": components})
    )


def worker_token(kube: Any, timeout: float = TOKEN_TIMEOUT_S) -> str:
    """The token the worker's controller-manager put in MultiKueue's ServiceAccount Secret."""
    from taugrid.components.multikueue import KUEUE_NAMESPACE

    deadline = time.monotonic() + timeout
    name = f"{MC.WORKER_SERVICE_ACCOUNT}-token"
    while True:
        secret = kube.get("Secret", name, KUEUE_NAMESPACE) or {}
        token = (secret.get("data") or {}).get("token")
        if token:
            return base64.b64decode(token).decode()
        if time.monotonic() >= deadline:
            raise TauError(
                f"the worker's token Secret {KUEUE_NAMESPACE}/{name} was not filled in "
                f"{timeout:.0f} s (its controller-manager's token controller)",
                exit_code=EXIT_PLATFORM,
            )
        time.sleep(0.2)


def worker_kubeconfig(name: str, cp: Any) -> str:
    """What the manager's MultiKueue reads for a worker: its server, its CA inline, the token."""
    from taugrid.components.multikueue import worker_kubeconfig as render

    ca = base64.b64encode(cp.pki.ca_cert.read_bytes()).decode()
    return render(name, cp.url, ca, worker_token(cp.kube()))


def add_worker_contexts(manager: dict[str, str], workers: dict[str, dict[str, str]]) -> None:
    """Each identity's kubeconfig (manager's) gains a context per worker, named after it, with
    the same identity's credentials there."""
    for who, path in manager.items():
        doc = json.loads(Path(path).read_text())
        for name, kubeconfigs in workers.items():
            if who not in kubeconfigs:
                continue
            theirs = json.loads(Path(kubeconfigs[who]).read_text())
            user = f"{who}@{name}"
            doc["clusters"].append({"name": name, "cluster": theirs["clusters"][0]["cluster"]})
            doc["users"].append({"name": user, "user": theirs["users"][0]["user"]})
            doc["contexts"].append({"name": name, "context": {"cluster": name, "user": user}})
        Path(path).write_text(json.dumps(doc))
