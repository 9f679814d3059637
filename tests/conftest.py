from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from localkit import example_copy, project, tau  # noqa: F401  (fixtures for test_local_*.py)

if TYPE_CHECKING:
    from collections.abc import Iterator

    from taugrid.infra.controlplane import ControlPlane

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
PROFILES = EXAMPLES / "profiles.yaml"
SHARED = ROOT.parent / "shared"
UPSTREAM_CRDS = SHARED / "upstream-crds"
EXAMPLE_DIRS = sorted(p.parent for p in EXAMPLES.glob("*/tau.yaml"))


@pytest.fixture(scope="session")
def upstream_crds() -> Path:
    if not UPSTREAM_CRDS.is_dir():
        pytest.skip(f"{UPSTREAM_CRDS} is absent: the upstream CRD oracles live in ../shared")
    return UPSTREAM_CRDS


@pytest.fixture(scope="session")
def cluster() -> Iterator[ControlPlane]:
    """A real control plane on 127.0.0.1 for the whole session (skips when not built)."""
    from taugrid.infra.controlplane import binaries_dir, running

    if binaries_dir() is None:
        pytest.skip("the control plane is not built: `make e2e` builds it (or `make controlplane`)")
    with running() as cp:
        yield cp


@pytest.fixture(scope="session")
def cluster_crds(cluster: ControlPlane) -> Any:
    """The cluster with the upstream Kueue/KubeRay CRDs and TauGrid's installed (once)."""
    from kube import install_crds

    if not UPSTREAM_CRDS.is_dir():
        pytest.skip(f"{UPSTREAM_CRDS} is absent: the upstream CRDs live in ../shared")
    dyn = cluster.dynamic()
    install_crds(dyn, UPSTREAM_CRDS)
    return dyn
