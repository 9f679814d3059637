"""Rendering: a resolved run -> the exact Kubernetes objects a cluster receives. Pure.

`rayjob` -> a KubeRay `RayJob` (ray.io/v1) with a CPU-only control head and one worker group;
`job` -> a suspended `batch/v1` Job. Both carry the run labels on the workload and on every pod
template, mount the workspace PVC at /data and the code snapshot at /code, and inject the env
contract. The code travels in an immutable ConfigMap rendered first.
"""

from __future__ import annotations

import base64
import copy
import json
import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from taugrid.api import constants as C
from taugrid.api import naming, yamlio
from taugrid.api.manifest import TORCHRUN_PORT, Manifest
from taugrid.api.quantity import format_memory
from taugrid.api.vocabulary import ResolvedInput
from taugrid.runs.codebundle import CodeBundle, helpers_digest, text_of
from taugrid.runs.resolve import Resolved

_RAY_VERSION = re.compile(r"ray[-_]?(\d+\.\d+\.\d+)")
DSHM_MAX = 16 * 2**30


@dataclass(frozen=True)
class RunMeta:
    """Facts about one submission that are not in tau.yaml."""

    run_id: str
    submitter: str = "unknown"
    code_revision: str = "unknown"
    resume_from: str | None = None
    # the MultiKueue worker it must run on (a resume's: its parent's checkpoint is on that
    # worker's volume); None: any
    cluster: str | None = None
    attempt: int = 0
    inputs: tuple[ResolvedInput, ...] = ()  # data inputs, resolved at submit


def labels(r: Resolved, run_id: str) -> dict[str, str]:
    out = {
        C.LABEL_RUN_ID: run_id,
        C.LABEL_RUN_NAME: r.manifest.name,
        C.LABEL_WORKSPACE: r.workspace.name,
        C.LABEL_PROFILE: r.profile.name,
        C.LABEL_MANAGED_BY: C.MANAGED_BY_VALUE,
        C.LABEL_WORKLOAD_KIND: r.kind,
        C.KUEUE_QUEUE_LABEL: r.queue,
    }
    if r.priority:
        out[C.KUEUE_PRIORITY_LABEL] = r.priority
    exp = r.manifest.experiment.name or r.manifest.research.experiment
    if exp:
        out[C.LABEL_EXPERIMENT] = exp
    return out


def contract_env(
    r: Resolved, meta: RunMeta, data_dir: str = C.DATA_DIR, registry_dir: str | None = None
) -> dict[str, str]:
    """The TAU_* env every process of the run sees (also used by the local backend). With data
    inputs: which versions (TAU_INPUTS), the registry they are in (the workspace volume's
    /data/registry on a cluster) and where the run sees them (TAU_INPUT_DIR)."""
    m = r.manifest
    rdir = C.run_dir(meta.run_id, data_dir)
    env = {
        C.ENV_RUN_ID: meta.run_id,
        C.ENV_RUN_NAME: m.name,
        C.ENV_WORKSPACE: r.workspace.name,
        C.ENV_DATA_DIR: data_dir,
        C.ENV_RUN_DIR: rdir,
        C.ENV_CHECKPOINT_DIR: f"{rdir}/{m.checkpoint_subdir}",
        C.ENV_OUTPUT_DIR: f"{rdir}/{m.output_subdir}",
        C.ENV_METRICS_FILE: f"{rdir}/{C.METRICS_FILENAME}",
        C.ENV_NUM_WORKERS: str(r.workers),
        C.ENV_GPUS_PER_WORKER: str(r.gpus),
        C.ENV_WORLD_SIZE: str(
            r.workers * (m.nproc_per_node if m.launcher == "torchrun" else max(r.gpus, 1))
        ),
        C.ENV_ATTEMPT: str(meta.attempt),
    }
    if meta.resume_from:
        env[C.ENV_RESUME_FROM] = meta.resume_from
    if meta.inputs:
        import tau_inputs

        env[tau_inputs.INPUTS_ENV] = json.dumps(
            [i.model_dump(exclude={"ref"}) for i in meta.inputs], separators=(",", ":")
        )
        env[tau_inputs.REGISTRY_DIR_ENV] = registry_dir or f"{data_dir}/{C.REGISTRY_SUBDIR}"
        env[tau_inputs.INPUT_DIR_ENV] = f"{rdir}/inputs"
    if m.run.smoke_pairs is not None:
        env["TAU_SMOKE_PAIRS"] = str(m.run.smoke_pairs)
    if m.launcher == "torchrun":
        env[C.ENV_LAUNCHER] = "torchrun"
        env[C.ENV_NPROC_PER_NODE] = str(m.nproc_per_node)
    elif m.launcher in ("ray-train", "ray-tune"):
        env[C.ENV_LAUNCHER] = m.launcher
        env[C.ENV_RAY_FUNCTION] = m.function
        if m.launcher == "ray-tune":
            env[C.ENV_TUNE] = json.dumps(m.sweep().model_dump(mode="json"), separators=(",", ":"))
    return env


