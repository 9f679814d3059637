"""Where tau keeps things, and atomic writes: stdlib only, so the run launcher
(runs/backends/local/launch.py) can use them without loading the models."""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path

from taugrid.api import constants as C
from taugrid.api.home import tau_home

__all__ = ["tau_home"]

DISCOVERY = ("tau.yaml", "tau.yml", ".tau.yaml")


def data_root() -> Path:
    """The local stand-in for /data."""
    return tau_home() / "data"


def runs_root() -> Path:
    return data_root() / C.RUNS_SUBDIR


def find_manifest(p: Path) -> Path | None:
    """The tau.yaml in folder `p` (first of DISCOVERY), or None."""
    for name in DISCOVERY:
        if (p / name).is_file():
            return p / name
    return None


def write_atomic(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
