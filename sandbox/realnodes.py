"""Real nodes of the sandbox: kubelet + containerd + runc + CNI + kube-proxy, beside KWOK's.

Each real node is a network namespace the sandbox makes (like a kind node's container, without
a container): its containerd, kubelet and kube-proxy run there, its pods hang off its own
bridge (`cni0`, the CNI bridge plugin, no masquerade), and the node reaches nothing but the
sandbox. The nodes and the host meet on the sandbox's own network: a bridge in a namespace of
its own (`tau-TAG`), one veth to each node and one to the host. The host gets a route to each
node's pod range through that veth (so the API server's proxy, `tau serve invoke`, reaches a
pod), and forwards nothing. A pod has routes to the sandbox's range and to the service range
only: a name or an address outside the cluster fails at once.

What a node reaches on the host is served into its namespace by `nodeproxy` (the API server
relayed to the node's 127.0.0.1:6443; DNS for cluster.local only). Images are the ones
`make images` built here, imported into each node's containerd; none is ever pulled.

Host hygiene: everything lives under the sandbox's folder or the node's own short folder
(NODES_ROOT/TAG-nI, linked from it: containerd's root, state and sockets, the kubelet's root,
pod logs and netns mounts, CNI's IP leases), each node's cgroups under a root of
its own (`/tau-TAG-nI`), the namespaces under /run/netns named `tau-TAG*`. The kubelet writes a
few host kernel settings when it starts (vm.overcommit_memory, kernel.panic, ...): their values
are kept before the first real node starts and written back when the last one stops, even
across two sandboxes (a shared record under /run/taugrid). `stop` unmounts, removes cgroups and
namespaces, and drops the routes.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from taugrid.api.errors import TauError
from taugrid.sandbox import netns

RELAY_PORT = 6443  # the API server, on each node's own loopback
SERVICE_CIDR = "10.0.0.0/24"  # the API server's --service-cluster-ip-range
# The kernel settings the kubelet writes at start (pkg/kubelet/cm: setupKernelTunables).
KUBELET_SYSCTLS = (
    "vm/overcommit_memory",
    "vm/panic_on_oom",
    "kernel/panic",
    "kernel/panic_on_oops",
    "kernel/keys/root_maxkeys",
    "kernel/keys/root_maxbytes",
)
HOST_RECORD = Path("/run/taugrid")
# Each node's own folder (containerd's root, state and sockets, the kubelet's root, pod logs):
# a short path, whatever TAU_HOME is: a unix socket's path holds at most 107 bytes (containerd
# refuses > 104), and the kubelet makes sockets deep under its root. Linked from the sandbox's
# folder as nodes/NAME; removed by `stop_nodes`.
NODES_ROOT = Path(os.environ.get("TAU_SANDBOX_NODES_ROOT", "/var/lib/taugrid/nodes"))
# a node Ready from its start (kubelet registered, its runtime answering): 22-28 s measured
READY_TIMEOUT_S = float(os.environ.get("TAU_SANDBOX_NODE_TIMEOUT", "300"))
Say = Callable[[str], None]


def images_record() -> Path:
    root = Path(
        os.environ.get("TAUGRID_IMAGE_CACHE", Path.home() / ".cache" / "taugrid" / "images")
    )
    return root / "current.json"


def built_images() -> dict[str, str] | None:
    """The archives `make images` built (runtime and pause, and torch when it could), or None."""
    try:
        doc = json.loads(images_record().read_text())
    except (OSError, ValueError):
        return None
    if not all(Path(doc.get(k, "")).is_file() for k in ("runtime", "pause")):
        return None
    return {k: str(v) for k, v in doc.items()}


def can_run() -> str | None:
    """Why real nodes cannot run on this machine (None: they can)."""
    if os.geteuid() != 0:
        return "real nodes need root (network namespaces, containerd, cgroups)"
    for tool in ("containerd", "runc", "ip", "nsenter", "iptables"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (apt-get install -y containerd runc iproute2 iptables)"
    if not Path("/usr/lib/cni/bridge").is_file():
        return "the CNI plugins are not installed (apt-get install -y containernetworking-plugins)"
    if built_images() is None:
        return "the sandbox's images are not built (make images)"
    return None


# --- the sandbox's own network --------------------------------------------------------------------
@dataclass
class Network:
    tag: str  # 6 hex digits: this sandbox's names
    octet: int  # the sandbox's range is 10.OCTET.0.0/16
    nodes: int

    @property
    def ns(self) -> str:
        return f"tau-{self.tag}"

    @property
    def host_if(self) -> str:
        return f"tau{self.tag}"

    @property
    def cidr(self) -> str:
        return f"10.{self.octet}.0.0/16"

    @property
    def host_ip(self) -> str:
        return f"10.{self.octet}.0.1"

    def node_ip(self, i: int) -> str:
        return f"10.{self.octet}.0.{10 + i}"

    def pod_cidr(self, i: int) -> str:
        return f"10.{self.octet}.{i + 1}.0/24"

    def node_ns(self, i: int) -> str:
        return f"{self.ns}-n{i}"


def tag_for(work: Path) -> str:
    return hashlib.sha256(str(work.resolve()).encode()).hexdigest()[:6]


def _free_octet() -> int:
    """A 10.X.0.0/16 no route and no other sandbox of this machine uses."""
    used = set(re.findall(r"\b10\.(\d+)\.", netns.ip("-4", "route", "show", "table", "all")))
    used |= set(re.findall(r"\b10\.(\d+)\.", netns.ip("-4", "addr", "show")))
    for octet in range(200, 250):
        if str(octet) not in used:
            return octet
    raise OSError("no free 10.X.0.0/16 range for the sandbox's network (200-249 all in use)")


def make_network(work: Path, nodes: int) -> Network:
    # Under the host lock: two sandboxes starting at once (the e2e suite's workers) would
    # otherwise both find the same range free; it is taken once the host's address is up.
    with _host_lock():
        return _make_network(work, nodes)


def _make_network(work: Path, nodes: int) -> Network:
    net = Network(tag_for(work), _free_octet(), nodes)
    if netns.exists(net.ns):
        remove_network(net)
    netns.ip("netns", "add", net.ns)
    netns.ip("link", "set", "lo", "up", netns=net.ns)
    netns.ip("link", "add", "br0", "type", "bridge", netns=net.ns)
    netns.ip("link", "set", "br0", "up", netns=net.ns)
    netns.ip("link", "add", net.host_if, "type", "veth", "peer", "name", "host", "netns", net.ns)
    netns.ip("link", "set", "host", "master", "br0", "up", netns=net.ns)
    netns.ip("addr", "add", f"{net.host_ip}/24", "dev", net.host_if)
    netns.ip("link", "set", net.host_if, "up")
    return net


def save_network(work: Path, net: Network) -> None:
    """Kept beside the sandbox's state before anything is wired: `down` (and a failed `up`)
    finds what to take apart."""
    (work / "network.json").write_text(
        json.dumps({"tag": net.tag, "octet": net.octet, "nodes": net.nodes})
    )


def load_network(work: Path) -> Network | None:
    try:
        doc = json.loads((work / "network.json").read_text())
        return Network(str(doc["tag"]), int(doc["octet"]), int(doc["nodes"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def remove_network(net: Network) -> None:
    """The host's veth (and with it every route through it) and the sandbox's namespace."""
    netns.ip("link", "del", net.host_if, check=False)
    for name in netns.names():
        if name == net.ns or name.startswith(net.ns + "-"):
            netns.ip("netns", "del", name, check=False)


# --- host kernel settings -------------------------------------------------------------------------
@contextlib.contextmanager
def _host_lock() -> Iterator[Path]:
    HOST_RECORD.mkdir(parents=True, exist_ok=True)
    with (HOST_RECORD / "lock").open("a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield HOST_RECORD
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def read_sysctls() -> dict[str, str]:
    return {k: Path("/proc/sys", k).read_text().strip() for k in KUBELET_SYSCTLS}


def hold_sysctls(tag: str) -> None:
    """Keep the host's values before this sandbox's first kubelet starts (unless another
    sandbox already kept them: its record is the host's own values)."""
    with _host_lock() as d:
        record = d / "sysctls.json"
        if not record.exists():
            record.write_text(json.dumps(read_sysctls()))
        (d / f"holder-{tag}").write_text(str(os.getpid()))


def release_sysctls(tag: str) -> None:
    """Write the host's values back once no sandbox holds them."""
    with _host_lock() as d:
        (d / f"holder-{tag}").unlink(missing_ok=True)
        if any(d.glob("holder-*")):
            return
        record = d / "sysctls.json"
        try:
            kept = json.loads(record.read_text())
        except (OSError, ValueError):
            return
        for key, value in kept.items():
            with contextlib.suppress(OSError):
                Path("/proc/sys", key).write_text(value)
        record.unlink(missing_ok=True)


# --- a node ---------------------------------------------------------------------------------------
@dataclass
class NodeSpec:
    name: str
    index: int
    labels: dict[str, str] = field(default_factory=dict)
    taints: list[dict[str, str]] = field(default_factory=list)


def _containerd_toml(d: Path, pause_ref: str) -> str:
    cri = 'plugins."io.containerd.grpc.v1.cri"'
    return f"""version = 2
root = "{d}/containerd/root"
state = "{d}/containerd/state"
[grpc]
  address = "{d}/containerd.sock"
[ttrpc]
  address = "{d}/containerd-ttrpc.sock"
[{cri}]
  sandbox_image = "{pause_ref}"
  # root here lacks CAP_SYS_RESOURCE: a pod's oom_score_adj may only go up
  restrict_oom_score_adj = true
  disable_apparmor = true
  # the pods' network namespaces under the state folder, not /run/netns
  netns_mounts_under_state_dir = true
  [{cri}.cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "{d}/cni"
  [{cri}.containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [{cri}.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [{cri}.containerd.runtimes.runc.options]
        BinaryName = "{shutil.which("runc") or "runc"}"
        Root = "{d}/runc"
        SystemdCgroup = false
"""


def _cni(net: Network, i: int, d: Path) -> dict[str, Any]:
    return {
        "cniVersion": "1.0.0",
        "name": "tau",
        "plugins": [
            {
                "type": "bridge",
                "bridge": "cni0",
                "isGateway": True,
                "ipMasq": False,  # nothing is masqueraded: a pod is seen by its own address
                "hairpinMode": True,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": net.pod_cidr(i)}]],
                    # the sandbox and the services: no default route, nothing else reachable
                    "routes": [{"dst": net.cidr}, {"dst": SERVICE_CIDR}],
                    "dataDir": str(d / "cni-ipam"),
                },
            }
        ],
    }