def _env_list(r: Resolved, meta: RunMeta) -> list[dict[str, Any]]:
    m = r.manifest
    user = m.runtime.env_items()
    user_names = {e.name for e in user} | set(m.runtime.env_from_secret)
    out: list[dict[str, Any]] = [{"name": k, "value": v} for k, v in contract_env(r, meta).items()]
    for k, v in (("PYTHONPATH", C.CODE_DIR), ("PYTHONUNBUFFERED", "1")):
        if k not in user_names:
            out.append({"name": k, "value": v})
    for e in user:
        out.append(e.model_dump(exclude_none=True))
    for name, ref in sorted(m.runtime.env_from_secret.items()):
        secret, _, key = ref.partition(":")
        out.append({"name": name, "valueFrom": {"secretKeyRef": {"name": secret, "key": key}}})
    return out


def _copy_env(env: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A container's own env list (entries copied; only a valueFrom is nested)."""
    return [
        {k: (copy.deepcopy(v) if isinstance(v, dict) else v) for k, v in e.items()} for e in env
    ]


def pod_command(m: Manifest) -> str:
    """What a cluster run's driver (RayJob) or Job container runs: the entrypoint under
    tau_launch.py (carried in the code), which keeps the evidence record on the PVC and seals it.
    torchrun: tau_launch starts `torchrun` with the node's rank and the rendezvous from the env."""
    ep = m.entrypoint_path or ""
    if m.launcher == "torchrun":
        runner = ["--torchrun", "--"]
    elif m.launcher in ("ray-train", "ray-tune"):
        runner = ["--", "python", "tau_ray.py"]  # the driver calls run.function of the entrypoint
    else:
        runner = ["--", "bash" if ep.endswith(".sh") else "python"]
    if m.workload_kind() == "rayjob":  # the driver's output also in the head pod's log
        runner = ["--container-log", *runner]
    argv = " ".join(shlex.quote(a) for a in ["python", "tau_launch.py", *runner, ep, *m.run.args])
    return f"cd {shlex.quote(C.CODE_DIR)} && exec {argv}"


def command_script(
    m: Manifest, code_dir: str = C.CODE_DIR, python: str = "python", helper_dir: str | None = None
) -> str:
    """The shell a local run's driver runs (its supervisor keeps the record): the log teed.
    `helper_dir`: where tau's helpers (tau_ray.py) are when they are not in the code."""
    if m.launcher == "torchrun":
        return torchrun_local_script(m, code_dir, python)
    ep = m.entrypoint_path or ""
    runner = [python] if not ep.endswith(".sh") else ["bash"]
    if m.launcher in ("ray-train", "ray-tune"):
        runner = [python, f"{helper_dir}/tau_ray.py" if helper_dir else "tau_ray.py"]
    argv = " ".join(shlex.quote(a) for a in [*runner, ep, *m.run.args])
    return "\n".join(
        [
            "set -o pipefail",
            'mkdir -p "$TAU_RUN_DIR/logs" "$TAU_CHECKPOINT_DIR" "$TAU_OUTPUT_DIR"',
            f"cd {shlex.quote(code_dir)}",
            f'{argv} 2>&1 | tee -a "$TAU_RUN_DIR/logs/driver.log"',
        ]
    )


# A free port on 127.0.0.1 for a rendezvous torchrun binds seconds later, picked as
# taugrid.host.ports does (in the run's Python, which may not have taugrid): TAUGRID_PORT_RANGE,
# else below the kernel's ephemeral range, where no outgoing connection takes it meanwhile;
# the kernel's pick if neither holds one.
LOCAL_FREE_PORT_PY = """
import os, random, socket
try:
    lo, _, hi = os.environ.get("TAUGRID_PORT_RANGE", "").partition("-")
    span = range(int(lo), int(hi) + 1)
except ValueError:
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            span = range(20000, int(f.read().split()[0]))
    except (OSError, ValueError, IndexError):
        span = range(0)
ports = random.sample(span, min(len(span), 200)) + [0]
for port in ports:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            continue
        print(s.getsockname()[1])
        break
""".strip()


def torchrun_local_script(m: Manifest, code_dir: str, python: str) -> str:
    """A torchrun job on this machine: `compute.workers` local nodes on 127.0.0.1, each its own
    torchrun agent with its node rank, meeting at a c10d rendezvous that node 0 hosts on a free
    port. Each node's output goes to `$TAU_RUN_DIR/nodes/<i>/driver.log` and, prefixed with
    `[node i]`, to the run's log. The first node that fails stops the others (its exit code is
    the run's): a job never waits for a node that is gone. bash's `wait -n` can answer 127
    (nothing left to wait for) when it reaped a node already that ended at about the same time
    as another (9 of 150 stubbed runs of two nodes): a 127 no node reported is that, not a
    failure, and the run's code then comes from the codes the nodes wrote
    (`nodes/<i>/exit.json`)."""
    n, p, py = m.nodes, m.nproc_per_node, shlex.quote(python)
    script = " ".join(shlex.quote(a) for a in [m.entrypoint_path or "", *m.run.args])
    free_port = LOCAL_FREE_PORT_PY
    node = (
        f"{py} -m torch.distributed.run --nnodes={n} --nproc-per-node={p} --node-rank=$i "
        f'--rdzv-backend=c10d --rdzv-endpoint=127.0.0.1:$port --rdzv-id="$TAU_RUN_ID" '
        f"--rdzv-conf=is_host=$host {script}"
    )
    return "\n".join(
        [
            "set -o pipefail",
            'mkdir -p "$TAU_RUN_DIR/logs" "$TAU_CHECKPOINT_DIR" "$TAU_OUTPUT_DIR"',
            f"cd {shlex.quote(code_dir)}",
            f"port=$({py} -c {shlex.quote(free_port)}) || exit 1",
            f"export TAU_NODES={n} MASTER_ADDR=127.0.0.1 MASTER_PORT=$port",
            "pids=()",
            f"for i in $(seq 0 {n - 1}); do",
            # (a retry's exit.json removed)
            '  mkdir -p "$TAU_RUN_DIR/nodes/$i"; rm -f "$TAU_RUN_DIR/nodes/$i/exit.json"',
            "  host=0; [ $i = 0 ] && host=1",
            f'  ( export TAU_NODE_RANK=$i; {node} 2>&1 | tee -a "$TAU_RUN_DIR/nodes/$i/driver.log" '
            '| sed -u "s/^/[node $i] /" | tee -a "$TAU_RUN_DIR/logs/driver.log"; '
            'rc=${PIPESTATUS[0]}; printf \'{"exit_code": %s}\\n\' "$rc" > '
            '"$TAU_RUN_DIR/nodes/$i/exit.json"; '
            "exit $rc ) &",
            "  pids+=($!)",
            "done",
            # the codes the nodes that ended wrote, one a line (no pipeline: pipefail is on)
            'codes() { for f in "$TAU_RUN_DIR"/nodes/*/exit.json; do'
            ' [ -f "$f" ] && tr -dc \'0-9\\n\' < "$f"; done; return 0; }',
            "rc=0",
            f"for _ in $(seq 1 {n}); do",
            "  wait -n; s=$?",
            '  if [ $s -eq 127 ] && ! grep -qx 127 <<< "$(codes)"; then break; fi  # none left to '
            "wait for",
            "  if [ $s -ne 0 ]; then rc=$s; trap '' TERM; kill -TERM 0 2>/dev/null; break; fi",
            "done",
            "wait",
            "if [ $rc -eq 0 ]; then rc=$(grep -vx -e 0 -e '' <<< \"$(codes)\" | head -n 1); fi",
            "exit ${rc:-0}",
        ]
    )


def _configmap(
    name: str,
    namespace: str,
    labels: dict[str, str],
    annotations: dict[str, str],
    files: tuple[tuple[str, bytes], ...],
    keyed_by_name: bool = False,
) -> tuple[dict[str, Any], list[dict[str, str]]]:
    """An immutable ConfigMap of files, and the volume items that lay them out (keys `f0000`..,
    or the file names themselves where they are plain names)."""
    data: dict[str, str] = {}
    binary: dict[str, str] = {}
    items: list[dict[str, str]] = []
    for i, (rel, content) in enumerate(files):
        key = rel if keyed_by_name else f"f{i:04d}"
        text = text_of(content)
        if text is None:
            binary[key] = base64.b64encode(content).decode()
        else:
            data[key] = text
        items.append({"key": key, "path": rel})
    cm: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": labels,
            "annotations": annotations,
        },
        "immutable": True,
        "data": data,
    }
    if binary:
        cm["binaryData"] = binary
    return cm, items


