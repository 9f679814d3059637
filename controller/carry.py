"""A MultiKueue manager's runs, made whole on their worker: the ConfigMaps their pods mount.

MultiKueue (Kueue v0.19) copies a run's Job or RayJob to the worker that admits it, and nothing
else. A TauGrid run's pods mount its code and TauGrid's helpers from ConfigMaps made beside the
Job at submission, on the manager; on the worker they do not exist and the pods would wait in
ContainerCreating for ever. Once the manager's Workload names its worker (`status.clusterName`),
the controller makes each ConfigMap the run's pod templates name (`decide.companions`) on that
worker, through the same kubeconfig Secret MultiKueue uses there (the worker's ServiceAccount may
create ConfigMaps for this). The run's own are owned by the run's Job there, so they go with it;
shared ones (named by their content) stay, as they do here. A run moved to another worker (its
first was lost) is carried again. The kubelet retries a mount that waited, so a pod that started
before its ConfigMaps arrived starts once they do.
"""

from __future__ import annotations

import base64
import logging
import threading
from typing import Any

import yaml

from taugrid.api import multicluster as MC
from taugrid.api.errors import TauError
from taugrid.controller import decide as D
from taugrid.kube.client import Kube

log = logging.getLogger("taugrid.controller.carry")


class NotYet(Exception):
    """MultiKueue has not made the run's Job on the worker yet (it names the worker first): the
    run's own ConfigMaps wait for an owner there, or they would outlive the run."""


class Carrier:
    """Clients of the workers (one each, built from their MultiKueueCluster's Secret) and what
    has been carried where."""

    def __init__(self, kube: Any, connect: Any = None) -> None:
        self.kube = kube  # the manager's client
        self._connect = connect or (lambda doc: Kube(doc=doc))
        self._workers: dict[str, Any] = {}
        self._done: dict[tuple[str, str], str] = {}  # (namespace, run) -> the worker it reached
        self._lock = threading.Lock()

    def needed(self, key: tuple[str, str], worker: str | None) -> bool:
        return worker is not None and self._done.get(key) != worker

    def forget(self, key: tuple[str, str]) -> None:
        self._done.pop(key, None)

    def worker(self, name: str) -> Any:
        """The worker's client, from the kubeconfig Secret its MultiKueueCluster names."""
        with self._lock:
            if name in self._workers:
                return self._workers[name]
        mkc = self.kube.get("MultiKueueCluster", name)
        if mkc is None:
            raise TauError(f"no MultiKueueCluster {name!r} on this manager")
        source = ((mkc.get("spec") or {}).get("clusterSource") or {}).get("kubeConfig") or {}
        if source.get("locationType", "Secret") != "Secret":
            raise TauError(f"MultiKueueCluster {name}: its kubeconfig is not in a Secret")
        secret = self.kube.get("Secret", source["location"], MC.KUEUE_NAMESPACE)
        data = (secret or {}).get("data") or {}
        if MC.KUBECONFIG_KEY not in data:
            raise TauError(
                f"MultiKueueCluster {name}: Secret {MC.KUEUE_NAMESPACE}/{source['location']} "
                f"has no {MC.KUBECONFIG_KEY!r}"
            )
        doc = yaml.safe_load(base64.b64decode(data[MC.KUBECONFIG_KEY]))
        client = self._connect(doc)
        with self._lock:
            self._workers[name] = client
        return client

    def carry(self, key: tuple[str, str], kind: str, worker: str) -> int:
        """Make the run's ConfigMaps on `worker`; how many were made (0: all there already).
        Raises TauError when the worker or the manager cannot be read or written."""
        namespace, run = key
        job = self.kube.get(kind, run, namespace)
        if job is None:
            return 0
        names = D.companions(job)
        remote = self.worker(worker)
        try:
            owner = remote.get(kind, run, namespace)  # the copy MultiKueue made there
            if owner is None:
                raise NotYet(f"{kind} {namespace}/{run} is not on worker {worker} yet")
            made = 0
            for name in names:
                cm = self.kube.get("ConfigMap", name, namespace)
                if cm is None:
                    log.warning("run %s/%s: its ConfigMap %s is gone here", namespace, run, name)
                    continue
                if remote.create(D.carried_copy(cm, owner, namespace)) is not None:
                    made += 1
        except TauError:
            with self._lock:  # a worker's credentials may have been replaced: read them again
                self._workers.pop(worker, None)
            raise
        self._done[key] = worker
        return made
