from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from azuritekit import azurite  # noqa: F401  (the az:// registry tests' Azurite)
from citiming import (  # noqa: F401  (CI's times per module; the e2e workers' order and ports)
    pytest_collection_modifyitems,
    pytest_configure,
    pytest_runtest_logreport,
    pytest_terminal_summary,
)
from datakit import store  # noqa: F401  (a registry test on the file store and on Azurite)
from localkit import example_copy, project, tau  # noqa: F401  (fixtures for test_local_*.py)

if TYPE_CHECKING:
    from taugrid.sandbox.controlplane import ControlPlane

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
PROFILES = EXAMPLES / "profiles.yaml"
SHARED = ROOT.parent / "shared"
UPSTREAM_CRDS = SHARED / "upstream-crds"

# A small valid platform declaration (stack config) that tests vary
SMALL_PLATFORM: dict[str, Any] = {
    "cluster": {"provider": "aks", "name": "c", "location": "westus3", "kubernetesVersion": "1.36"},
    "gpuPools": [{"name": "a100", "vmSize": "Standard_NC24ads_A100_v4", "maxCount": 2}],
    "cpuPools": [{"name": "cpu", "vmSize": "Standard_D4s_v5", "maxCount": 2}],
    "queues": {
        "clusterQueues": [
            {"name": "gpu", "flavors": [{"pool": "a100", "nominalQuota": {"nvidia.com/gpu": 2}}]},
        ]
    },
    "workspaces": [{"name": "w", "queues": ["gpu"]}],
}
EXAMPLE_DIRS = sorted(p.parent for p in EXAMPLES.glob("*/tau.yaml"))
TAU = str(Path(sys.executable).parent / "tau")


def run_tau(
    home: Path, *args: str, env: dict[str, str] | None = None, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    """The real `tau` with its own TAU_HOME (no TAU_TARGET from the caller's environment) and
    its own Pulumi home (no login or backend of the machine's: a test that needs one says so)."""
    base = {k: v for k, v in os.environ.items() if k not in CALLERS_OWN}
    return subprocess.run(
        [TAU, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        env={
            **base,
            "TAU_HOME": str(home),
            "PULUMI_HOME": str(home / "pulumi-home"),
            **(env or {}),
        },
    )


CALLERS_OWN = (
    "TAU_TARGET",
    "KUBECONFIG",
    "PULUMI_HOME",
    "PULUMI_BACKEND_URL",
    "PULUMI_CONFIG_PASSPHRASE",
    "PULUMI_CONFIG_PASSPHRASE_FILE",
)


@pytest.fixture()
def own_tau_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """TAU_HOME set to a folder of the test's own (a test that sets its own later overrides it):
    for in-process code that keeps state under tau's home (a pull's ledger)."""
    home = tmp_path_factory.mktemp("tau-home")
    monkeypatch.setenv("TAU_HOME", str(home))
    return home


@pytest.fixture(scope="session")
def sandbox(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """`tau sandbox up` in its own TAU_HOME for the session (the e2e suite's cluster for
    everything that goes through the CLI); `down` at the end."""
    from taugrid.sandbox.controlplane import binaries_dir

    if binaries_dir() is None:
        pytest.skip("the control plane is not built: `make e2e` builds it")
    home = tmp_path_factory.mktemp("sandboxhome")
    res = run_tau(home, "sandbox", "up", "--real-nodes", "0")  # KWOK: real nodes have their own
    assert res.returncode == 0, res.stderr
    yield home
    run_tau(home, "sandbox", "down")


@pytest.fixture(scope="session")
def upstream_crds() -> Path:
    if not UPSTREAM_CRDS.is_dir():
        pytest.skip(f"{UPSTREAM_CRDS} is absent: the upstream CRD oracles live in ../shared")
    return UPSTREAM_CRDS


@pytest.fixture(scope="session")
def cluster() -> Iterator[ControlPlane]:
    """A real control plane on 127.0.0.1 for the whole session (skips when not built)."""
    from taugrid.sandbox.controlplane import binaries_dir, running

    if binaries_dir() is None:
        pytest.skip("the control plane is not built: `make e2e` builds it (or `make controlplane`)")
    with running() as cp:
        yield cp


@pytest.fixture(scope="session")
def cluster_crds(cluster: ControlPlane) -> Any:
    """The cluster with the upstream Kueue/KubeRay CRDs and TauGrid's installed (once)."""
    from kubekit import dynamic

    from taugrid.sandbox.controlplane import install_crds

    if not UPSTREAM_CRDS.is_dir():
        pytest.skip(f"{UPSTREAM_CRDS} is absent: the upstream CRDs live in ../shared")
    install_crds(cluster.kube(), UPSTREAM_CRDS)
    dyn = dynamic(cluster)
    dyn.resources.invalidate_cache()
    return dyn