def _run_configmap(
    r: Resolved, meta: RunMeta, bundle: CodeBundle, files: tuple[tuple[str, bytes], ...]
) -> tuple[dict[str, Any], list[dict[str, str]]]:
    run_labels = {k: v for k, v in labels(r, meta.run_id).items() if k.startswith(C.GROUP)}
    return _configmap(
        naming.code_configmap(meta.run_id),
        r.namespace,
        run_labels,
        {C.ANN_CODE_DIGEST: bundle.digest},
        files,
    )


def code_configmap(
    r: Resolved, meta: RunMeta, bundle: CodeBundle
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The run's code ConfigMap with every file of the bundle (helpers too), and the source of
    the `code` volume that mounts it."""
    cm, items = _run_configmap(r, meta, bundle, bundle.files)
    return cm, _source(cm, items)


def _source(cm: dict[str, Any], items: list[dict[str, str]]) -> dict[str, Any]:
    """A volume source (or a projection's) of a ConfigMap's items."""
    return {"configMap": {"name": cm["metadata"]["name"], "items": items}}


# the labels of a namespace's helpers ConfigMap: no owner, so no run's end deletes what the
# others mount (one per TauGrid version and namespace, ~40 KB; left in place)
SHARED_HELPERS = {C.LABEL_MANAGED_BY: C.MANAGED_BY_VALUE, C.LABEL_SHARED: "helpers"}


def code_objects(
    r: Resolved, meta: RunMeta, bundle: CodeBundle, shared: bool
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The ConfigMaps a run's code needs, and the `code` volume's source. `shared`: the helpers
    every run of this TauGrid carries (~40 KB) are one ConfigMap per namespace, named by their
    content (first in the list, marked by `is_shared`), and the run's own holds only the
    folder's files; a projected volume lays both out as one folder, as before."""
    if not shared:
        cm, source = code_configmap(r, meta, bundle)
        return [cm], source
    own, helpers = bundle.split_helpers()
    cm, items = _run_configmap(r, meta, bundle, own)
    if not helpers:  # the folder has its own copy of every helper
        return [cm], _source(cm, items)
    name = naming.helpers_configmap(helpers_digest(helpers))
    shared_cm, shared_items = _configmap(
        name, r.namespace, SHARED_HELPERS, {}, helpers, keyed_by_name=True
    )
    sources = [_source(shared_cm, shared_items)]
    if items:
        sources.append(_source(cm, items))
    return [shared_cm, cm], {"projected": {"sources": sources}}


def is_shared(obj: dict[str, Any]) -> bool:
    """A shared object of a namespace (the helpers ConfigMap): no run owns it."""
    labels: dict[str, str] = obj["metadata"].get("labels") or {}
    return (
        obj["kind"] == "ConfigMap" and labels.get(C.LABEL_SHARED) == SHARED_HELPERS[C.LABEL_SHARED]
    )


def _fresh(code: dict[str, Any]) -> dict[str, Any]:
    """The `code` volume's source, its dicts new for each pod template (the item lists, never
    changed after rendering, are shared: a deep copy cost a render ~25%)."""
    if "projected" in code:
        return {
            "projected": {
                "sources": [{"configMap": {**s["configMap"]}} for s in code["projected"]["sources"]]
            }
        }
    return {"configMap": {**code["configMap"]}}


def _volumes(
    r: Resolved, meta: RunMeta, code: dict[str, Any], shm: int
) -> tuple[list[Any], list[Any]]:
    volumes: list[dict[str, Any]] = [
        {"name": "data", "persistentVolumeClaim": {"claimName": r.pvc}},
        {"name": "code", **_fresh(code)},
        {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": format_memory(shm)}},
    ]
    mounts: list[dict[str, Any]] = [
        {"name": "data", "mountPath": C.DATA_DIR},
        {"name": "code", "mountPath": C.CODE_DIR, "readOnly": True},
        {"name": "dshm", "mountPath": "/dev/shm"},
    ]
    for mt in r.manifest.storage.mounts:
        volumes.append(
            {
                "name": mt.name,
                "persistentVolumeClaim": {"claimName": mt.pvc, "readOnly": mt.readOnly},
            }
        )
        mounts.append({"name": mt.name, "mountPath": mt.mountPath, "readOnly": mt.readOnly})
    return volumes, mounts


def _gpu_resources(r: Resolved, base: dict[str, dict[str, str]]) -> dict[str, dict[str, str]]:
    if r.gpus:
        base["requests"][r.gpu_resource] = str(r.gpus)
        base["limits"][r.gpu_resource] = str(r.gpus)
    return base


def _on(meta: RunMeta, node_selector: dict[str, str]) -> dict[str, str]:
    """A pod's node selector: the profile's, and the worker the run is pinned to."""
    if meta.cluster is None:
        return node_selector
    return {**node_selector, C.LABEL_CLUSTER: meta.cluster}


def _pod_spec(
    r: Resolved,
    containers: list[dict[str, Any]],
    volumes: list[Any],
    node_selector: dict[str, str],
    tolerations: list[dict[str, Any]],
    restart_policy: str | None,
) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": containers, "volumes": volumes}
    if restart_policy:
        spec["restartPolicy"] = restart_policy
    if node_selector:
        spec["nodeSelector"] = dict(node_selector)
    if tolerations:
        spec["tolerations"] = tolerations
    if r.workspace.serviceAccount:
        spec["serviceAccountName"] = r.workspace.serviceAccount
    return spec


def _metadata(r: Resolved, meta: RunMeta, bundle: CodeBundle) -> dict[str, Any]:
    ann = {
        C.ANN_CONFIG_HASH: r.manifest.config_hash(),
        C.ANN_SUBMITTER: meta.submitter,
        C.ANN_CODE_REVISION: meta.code_revision,
        C.ANN_CODE_DIGEST: bundle.digest,
    }
    if r.profile_set_hash:
        ann[C.ANN_PROFILE_SET_HASH] = r.profile_set_hash
    if meta.resume_from:
        ann[C.ANN_RESUME_FROM] = meta.resume_from
    return {
        "name": meta.run_id,
        "namespace": r.namespace,
        "labels": labels(r, meta.run_id),
        "annotations": ann,
    }


def ray_version(image: str) -> str:
    m = _RAY_VERSION.search(image.rsplit("/", 1)[-1])
    return m.group(1) if m else C.DEFAULT_RAY_VERSION


def pip_yaml(pip: list[str]) -> str:
    """Ray's runtime env `{pip: [...]}` as YAML: each printable ASCII requirement as a JSON
    string (a YAML double-quoted scalar), else through the YAML emitter (~50x the cost)."""
    if pip and all(p.isascii() and p.isprintable() for p in pip):
        return "pip:\n" + "".join(f"- {json.dumps(p)}\n" for p in pip)
    return yamlio.dump({"pip": pip})


def ray_cluster_spec(
    r: Resolved,
    meta: RunMeta,
    code: dict[str, Any],
    env: list[dict[str, Any]],
    pod_labels: dict[str, str],
    group: str = "workers",
) -> dict[str, Any]:
    """A RayCluster spec (a RayJob's `rayClusterSpec`, a RayService's `rayClusterConfig`): a
    CPU-only head and one worker group of `r.workers` pods of the resolved size."""
    return {
        "rayVersion": ray_version(r.named_image or r.image),
        "enableInTreeAutoscaling": False,  # (Kueue admits fixed sizes only)
        "headGroupSpec": _head_group(r, meta, code, env, pod_labels),
        "workerGroupSpecs": [_worker_group(r, meta, code, env, pod_labels, group)],
    }


def _head_group(
    r: Resolved,
    meta: RunMeta,
    code: dict[str, Any],
    env: list[dict[str, Any]],
    pod_labels: dict[str, str],
) -> dict[str, Any]:
    """The head: no CPU nor GPU for Ray's tasks (it schedules them), on the profile's head
    nodes."""
    volumes, mounts = _volumes(r, meta, code, 2 * 2**30)
    container = {
        "name": "ray-head",
        "image": r.image,
        "env": env,
        "resources": r.profile.head.resources(),
        "ports": [
            {"containerPort": 6379, "name": "gcs"},
            {"containerPort": 8265, "name": "dashboard"},
            {"containerPort": 10001, "name": "client"},
        ],
        "volumeMounts": mounts,
    }
    tolerations = [t.to_k8s() for t in r.profile.headTolerations]
    return {
        "rayStartParams": {"num-cpus": "0", "num-gpus": "0", "dashboard-host": "0.0.0.0"},
        "template": {
            "metadata": {"labels": dict(pod_labels)},
            "spec": _pod_spec(
                r, [container], volumes, _on(meta, r.profile.headNodeSelector), tolerations, None
            ),
        },
    }


def _worker_group(
    r: Resolved,
    meta: RunMeta,
    code: dict[str, Any],
    env: list[dict[str, Any]],
    pod_labels: dict[str, str],
    group: str,
) -> dict[str, Any]:
    """`r.workers` workers of the resolved size, fixed (Kueue admits fixed sizes)."""
    shm = min(DSHM_MAX, r.worker.memory_request // 2)
    volumes, mounts = _volumes(r, meta, code, max(shm, 64 * 2**20))
    container = {
        "name": "ray-worker",
        "image": r.image,
        "env": _copy_env(env),
        "resources": _gpu_resources(r, r.worker.resources()),
        "volumeMounts": mounts,
    }
    tolerations = [t.to_k8s() for t in r.profile.tolerations]
    num_cpus = max(1, int(r.worker.cpu_request))
    return {
        "groupName": group,
        "replicas": r.workers,
        "minReplicas": r.workers,
        "maxReplicas": r.workers,
        "numOfHosts": 1,
        "rayStartParams": {"num-cpus": str(num_cpus), "num-gpus": str(r.gpus)},
        "template": {
            "metadata": {"labels": dict(pod_labels)},
            "spec": _pod_spec(
                r, [container], volumes, _on(meta, r.profile.nodeSelector), tolerations, None
            ),
        },
    }


def render_rayjob(
    r: Resolved, meta: RunMeta, bundle: CodeBundle, shared: bool = False
) -> list[dict[str, Any]]:
    cms, code = code_objects(r, meta, bundle, shared)
    m = r.manifest
    spec: dict[str, Any] = {
        "suspend": True,
        "shutdownAfterJobFinishes": True,
        "ttlSecondsAfterFinished": 0,
        "submissionMode": "HTTPMode",
        "backoffLimit": 0,
        "entrypoint": "bash -c " + shlex.quote(pod_command(m)),
        "rayClusterSpec": ray_cluster_spec(
            r, meta, code, _env_list(r, meta), labels(r, meta.run_id)
        ),
    }
    if m.runtime.pip:
        spec["runtimeEnvYAML"] = pip_yaml(list(m.runtime.pip))
    rayjob = {
        "apiVersion": "ray.io/v1",
        "kind": "RayJob",
        "metadata": _metadata(r, meta, bundle),
        "spec": spec,
    }
    return [*cms, rayjob]


def render_job(
    r: Resolved, meta: RunMeta, bundle: CodeBundle, shared: bool = False
) -> list[dict[str, Any]]:
    cms, code = code_objects(r, meta, bundle, shared)
    m = r.manifest
    volumes, mounts = _volumes(
        r, meta, code, max(min(DSHM_MAX, r.worker.memory_request // 2), 64 * 2**20)
    )
    script = pod_command(m)
    if m.runtime.pip:
        pip = " ".join(shlex.quote(p) for p in m.runtime.pip)
        script = (
            f"python -m pip install --quiet --no-cache-dir {pip} || python -m pip install --quiet "
            f"--user {pip}\n" + script
        )
    container = {
        "name": "main",
        "image": r.image,
        "command": ["bash", "-c", script],
        "workingDir": C.CODE_DIR,
        "env": _env_list(r, meta),
        "resources": _gpu_resources(r, r.worker.resources()),
        "volumeMounts": mounts,
    }
    pod = _pod_spec(
        r,
        [container],
        volumes,
        _on(meta, r.profile.nodeSelector),
        [t.to_k8s() for t in r.profile.tolerations],
        "Never",
    )
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": _metadata(r, meta, bundle),
        "spec": {
            "suspend": True,
            "backoffLimit": m.resilience.max_retries,
            **job_failure_policy(m.resilience.max_retries, m.resilience.retry_on),
            "completions": 1,
            "parallelism": 1,
            "ttlSecondsAfterFinished": C.JOB_TTL_SECONDS,
            "template": {"metadata": {"labels": labels(r, meta.run_id)}, "spec": pod},
        },
    }
    if m.launcher != "torchrun" or r.workers == 1:
        return [*cms, job]
    return [*cms, *torchrun_nodes(r, meta, job)]


def torchrun_nodes(r: Resolved, meta: RunMeta, job: dict[str, Any]) -> list[dict[str, Any]]:
    """A torchrun job over `workers` nodes: an Indexed Job (a pod per index, all admitted by
    Kueue as one workload), one pod per host, and a headless Service that gives index 0 a stable
    name for the c10d rendezvous (`MASTER_ADDR`)."""
    n, service = r.workers, naming.ranks_service(meta.run_id)
    spec = job["spec"]
    spec.update(completionMode="Indexed", completions=n, parallelism=n)
    pod = spec["template"]["spec"]
    pod["subdomain"] = service  # index i answers as <job>-<i>.<service>
    pod["affinity"] = {
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {
                    "labelSelector": {"matchLabels": {C.LABEL_RUN_ID: meta.run_id}},
                    "topologyKey": "kubernetes.io/hostname",
                },
            ]
        }
    }
    env = pod["containers"][0]["env"]
    env += [
        {"name": C.ENV_NODES, "value": str(n)},
        {"name": "MASTER_ADDR", "value": f"{meta.run_id}-0.{service}.{r.namespace}.svc"},
        {"name": "MASTER_PORT", "value": str(TORCHRUN_PORT)},
    ]
    pod["containers"][0]["ports"] = [{"name": "rendezvous", "containerPort": TORCHRUN_PORT}]
    svc = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": service,
            "namespace": r.namespace,
            "labels": {
                k: v
                for k, v in labels(r, meta.run_id).items()
                if not k.startswith("kueue.x-k8s.io/")
            },
        },  # (not a workload)
        "spec": {
            "clusterIP": "None",  # headless: a DNS name per pod
            "publishNotReadyAddresses": True,  # the rendezvous starts before any pod is Ready
            "selector": {C.LABEL_RUN_ID: meta.run_id},
            "ports": [{"name": "rendezvous", "port": TORCHRUN_PORT, "targetPort": TORCHRUN_PORT}],
        },
    }
    return [svc, job]


def job_failure_policy(max_retries: int, retry_on: Sequence[str]) -> dict[str, Any]:
    """`resilience` as the Job's own retries: `backoffLimit` attempts, and a podFailurePolicy
    that counts a failure as retryable only for the reasons in `retry_on` (any other fails the
    Job at once). A pod evicted from a node (a drain, the controller's GPU quarantine, a
    preemption) carries DisruptionTarget; exit code 137 is the OOM killer's."""
    if max_retries == 0:
        return {}

    def action(retried: bool) -> str:
        return "Count" if retried else "FailJob"

    disrupted = bool({"Preempted", "Evicted", "NodeFailure"} & set(retry_on))
    return {
        "podFailurePolicy": {
            "rules": [
                {
                    "action": action(disrupted),
                    "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}],
                },
                {
                    "action": action("OOMKilled" in retry_on),
                    "onExitCodes": {"containerName": "main", "operator": "In", "values": [137]},
                },
                {
                    "action": action("Failed" in retry_on),
                    "onExitCodes": {"containerName": "main", "operator": "NotIn", "values": [0]},
                },
            ]
        }
    }


def render_taurun(r: Resolved, meta: RunMeta, parent: str | None = None) -> dict[str, Any]:
    """The TauRun: the run's record in the cluster and the owner of its objects."""
    from taugrid.api.crds import TauRunSpec

    m = r.manifest
    spec = TauRunSpec(
        runId=meta.run_id,
        runName=m.name,
        workspace=r.workspace.name,
        profile=r.profile.name,
        workloadKind=r.kind,
        configHash=m.config_hash(),
        submitter=meta.submitter,
        codeRevision=meta.code_revision,
        attempt=meta.attempt,
        workers=r.workers,
        gpusPerWorker=r.gpus,
        manifest=m.model_dump(mode="json", exclude_defaults=True),
        resumeFrom=meta.resume_from or None,
        parentRun=parent or None,
        inputs=list(meta.inputs),
    ).model_dump(mode="json", exclude_none=True)  # its model: what the CRD's schema is made of
    if not meta.inputs:
        del spec["inputs"]
    return {
        "apiVersion": C.API_VERSION,
        "kind": "TauRun",
        "metadata": {
            "name": meta.run_id,
            "namespace": r.namespace,
            "labels": labels(r, meta.run_id),
        },
        "spec": spec,
    }


def render(
    r: Resolved, meta: RunMeta, bundle: CodeBundle, shared_helpers: bool = False
) -> list[dict[str, Any]]:
    """All objects of one run, in apply order (the code ConfigMaps first). `shared_helpers`:
    TauGrid's helpers are in a namespace's shared ConfigMap (`code_objects`), not in the run's."""
    if r.kind == "rayjob":
        return render_rayjob(r, meta, bundle, shared_helpers)
    return render_job(r, meta, bundle, shared_helpers)
