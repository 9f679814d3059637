"""Azurite (the Azure Storage emulator, installed by `make azurite`) on 127.0.0.1 for the tests of
the az:// registry: one server per session, a new container per test."""

from __future__ import annotations

import itertools
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from taugrid.host.ports import free_port

ROOT = Path(__file__).resolve().parents[1]
AZURITE = ROOT / "e2e" / "azurite" / "node_modules" / ".bin" / "azurite-blob"
# Azurite's well-known development account (public, documented by Microsoft; not a secret).
ACCOUNT = "devstoreaccount1"
KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
_containers = itertools.count()


def connection_string(port: int, key: str = KEY) -> str:
    return (
        f"DefaultEndpointsProtocol=http;AccountName={ACCOUNT};AccountKey={key};"
        f"BlobEndpoint=http://127.0.0.1:{port}/{ACCOUNT};"
    )


@pytest.fixture(scope="session")
def azurite(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    """The port of a running Azurite blob service."""
    if not AZURITE.exists():
        pytest.skip("Azurite is not installed: `make azurite` (make test does it)")
    port = free_port()
    folder = tmp_path_factory.mktemp("azurite")
    log = (folder / "azurite.log").open("wb")
    proc = subprocess.Popen(
        [
            str(AZURITE),
            "--blobHost",
            "127.0.0.1",
            "--blobPort",
            str(port),
            "--location",
            str(folder),
            "--silent",
            "--skipApiVersionCheck",
            "--loose",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                break
        if proc.poll() is not None:
            raise RuntimeError(f"azurite exited: {(folder / 'azurite.log').read_text()}")
        time.sleep(0.1)
    yield port
    proc.kill()  # it keeps nothing worth a graceful stop (a temporary folder)
    proc.wait(timeout=30)


def new_container(port: int) -> str:
    """A new, empty container; its az:// URL."""
    from azure.storage.blob import BlobServiceClient

    name = f"reg{next(_containers)}x{int(time.time() * 1000) % 100000}"
    BlobServiceClient.from_connection_string(connection_string(port)).create_container(name)
    return f"az://{ACCOUNT}/{name}/registry"
