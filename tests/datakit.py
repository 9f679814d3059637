"""Registry helpers shared by the data tests: who registers, a tree of files, and `store`, the
fixture that runs a test on the file store and on Azure Blob Storage (Azurite)."""

from __future__ import annotations

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
