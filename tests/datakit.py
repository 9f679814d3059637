"""Registry helpers shared by the data tests: who registers, a tree of files, and `store`, the
fixture that runs a test on the file store and on Azure Blob Storage (Azurite)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from taugrid.api.data import Created
from taugrid.data.filestore import FileStore
from taugrid.data.store import Store, open_store

WHO = Created(by="alice@lab", at="2026-12-01T12:00:00Z", host="lab")


def tree(root: Path, files: dict[str, bytes]) -> Path:
    for rel, data in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)
    return root


@pytest.fixture(params=["file", "azure"])
def store(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Store:
    """Each store test runs on the file store and on Azure Blob Storage (Azurite, 127.0.0.1)."""
    cache = tmp_path / "cache" / "stat"
    if request.param == "file":
        return FileStore(tmp_path / "registry", cache)
    from azuritekit import connection_string, new_container

    port = request.getfixturevalue("azurite")
    monkeypatch.setenv("AZURE_STORAGE_CONNECTION_STRING", connection_string(port))
    return open_store(new_container(port), cache)


def run_with_checkpoints(home: Path, losses: dict[int, float]) -> str:
    """A finished local run's record with checkpoints at the given steps and their loss."""
    from taugrid.api.evidence import LocalHandle, RunRecord
    from taugrid.runs.evidence import RunDir

    rd = RunDir(home / "data" / "runs" / "train-abcde")
    rd.path.mkdir(parents=True)
    rd.create(
        RunRecord(
            run_id="train-abcde",
            name="train",
            workspace="local",
            profile="local",
            workload_kind="job",
            handle=LocalHandle(),
            submitter="a",
            code_folder="/x",
            code_revision="rev1",
            code_digest="d",
            config_hash="cfg1",
            image="i",
            entrypoint="t.py",
            created_at="2026-12-01T00:00:00+00:00",
            primary_metric="loss",
        )
    )
    ckpt = rd.checkpoint_dir()
    ckpt.mkdir(parents=True, exist_ok=True)
    entries = []
    for step in losses:
        (ckpt / f"step-{step:08d}").mkdir(parents=True)
        (ckpt / f"step-{step:08d}" / "weights.bin").write_bytes(f"w{step}".encode())
        entries.append({"step": step, "path": f"step-{step:08d}", "ts": 0})
    (ckpt / "index.json").write_text(json.dumps({"complete": entries}))
    rd.metrics_path.write_text(
        "".join(json.dumps({"step": s, "loss": v}) + "\n" for s, v in losses.items())
    )
    return rd.run_id
