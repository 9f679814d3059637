"""Helpers of the e2e tests that drive the sandbox through the real CLI."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from conftest import run_tau as tau
from kubekit import wait_until


def kube_env(home: Path, who: str = "researcher") -> dict[str, str]:
    """The environment of `tau` as `who` on the sandbox of `home`. The kubeconfig's path is
    asked of `tau sandbox kubeconfig` once per state of the sandbox (again when its state file
    changes: an identity added, the sandbox started again): every status look of a wait would
    otherwise start a second `tau` process."""
    state = home / "sandbox" / "state.json"  # which identities there are, and their kubeconfigs
    key = (home, who, state.stat().st_mtime_ns if state.exists() else 0)
    if key not in _KUBECONFIGS:
        res = tau(home, "sandbox", "kubeconfig", "--as", who)
        if res.returncode != 0:  # not up: as before, no kubeconfig (and nothing remembered)
            return {"KUBECONFIG": "", "TAU_TARGET": "kube"}
        _KUBECONFIGS[key] = res.stdout.strip()
    return {"KUBECONFIG": _KUBECONFIGS[key], "TAU_TARGET": "kube"}


_KUBECONFIGS: dict[tuple[Path, str, int], str] = {}


def status(home: Path, run_id: str) -> dict[str, Any]:
    res = tau(home, "run", "status", run_id, "-o", "json", env=kube_env(home))
    assert res.returncode in (0, 1), res.stderr
    return dict(json.loads(res.stdout))


def sig(st: dict[str, Any], name: str) -> dict[str, Any]:
    return next(s for s in st["signals"] if s["name"] == name)


def submit(home: Path, folder: Path, *args: str) -> str:
    res = tau(home, "run", str(folder), "-d", *args, env=kube_env(home))
    assert res.returncode == 0, res.stderr
    return res.stdout.strip()


def admin(home: Path) -> Any:
    from kubernetes import config, dynamic

    kc = tau(home, "sandbox", "kubeconfig").stdout.strip()
    return dynamic.DynamicClient(config.new_client_from_config(config_file=kc))


def volumes(home: Path) -> list[Path]:
    """The host folders of this sandbox's volumes (with real nodes, the workspace volume is one):
    never a glob of /tmp/hostpath_pv, which may hold another sandbox's or a killed one's."""
    from taugrid.sandbox.cluster import volume_dirs

    kc = tau(home, "sandbox", "kubeconfig").stdout.strip()
    return volume_dirs(kc)


def on_volumes(home: Path, pattern: str) -> list[Path]:
    """Files matching `pattern` on this sandbox's volumes only."""
    return [p for v in volumes(home) for p in v.glob(pattern)]


def gpu_rayjob(folder: Path, name: str, extra: str = "", runs_for: int = 86400) -> Path:
    """A one-GPU RayJob project (a CPU head and one a100x1-sized worker; KWOK runs both). The
    sandbox's Ray job runs for `runs_for` seconds (SANDBOX_RUN_SECONDS): by default until
    the test is over, so a test sees it running."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "train.py").write_text("print('hi')\n")
    (folder / "tau.yaml").write_text(
        f"schema_version: 1\nname: {name}\nrun: {{entrypoint: train.py, workload_kind: rayjob}}\n"
        "compute: {gpus: 1, workers: 1, worker_cpus: 8, worker_memory: 32Gi}\n"
        "runtime: {image: rayproject/ray:2.56.0-py312-gpu, "
        f"env: {{SANDBOX_RUN_SECONDS: '{runs_for}'}}}}\n{extra}"
    )
    return folder


def cpu_job(folder: Path, name: str, env: dict[str, str] | None = None, extra: str = "") -> Path:
    """A one-pod CPU Job project. KWOK completes its pod at once, or as `env` says: after
    SANDBOX_RUN_SECONDS, failed if SANDBOX_RESULT=FAILED."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "s.py").write_text("print('done')\n")
    (folder / "tau.yaml").write_text(
        f"schema_version: 1\nname: {name}\nrun: {{entrypoint: s.py, workload_kind: job}}\n"
        "compute: {gpus: 0, cpus: 1, memory: 1Gi}\n"
        f"runtime: {{image: python:3.12-slim, env: {json.dumps(env or {})}}}\n{extra}"
    )
    return folder


def new_gpu_node(name: str, gpus: str = "2", knobs: dict[str, Any] | None = None) -> dict[str, Any]:
    """A GPU node of pool a100x2 as it registers: the pool's taints and the validating one, the
    GPU Operator's labels, `gpus` allocatable (2 declared), and the sandbox's GPU knobs."""
    from taugrid.api import constants as C
    from taugrid.api import gpuhealth as G
    from taugrid.sandbox.dcgmsim import SIM_ANNOTATION

    annotations = {"kwok.x-k8s.io/node": "fake"}
    if knobs:
        annotations[SIM_ANNOTATION] = json.dumps(knobs)
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": annotations,
            "labels": {
                C.LABEL_POOL: "a100x2",
                C.LABEL_GPU_CLASS: "a100-80gb-2x",
                G.GFD_PRODUCT: "NVIDIA-A100-SXM4-80GB",
                G.GFD_COUNT: "2",
                "kubernetes.io/hostname": name,
                "type": "kwok",
            },
        },
        "spec": {
            "taints": [
                {"key": C.GPU_TAINT_KEY, "value": C.GPU_TAINT_VALUE, "effect": "NoSchedule"},
                {"key": C.VALIDATING_TAINT, "value": "passive", "effect": "NoSchedule"},
            ]
        },
        "status": {
            "capacity": {"cpu": "44", "memory": "396Gi", "pods": "110", "nvidia.com/gpu": "2"},
            "allocatable": {"cpu": "44", "memory": "396Gi", "pods": "110", "nvidia.com/gpu": gpus},
        },
    }


