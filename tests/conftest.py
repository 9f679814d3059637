from __future__ import annotations

from pathlib import Path

import pytest
from localkit import example_copy, project, tau  # noqa: F401  (fixtures for test_local_*.py)

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
