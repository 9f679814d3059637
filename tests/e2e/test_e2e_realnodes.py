"""Runs that execute: the sandbox's real nodes (kubelet, containerd, runc, CNI, kube-proxy in a
network namespace each), with the images built here (`make images`), running what TauGrid renders
for AKS, the image mirror aside. And the host as it was after `tau sandbox down`.

Where the machine cannot run real nodes (not root, no containerd, no images) these tests skip,
unless TAU_REQUIRE_REAL_NODES=1 (`make e2e` sets it): then that is a failure."""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import TAU
from conftest import run_tau as tau
from kubekit import wait_until
from sandboxkit import (
    admin,
    corpus_reader,
    kube_env,
    need_real_nodes,
    on_volumes,
    project,
    resumed_after_a_fault,
    sig,
    submit,
    wait_phase,
)

from taugrid.api import constants as C
from taugrid.api import naming
from taugrid.sandbox import realnodes

pytestmark = pytest.mark.e2e


# --- the host, before and after -----------------------------------------------------------------
def _run(*cmd: str) -> str:
    return subprocess.run(cmd, capture_output=True, text=True, check=False).stdout


def _sysctls() -> dict[str, str]:
    out = {}
    for line in _run("sysctl", "-a").splitlines():
        key, sep, value = line.partition(" = ")
        if sep:
            out[key] = value
    return out


def _cgroups() -> set[str]:
    base = Path("/sys/fs/cgroup")
    return {str(p) for h in base.iterdir() if h.is_dir() for p in h.iterdir() if p.is_dir()}


def _processes(home: Path) -> set[str]:
    """Processes of anything a sandbox runs: its binaries, containerd's shims, pods' cgroups."""
    found = set()
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmd = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            cg = (proc / "cgroup").read_text()
        except OSError:
            continue
        if str(home) in cmd or "containerd" in cmd or "kubelet" in cmd or ":/tau-" in cg:
            found.add(f"{proc.name} {cmd[:120]}")
    return found


def host_facts(home: Path) -> dict[str, Any]:
    return {
        "processes": _processes(home),
        "mounts": {
            line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()
        },
        "netns": set(_run("ip", "netns", "list").split()),
        "links": set(re.findall(r"^\d+: ([^:@]+)", _run("ip", "-o", "link"), re.M)),
        "routes": set(_run("ip", "route", "show", "table", "all").splitlines()),
        "iptables": set(_run("iptables-save").splitlines()) - {""},
        "cgroups": _cgroups(),
        "node folders": set(map(str, realnodes.NODES_ROOT.glob("*"))),
    }


def _steady(facts: dict[str, Any]) -> dict[str, Any]:
    # iptables-save's comment lines carry a date
    return {**facts, "iptables": {x for x in facts["iptables"] if not x.startswith("#")}}


def volatile_sysctls() -> set[str]:
    """Kernel values that change on their own (counters, random, timestamps): read twice apart."""
    a = _sysctls()
    time.sleep(0.5)  # two readings apart, not a wait for anything
    b = _sysctls()
    counters = (
        "fs.quota.",
        "fs.dentry-state",
        "fs.file-nr",
        "fs.inode-",
        "kernel.random.",
        "kernel.ns_last_pid",
    )
    return {k for k in a if a.get(k) != b.get(k) or k.startswith(counters)}


