"""The in-pod launcher, without a cluster: the rendered Job's container command runs here, with
/code made from the rendered ConfigMap and /data a temporary folder. It keeps the evidence
record on "the PVC" with the same code as local runs, and `tau run verify`'s check passes."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import EXAMPLES, PROFILES

from taugrid.runs import load
from taugrid.runs.evidence import RunDir
from taugrid.runs.prepare import RunRequest, prepare


def run_pod(
    objs: list[dict[str, Any]], tmp: Path, extra: dict[str, str] | None = None
) -> tuple[subprocess.CompletedProcess[str], Path]:
    job, code = objs[-1], tmp / "code"
    by_name = {o["metadata"]["name"]: o for o in objs if o["kind"] == "ConfigMap"}
    volume = {v["name"]: v for v in job["spec"]["template"]["spec"]["volumes"]}["code"]
    sources = volume["projected"]["sources"] if "projected" in volume else [volume]
    for src in sources:  # as the kubelet lays a ConfigMap (or a projection of several) out
        cm = by_name[src["configMap"]["name"]]
        for item in src["configMap"]["items"]:
            dst = code / item["path"]
            dst.parent.mkdir(parents=True, exist_ok=True)
            if item["key"] in cm.get("data", {}):
                dst.write_text(cm["data"][item["key"]])
            else:
                dst.write_bytes(base64.b64decode(cm["binaryData"][item["key"]]))
    container = job["spec"]["template"]["spec"]["containers"][0]

    def here(v: str) -> str:
        return v.replace("/code", str(code)).replace("/data", str(tmp / "data"))

    env = {e["name"]: here(e["value"]) for e in container["env"] if "value" in e}
    env["PATH"] = os.environ["PATH"]
    for k, v in (extra or {}).items():  # what the cluster adds (an Indexed Job's index)
        env[k] = v + (os.pathsep + env[k] if k == "PYTHONPATH" and k in env else "")
    script = here(container["command"][-1]).replace("exec python ", f"exec {sys.executable} ")
    script = script.replace(" -- python ", f" -- {sys.executable} ")
    res = subprocess.run(
        ["bash", "-c", script], env=env, capture_output=True, text=True, timeout=120, check=False
    )
    return res, Path(env["TAU_RUN_DIR"])


def render_job(folder: Path, shared_helpers: bool = False) -> list[dict[str, Any]]:
    loaded = load.load_manifest(folder)
    prepared = prepare(RunRequest(loaded, run_id="pod-run-abcde"), load.load_snapshot(PROFILES))
    objs = prepared.objects(shared_helpers)
    assert objs[-1]["kind"] == "Job"
    return objs


@pytest.mark.parametrize("shared", [False, True], ids=["helpers-in-the-run", "shared-helpers"])
def test_the_rendered_job_keeps_and_seals_its_evidence_record(tmp_path: Path, shared: bool) -> None:
    res, run_dir = run_pod(render_job(EXAMPLES / "batch-job", shared), tmp_path)
    assert res.returncode == 0, res.stderr
    assert (run_dir / "logs" / "driver.log").read_text() == res.stdout  # teed, not lost
    history = [json.loads(x) for x in (run_dir / "history.jsonl").read_text().splitlines()]
    assert [h["phase"] for h in history] == ["Running", "Succeeded"]
    rec = json.loads((run_dir / "run.json").read_text())
    assert rec["run_id"] == "pod-run-abcde" and rec["exit_code"] == 0
    n, problems = RunDir(run_dir).verify()  # the local backend's verify, on the pod's seal
    assert problems == [] and n >= 3


@pytest.mark.parametrize("code", [3, 137])
def test_a_failing_entrypoint_is_recorded_and_its_exit_code_kept(tmp_path: Path, code: int) -> None:
    folder = tmp_path / "proj"
    folder.mkdir()
    (folder / "s.py").write_text(
        f"import sys\nprint('about to fail', flush=True)\nsys.exit({code})\n"
    )
    (folder / "tau.yaml").write_text(
        "schema_version: 1\nname: podfail\nrun: {entrypoint: s.py, workload_kind: job}\n"
        "compute: {gpus: 0, cpus: 1, memory: 1Gi}\nruntime: {image: python:3.12-slim}\n"
    )
    res, run_dir = run_pod(render_job(folder), tmp_path / "pod")
    assert res.returncode == code
    history = [json.loads(x) for x in (run_dir / "history.jsonl").read_text().splitlines()]
    assert history[-1]["phase"] == "Failed" and history[-1]["reason"] == f"exit code {code}"
    assert "about to fail" in (run_dir / "logs" / "driver.log").read_text()
    assert RunDir(run_dir).verify()[1] == []


def test_a_resumed_pod_finds_its_parents_newest_complete_checkpoint(tmp_path: Path) -> None:
    folder = tmp_path / "proj"
    folder.mkdir()
    (folder / "s.py").write_text("import os\nprint('resume', os.environ.get('TAU_RESUME_FROM'))\n")
    (folder / "tau.yaml").write_text(
        "schema_version: 1\nname: podresume\nrun: {entrypoint: s.py, workload_kind: job}\n"
        "compute: {gpus: 0, cpus: 1, memory: 1Gi}\nruntime: {image: python:3.12-slim}\n"
    )
    loaded = load.load_manifest(folder)
    marker = "/data/runs/parent-abcde/checkpoints/@newest"
    request = RunRequest(loaded, run_id="child-abcde", resume_from=marker, parent="parent-abcde")
    objs = prepare(request, load.load_snapshot(PROFILES)).objects()
    pod = tmp_path / "pod"
    ckpts = pod / "data" / "runs" / "parent-abcde" / "checkpoints"
    # no complete checkpoint: the pod refuses to start rather than silently start over
    res, _ = run_pod(objs, pod)
    assert res.returncode == 3 and "no complete checkpoint" in res.stderr
    for step in (5, 10, 15):
        (ckpts / f"step-{step:08d}").mkdir(parents=True)
    index = [{"step": s, "path": f"step-{s:08d}", "ts": 0.0} for s in (5, 10)]  # 15: incomplete
    (ckpts / "index.json").write_text(json.dumps({"complete": index}))
    res, _ = run_pod(objs, pod)
    assert res.returncode == 0, res.stderr
    assert f"resume {ckpts / 'step-00000010'}" in res.stdout


# --- torchrun: a pod per node ---------------------------------------------------------------------
FAKE_TORCHRUN = '''"""A stand-in for torch.distributed.run (no torch here): records its arguments, then runs
the script once for this node (as torchrun would run it nproc times)."""
import os, runpy, sys
args = sys.argv[1:]
script = next(i for i, a in enumerate(args) if not a.startswith("--"))
print("torchrun", " ".join(args[:script]), flush=True)
sys.argv = args[script:]
runpy.run_path(sys.argv[0], run_name="__main__")
'''  # noqa: E501 (data: its lines are what they are)


def torchrun_project(tmp: Path, body: str, nodes: int = 2) -> list[dict[str, Any]]:
    folder = tmp / "proj"
    folder.mkdir()
    (folder / "train.py").write_text(body)
    (folder / "tau.yaml").write_text(
        f"schema_version: 1\nname: ddp\nrun: {{entrypoint: train.py, launcher: torchrun, "
        f"args: ['--epochs', '1']}}\ncompute: {{gpus: 0, cpus: 1, memory: 1Gi, workers: {nodes}}}\n"
        "runtime: {image: python:3.12-slim}\n"
    )
    loaded = load.load_manifest(folder)
    prepared = prepare(RunRequest(loaded, run_id="ddp-abcde"), load.load_snapshot(PROFILES))
    return prepared.objects()


def run_node(objs: list[dict[str, Any]], tmp: Path, index: int, fake: Path) -> Any:
    """One node's pod: the Indexed Job sets JOB_COMPLETION_INDEX; `torch` is the stand-in."""
    return run_pod(objs, tmp, {"JOB_COMPLETION_INDEX": str(index), "PYTHONPATH": str(fake)})