def _kubelet_config(net: Network, node: NodeSpec, d: Path, ca: Path) -> dict[str, Any]:
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "address": net.node_ip(node.index),
        "port": 10250,
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": 10248,
        "authentication": {
            "anonymous": {"enabled": True},
            "webhook": {"enabled": False},
            "x509": {"clientCAFile": str(ca)},
        },
        "authorization": {"mode": "AlwaysAllow"},  # it listens inside the sandbox only
        "cgroupDriver": "cgroupfs",  # the only one here (no systemd)
        "cgroupRoot": f"/tau-{net.tag}-n{node.index}",
        "failCgroupV1": False,
        "failSwapOn": False,
        "clusterDomain": "cluster.local",
        "clusterDNS": [net.node_ip(node.index)],
        "resolvConf": str(d / "resolv.conf"),  # empty: no upstream resolver
        "containerRuntimeEndpoint": f"unix://{d}/containerd.sock",
        "podLogsDir": str(d / "pod-logs"),
        "podCIDR": net.pod_cidr(node.index),
        "oomScoreAdj": 0,  # root here cannot lower its own
        # images cannot be pulled again: never collected
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "evictionHard": {
            "memory.available": "100Mi",
            "nodefs.available": "1%",
            "imagefs.available": "1%",
            "nodefs.inodesFree": "1%",
        },
        "serializeImagePulls": False,
        "runtimeRequestTimeout": "10m",
        "registerWithTaints": node.taints,
        "protectKernelDefaults": False,
        "maxPods": 110,
    }


