"""TAU_HOME: where tau keeps its state (run records, the sandbox, Pulumi state). One definition
for every layer (reading an environment variable is the only thing it does)."""

from __future__ import annotations

import os
from pathlib import Path

HOME_ENV = "TAU_HOME"


def tau_home() -> Path:
    return Path(os.environ.get(HOME_ENV) or Path.home() / ".tau").expanduser()