# --- the sandbox with a real node ---------------------------------------------------------------
@pytest.fixture(scope="module")
def real(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    need_real_nodes()
    home = tmp_path_factory.mktemp("realhome")
    kept = realnodes.read_sysctls()  # what the kubelet changes at start
    # two: a torchrun job's pods go one per node
    res = tau(home, "sandbox", "up", "--real-nodes", "2", timeout=900)
    assert res.returncode == 0, res.stdout + res.stderr
    yield home
    assert tau(home, "sandbox", "down", timeout=300).returncode == 0
    if not any(realnodes.HOST_RECORD.glob("holder-*")):  # no other sandbox holds them
        assert realnodes.read_sysctls() == kept, "the host's kernel settings came back"


def example(tmp_path: Path, name: str, tau_yaml: str) -> Path:
    """An example's train.py, unchanged, with a tau.yaml for the real nodes."""
    import shutil

    folder = tmp_path / name
    folder.mkdir()
    shutil.copy(Path(__file__).parents[2] / "examples" / name / "train.py", folder)
    (folder / "tau.yaml").write_text(tau_yaml)
    return folder


def run_to_end(home: Path, folder: Path, timeout: float) -> tuple[str, dict[str, Any], str]:
    """(run id, its final status, its log) of a run submitted and waited for to its end."""
    run_id = submit(home, folder)
    st = wait_phase(home, run_id, {"Succeeded", "Failed"}, timeout=timeout)
    return run_id, st, tau(home, "run", "logs", run_id, env=kube_env(home)).stdout


def test_up_says_which_nodes_are_real(real: Path) -> None:
    doc = json.loads(tau(real, "sandbox", "status", "-o", "json").stdout)
    assert doc["real_nodes"] == ["cpu-0", "cpu-1"] and "cpu-0" not in doc["nodes"]
    running = {c["component"] for c in doc["components"] if c["running"]}
    for node in ("cpu-0", "cpu-1"):
        assert {f"kubelet-{node}", f"containerd-{node}", f"kube-proxy-{node}"} <= running


def test_a_cpu_job_runs_its_code_on_the_real_node_and_says_what_it_printed(
    real: Path, tmp_path: Path
) -> None:
    script = (
        "import os, socket, sys\n"
        "print('hello from', socket.gethostname(), sys.version_info[:2])\n"
        "out = os.environ['TAU_OUTPUT_DIR']\n"
        "os.makedirs(out, exist_ok=True)\n"
        "open(os.path.join(out, 'answer.txt'), 'w').write('42')\n"
        "try:\n    socket.getaddrinfo('example.com', 80)\n    print('OUTSIDE RESOLVED')\n"
        "except OSError as e:\n    print('outside name: refused', type(e).__name__)\n"
    )
    run_id = submit(real, project(tmp_path / "p", "hello", script))
    st = wait_phase(real, run_id, {"Succeeded", "Failed"})
    assert st["phase"] == "Succeeded", st
    assert re.search(r"on cpu-[01]\b", sig(st, "Scheduled")["reason"]), st
    logs = tau(real, "run", "logs", run_id, env=kube_env(real)).stdout
    assert "hello from" in logs and "(3, 11)" in logs  # the runtime image's python, not KWOK
    # a name outside the cluster fails at once inside a pod: nothing reaches the host's resolver
    assert "outside name: refused" in logs and "OUTSIDE RESOLVED" not in logs
    # the record the pod sealed on the workspace's volume (a real folder here) verifies
    from taugrid.runs.evidence import RunDir

    sealed = [p.parent for p in on_volumes(real, f"runs/{run_id}/MANIFEST.sha256")]
    assert len(sealed) == 1, sealed
    n, problems = RunDir(sealed[0]).verify()
    assert not problems and n >= 4, problems
    assert (sealed[0] / "outputs" / "answer.txt").read_text() == "42"


def _pod_record(real: Path, run_id: str) -> Path:
    """The record the run's pod sealed on the workspace's volume (a real folder here)."""
    sealed = [p.parent for p in on_volumes(real, f"runs/{run_id}/MANIFEST.sha256")]
    assert len(sealed) == 1, sealed
    return sealed[0]


def test_the_quickstart_cpu_variant_forms_a_ray_cluster_of_real_pods_and_seals_its_record(
    real: Path, tmp_path: Path
) -> None:
    """The quickstart's code, unchanged, as a CPU RayJob: a head and a worker pod on the real
    node form a Ray cluster (the head has no CPUs for tasks, so every gradient runs on the
    worker: without it the run never ends), KubeRay submits the entrypoint to the real head,
    metrics and checkpoints land on /data, and the record the pod sealed verifies."""
    folder = example(
        tmp_path,
        "quickstart",
        (
            "schema_version: 1\nname: quickstart-cpu\n"
            "run: {entrypoint: train.py, workload_kind: rayjob}\n"
            "compute: {gpus: 0, workers: 1, cpus: 1, memory: 2Gi}\n"
            "runtime:\n  image: rayproject/ray:2.56.0-py312-cpu\n"
            "  env: [{name: QUICKSTART_STEPS, value: '20'}]\n"
        ),
    )
    run_id, st, logs = run_to_end(real, folder, timeout=600)
    assert st["phase"] == "Succeeded", (st, logs[-3000:])
    assert "fitting y = 3x + 2 on 1 worker(s), 20 steps" in logs and "done: w=" in logs, logs
    rec = _pod_record(real, run_id)
    from taugrid.runs.evidence import RunDir

    n, problems = RunDir(rec).verify()
    assert not problems and n >= 4, problems
    steps = [json.loads(line)["step"] for line in (rec / "metrics.jsonl").read_text().splitlines()]
    assert steps == list(range(1, 21))
    index = json.loads((rec / "checkpoints" / "index.json").read_text())
    assert [e["step"] for e in index["complete"]] == [10, 20]
    res = tau(real, "run", "verify", run_id, env=kube_env(real))
    assert res.returncode == 0, res.stdout + res.stderr


def test_a_jobs_data_input_is_laid_out_from_the_workspace_registry_and_checked(
    real: Path, tmp_path: Path
) -> None:
    """A dataset registered on the researcher's machine is copied at submit into the workspace's
    registry, which with real nodes is the workspace volume's /data/registry: the pod lays the
    exact version out, checks it, and the code reads it. A version whose bytes changed in the
    registry stops the run before its code, with the reason."""
    folder, _ = corpus_reader(real, tmp_path, "withdata")
    run_id = submit(real, folder)
    st = wait_phase(real, run_id, {"Succeeded", "Failed"})
    logs = tau(real, "run", "logs", run_id, env=kube_env(real)).stdout
    assert st["phase"] == "Succeeded", (st, logs)
    assert "read 3 words" in logs, logs
    # the registry the pod read is the workspace volume's (a real folder here)
    stored = on_volumes(real, "registry/datasets/corpus/versions/*.json")
    assert len(stored) == 1, stored
    # bytes changed in the workspace's registry: the next run stops before its code, and says why
    blobs = [p for p in stored[0].parents[3].glob("blobs/sha256/*/*") if p.is_file()]
    packs = [p for p in stored[0].parents[3].glob("packs/*.pack")]
    target = blobs[0] if blobs else packs[0]
    target.write_bytes(target.read_bytes().replace(b"alpha", b"omega"))
    run_id = submit(real, folder)
    st = wait_phase(real, run_id, {"Succeeded", "Failed"})
    assert st["phase"] == "Failed" and st["termination_reason"] == "Failed", st
    logs = tau(real, "run", "logs", run_id, env=kube_env(real)).stdout
    assert "part-0.txt changed in the registry" in logs and "read 3 words" not in logs, logs


PROGRESS_SCRIPT = """
import os, time, tau_run
for step in range(1, 31):
    tau_run.log(step, loss=(step - 20) ** 2 / 100 + 0.1)  # lowest at step 20
    if step % 10 == 0:
        with tau_run.checkpoint(step) as d:
            (d / "weights.bin").write_bytes(os.urandom(1 << 20))
    print("step", step, flush=True)
    time.sleep(1)
os.makedirs(os.environ["TAU_OUTPUT_DIR"], exist_ok=True)
open(os.path.join(os.environ["TAU_OUTPUT_DIR"], "answer.txt"), "w").write("42")
"""


def test_a_cluster_run_s_progress_is_live_and_its_results_reach_another_machine(
    real: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run that logs 30 steps over ~30 s, a checkpoint every 10: `tau run status --watch`
    shows its step and newest checkpoint moving while it runs (read from the workspace volume
    through its file server). After it ends, a second TAU_HOME (a teammate's machine: it never
    saw the run) reads its curve, pulls its whole record verified, and reads its log from the
    volume once its pods are gone."""
    metric = "metrics: {primary: loss, direction: lower}\n"
    run_id = submit(real, project(tmp_path / "p", "progress", PROGRESS_SCRIPT, metric))
    res = tau(
        real, "run", "status", run_id, "--watch", "-o", "json", env=kube_env(real), timeout=300
    )
    docs = [json.loads(line) for line in res.stdout.splitlines()]
    assert docs and docs[-1]["phase"] == "Succeeded", (res.stderr, docs[-1:])
    running = [d for d in docs if d["phase"] == "Running"]
    steps = [d["last_step"] for d in running if d.get("last_step") is not None]
    assert len(set(steps)) >= 3 and steps == sorted(steps), steps  # it moved, forward
    assert all(sig(d, "Progressing")["state"] == "true" for d in running if d.get("last_step"))
    saved = {sig(d, "ArtifactSaved")["reason"] for d in running}
    assert any("(step 10)" in r for r in saved) and any("(step 20)" in r for r in saved), saved
    final = sig(docs[-1], "ArtifactSaved")["reason"]
    assert "3 complete checkpoint(s)" in final and "record sealed" in final, final

    other = tmp_path / "teammate"  # another machine: its own TAU_HOME
    rows = json.loads(tau(other, "run", "metrics", run_id, "-o", "json", env=kube_env(real)).stdout)
    assert [r["step"] for r in rows] == list(range(1, 31))
    pulled = tau(
        other,
        "run",
        "pull",
        run_id,
        "--to",
        str(tmp_path / "got"),
        "-o",
        "json",
        env=kube_env(real),
    )
    assert pulled.returncode == 0, pulled.stderr
    got = json.loads(pulled.stdout)
    assert got["ok"] and got["sealed"] and got["verified"] == got["files"] - 1, got
    from taugrid.runs.evidence import RunDir

    assert RunDir(tmp_path / "got").verify()[1] == []
    assert (tmp_path / "got" / "outputs" / "answer.txt").read_text() == "42"
    assert len(list((tmp_path / "got" / "checkpoints").glob("step-*/weights.bin"))) == 3

    # its newest checkpoint as a model, in the workspace's registry (the volume's own folder
    # here): registered where the run left it, with its lineage
    reg = tau(
        other,
        "data",
        "model",
        "register",
        "progress-model",
        "--from-run",
        run_id,
        "--checkpoint",
        "best",
        "-o",
        "json",
        env=kube_env(real),
    )
    assert reg.returncode == 0, reg.stderr
    model = json.loads(reg.stdout)
    assert "where the run left it" in reg.stderr, reg.stderr
    assert model["lineage"]["run"] == run_id and model["lineage"]["checkpoint"] == "step-00000020"
    assert on_volumes(real, "registry/models/progress-model/versions/*.json")

    # the portal's page of the run, on the teammate's machine: its curve drawn (in Chromium where
    # `make browser` installed it, as CI does before `make e2e`) and its checkpoints listed
    monkeypatch.setenv("TAU_HOME", str(other))
    monkeypatch.setenv("KUBECONFIG", kube_env(real)["KUBECONFIG"])
    # each file of that checkpoint hashed on the volume by the real file server (what a copy
    # into an az:// registry inside its storage account is checked with, the bytes never
    # leaving the cluster): the digests of the files the pull brought and verified
    import hashlib

    from taugrid.client import runs as client_runs

    checked = client_runs.check_in_place(run_id, "checkpoints/step-00000020")
    here = tmp_path / "got" / "checkpoints" / "step-00000020"
    assert [(rel, sha) for rel, _size, sha in checked.files] == [
        (p.relative_to(here).as_posix(), hashlib.sha256(p.read_bytes()).hexdigest())
        for p in sorted(here.rglob("*"))
        if p.is_file()
    ]
    text, drawn = portal_page(f"/runs/{run_id}")
    assert "step-00000030" in text and "answer.txt" in text and "loss" in text
    assert drawn is None or drawn > 100, drawn  # the curve's width on screen, in pixels

    api = admin(real)  # the pods go (as they do on AKS when a node is recycled)
    pods = api.resources.get(api_version="v1", kind="Pod")
    for pod in pods.get(namespace="research", label_selector=f"job-name={run_id}").items:
        pods.delete(name=pod.metadata.name, namespace="research", grace_period_seconds=0)
    wait_until(
        lambda: not pods.get(namespace="research", label_selector=f"job-name={run_id}").items,
        timeout=120,
        what="the run's pods to be gone",
    )
    logs = tau(other, "run", "logs", run_id, env=kube_env(real))
    assert logs.returncode == 0, logs.stderr
    assert "from the volume of workspace research" in logs.stderr and "step 30" in logs.stdout


def portal_page(path: str) -> tuple[str, float | None]:
    """(the page's text, the width of its first chart's curve on screen) from the portal on a
    loopback port, read by Chromium when it is installed (else the page's HTML, and None)."""
    import shutil
    import socket
    import threading

    import uvicorn

    from taugrid.portal.app import Settings, create_app

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(create_app(Settings()), log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        wait_until(lambda: server.started or not thread.is_alive(), 30, "the portal to start")
        url = f"http://127.0.0.1:{port}{path}"
        chromium = os.environ.get("TAU_CHROMIUM") or shutil.which("chromium")
        try:
            from playwright.sync_api import sync_playwright
        except ImportError:
            chromium = None
        if not chromium:
            import urllib.request

            with urllib.request.urlopen(url, timeout=60) as resp:
                return resp.read().decode(), None
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
            page = browser.new_page(viewport={"width": 1200, "height": 800})
            page.goto(url, timeout=60_000)
            box = page.locator("svg.chart polyline.series").first.bounding_box()
            text = page.content()
            browser.close()
        return text, box["width"] if box else 0.0
    finally:
        server.should_exit = True
        thread.join(timeout=10)


RESUMABLE = """
import sys, tau_run
start = tau_run.resume_step()
print("starting after step", start, flush=True)
for step in range(start + 1, 21):
    tau_run.log(step, loss=1.0 / step)
    if step % 10 == 0:
        with tau_run.checkpoint(step) as d:
            (d / "state.txt").write_text(str(step))
    if step == 15 and start == 0:
        sys.exit("a fault at step 15")
"""


def test_resume_of_a_cluster_run_continues_from_its_checkpoint_on_the_volume(
    real: Path, tmp_path: Path
) -> None:
    """A run that fails at step 15 after a checkpoint at step 10; `tau run resume` starts a new
    run whose pod resolves the parent's newest checkpoint on the volume: its steps go on from 11,
    and the metrics of the lineage are one curve, 1 to 20."""
    folder = project(tmp_path / "p", "resumable", RESUMABLE, "resilience: {max_retries: 0}\n")
    resumed_after_a_fault(real, folder)


SERVE_APP = """
import os
from pathlib import Path
from ray import serve
from starlette.requests import Request


@serve.deployment
class Files:
    def __init__(self) -> None:
        root = Path(os.environ["TAU_MODEL_DIR"])
        self.files = sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())

    async def __call__(self, request: Request) -> dict:
        got = await request.json() if request.method == "POST" else None
        return {"files": self.files, "got": got}


app = Files.bind()
"""


def test_a_cluster_run_s_checkpoint_served_on_the_real_node_answers_the_host(
    real: Path, tmp_path: Path
) -> None:
    """A run's checkpoint on the volume, deployed with `tau serve deploy --from-run` as a
    RayService (head and replica pods on the real node, Ray Serve deployed through KubeRay's
    own dashboard client), answers `tau serve invoke` from the host through the API server's
    service proxy, with the researcher's credentials."""
    script = (
        "import tau_run\n"
        "with tau_run.checkpoint(1) as d:\n    (d / 'weights.txt').write_text('w=7')\n"
        "tau_run.log(1, loss=0.5)\n"
    )
    run_id = submit(real, project(tmp_path / "train", "tiny", script))
    assert wait_phase(real, run_id, {"Succeeded", "Failed"})["phase"] == "Succeeded"
    svc = tmp_path / "svc"
    svc.mkdir()
    (svc / "serve_app.py").write_text(SERVE_APP)
    (svc / "tau.yaml").write_text(
        "schema_version: 1\nname: tiny-svc\nruntime: {image: rayproject/ray:2.56.0-py312-cpu}\n"
        "service: {import_path: 'serve_app:app', cpus: 0.5, memory: 1Gi, replicas: 1, "
        "readiness_path: /}\n"
    )
    env = kube_env(real)
    res = tau(
        real,
        "serve",
        "deploy",
        str(svc),
        "--from-run",
        run_id,
        "--target",
        "kube",
        "-o",
        "json",
        env=env,
        timeout=600,
    )
    try:
        assert res.returncode == 0, res.stderr
        st = json.loads(res.stdout)
        assert st["phase"] == "Ready" and "simulated" not in st["summary"], st
        # the checkpoint is registered in the workspace's registry where the run left it
        assert "where the run left it" in res.stderr, res.stderr
        assert "through this machine" not in res.stderr and "copying model" not in res.stderr
        answer = tau(real, "serve", "invoke", "tiny-svc", "--data", '{"x": 1}', env=env)
        assert answer.returncode == 0, answer.stderr
        doc = json.loads(answer.stdout)
        assert doc == {"files": ["weights.txt"], "got": {"x": 1}}, doc
    finally:
        assert tau(real, "serve", "delete", "tiny-svc", env=env, timeout=300).returncode == 0


def test_torchrun_across_two_real_nodes_all_reduces_over_gloo(real: Path, tmp_path: Path) -> None:
    """The DDP example, unchanged, on 2 nodes: an Indexed Job of 2 pods, one per real node, whose
    torchrun processes meet through the c10d rendezvous on node 0's name (the headless
    Service's, answered by the sandbox's cluster.local DNS) and all-reduce gradients with gloo
    across the pods; rank 0 checks that both replicas ended with the same weights."""
    folder = example(
        tmp_path,
        "torchrun-ddp",
        (
            "schema_version: 1\nname: ddp\n"
            "run: {entrypoint: train.py, launcher: torchrun, args: ['--steps', '20']}\n"
            "compute: {workers: 2, gpus: 0, cpus: 0.5, memory: 1Gi}\n"
            "runtime: {image: pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime}\n"
        ),
    )
    run_id, st, logs = run_to_end(real, folder, timeout=420)
    assert st["phase"] == "Succeeded", (st, logs[-3000:])
    assert "cpu-0" in sig(st, "Scheduled")["reason"] and "cpu-1" in sig(st, "Scheduled")["reason"]
    assert "world 2:" in logs and "replicas equal: True" in logs, logs
    rows = json.loads(tau(real, "run", "metrics", run_id, "-o", "json", env=kube_env(real)).stdout)
    assert [r["step"] for r in rows] == list(range(1, 21))


def test_a_pod_over_its_memory_limit_is_oomkilled_and_status_says_so(
    real: Path, tmp_path: Path
) -> None:
    script = "x = []\nwhile True:\n    x.append(bytearray(16 * 2**20))\n"
    folder = project(
        tmp_path / "p",
        "hog",
        script,
        "resilience: {max_retries: 0}\n",
        compute="{gpus: 0, cpus: 0.5, memory: 256Mi}",
    )
    run_id = submit(real, folder)
    st = wait_phase(real, run_id, {"Succeeded", "Failed"})
    assert st["phase"] == "Failed" and st["termination_reason"] == "OOMKilled", st
    text = tau(real, "run", "status", run_id, env=kube_env(real)).stdout
    assert "out of memory" in text and "memory limit 256Mi" in text, text


BIG_OUTPUT = """
import os, tau_run
block = os.urandom(8 << 20)
with open(tau_run.output_dir() / "big.bin", "wb") as f:
    for _ in range(64):
        f.write(block)
"""


def test_a_pull_killed_mid_file_and_a_file_server_replaced_then_pulled_again_is_whole(
    real: Path, tmp_path: Path
) -> None:
    """#40's faults on real nodes: a pull killed with SIGKILL in the middle of a 512 MiB file,
    then the workspace's file server pod deleted (evicted, as on a node drain): the next pull
    waits for its replacement, reads on from the bytes that arrived and ends with every file
    verified against the sealed manifest."""
    run_id = submit(real, project(tmp_path / "p", "big", BIG_OUTPUT))
    assert wait_phase(real, run_id, {"Succeeded", "Failed"})["phase"] == "Succeeded"
    other = {**kube_env(real), "TAU_HOME": str(tmp_path / "teammate")}
    dest = tmp_path / "got"
    part = dest / "outputs" / "big.bin.tau-part"
    said = tmp_path / "cut.stderr"
    with said.open("w") as err:
        cut = subprocess.Popen(
            [TAU, "run", "pull", run_id, "--to", str(dest)],
            env={**os.environ, **other},
            stdout=subprocess.DEVNULL,
            stderr=err,
        )
    try:
        wait_until(
            lambda: (part.exists() and part.stat().st_size > 0) or cut.poll() is not None,
            timeout=300,
            what="the pull to be in the middle of the big file",
        )
    finally:
        cut.kill()
        cut.wait()
    assert cut.returncode == -9, "the pull ended before it was cut: " + said.read_text()
    arrived = part.stat().st_size
    assert 0 < arrived < 512 << 20
    pods = admin(real).resources.get(api_version="v1", kind="Pod")
    server = f"app.kubernetes.io/name={naming.FILES_SERVICE}"
    replaced = [
        p.metadata.name for p in pods.get(namespace="research", label_selector=server).items
    ]
    for name in replaced:
        pods.delete(name=name, namespace="research")
    again = tau(
        tmp_path / "teammate",
        "run",
        "pull",
        run_id,
        "--to",
        str(dest),
        "-o",
        "json",
        env=other,
        timeout=600,
    )
    assert again.returncode == 0, again.stderr
    got = json.loads(again.stdout)
    assert got["ok"] and got["resumed"] == 1 and got["bad"] == [] and got["missing"] == [], got
    assert got["verified"] == got["files"] - 1, got  # all but the manifest itself
    assert (dest / "outputs" / "big.bin").stat().st_size == 512 << 20 and not part.exists()
    wait_until(  # the replaced pod is gone, its processes with it: nothing left for the next test
        lambda: not {p.metadata.name for p in pods.get(namespace="research").items} & set(replaced),
        timeout=120,
        what="the replaced file server pod to be gone",
    )


def test_cancel_mid_run_stops_its_processes_and_frees_the_node(real: Path, tmp_path: Path) -> None:
    script = "import time\nprint('started', flush=True)\ntime.sleep(3600)\n"
    run_id = submit(real, project(tmp_path / "p", "sleeper", script))
    wait_phase(real, run_id, {"Running"})
    wait_until(
        lambda: "started" in tau(real, "run", "logs", run_id, env=kube_env(real)).stdout,
        timeout=120,
        what="the sleeper to start",
    )
    sleeping = [p for p in _processes(Path("/nonexistent")) if "main.py" in p]
    assert sleeping, "the run's process is on this machine (in the node's cgroup)"
    pods = admin(real).resources.get(api_version="v1", kind="Pod")
    node = next(
        p.spec.nodeName
        for p in pods.get(namespace="research").items
        if p.metadata.labels.get(C.LABEL_RUN_ID) == run_id
    )
    assert _cpu_requested(pods, node, run_id)[1] > 0, "the run holds CPU on its node"
    res = tau(real, "run", "cancel", run_id, env=kube_env(real))
    assert res.returncode == 0, res.stderr
    wait_until(
        lambda: not [p for p in _processes(Path("/nonexistent")) if "main.py" in p],
        timeout=120,
        what="the cancelled run's processes to be gone",
    )
    assert wait_phase(real, run_id, {"Cancelled"})["phase"] == "Cancelled"
    wait_until(  # the scheduler's view: nothing of the run holds the node's CPU any more
        lambda: _cpu_requested(pods, node, run_id)[1] == 0,
        timeout=120,
        what="the cancelled run's CPU on its node to be free",
    )


def _cpu_requested(pods: Any, node: str, run_id: str) -> tuple[float, float]:
    """(CPU cores requested on `node` by pods that still hold it, of which by `run_id`'s)."""
    total = mine = 0.0
    for p in pods.get(field_selector=f"spec.nodeName={node}").items:
        if p.status.phase in ("Succeeded", "Failed"):
            continue  # an ended pod holds nothing the scheduler counts
        cpu = 0.0
        for c in p.spec.containers:
            want = str(((c.resources or {}).get("requests") or {}).get("cpu") or "0")
            cpu += float(want[:-1]) / 1000 if want.endswith("m") else float(want)
        total += cpu
        if (p.metadata.labels or {}).get(C.LABEL_RUN_ID) == run_id:
            mine += cpu
    return total, mine


@pytest.mark.alone  # it compares the whole host before and after: no other sandbox meanwhile
def test_a_second_sandbox_beside_it_and_down_leaves_the_host_as_it_was(
    real: Path, tmp_path: Path
) -> None:
    """A second sandbox with a real node on the same machine (its own names, ranges, cgroups),
    a run on it, then down: no process, mount, netns, link, route, iptables rule, cgroup or
    kernel setting of it is left. (The first one's own kernel settings come back when the last
    sandbox holding them goes down: realnodes.release_sysctls.)"""
    home = tmp_path / "second"
    skip = volatile_sysctls()
    before, before_sys = _steady(host_facts(home)), _sysctls()
    res = tau(home, "sandbox", "up", "--real-nodes", "1", timeout=900)
    try:
        assert res.returncode == 0, res.stdout + res.stderr
        run_id = submit(home, project(tmp_path / "p", "second", "print('second sandbox')\n"))
        assert wait_phase(home, run_id, {"Succeeded", "Failed"})["phase"] == "Succeeded"
        first = json.loads(tau(real, "sandbox", "status", "-o", "json").stdout)
        assert first["up"], "the first sandbox kept running beside the second"
    finally:
        down = tau(home, "sandbox", "down", timeout=300)
    assert down.returncode == 0, down.stderr
    after, after_sys = _steady(host_facts(home)), _sysctls()
    for what in before:
        assert after[what] == before[what], (
            f"{what}: left {sorted(after[what] - before[what])[:10]}, "
            f"gone {sorted(before[what] - after[what])[:10]}"
        )
    changed = {k for k in before_sys if k not in skip and before_sys[k] != after_sys.get(k)}
    assert not changed, {k: (before_sys[k], after_sys.get(k)) for k in sorted(changed)}