def _kube_proxy_config(net: Network, node: NodeSpec, kubeconfig: Path) -> dict[str, Any]:
    return {
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
        "kind": "KubeProxyConfiguration",
        "clientConnection": {"kubeconfig": str(kubeconfig)},
        "mode": "iptables",
        "clusterCIDR": net.cidr,
        "hostnameOverride": node.name,
        "bindAddress": net.node_ip(node.index),
        "metricsBindAddress": "127.0.0.1:10249",
        "healthzBindAddress": "127.0.0.1:10256",
        # the host's connection-tracking settings are left as they are
        "conntrack": {
            "maxPerCore": 0,
            "min": 0,
            "tcpEstablishedTimeout": "0s",
            "tcpCloseWaitTimeout": "0s",
        },
    }


def _relayed(kubeconfig: Path, out: Path) -> Path:
    """A kubeconfig that reaches the API server through the node's relay."""
    doc = json.loads(kubeconfig.read_text())
    for c in doc["clusters"]:
        c["cluster"]["server"] = f"https://127.0.0.1:{RELAY_PORT}"
    out.write_text(json.dumps(doc))
    return out


def _in_node(net: Network, i: int, *cmd: str) -> list[str]:
    return ["nsenter", f"--net={netns.NETNS_DIR / net.node_ns(i)}", "--", *cmd]


