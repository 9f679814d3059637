"""A local run reads a dataset by reference: tau.yaml names fineweb@prod, the submission pins
the exact version in the record, the run sees the files read-only under $TAU_INPUT_DIR, and a
resumed run reads the same version after the alias moved. A changed file stops the run before
its code starts."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

import pytest
from localkit import Tau, have_ray

pytestmark = pytest.mark.skipif(not have_ray(), reason="Ray is not installed")

SCRIPT = """
import os, pathlib, tau_run
d = pathlib.Path(os.environ["TAU_INPUT_DIR"]) / "corpus"
text = (d / "part-0.txt").read_text()
print("READ", text.strip(), "MODE", oct((d / "part-0.txt").stat().st_mode & 0o777))
with tau_run.checkpoint(1) as c:
    (c / "w").write_text(text)
"""


def _register(tau: Tau, folder: Path, text: str) -> str:
    (folder / "part-0.txt").parent.mkdir(parents=True, exist_ok=True)
    (folder / "part-0.txt").write_text(text)
    res = tau("data", "dataset", "register", "corpus", str(folder), "-o", "json")
    assert res.returncode == 0, res.stderr
    return str(json.loads(res.stdout)["version"])


def test_a_run_reads_its_input_by_exact_version(
    tau: Tau, tmp_path: Path, project: Callable[[str, str, str], Path]
) -> None:
    v1 = _register(tau, tmp_path / "v1", "first\n")
    assert tau("data", "dataset", "alias", "set", "corpus", "prod", v1).returncode == 0
    folder = project(
        "schema_version: 1\nname: reader\nrun: {entrypoint: read.py}\n"
        "data: {inputs: [{ref: corpus@prod}]}\n",
        "read.py",
        SCRIPT,
    )
    res = tau("run", str(folder))
    assert res.returncode == 0, res.stderr
    run_id = re.search(r"run (reader-\w+)", res.stderr).group(1)  # type: ignore[union-attr]
    rec = tau.record(run_id)
    assert rec["inputs"] == [
        {"kind": "dataset", "name": "corpus", "version": v1, "path": "corpus", "ref": "corpus@prod"}
    ]
    log = (tau.run_dir(run_id) / "logs" / "driver.log").read_text()
    assert "READ first MODE 0o444" in log
    shown = tau("run", "status", run_id)
    assert f"input: dataset corpus@{v1[:19]} (corpus@prod)" in shown.stdout
    # the alias moves; a resumed run still reads what its parent read
    v2 = _register(tau, tmp_path / "v2", "second\n")
    assert (
        tau("data", "dataset", "alias", "set", "corpus", "prod", v2, "--expect", v1).returncode == 0
    )
    res = tau("run", "resume", run_id)
    assert res.returncode == 0, res.stderr
    child = re.search(r"run (reader-\w+)", res.stderr.split("resuming", 1)[-1]).group(1)  # type: ignore[union-attr]
    assert tau.record(child)["inputs"][0]["version"] == v1
    assert "READ first" in (tau.run_dir(child) / "logs" / "driver.log").read_text()
    # the model made from the run names the dataset version it read, both ways
    res = tau("data", "model", "register", "reader-model", "--from-run", run_id, "-o", "json")
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["lineage"]["inputs"] == [{"name": "corpus", "version": v1}]
    back = json.loads(tau("data", "lineage", f"dataset:corpus@{v1[:19]}", "-o", "json").stdout)
    assert [m["name"] for m in back["models"]] == ["reader-model"]


def test_a_changed_input_stops_the_run_before_its_code(
    tau: Tau, tmp_path: Path, project: Callable[[str, str, str], Path]
) -> None:
    version = _register(tau, tmp_path / "bad", "to be changed\n")
    # the bytes changed in place where the store keeps them (a small file: inside a pack)
    held = next(
        p
        for p in (tau.home / "data" / "registry").rglob("*")
        if p.is_file() and b"to be changed\n" in p.read_bytes()
    )
    held.chmod(0o644)
    held.write_bytes(held.read_bytes().replace(b"to be changed\n", b"TO BE CHANGED\n"))
    folder = project(
        "schema_version: 1\nname: tampered\nrun: {entrypoint: read.py}\n"
        f"data: {{inputs: [{{ref: 'corpus@{version[:19]}'}}]}}\n",
        "read.py",
        SCRIPT,
    )
    res = tau("run", str(folder))
    assert res.returncode != 0
    run_id = re.search(r"run (tampered-\w+)", res.stderr).group(1)  # type: ignore[union-attr]
    log = (tau.run_dir(run_id) / "logs" / "driver.log").read_text()
    assert "part-0.txt changed in the registry" in log and "READ" not in log


def test_an_unknown_input_is_refused_at_submit(
    tau: Tau, project: Callable[[str, str, str], Path]
) -> None:
    folder = project(
        "schema_version: 1\nname: nodata\nrun: {entrypoint: read.py}\n"
        "data: {inputs: [{ref: nothing@prod}]}\n",
        "read.py",
        SCRIPT,
    )
    res = tau("run", str(folder))
    assert res.returncode == 2 and "no dataset 'nothing'" in res.stderr
    assert "Traceback" not in res.stderr
