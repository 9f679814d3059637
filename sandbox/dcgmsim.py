"""The sandbox's DCGM exporter: one loopback server that answers for every simulated GPU node.

`GET /nodes/<node>/metrics` prints what dcgm-exporter prints on that node, in its exposition
format: per GPU the fields TauGrid reads (DCGM_FI_PROF_SM_ACTIVE, DCGM_FI_PROF_GR_ENGINE_ACTIVE,
DCGM_FI_DEV_GPU_UTIL, DCGM_FI_DEV_FB_USED, DCGM_FI_DEV_POWER_USAGE, DCGM_FI_DEV_XID_ERRORS) and
a few it does not (temperature, clocks: the reader must skip them), with the labels the exporter
sets (gpu, UUID, device, modelName, Hostname, DCGM_FI_DRIVER_VERSION; pod, namespace and
container on a GPU a pod holds, as its Kubernetes mode does from the kubelet's pod-resources).

A node's GPUs are its capacity of nvidia.com/gpu; the pods on it that ask for GPUs hold them in
the order they were created. A GPU a pod holds is busy, unless the node's knob says idle.

Knobs (`tau sandbox gpu NODE ...`), kept in the node's `SIM_ANNOTATION` (JSON):
- `idle`: its pods' GPUs report ~1% SM activity (a run that holds GPUs and does nothing);
- `missing`: that many GPUs fewer registered (capacity and exporter alike: "7 of 8");
- `xid`: the last XID on GPU 0 (and NPD's GPUXidError condition, set by the knob);
- `down`: the exporter does not answer (the connection is closed);
- `garbage`: it answers something that is not its format;
- `diag_fail`: DCGM's diagnostics fail on it (the active tier);
- `nccl_gbps`: the bus bandwidth its all-reduce reaches (default `HEALTHY_NCCL_GBPS`).

It also plays the node agent for the active tier's check pods (api/gpuactive.py) on KWOK's
nodes, which KWOK leaves running (`kwokstages.py`): each ends as its real container would, its
result in its termination message, from the node's knobs.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from taugrid.api import constants as C
from taugrid.api import gpuhealth as G
from taugrid.api.gpuuse import container_gpus

SIM_ANNOTATION = "sandbox.tau.azure.com/dcgm"
KNOBS = ("idle", "missing", "xid", "down", "garbage", "diag_fail", "nccl_gbps")
HEALTHY_NCCL_GBPS = 150.0
AGENT_POLL_S = 3.0  # a LIST of the validation pods per look: each sandbox's API server pays it
DRIVER = "550.90.07"
URL_TEMPLATE = "http://127.0.0.1:{port}/nodes/{{node}}/metrics"

_HELP = {
    "DCGM_FI_DEV_GPU_TEMP": ("gauge", "GPU temperature (in C)."),
    "DCGM_FI_DEV_SM_CLOCK": ("gauge", "SM clock frequency (in MHz)."),
    "DCGM_FI_DEV_GPU_UTIL": ("gauge", "GPU utilization (in %)."),
    "DCGM_FI_DEV_FB_USED": ("gauge", "Framebuffer memory used (in MiB)."),
    "DCGM_FI_DEV_POWER_USAGE": ("gauge", "Power draw (in W)."),
    "DCGM_FI_DEV_XID_ERRORS": ("gauge", "Value of the last XID error encountered."),
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE": ("gauge", "Ratio of time the graphics engine is active."),
    "DCGM_FI_PROF_SM_ACTIVE": (
        "gauge",
        "The ratio of cycles an SM has at least 1 warp assigned.",
    ),
}


def knobs_of(node: dict[str, Any]) -> dict[str, Any]:
    raw = ((node.get("metadata") or {}).get("annotations") or {}).get(SIM_ANNOTATION)
    try:
        got = json.loads(raw) if raw else {}
    except ValueError:
        return {}
    return {k: v for k, v in got.items() if k in KNOBS} if isinstance(got, dict) else {}


def holders(pods: list[dict[str, Any]]) -> list[tuple[str, str, str]]:
    """(namespace, pod, container) per GPU index, in the order the pods were created."""
    out = []
    live = [
        p
        for p in pods
        if (p.get("status") or {}).get("phase") in ("Running", "Pending")
        and not (p.get("metadata") or {}).get("deletionTimestamp")
    ]
    live.sort(key=lambda p: (p["metadata"].get("creationTimestamp") or "", p["metadata"]["name"]))
    for p in live:
        for c in (p.get("spec") or {}).get("containers") or []:
            n = container_gpus(c)
            out += [(p["metadata"]["namespace"], p["metadata"]["name"], c["name"])] * n
    return out


def exposition(node: dict[str, Any], pods: list[dict[str, Any]]) -> str:
    """What dcgm-exporter prints on `node` now."""
    meta = node.get("metadata") or {}
    name = meta["name"]
    knobs = knobs_of(node)
    registered = int(((node.get("status") or {}).get("capacity") or {}).get(C.GPU_RESOURCE, 0))
    model = (meta.get("labels") or {}).get(G.GFD_PRODUCT, "NVIDIA-A100-SXM4-80GB")
    model = model.replace("NVIDIA-", "NVIDIA ", 1)
    held = holders(pods)
    series: dict[str, list[str]] = {k: [] for k in _HELP}
    for i in range(registered):
        uuid = "GPU-" + hashlib.sha1(f"{name}/{i}".encode()).hexdigest()[:32]
        labels = (
            f'gpu="{i}",UUID="{uuid}",device="nvidia{i}",modelName="{model}",'
            f'Hostname="{name}",DCGM_FI_DRIVER_VERSION="{DRIVER}"'
        )
        pod = held[i] if i < len(held) else None
        if pod:
            labels += f',container="{pod[2]}",namespace="{pod[0]}",pod="{pod[1]}"'
        sm = (0.01 if knobs.get("idle") else 0.6 + 0.05 * (i % 4)) if pod else 0.0
        busy = bool(pod) and not knobs.get("idle")
        values = {
            "DCGM_FI_DEV_GPU_TEMP": 62 if busy else 34,
            "DCGM_FI_DEV_SM_CLOCK": 1410 if busy else 210,
            "DCGM_FI_DEV_GPU_UTIL": 100 if busy else 0,
            "DCGM_FI_DEV_FB_USED": 40960 if busy else (2048 if pod else 0),
            "DCGM_FI_DEV_POWER_USAGE": 310.5 if busy else 61.25,
            "DCGM_FI_DEV_XID_ERRORS": int(knobs.get("xid") or 0) if i == 0 else 0,
            "DCGM_FI_PROF_GR_ENGINE_ACTIVE": min(1.0, sm + 0.05) if pod else 0.0,
            "DCGM_FI_PROF_SM_ACTIVE": sm,
        }
        for field, v in values.items():
            series[field].append(f"{field}{{{labels}}} {v}")
    lines = []
    for field, rows in series.items():
        kind, text = _HELP[field]
        lines += [f"# HELP {field} {text}", f"# TYPE {field} {kind}", *rows]
    return "\n".join(lines) + "\n"


class _Handler(BaseHTTPRequestHandler):
    kube: Any = None

    def do_GET(self) -> None:
        parts = self.path.strip("/").split("/")
        if parts == ["healthz"]:
            self._answer(b"ok\n")
            return
        if len(parts) != 3 or parts[0] != "nodes" or parts[2] != "metrics":
            self.send_error(404, "GET /nodes/<node>/metrics")
            return
        try:
            node = self.kube.get("Node", parts[1])
        except Exception as e:  # the API server is going away with the sandbox
            self.send_error(503, str(e)[:200])
            return
        if node is None:
            self.send_error(404, f"no node {parts[1]}")
            return
        knobs = knobs_of(node)
        if knobs.get("down"):
            self.close_connection = True
            self.connection.close()  # answers nothing: the reader sees the connection drop
            return
        if knobs.get("garbage"):
            body = b"<html><body>502 Bad Gateway</body></html>\n"
        else:
            pods = self.kube.list("Pod", None, None, {"spec.nodeName": parts[1]})
            body = exposition(node, pods).encode()
        self._answer(body)

    def _answer(self, body: bytes) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        return


def set_knobs(kube: Any, node: str, changes: dict[str, Any], now: str) -> dict[str, Any]:
    """Turn a simulated GPU node's knobs (`changes`: knob -> value, None to clear), and what the
    cluster would show with them: `missing` lowers its nvidia.com/gpu capacity, `xid` sets NPD's
    GPUXidError condition (and its event). Returns the knobs now."""
    from taugrid.api.errors import EXIT_USAGE, TauError

    body = kube.get("Node", node)
    if body is None:
        raise TauError(f"no node {node!r} in the sandbox", exit_code=EXIT_USAGE)
    labels = (body.get("metadata") or {}).get("labels") or {}
    declared = int(labels.get(G.GFD_COUNT) or 0)
    if not declared:
        raise TauError(
            f"{node} is not a simulated GPU node (no {G.GFD_COUNT} label): the knobs are for the "
            "stack's GPU pools' nodes",
            exit_code=EXIT_USAGE,
        )
    knobs = {**knobs_of(body), **changes}
    knobs = {k: v for k, v in knobs.items() if v not in (None, False, 0)}
    if knobs.get("missing", 0) >= declared:
        raise TauError(
            f"--missing {knobs['missing']}: {node} has {declared} GPUs; at most {declared - 1} "
            "can go missing",
            exit_code=EXIT_USAGE,
        )
    kube.merge_patch(
        "Node",
        node,
        None,
        {"metadata": {"annotations": {SIM_ANNOTATION: json.dumps(knobs) if knobs else None}}},
        "tau-sandbox",
    )
    if "missing" in changes:
        gpus = str(declared - int(knobs.get("missing") or 0))
        status = {"capacity": {C.GPU_RESOURCE: gpus}, "allocatable": {C.GPU_RESOURCE: gpus}}
        _node_status(kube, node, status, "tau-sandbox-gpus")
    if "xid" in changes:
        xid = int(knobs.get("xid") or 0)
        cond = {
            "type": C.XID_CONDITION,
            "status": "True" if xid else "False",
            "reason": "GPUXidFatal" if xid else "NoGPUXid",
            "message": f"NVRM: Xid (PCI:0000:00:00): {xid}" if xid else "no fatal XID",
            "lastTransitionTime": now,
            "lastHeartbeatTime": now,
        }
        _node_status(kube, node, {"conditions": [cond]}, "tau-sandbox-xid")
        if xid:
            kube.create(_xid_event(node, xid, now), "tau-sandbox")
    return knobs


def _node_status(kube: Any, node: str, status: dict[str, Any], manager: str) -> None:
    """Server-side apply, one manager per knob: a manager's next apply drops what it owned and
    did not send again (the capacity would go when the XID knob is turned)."""
    kube.apply_status(
        {"apiVersion": "v1", "kind": "Node", "metadata": {"name": node}, "status": status},
        manager,
    )


def _xid_event(node: str, xid: int, now: str) -> dict[str, Any]:
    """The event NPD's XID monitor posts (on the node, in `default`)."""
    stamp = now.replace(":", "").replace("-", "").lower()
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": f"{node}.xid{xid}.{stamp}", "namespace": "default"},
        "involvedObject": {"apiVersion": "v1", "kind": "Node", "name": node, "uid": node},
        "reason": G.XID_EVENT_REASON,
        "message": f"NVRM: Xid (PCI:0000:00:00): {xid}, simulated by tau sandbox gpu",
        "type": "Warning",
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
        "source": {"component": "node-problem-detector", "host": node},
    }


