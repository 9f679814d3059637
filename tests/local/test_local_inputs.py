"""Every run kind gets its data inputs the same way, checked before its code starts, and no run
can change what the registry or another run holds: a script that chmods its input and writes
it changes its own copy only (the stored bytes verify, the next run reads the original)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from localkit import Tau, have_ray

# A script that reads its input, then does what a careless script does: chmod it and write it.
VANDAL = """
import os, pathlib, sys
d = pathlib.Path(os.environ["TAU_INPUT_DIR"]) / "texts"
f = d / "part-0.txt"
print("READ", f.read_text().splitlines()[0], flush=True)
f.chmod(0o644)
with f.open("w") as out:
    out.write("CLOBBERED\\n")
print("WROTE", flush=True)
"""

STAND_IN = """import runpy, sys
args = sys.argv[1:]
i = next(k for k, a in enumerate(args) if not a.startswith("--"))
sys.argv = args[i:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""

KINDS = {
    "job": "run: {entrypoint: vandal.py, workload_kind: job}\n",
    "torchrun": "run: {entrypoint: vandal.py, launcher: torchrun}\ncompute: {workers: 2}\n",
    "rayjob": "run: {entrypoint: vandal.py, workload_kind: rayjob}\n",
}


def _register(tau: Tau, folder: Path, files: dict[str, str]) -> str:
    for rel, text in files.items():
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_text(text)
    res = tau("data", "dataset", "register", "texts", str(folder), "-o", "json")
    assert res.returncode == 0, res.stderr
    return str(json.loads(res.stdout)["version"])


def _project(tmp_path: Path, name: str, kind: str) -> Path:
    folder = tmp_path / name
    folder.mkdir()
    fake = tmp_path / "fake" / "torch" / "distributed"  # torch's launcher, stood in
    fake.mkdir(parents=True, exist_ok=True)
    (fake.parent / "__init__.py").write_text("")
    (fake / "__init__.py").write_text("")
    (fake / "run.py").write_text(STAND_IN)
    env = f"runtime: {{env: {{PYTHONPATH: '{tmp_path / 'fake'}'}}}}\n"
    (folder / "tau.yaml").write_text(
        f"schema_version: 1\nname: {name}\n{KINDS[kind]}{env}data: {{inputs: [{{ref: texts}}]}}\n"
    )
    (folder / "vandal.py").write_text(VANDAL)
    return folder


def _run(tau: Tau, folder: Path) -> tuple[str, str]:
    res = tau("run", str(folder))
    found = re.search(r"run (\S+-\w+)\n", res.stderr)
    assert found, res.stderr
    run_id = found.group(1)
    return run_id, (tau.run_dir(run_id) / "logs" / "driver.log").read_text()


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_a_run_that_writes_its_input_changes_nothing_stored(
    tau: Tau, tmp_path: Path, kind: str
) -> None:
    if kind == "rayjob" and not have_ray():
        pytest.skip("Ray is not installed")
    big = "x" * (2 << 20)  # a blob of its own (small files are packed): once hard-linked
    version = _register(
        tau, tmp_path / "src", {"part-0.txt": "original\n" + big, "small.txt": "packed\n"}
    )
    first, log = _run(tau, _project(tmp_path, f"vandal-{kind}", kind))
    assert "READ original" in log and "WROTE" in log, log  # the run got its input, and wrote
    verified = tau("data", "dataset", "verify", f"texts@{version[:19]}")
    assert verified.returncode == 0, verified.stdout + verified.stderr
    second, log2 = _run(tau, _project(tmp_path, f"again-{kind}", kind))
    assert "READ original" in log2, log2  # the next run reads what was registered
    for run_id in (first, second):  # each record verifies; its working copy is not in it
        v = tau("run", "verify", run_id)
        assert v.returncode == 0, v.stdout + v.stderr
        assert not (tau.run_dir(run_id) / "inputs").exists()
        assert tau.record(run_id)["inputs"][0]["version"] == version


def test_every_kind_stops_before_its_code_when_an_input_is_damaged(
    tau: Tau, tmp_path: Path
) -> None:
    version = _register(tau, tmp_path / "src", {"part-0.txt": "to be damaged\n"})
    held = next(
        p
        for p in (tau.home / "data" / "registry").rglob("*")
        if p.is_file() and b"to be damaged\n" in p.read_bytes()
    )
    held.chmod(0o644)
    held.write_bytes(held.read_bytes().replace(b"to be damaged\n", b"TO BE DAMAGED\n"))
    for kind in ("job", "torchrun"):
        run_id, log = _run(tau, _project(tmp_path, f"damaged-{kind}", kind))
        assert "part-0.txt changed in the registry" in log and "READ" not in log, log
        st = tau("run", "status", run_id, "-o", "json")
        doc = json.loads(st.stdout)
        assert doc["phase"] == "Failed" and "changed in the registry" in (doc["last_error"] or "")
    assert version
