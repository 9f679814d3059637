"""What the sandbox benchmarks share: `tau` as a user runs it (a new process), and a sandbox of
their own, started and always stopped."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

TAU = str(Path(sys.executable).parent / "tau")


def tau(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([TAU, *args], env=env, capture_output=True, text=True, check=False)


def control_plane_built() -> bool:
    """Whether the sandbox can start here (else the benchmark says it skipped)."""
    from taugrid.sandbox.controlplane import binaries_dir

    if binaries_dir() is None:
        print("skipped: the control plane is not built (make controlplane)")
        return False
    return True


@dataclass(frozen=True)
class Sandbox:
    env: dict[str, str]  # TAU_HOME; KUBECONFIG as the admin; TAU_TARGET=kube
    admin: str  # the admin's kubeconfig
    folder: Path  # a scratch folder that goes with it
    up_s: float  # what `tau sandbox up` took


@contextmanager
def sandbox(*up: str) -> Iterator[Sandbox]:
    """`tau sandbox up *up` in a TAU_HOME of its own; `tau sandbox down` however it ends."""
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "TAU_HOME": str(Path(tmp) / "home")}
        t = time.perf_counter()
        res = tau(env, "sandbox", "up", *up)
        up_s = time.perf_counter() - t
        assert res.returncode == 0, res.stderr
        try:
            admin = tau(env, "sandbox", "kubeconfig").stdout.strip()
            env = {**env, "KUBECONFIG": admin, "TAU_TARGET": "kube"}
            yield Sandbox(env, admin, Path(tmp), up_s)
        finally:
            tau(env, "sandbox", "down")
