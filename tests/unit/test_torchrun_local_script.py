"""The shell a local torchrun run's driver runs (`render.torchrun_local_script`), with torch
replaced by a stub that ends each node with the code a test chooses: the run's code is the
first failing node's, and two nodes that end together are a success, every time (bash's
`wait -n` sometimes answers 127 for a node it had reaped already: 9 of these 150 runs before)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from conftest import EXAMPLES

from taugrid.runs import load
from taugrid.runs.render import command_script

# `python -c ...` prints a port (the script asks for a free one); `python -m torch...` is a node:
# it ends at once with NODE<rank>_RC (default 0): two nodes end at about the same time.
STUB = """#!/bin/bash
if [ "$1" = "-c" ]; then echo 29999; exit 0; fi
eval "code=\\${NODE${TAU_NODE_RANK}_RC:-0}"
[ "$code" = 0 ] && echo "node $TAU_NODE_RANK done"
exit "$code"
"""


@pytest.fixture
def script(tmp_path: Path) -> str:
    stub = tmp_path / "python"
    stub.write_text(STUB)
    stub.chmod(0o755)
    loaded = load.load_manifest(str(EXAMPLES / "torchrun-ddp"))
    assert loaded.manifest.nodes == 2
    return command_script(loaded.manifest, code_dir=str(tmp_path), python=str(stub))


def run(script: str, tmp_path: Path, **codes: int) -> tuple[int, Path]:
    run_dir = tmp_path / "run"
    env = {
        **os.environ,
        "TAU_RUN_DIR": str(run_dir),
        "TAU_RUN_ID": "r1",
        "TAU_CHECKPOINT_DIR": str(tmp_path / "ck"),
        "TAU_OUTPUT_DIR": str(tmp_path / "out"),
        **{k: str(v) for k, v in codes.items()},
    }
    # its own session: the script stops the other nodes with `kill -TERM 0`
    res = subprocess.run(
        ["bash", "-c", script],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        start_new_session=True,
        check=False,
    )
    return res.returncode, run_dir


def test_two_nodes_that_succeed_are_a_success_every_time(script: str, tmp_path: Path) -> None:
    codes = [run(script, tmp_path)[0] for _ in range(150)]
    assert codes == [0] * len(codes), {c: codes.count(c) for c in set(codes)}


@pytest.mark.parametrize("failing, code", [("NODE0_RC", 3), ("NODE1_RC", 7), ("NODE1_RC", 127)])
def test_a_failing_node_is_the_runs_code(
    script: str, tmp_path: Path, failing: str, code: int
) -> None:
    for _ in range(10):
        rc, run_dir = run(script, tmp_path, **{failing: code})
        assert rc == code
        rank = failing[4]
        assert (run_dir / "nodes" / rank / "exit.json").read_text().strip() == (
            f'{{"exit_code": {code}}}'
        )


def test_a_retry_does_not_read_the_codes_of_the_attempt_before(script: str, tmp_path: Path) -> None:
    assert run(script, tmp_path, NODE1_RC=5)[0] == 5
    assert run(script, tmp_path)[0] == 0  # the same run folder, the nodes succeed this time
