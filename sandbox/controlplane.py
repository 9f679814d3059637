"""A real Kubernetes control plane on 127.0.0.1: the sandbox's (`tau sandbox up`) and the e2e
suite's, one code (envtest-style).

Binaries come from `make controlplane` (e2e/controlplane/build.sh), built from the upstream Go
modules into a version-keyed cache, with the CRDs that ship in the Kueue and KubeRay modules.
This module generates certificates (a CA, the API server's serving cert, an admin client and
researcher client identities), starts etcd, kube-apiserver and, where built,
kube-controller-manager, kube-scheduler, KWOK, Kueue and the KubeRay operator on free loopback
ports, waits for readiness, and stops them. Every process binds and advertises 127.0.0.1; each
runs in its own session, so it outlives the command that started it (the sandbox) until stopped.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import ssl
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from taugrid.host.ports import free_port
from taugrid.host.procs import group_alive
from taugrid.sandbox.kwokstages import sandbox_stages
from taugrid.sandbox.pki import HOST, Pki

if TYPE_CHECKING:
    from taugrid.kube.client import Kube

CACHE_ROOT = Path(
    os.environ.get("TAUGRID_CP_CACHE") or Path.home() / ".cache" / "taugrid" / "controlplane"
)
READY_TIMEOUT_S = 90.0
KWOK_ANNOTATION = "kwok.x-k8s.io/node"
KUEUE_METRICS_CERTS = "/etc/kueue/metrics/certs"


def name_lookups(work: Path) -> dict[str, list[str]]:
    """Host names each component of a control plane (its logs in `work`) looked up through a
    resolver, from Go's resolver trace (`_spawn` turns it on): empty on a sandbox that stays on
    the loopback."""
    out: dict[str, list[str]] = {}
    for log in sorted(work.glob("*.log")):
        hosts = re.findall(
            r"go package net: hostLookupOrder\(([^)]*)\)", log.read_text(errors="replace")
        )
        if hosts:
            out[log.stem] = sorted(set(hosts))
    return out


def binaries_dir() -> Path | None:
    """The built binaries (`make controlplane`), or None."""
    current = CACHE_ROOT / "current"
    if (current / ".complete").is_file() and (current / "bin" / "kube-apiserver").is_file():
        return current / "bin"
    return None


def crds_dir() -> Path | None:
    """CRDs copied from the built modules at build time: <dir>/kueue/*.yaml,
    <dir>/kuberay/*.yaml."""
    d = binaries_dir()
    return d.parent / "crds" if d is not None and (d.parent / "crds").is_dir() else None


def versions() -> dict[str, str]:
    d = binaries_dir()
    if d is None:
        return {}
    data: dict[str, str] = json.loads((d.parent / "versions.json").read_text())
    return data


# --- the cluster -------------------------------------------------------------------------------
@dataclass
class Identity:
    name: str
    groups: tuple[str, ...]
    kubeconfig: Path


@dataclass
class ControlPlane:
    bin_dir: Path
    work: Path
    with_controllers: bool = True
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    identities: dict[str, Identity] = field(default_factory=dict)
    api_port: int = 0
    dcgm_url: str = ""  # the simulated DCGM exporter's URL per node, once started

    @property
    def url(self) -> str:
        return f"https://{HOST}:{self.api_port}"

    @property
    def admin(self) -> Identity:
        return self.identities["admin"]

    def _spawn(
        self, name: str, args: list[str], env: dict[str, str] | None = None
    ) -> subprocess.Popen[bytes]:
        # Go's resolver logs every host name it looks up (the sandbox must look up none: its
        # components talk to 127.0.0.1 by address; `name_lookups` reads these lines).
        env = {**(env if env is not None else os.environ), "GODEBUG": "netdns=go+2"}
        with (self.work / f"{name}.log").open("wb") as log:
            proc = subprocess.Popen(
                args,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                env=env,
            )
        self.procs[name] = proc
        return proc

    def pids(self) -> dict[str, int]:
        return {name: p.pid for name, p in self.procs.items()}

    def log_tail(self, name: str, lines: int = 20) -> str:
        p = self.work / f"{name}.log"
        return "\n".join(p.read_text(errors="replace").splitlines()[-lines:]) if p.exists() else ""

    def _wait(self, name: str, check: Any) -> None:
        deadline = time.monotonic() + READY_TIMEOUT_S
        proc = self.procs[name]
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"{name} exited with {proc.returncode}:\n{self.log_tail(name)}")
            if check():
                return
            time.sleep(0.1)
        raise RuntimeError(
            f"{name} not ready within {READY_TIMEOUT_S:.0f}s:\n{self.log_tail(name)}"
        )

    def kubeconfig_for(self, name: str, cert: Path, key: Path) -> Path:
        cfg = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "e2e",
                    "cluster": {"server": self.url, "certificate-authority": str(self.pki.ca_cert)},
                }
            ],
            "users": [
                {"name": name, "user": {"client-certificate": str(cert), "client-key": str(key)}}
            ],
            "contexts": [{"name": name, "context": {"cluster": "e2e", "user": name}}],
            "current-context": name,
        }
        p = self.work / f"{name}.kubeconfig"
        p.write_text(json.dumps(cfg))
        return p

    def add_identity(
        self, name: str, groups: tuple[str, ...] = (), user: str | None = None
    ) -> Identity:
        """A client certificate for `user` (default: `name`; files are named after `name`)."""
        cert, key = self.pki.issue(f"user-{name}", user or name, groups)
        ident = Identity(name, groups, self.kubeconfig_for(name, cert, key))
        self.identities[name] = ident
        return ident

    def start(self) -> None:
        """etcd, the API server, and (with controllers) the controller-manager, the scheduler
        and KWOK, each waited for in turn."""
        self.pki = Pki(self.work / "pki")
        etcd_client = self._start_etcd()
        self._start_apiserver(etcd_client)
        if not self.with_controllers:
            return
        self._start_controllers()
        self._start_kwok()

    def _start_etcd(self) -> int:
        etcd_client, etcd_peer = free_port(), free_port()
        self._spawn(
            "etcd",
            [
                str(self.bin_dir / "etcd"),
                "--name=e2e",
                f"--data-dir={self.work / 'etcd'}",
                f"--listen-client-urls=http://{HOST}:{etcd_client}",
                f"--advertise-client-urls=http://{HOST}:{etcd_client}",
                f"--listen-peer-urls=http://{HOST}:{etcd_peer}",
                f"--initial-advertise-peer-urls=http://{HOST}:{etcd_peer}",
                f"--initial-cluster=e2e=http://{HOST}:{etcd_peer}",
                "--unsafe-no-fsync=true",
                "--max-request-bytes=10485760",  # Kueue's Workload CRD alone is 1.4 MB
                "--log-level=warn",
            ],
        )
        self._wait("etcd", lambda: _http_ok(f"http://{HOST}:{etcd_client}/health"))
        return etcd_client

    def _audit_policy(self) -> Path:
        """An audit log of the TauGrid controller's requests only (its API calls per minute are
        a budget: bench/bench_controller.py counts them here, watches included)."""
        from taugrid.api import constants as C
        from taugrid.components.controller_manifests import CONTROLLER_USER

        audit_policy = self.work / "audit-policy.json"
        audit_policy.write_text(
            json.dumps(
                {
                    "apiVersion": "audit.k8s.io/v1",
                    "kind": "Policy",
                    "omitStages": ["RequestReceived"],
                    "rules": [
                        # what it wrote to a run (a test shows the writes of a quiet minute it
                        # fails on)
                        {
                            "level": "Request",
                            "users": [CONTROLLER_USER],
                            "verbs": ["patch", "update"],
                            "resources": [{"group": C.GROUP, "resources": ["runs/status"]}],
                        },
                        {"level": "Metadata", "users": [CONTROLLER_USER]},
                        {"level": "None"},
                    ],
                }
            )
        )
        return audit_policy

    def _start_apiserver(self, etcd_client: int) -> None:
        serving_cert, serving_key = self.pki.issue("apiserver", "kube-apiserver", server=True)
        sa_pub, sa_priv = self.pki.rsa_pair("sa")
        self._sa_signing_key = sa_priv  # the controller-manager signs tokens with it
        self.api_port = free_port()
        audit_policy = self._audit_policy()
        self._spawn(
            "kube-apiserver",
            [
                str(self.bin_dir / "kube-apiserver"),
                f"--etcd-servers=http://{HOST}:{etcd_client}",
                f"--bind-address={HOST}",
                f"--advertise-address={HOST}",
                f"--secure-port={self.api_port}",
                f"--tls-cert-file={serving_cert}",
                f"--tls-private-key-file={serving_key}",
                f"--client-ca-file={self.pki.ca_cert}",
                "--service-cluster-ip-range=10.0.0.0/24",
                f"--service-account-issuer=https://{HOST}:{self.api_port}",
                f"--service-account-key-file={sa_pub}",
                f"--service-account-signing-key-file={sa_priv}",
                "--authorization-mode=RBAC",
                "--allow-privileged=true",
                "--endpoint-reconciler-type=none",
                f"--cert-dir={self.work / 'certs'}",
                "--enable-priority-and-fairness=false",
                # a node is reached by its address, never by looking its name up
                "--kubelet-preferred-address-types=InternalIP",
                f"--audit-policy-file={audit_policy}",
                f"--audit-log-path={self.work / 'audit.log'}",
                "--v=1",
            ],
        )
        admin_cert, admin_key = self.pki.issue("admin", "e2e-admin", ("system:masters",))
        self.identities["admin"] = Identity(
            "admin", ("system:masters",), self.kubeconfig_for("admin", admin_cert, admin_key)
        )
        ctx = ssl.create_default_context(cafile=str(self.pki.ca_cert))
        ctx.load_cert_chain(str(admin_cert), str(admin_key))
        self._wait("kube-apiserver", lambda: _http_ok(f"{self.url}/readyz", ctx))

    def _start_controllers(self) -> None:
        sa_priv = self._sa_signing_key
        for name, extra in (
            (
                "kube-controller-manager",
                [
                    f"--service-account-private-key-file={sa_priv}",
                    f"--root-ca-file={self.pki.ca_cert}",
                    "--use-service-account-credentials=false",
                    "--controllers=*,-nodeipam,-service-lb-controller,-cloud-node-lifecycle",
                    # a dynamic provisioner (class provisioner kubernetes.io/host-path) for the
                    # sandbox's workspace volumes, so a PVC deleted and created again binds anew
                    "--enable-hostpath-provisioner=true",
                ],
            ),
            ("kube-scheduler", []),
        ):
            binary = self.bin_dir / name
            if not binary.is_file():
                continue
            port = free_port()
            self._spawn(
                name,
                [
                    str(binary),
                    f"--kubeconfig={self.admin.kubeconfig}",
                    f"--authentication-kubeconfig={self.admin.kubeconfig}",
                    f"--authorization-kubeconfig={self.admin.kubeconfig}",
                    f"--bind-address={HOST}",
                    f"--secure-port={port}",
                    "--leader-elect=false",
                    f"--cert-dir={self.work / name}",
                    *extra,
                ],
            )
            self._wait(
                name, lambda p=port: _http_ok(f"https://{HOST}:{p}/healthz", _insecure_ctx())
            )

    def _start_kwok(self) -> None:
        kwok = self.bin_dir / "kwok"
        stages = [
            p
            for p in sorted((self.bin_dir.parent / "kwok-stages").glob("*.yaml"))
            if p.name != "pod-complete.yaml"
        ]
        if kwok.is_file() and stages:
            ours = self.work / "kwok-stages.yaml"
            ours.write_text("---\n".join(json.dumps(s) + "\n" for s in sandbox_stages()))
            stages.append(ours)
            port = free_port()
            self._spawn(
                "kwok",
                [
                    str(kwok),
                    f"--kubeconfig={self.admin.kubeconfig}",
                    f"--manage-nodes-with-annotation-selector={KWOK_ANNOTATION}=fake",
                    f"--server-address={HOST}:{port}",
                    f"--node-ip={HOST}",
                    f"--node-port={free_port()}",
                    "--cidr=10.250.0.0/24",
                    # node leases renewed every 10 s, as a kubelet does: the node controller
                    # then sees a heartbeat four times per grace period, not twice (the
                    # stock stage patches the status every 20-25 s), and a KWOK node does not
                    # go NotReady when a busy machine delays one status update
                    "--node-lease-duration-seconds=40",
                    *(f"--config={p}" for p in stages),
                ],
            )
            self._wait("kwok", lambda p=port: _http_ok(f"http://{HOST}:{p}/healthz"))

    @property
    def has_kueue(self) -> bool:
        return (
            (self.bin_dir / "kueue").is_file()
            and os.geteuid() == 0
            and shutil.which("unshare") is not None
        )

    def start_kueue(
        self, namespace_label: str, rayjobs: bool = False, extra: dict[str, Any] | None = None
    ) -> None:
        """Kueue out of cluster: webhooks served on 127.0.0.1 and registered by loopback URL;
        `extra`: more of its configuration (the stack's fair sharing).

        Its CRDs must be installed first. Only the webhooks of the integrations runs use are
        registered: batch/v1 Jobs, and with `rayjobs` KubeRay's RayJobs and RayServices (its CRDs
        installed).
        """
        if "kueue" in self.procs:
            return
        import yaml as _yaml

        wh_port, health_port = free_port(), free_port()
        crt, key = self.pki.issue("kueue-webhook", "kueue-webhook", server=True)
        cert_dir = self._cert_dir("kueue-certs", crt, key)
        selector = {"matchExpressions": [{"key": namespace_label, "operator": "Exists"}]}
        config = {
            "apiVersion": "config.kueue.x-k8s.io/v1beta2",
            "kind": "Configuration",
            "namespace": "kueue-system",
            "health": {"healthProbeBindAddress": f"{HOST}:{health_port}"},
            "metrics": {"bindAddress": "0"},
            "webhook": {"host": HOST, "port": wh_port, "certDir": str(cert_dir)},
            "leaderElection": {"leaderElect": False},
            "internalCertManagement": {"enable": False},
            "manageJobsWithoutQueueName": False,
            "managedJobsNamespaceSelector": selector,
            "integrations": {
                "frameworks": [
                    "batch/job",
                    *(["ray.io/rayjob", "ray.io/rayservice"] if rayjobs else []),
                ]
            },
            **(extra or {}),
        }
        cfg_file = self.work / "kueue-config.yaml"
        cfg_file.write_text(_yaml.safe_dump(config))

        kube = self.kube()
        apply(kube, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "kueue-system"}})
        env = {**os.environ, "KUBECONFIG": str(self.admin.kubeconfig)}
        # Kueue reads its metrics certificate from a fixed path: give it ours through a bind
        # mount in a private mount namespace (only an empty mount point is created on the host).
        metrics_dir = self._cert_dir("kueue-metrics-certs", crt, key)
        Path(KUEUE_METRICS_CERTS).mkdir(parents=True, exist_ok=True)
        script = (
            f"mount --bind {metrics_dir} {KUEUE_METRICS_CERTS} && exec {self.bin_dir / 'kueue'} "
            f"--config={cfg_file} --feature-gates=VisibilityOnDemand=false"
        )
        self._spawn(
            "kueue", ["unshare", "--mount", "--propagation", "private", "sh", "-c", script], env
        )
        self._wait("kueue", lambda: _http_ok(f"http://{HOST}:{health_port}/readyz"))
        self._register_kueue_webhooks(kube, wh_port, selector, rayjobs)

    def _cert_dir(self, name: str, crt: Path, key: Path) -> Path:
        """A directory holding `tls.crt` and `tls.key`, as Kueue expects its certificates."""
        d = self.work / name
        d.mkdir()
        shutil.copy(crt, d / "tls.crt")
        shutil.copy(key, d / "tls.key")
        return d

    def _register_kueue_webhooks(
        self, kube: Kube, port: int, selector: dict[str, Any], rayjobs: bool
    ) -> None:
        """Kueue's mutating and validating webhooks for the kinds runs use, by loopback URL."""
        import base64

        ca = base64.b64encode(self.pki.ca_cert.read_bytes()).decode()
        # (group, resource, Kueue's path stem, webhook name stem)
        kinds = [("batch", "jobs", "batch-v1-job", "job")]
        if rayjobs:
            kinds += [
                ("ray.io", "rayjobs", "ray-io-v1-rayjob", "rayjob"),
                ("ray.io", "rayservices", "ray-io-v1-rayservice", "rayservice"),
            ]

        def hook(
            prefix: str, verbs: list[str], group: str, resource: str, path: str, stem: str
        ) -> dict[str, Any]:
            action = "mutate" if prefix == "m" else "validate"
            return {
                "name": f"{prefix}{stem}.kb.io",
                "admissionReviewVersions": ["v1"],
                "sideEffects": "None",
                "failurePolicy": "Fail",
                "namespaceSelector": selector,
                "clientConfig": {"url": f"https://{HOST}:{port}/{action}-{path}", "caBundle": ca},
                "rules": [
                    {
                        "apiGroups": [group],
                        "apiVersions": ["v1"],
                        "operations": verbs,
                        "resources": [resource],
                    }
                ],
            }

        for kind, prefix, verbs in (
            ("MutatingWebhookConfiguration", "m", ["CREATE"]),
            ("ValidatingWebhookConfiguration", "v", ["CREATE", "UPDATE"]),
        ):
            apply(
                kube,
                {
                    "apiVersion": "admissionregistration.k8s.io/v1",
                    "kind": kind,
                    "metadata": {"name": "kueue-loopback"},
                    "webhooks": [hook(prefix, verbs, *k) for k in kinds],
                },
            )

    @property
    def has_kuberay(self) -> bool:
        return (self.bin_dir / "ray-operator").is_file()

    def start_kuberay(self) -> None:
        """The KubeRay operator out of cluster (no webhooks; RayJob -> RayCluster -> pods), built
        with the sandbox's Ray dashboard clients: it never connects to a Ray head (there is none:
        KWOK simulates the pods), a RayJob's Ray job has its submitter Job's state."""
        if "kuberay" in self.procs or not self.has_kuberay:
            return
        metrics, probe = free_port(), free_port()
        env = {**os.environ, "KUBECONFIG": str(self.admin.kubeconfig)}
        self._spawn(
            "kuberay",
            [
                str(self.bin_dir / "ray-operator"),
                f"--metrics-addr={HOST}:{metrics}",
                f"--health-probe-bind-address={HOST}:{probe}",
            ],
            env=env,
        )
        self._wait("kuberay", lambda: _http_ok(f"http://{HOST}:{probe}/readyz"))

    def start_controller(self, kubeconfig: Path, config: Path) -> None:
        """The TauGrid controller out of cluster (`python -m taugrid.controller`), as the given
        identity (the sandbox gives it the controller's ServiceAccount name and RBAC)."""
        if "controller" in self.procs:
            return
        import sys

        port = free_port()
        env = {**os.environ, "KUBECONFIG": str(kubeconfig)}
        self._spawn(
            "controller",
            [
                sys.executable,
                "-m",
                "taugrid.controller",
                "--standalone",
                f"--config={config}",
                f"--liveness=http://{HOST}:{port}/healthz",
            ],
            env=env,
        )
        self._wait("controller", lambda: _http_ok(f"http://{HOST}:{port}/healthz"))

    def start_dcgm_sim(self) -> str:
        """The simulated DCGM exporter of every KWOK GPU node (`dcgmsim.py`), on one loopback
        port; returns its URL per node (with `{node}`), for the controller's settings."""
        import sys

        from taugrid.sandbox.dcgmsim import URL_TEMPLATE

        if "dcgm-sim" in self.procs:
            return self.dcgm_url
        port = free_port()
        self._spawn(
            "dcgm-sim",
            [
                sys.executable,
                "-m",
                "taugrid.sandbox.dcgmsim",
                f"--kubeconfig={self.admin.kubeconfig}",
                f"--port={port}",
            ],
            env=dict(os.environ),
        )
        self._wait("dcgm-sim", lambda: _http_ok(f"http://{HOST}:{port}/healthz"))
        self.dcgm_url = URL_TEMPLATE.format(port=port)
        return self.dcgm_url

    @property
    def has_kwok(self) -> bool:
        return "kwok" in self.procs

    def add_fake_node(
        self,
        name: str,
        gpus: int = 0,
        labels: dict[str, str] | None = None,
        taints: list[dict[str, str]] | None = None,
        cpu: str = "32",
        memory: str = "256Gi",
    ) -> dict[str, Any]:
        """A Node that KWOK keeps Ready and whose pods it runs (no kubelet, no real containers)."""
        capacity = {"cpu": cpu, "memory": memory, "pods": "110"}
        if gpus:
            capacity["nvidia.com/gpu"] = str(gpus)
        node = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": name,
                "annotations": {KWOK_ANNOTATION: "fake", "node.alpha.kubernetes.io/ttl": "0"},
                "labels": {"kubernetes.io/hostname": name, "type": "kwok", **(labels or {})},
            },
            "spec": {"taints": taints or []},
            "status": {"allocatable": capacity, "capacity": capacity},
        }
        apply(self.kube(), node)
        return node

    def stop(self) -> None:
        """SIGTERM every process group at once, SIGKILL what is left after 5 s."""
        stop_process_groups(list(self.pids().values()))
        for proc in self.procs.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=10)
        self.procs.clear()

    # --- clients -------------------------------------------------------------------------------
    def kube(self, who: str = "admin") -> Kube:
        """The project's Kubernetes client, as `who` (an identity's kubeconfig)."""
        from taugrid.kube.client import Kube

        return Kube(kubeconfig=self.identities[who].kubeconfig)


def stop_process_groups(pgids: list[int], grace_s: float = 5.0) -> None:
    """SIGTERM each group, SIGKILL what is left after `grace_s`, and wait until none runs."""
    for pgid in pgids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    left = [p for p in pgids if group_alive(p)]
    while left and time.monotonic() < deadline:
        time.sleep(0.1)
        left = [p for p in left if group_alive(p)]
    for pgid in left:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGKILL)
    deadline = time.monotonic() + 10.0
    while left and time.monotonic() < deadline:
        time.sleep(0.05)
        left = [p for p in left if group_alive(p)]


# --- objects ------------------------------------------------------------------------------------
FIELD_MANAGER = "taugrid-sandbox"


def apply(kube: Kube, obj: dict[str, Any], manager: str = FIELD_MANAGER) -> dict[str, Any]:
    """Server-side apply one object of any kind the cluster serves."""
    return kube.apply_any(obj, manager)


def wait_established(kube: Kube, names: list[str], timeout: float = 60.0) -> None:
    """Until the API server serves each CRD (its Established condition)."""
    deadline = time.monotonic() + timeout
    pending = set(names)
    while pending and time.monotonic() < deadline:
        for name in list(pending):
            crd = kube.get("CustomResourceDefinition", name) or {}
            conds = {
                c.get("type"): c.get("status")
                for c in (crd.get("status") or {}).get("conditions") or []
            }
            if conds.get("Established") == "True":
                pending.discard(name)
        if pending:
            time.sleep(0.1)
    if pending:
        raise RuntimeError(f"CRDs not established within {timeout}s: {sorted(pending)}")


def install_crds(
    kube: Kube, folder: Path, groups: tuple[str, ...] = ("kueue", "kuberay"), taugrid: bool = True
) -> list[str]:
    """The upstream CRDs of `groups` (folder/<group>/*.yaml) and (unless not `taugrid`)
    TauGrid's, applied and established. Returns their names."""
    import yaml

    from taugrid.api.crds import render_crds

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    crds = [
        yaml.load(f.read_text(), Loader=loader)
        for g in groups
        for f in sorted((folder / g).glob("*.yaml"))
    ]
    names = []
    for crd in [*crds, *(render_crds() if taugrid else [])]:
        apply(kube, crd)
        names.append(crd["metadata"]["name"])
    wait_established(kube, names)
    return names


def _insecure_ctx() -> ssl.SSLContext:
    # Health ports of the controllers serve a self-signed cert; the check only needs liveness.
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    return ctx


def _http_ok(url: str, ctx: ssl.SSLContext | None = None) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2, context=ctx) as resp:
            return bool(resp.status == 200)
    except (OSError, urllib.error.URLError):
        return False


NOT_BUILT = (
    "the control plane is not built; `make controlplane` builds etcd, kube-apiserver, "
    "controller-manager, scheduler, KWOK, Kueue and KubeRay from their Go modules once "
    "(about 10-20 minutes on 2 cores, into ~/.cache/taugrid/controlplane)"
)


@contextlib.contextmanager
def running(with_controllers: bool = True) -> Iterator[ControlPlane]:
    bin_dir = binaries_dir()
    if bin_dir is None:
        raise RuntimeError(NOT_BUILT)
    work = Path(tempfile.mkdtemp(prefix="tau-cp-"))
    cp = ControlPlane(bin_dir=bin_dir, work=work, with_controllers=with_controllers)
    try:
        cp.start()
        yield cp
    finally:
        cp.stop()
        shutil.rmtree(work, ignore_errors=True)