@pytest.fixture()
def fake_torch(tmp_path: Path) -> Path:
    pkg = tmp_path / "fake" / "torch" / "distributed"
    pkg.mkdir(parents=True)
    (pkg.parent / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "run.py").write_text(FAKE_TORCHRUN)
    return tmp_path / "fake"


def test_each_node_of_a_torchrun_job_keeps_its_evidence_and_node_0_seals_all(
    tmp_path: Path, fake_torch: Path
) -> None:
    objs = torchrun_project(
        tmp_path, "import os\nprint('rank node', os.environ['JOB_COMPLETION_INDEX'])\n"
    )
    assert [o["kind"] for o in objs] == ["ConfigMap", "Service", "Job"]
    res1, run_dir = run_node(objs, tmp_path / "pod", 1, fake_torch)
    assert res1.returncode == 0, res1.stderr
    # the rendezvous on node 0's stable name, the run id as its id; the script's own args kept
    assert "--nnodes=2 --rdzv-backend=c10d --rdzv-endpoint=ddp-abcde-0.ddp-abcde." in res1.stdout
    assert "--rdzv-id=ddp-abcde" in res1.stdout and "--nproc-per-node=1" in res1.stdout
    assert (run_dir / "nodes" / "1" / "driver.log").read_text() == res1.stdout
    assert not (run_dir / "run.json").exists()  # node 0 keeps the run's record
    res0, _ = run_node(objs, tmp_path / "pod", 0, fake_torch)
    assert res0.returncode == 0, res0.stderr
    rec = json.loads((run_dir / "run.json").read_text())
    assert rec["phase"] == "Succeeded" and rec["exit_code"] == 0
    _, problems = RunDir(run_dir).verify()
    sealed = (run_dir / "MANIFEST.sha256").read_text()
    assert problems == [] and "nodes/1/driver.log" in sealed and "nodes/0/exit.json" in sealed