# --- real nodes (tau sandbox up --real-nodes N) ------------------------------------------------
def _why_not() -> str | None:
    from taugrid.sandbox import realnodes
    from taugrid.sandbox.controlplane import binaries_dir

    if binaries_dir() is None:
        return "the control plane is not built (make controlplane)"
    if not (binaries_dir() / "kubelet").is_file():  # type: ignore[operator]
        return "the kubelet is not built (make controlplane)"
    return realnodes.can_run()


def need_real_nodes() -> None:
    why = _why_not()
    if why is None:
        return
    if os.environ.get("TAU_REQUIRE_REAL_NODES") == "1":
        pytest.fail(f"real nodes cannot run here: {why}")
    pytest.skip(f"real nodes cannot run here: {why}")


def project(
    folder: Path,
    name: str,
    script: str,
    extra: str = "",
    compute: str = "{gpus: 0, cpus: 0.5, memory: 512Mi}",
) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "main.py").write_text(script)
    (folder / "tau.yaml").write_text(
        f"schema_version: 1\nname: {name}\nrun: {{entrypoint: main.py, workload_kind: job}}\n"
        f"compute: {compute}\nruntime: {{image: python:3.12-slim}}\n{extra}"
    )
    return folder


def wait_phase(home: Path, run_id: str, phases: set[str], timeout: float = 240) -> dict[str, Any]:
    got: dict[str, Any] = {}

    def done() -> bool:
        got.update(status(home, run_id))
        return got.get("phase") in phases

    wait_until(done, timeout=timeout, what=f"run {run_id} to be one of {sorted(phases)}")
    return got


def resumed_after_a_fault(home: Path, folder: Path) -> tuple[str, str]:
    """A run of `folder` that fails at step 15 after its checkpoint at step 10, then `tau run
    resume` of it: the child succeeds, says it starts after step 10, and the lineage's metrics
    are one curve, 1 to 20. (parent, child)"""
    parent = submit(home, folder)
    assert wait_phase(home, parent, {"Succeeded", "Failed"})["phase"] == "Failed"
    res = tau(home, "run", "resume", parent, "-d", env=kube_env(home))
    assert res.returncode == 0, res.stderr
    child = res.stdout.strip().splitlines()[-1]
    st = wait_phase(home, child, {"Succeeded", "Failed"})
    logs = tau(home, "run", "logs", child, env=kube_env(home)).stdout
    assert st["phase"] == "Succeeded", (st, logs)
    assert "starting after step 10" in logs, logs
    rows = json.loads(tau(home, "run", "metrics", child, "-o", "json", env=kube_env(home)).stdout)
    assert [(r["step"], r["run_id"]) for r in rows] == [
        *((i, parent) for i in range(1, 11)),
        *((i, child) for i in range(11, 21)),
    ]
    return parent, child


READS_CORPUS = (
    "import os\n"
    "words = open(os.path.join(os.environ['TAU_INPUT_DIR'], 'corpus', 'part-0.txt')).read()\n"
    "print('read', len(words.split()), 'words')\n"
)


def corpus_reader(home: Path, folder: Path, name: str) -> tuple[Path, str]:
    """A three-word dataset `corpus` registered on the researcher's machine (`home`), and a Job
    project that names its exact version as input and prints "read 3 words" from where the run
    finds it: (the project, the version)."""
    (folder / "corpus").mkdir(parents=True)
    (folder / "corpus" / "part-0.txt").write_text("alpha beta gamma\n")
    reg = tau(home, "data", "dataset", "register", "corpus", str(folder / "corpus"), "-o", "json")
    assert reg.returncode == 0, reg.stderr
    version = str(json.loads(reg.stdout)["version"])
    extra = f"data: {{inputs: [{{ref: corpus@{version}}}]}}\n"
    return project(folder / "p", name, READS_CORPUS, extra=extra), version


def need_control_plane_and_pulumi() -> None:
    """Skips unless the control plane and the Pulumi engine are built (`make e2e` builds both)."""
    from taugrid.api.errors import TauError
    from taugrid.infra import engine
    from taugrid.sandbox.controlplane import binaries_dir

    if binaries_dir() is None:
        pytest.skip("the control plane is not built: `make e2e` builds it")
    try:
        engine.find_bin()
    except TauError:
        pytest.skip("the Pulumi engine is not built: `make pulumi` builds it")