def start_node(cp: Any, net: Network, node: NodeSpec, images: dict[str, str], say: Say) -> None:
    """Wire the node into the sandbox's network and start its processes (as process groups of
    the control plane, so `down` stops them with the rest)."""
    i = node.index
    d = node_dir(net, i)
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir(parents=True)
    (cp.work / "nodes").mkdir(exist_ok=True)
    (cp.work / "nodes" / node.name).symlink_to(d)
    for sub in ("cni", "pod-logs", "kubelet", "containerd"):
        (d / sub).mkdir(parents=True, exist_ok=True)
    (d / "resolv.conf").write_text("")
    ns = _wire(net, i)
    (d / "cni" / "10-tau.conflist").write_text(json.dumps(_cni(net, i, d), indent=1))
    (d / "containerd.toml").write_text(_containerd_toml(d, images["pause_ref"]))

    # what the node reaches on the host: the API server (relayed), cluster.local DNS
    who = cp.add_identity(f"node-{node.name}", ("system:nodes",), user=f"system:node:{node.name}")
    proxy_who = cp.add_identity(f"kube-proxy-{node.name}", (), user="system:kube-proxy")
    node_kc = _relayed(who.kubeconfig, d / "kubelet.kubeconfig")
    proxy_kc = _relayed(proxy_who.kubeconfig, d / "kube-proxy.kubeconfig")
    cp._spawn(
        f"nodeproxy-{node.name}",
        [
            sys.executable,
            "-m",
            "taugrid.sandbox.nodeproxy",
            f"--netns={netns.NETNS_DIR / ns}",
            f"--relay-port={RELAY_PORT}",
            f"--api-port={cp.api_port}",
            f"--dns={net.node_ip(i)}",
            f"--kubeconfig={cp.admin.kubeconfig}",
        ],
    )

    _start_containerd(cp, net, node, images, say)
    _start_kubelet(cp, net, node, node_kc, proxy_kc)