def check_result(pod: dict[str, Any], node: dict[str, Any] | None) -> tuple[int, str]:
    """What a check pod's container would end with on `node`: exit code, termination message."""
    from taugrid.api import gpuactive as A

    knobs = knobs_of(node or {})
    check = ((pod.get("metadata") or {}).get("labels") or {}).get(A.LABEL_CHECK)
    if check == "nccl":
        return 0, json.dumps({"busbw_gbps": float(knobs.get("nccl_gbps") or HEALTHY_NCCL_GBPS)})
    if knobs.get("diag_fail"):
        detail = "Memory: Fail - GPU 0: DCGM_FR_FAULTY_MEMORY (simulated)"
        return 226, json.dumps({"passed": False, "detail": detail})
    return 0, json.dumps({"passed": True, "detail": ""})


def finish_checks(kube: Any) -> int:
    """End the running check pods as their containers would; how many were ended."""
    from taugrid.api import gpuactive as A

    ended = 0
    for pod in kube.list("Pod", A.VALIDATION_NAMESPACE):
        meta, st = pod["metadata"], pod.get("status") or {}
        if st.get("phase") != "Running" or meta.get("deletionTimestamp"):
            continue
        node = kube.get("Node", (pod.get("spec") or {}).get("nodeName") or "")
        code, message = check_result(pod, node)
        now = meta.get("creationTimestamp")
        term = {"exitCode": code, "reason": "Completed" if code == 0 else "Error"}
        statuses = [
            {
                "name": c["name"],
                "image": c["image"],
                "ready": False,
                "started": False,
                "restartCount": 0,
                "state": {
                    "terminated": {**term, "message": message, "startedAt": now, "finishedAt": now}
                },
            }
            for c in (pod.get("spec") or {}).get("containers") or []
        ]
        patch = {
            "status": {
                "phase": "Succeeded" if code == 0 else "Failed",
                "containerStatuses": statuses,
            }
        }
        kube.merge_patch("Pod", meta["name"], meta["namespace"], patch, "tau-sandbox-agent", True)
        ended += 1
    return ended


def _agent(kube: Any, stop: threading.Event) -> None:
    while not stop.wait(AGENT_POLL_S):
        try:
            finish_checks(kube)
        except Exception:  # the API server is going away with the sandbox: try again, or stop
            continue


def serve(kubeconfig: str, port: int, ready: threading.Event | None = None) -> None:
    from taugrid.kube.client import Kube

    kube = Kube(kubeconfig=kubeconfig)
    threading.Thread(target=_agent, args=(kube, threading.Event()), daemon=True).start()
    handler = type("Handler", (_Handler,), {"kube": kube})
    server = ThreadingHTTPServer(("127.0.0.1", port), handler)
    server.daemon_threads = True
    if ready is not None:
        ready.set()
    server.serve_forever()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--kubeconfig", required=True)
    p.add_argument("--port", type=int, required=True)
    a = p.parse_args()
    serve(a.kubeconfig, a.port)


if __name__ == "__main__":
    main()