def test_a_failed_node_fails_the_run_and_node_0_says_which(
    tmp_path: Path, fake_torch: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    objs = torchrun_project(
        tmp_path,
        "import os, sys\nsys.exit(7 if os.environ['JOB_COMPLETION_INDEX'] == '1' else 0)\n",
    )
    res1, run_dir = run_node(objs, tmp_path / "pod", 1, fake_torch)
    assert res1.returncode == 7
    res0, _ = run_node(objs, tmp_path / "pod", 0, fake_torch)
    assert res0.returncode == 1 and "node 1 exit code 7" in res0.stdout
    history = [json.loads(x) for x in (run_dir / "history.jsonl").read_text().splitlines()]
    assert history[-1]["phase"] == "Failed"
    # a node that never ends is not waited for forever: node 0 says so (bounded by NODE_WAIT_S)
    import tau_launch

    monkeypatch.setattr(tau_launch, "NODE_WAIT_S", 0.0)
    assert tau_launch._wait_for_nodes(run_dir, 3) == [7, -1]


def test_one_node_torchrun_is_standalone_and_the_env_decides_the_rest() -> None:
    import tau_launch

    one = tau_launch.torchrun_argv(["train.py", "--lr", "1"], {"TAU_NPROC_PER_NODE": "4"})
    assert one[1:] == [
        "-m",
        "torch.distributed.run",
        "--nproc-per-node=4",
        "--standalone",
        "train.py",
        "--lr",
        "1",
    ]
    env = {"TAU_NODES": "3", "JOB_COMPLETION_INDEX": "2"}
    assert tau_launch.node_index(env) == 2 and tau_launch.node_index({}) is None


def test_every_node_lays_out_its_inputs_before_its_code(tmp_path: Path, fake_torch: Path) -> None:
    """On a cluster each torchrun node is a pod: every node (not only node 0) gets the run's
    data inputs, checked, in a copy of its own; a damaged one stops that node before its code."""
    from taugrid.api.data import Created
    from taugrid.api.vocabulary import ResolvedInput
    from taugrid.data.filestore import FileStore

    src = tmp_path / "src"
    src.mkdir()
    (src / "a.txt").write_text("x" * (2 << 20))  # a blob of its own
    store = FileStore(tmp_path / "pod" / "data" / "registry")
    reg = store.register(
        "dataset", "texts", src, Created(by="t", at="2026-01-01T00:00:00Z", host="h")
    )
    folder = tmp_path / "proj"
    folder.mkdir()
    (folder / "train.py").write_text(
        "import os, pathlib\nf = pathlib.Path(os.environ['TAU_INPUT_DIR']) / 'texts' / 'a.txt'\n"
        "print('node', os.environ['JOB_COMPLETION_INDEX'], 'read', len(f.read_text()))\n"
        "f.chmod(0o644); f.write_text('clobbered')\n"
    )
    (folder / "tau.yaml").write_text(
        "schema_version: 1\nname: ddp\nrun: {entrypoint: train.py, launcher: torchrun}\n"
        "compute: {gpus: 0, cpus: 1, memory: 1Gi, workers: 2}\nruntime: {image: python:3.12-slim}\n"
    )
    pinned = (ResolvedInput(name="texts", version=reg.record.version, path="texts"),)
    prepared = prepare(
        RunRequest(load.load_manifest(folder), run_id="ddp-input", inputs=pinned),
        load.load_snapshot(PROFILES),
    )
    objs = prepared.objects()
    res1, run_dir = run_node(objs, tmp_path / "pod", 1, fake_torch)
    assert res1.returncode == 0 and f"node 1 read {2 << 20}" in res1.stdout, res1.stderr
    res0, _ = run_node(objs, tmp_path / "pod", 0, fake_torch)
    assert res0.returncode == 0 and f"node 0 read {2 << 20}" in res0.stdout, res0.stderr
    assert store.verify(reg.record) == []  # what the nodes wrote reached no stored byte
    assert not (run_dir / "inputs").exists() and not (run_dir / "nodes" / "1" / "inputs").exists()
    # the stored bytes damaged: node 1 stops before its code, with the reason in its log
    blob = store.blob(reg.record.files[0].sha256)
    blob.chmod(0o644)
    blob.write_text("y" * (2 << 20))
    res1, _ = run_node(objs, tmp_path / "pod", 1, fake_torch)
    assert res1.returncode == 66 and "read" not in res1.stdout
    assert "a.txt changed in the registry" in (run_dir / "nodes" / "1" / "driver.log").read_text()


def test_a_ray_jobs_driver_also_writes_to_the_containers_log_and_a_job_does_not_twice(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    """KubeRay runs a RayJob's entrypoint under the head's Ray: its output is in Ray's job log,
    not the head pod's, so the launcher copies it to the container's log (PID 1's stdout)."""
    import tau_launch

    from taugrid.runs import render

    rayjob = load.load_manifest(EXAMPLES / "quickstart").manifest
    job = load.load_manifest(EXAMPLES / "batch-job").manifest
    assert "--container-log" in render.pod_command(rayjob).split()
    assert "--container-log" not in render.pod_command(job).split()

    container = tmp_path / "container.log"
    container.write_text("ray start ...\n")
    monkeypatch.setattr(tau_launch, "CONTAINER_LOG", str(container))
    monkeypatch.setenv("TAU_RUN_DIR", str(tmp_path / "run"))
    say = [sys.executable, "-c", "print('step 1: loss 0.5')"]
    assert tau_launch.main(["--container-log", "--", *say]) == 0
    assert container.read_text() == "ray start ...\nstep 1: loss 0.5\n"
    assert "step 1: loss 0.5" in (tmp_path / "run" / "logs" / "driver.log").read_text()
    assert "step 1: loss 0.5" in capfd.readouterr().out  # Ray's job log keeps its copy
    assert tau_launch.main(["--", *say]) == 0  # a Job: its stdout is the container's already
    assert container.read_text().count("step 1") == 1
    container.unlink()  # no container log to open: the run goes on with the other copies
    assert tau_launch.main(["--container-log", "--", *say]) == 0
    assert (tmp_path / "run" / "logs" / "driver.log").read_text().count("step 1") == 3