def _start_kubelet(cp: Any, net: Network, node: NodeSpec, node_kc: Path, proxy_kc: Path) -> None:
    """The node's kubelet (in its cgroups, labelled type=real) and kube-proxy."""
    i, d = node.index, node_dir(net, node.index)
    make_cgroups(net.tag, i)
    (d / "kubelet.yaml").write_text(json.dumps(_kubelet_config(net, node, d, cp.pki.ca_cert)))
    labels = ",".join(f"{k}={v}" for k, v in {**node.labels, "type": "real"}.items())
    cp._spawn(
        f"kubelet-{node.name}",
        _in_node(
            net,
            i,
            str(cp.bin_dir / "kubelet"),
            f"--config={d / 'kubelet.yaml'}",
            f"--kubeconfig={node_kc}",
            f"--hostname-override={node.name}",
            f"--node-ip={net.node_ip(i)}",
            f"--root-dir={d / 'kubelet'}",
            f"--node-labels={labels}",
            "--v=1",
        ),
    )
    (d / "kube-proxy.yaml").write_text(json.dumps(_kube_proxy_config(net, node, proxy_kc)))
    cp._spawn(
        f"kube-proxy-{node.name}",
        _in_node(
            net, i, str(cp.bin_dir / "kube-proxy"), f"--config={d / 'kube-proxy.yaml'}", "--v=1"
        ),
    )


def _wire(net: Network, i: int) -> str:
    """Node `i`'s network namespace: a veth onto the sandbox's bridge, its address, routes to
    the other nodes' pod ranges through them, and the host's route to its own pod range.
    Returns the namespace's name."""
    ns = net.node_ns(i)
    netns.ip("netns", "add", ns)
    netns.ip("link", "set", "lo", "up", netns=ns)
    peer = f"{net.host_if}n{i}"
    netns.ip("link", "add", peer, "type", "veth", "peer", "name", "eth0", "netns", ns)
    netns.ip("link", "set", peer, "netns", net.ns)
    netns.ip("link", "set", peer, "master", "br0", "up", netns=net.ns)
    netns.ip("addr", "add", f"{net.node_ip(i)}/24", "dev", "eth0", netns=ns)
    netns.ip("link", "set", "eth0", "up", netns=ns)
    for j in range(net.nodes):
        if j != i:
            netns.ip("route", "add", net.pod_cidr(j), "via", net.node_ip(j), netns=ns)
    subprocess.run(
        ["ip", "netns", "exec", ns, "sysctl", "-qw", "net.ipv4.ip_forward=1"], check=True
    )  # the node's own setting (each namespace has one)
    netns.ip("route", "add", net.pod_cidr(i), "via", net.node_ip(i), "dev", net.host_if)
    return ns


def _start_containerd(
    cp: Any, net: Network, node: NodeSpec, images: dict[str, str], say: Say
) -> None:
    """The node's containerd, and the sandbox's images imported into it (torch: built with
    the torch environment (make torch-env, then make images), for torchrun)."""
    i, d = node.index, node_dir(net, node.index)
    cp._spawn(
        f"containerd-{node.name}",
        _in_node(net, i, "containerd", f"--config={d / 'containerd.toml'}"),
    )
    sock = d / "containerd.sock"
    cp._wait(f"containerd-{node.name}", sock.exists)
    for key in (
        "pause",
        "runtime",
        *(("torch",) if Path(images.get("torch", "")).is_file() else ()),
    ):
        say(f"{node.name}: importing the {key} image ...")
        subprocess.run(
            ["ctr", f"--address={sock}", "-n", "k8s.io", "image", "import", images[key]],
            check=True,
            capture_output=True,
        )


def node_rbac() -> list[dict[str, Any]]:
    """The kubelets' identities (group system:nodes) get the kubelet's ClusterRole (this API
    server authorizes by RBAC only; kube-proxy's binding is a default one)."""
    return [
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": "tau-sandbox-nodes"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "system:node",
            },
            "subjects": [
                {"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "system:nodes"}
            ],
        }
    ]


# --- cleaning up ----------------------------------------------------------------------------------
def _mounts_under(root: Path) -> list[str]:
    found = []
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/mountinfo").read_text().splitlines():
            point = line.split()[4].replace("\\040", " ")
            if point == str(root) or point.startswith(str(root) + "/"):
                found.append(point)
    return found


def unmount_under(root: Path) -> int:
    """Unmount everything mounted under `root`, deepest first (lazily where busy)."""
    done = 0
    for _ in range(5):
        points = sorted(_mounts_under(root), key=lambda p: p.count("/"), reverse=True)
        if not points:
            break
        for p in points:
            if subprocess.run(["umount", p], capture_output=True).returncode != 0:
                subprocess.run(["umount", "-l", p], capture_output=True)
            done += 1
    return done


