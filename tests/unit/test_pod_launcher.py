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


def run_pod(objs: list[dict[str, Any]], tmp: Path) -> tuple[subprocess.CompletedProcess[str], Path]:
    cm, job = objs[0], objs[-1]
    code = tmp / "code"
    items = {v["name"]: v for v in job["spec"]["template"]["spec"]["volumes"]}["code"]["configMap"][
        "items"
    ]
    for item in items:
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
    script = here(container["command"][-1]).replace("exec python ", f"exec {sys.executable} ")
    script = script.replace(" -- python ", f" -- {sys.executable} ")
    res = subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True, timeout=120,
                         check=False)  # fmt: skip
    return res, Path(env["TAU_RUN_DIR"])


def render_job(folder: Path) -> list[dict[str, Any]]:
    loaded = load.load_manifest(folder)
    prepared = prepare(RunRequest(loaded, run_id="pod-run-abcde"), load.load_snapshot(PROFILES))
    objs = prepared.objects()
    assert objs[-1]["kind"] == "Job"
    return objs


def test_the_rendered_job_keeps_and_seals_its_evidence_record(tmp_path: Path) -> None:
    res, run_dir = run_pod(render_job(EXAMPLES / "batch-job"), tmp_path)
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