def make_cgroups(tag: str, i: int) -> None:
    """The node's cgroup root in every hierarchy (the kubelet wants it there; cgroup v1's
    cpuset needs its CPUs and memory nodes set before a task may join)."""
    base = Path("/sys/fs/cgroup")
    for hierarchy in sorted(base.iterdir()):
        if not hierarchy.is_dir() or hierarchy.name == "unified" or hierarchy.is_symlink():
            continue
        top = hierarchy / f"tau-{tag}-n{i}"
        top.mkdir(exist_ok=True)
        if hierarchy.name == "cpuset":
            for knob in ("cpuset.cpus", "cpuset.mems"):
                (top / knob).write_text((hierarchy / knob).read_text())


def remove_cgroups(tag: str) -> None:
    """Each node's cgroup tree (`/tau-TAG-nI` in every hierarchy), leaves first."""
    base = Path("/sys/fs/cgroup")
    for hierarchy in base.iterdir() if base.is_dir() else []:
        for top in hierarchy.glob(f"tau-{tag}-n*"):
            for dirpath, _dirs, _files in sorted(os.walk(top), key=lambda w: -w[0].count("/")):
                with contextlib.suppress(OSError):
                    os.rmdir(dirpath)


def node_dir(net: Network, i: int) -> Path:
    return NODES_ROOT / f"{net.tag}-n{i}"


def _leftovers(work: Path, tag: str) -> list[int]:
    """Processes of the nodes that left their process groups: containerd's shims (they start
    sessions of their own, addressed by a socket under the sandbox's folder) and every
    container's processes (in a cgroup under a node's root)."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            cgroups = (proc / "cgroup").read_text()
        except OSError:
            continue
        ours = str(work) in cmdline or f"{NODES_ROOT}/{tag}-n" in cmdline
        if (ours and "containerd-shim" in cmdline) or f":/tau-{tag}-n" in cgroups:
            found.append(int(proc.name))
    return found


def kill_leftovers(work: Path, tag: str, timeout: float = 10.0) -> int:
    """SIGKILL the nodes' processes that outlived their groups; wait until they are gone."""
    import signal

    pids = _leftovers(work, tag)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and _leftovers(work, tag):
        time.sleep(0.05)
    return len(pids)


def stop_nodes(work: Path, net: Network | None) -> None:
    """After the nodes' processes are stopped: what they left (shims, containers), their
    mounts, cgroups, namespaces and routes."""
    if net is not None:
        kill_leftovers(work, net.tag)
    unmount_under(work)
    if net is not None:
        for i in range(net.nodes):
            unmount_under(node_dir(net, i))
            shutil.rmtree(node_dir(net, i), ignore_errors=True)
        with contextlib.suppress(OSError):
            NODES_ROOT.rmdir()  # the last sandbox's
            if NODES_ROOT.parent.name == "taugrid":
                NODES_ROOT.parent.rmdir()
        remove_cgroups(net.tag)
        remove_network(net)
        release_sysctls(net.tag)


def wait_ready(cp: Any, names: list[str], timeout: float = 120.0) -> None:
    """Until each real node reports Ready (its kubelet registered and its runtime answers)."""
    kube = cp.kube()
    deadline = time.monotonic() + timeout
    waiting = set(names)
    while waiting and time.monotonic() < deadline:
        for n in list(waiting):
            with contextlib.suppress(TauError):
                node = kube.get("Node", n) or {}
                conditions = (node.get("status") or {}).get("conditions") or []
                if any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions):
                    waiting.discard(n)
        if waiting:
            time.sleep(0.5)
    if waiting:
        tails = "\n".join(f"--- {n}:\n{cp.log_tail('kubelet-' + n, 15)}" for n in sorted(waiting))
        raise RuntimeError(
            f"real node(s) not Ready within {timeout:.0f}s: {', '.join(sorted(waiting))}\n{tails}"
        )
