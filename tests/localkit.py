"""Helpers and fixtures for the local-backend tests: real Ray (127.0.0.1), real processes, files.

Imported by tests/conftest.py so the fixtures are available to test_local_*.py.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
TAU = str(Path(sys.executable).parent / "tau")


def have_ray() -> bool:
    return (Path(sys.executable).parent / "ray").exists()


def _foreground_signals() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


class Tau:
    """Runs the real `tau` executable against one TAU_HOME."""

    def __init__(self, home: Path) -> None:
        self.home = home
        self.env = {**os.environ, "TAU_HOME": str(home), "TAU_TARGET": "local"}

    def __call__(
        self, *args: str, timeout: float = 180, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [TAU, *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            env={**self.env, **(env or {})},
            check=False,
        )

    def spawn(self, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
        """`tau` as a terminal's foreground command: Ctrl-C (SIGINT) reaches it as it would a
        person's, even when the suite itself was started in the background (a shell's
        background job ignores SIGINT, its children inherit that, and Python then never turns
        SIGINT into KeyboardInterrupt)."""
        return subprocess.Popen(
            [TAU, *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**self.env, **(env or {})},
            preexec_fn=_foreground_signals,
        )

    def run_dir(self, run_id: str) -> Path:
        return self.home / "data" / "runs" / run_id

    def record(self, run_id: str) -> dict[str, Any]:
        return json.loads((self.run_dir(run_id) / "run.json").read_text())

    def explain(self, run_id: str) -> str:
        """What a failed wait on a run shows: its record and the tails of its logs and the
        head's."""
        rd = self.run_dir(run_id)
        parts = [f"run.json: {text(rd / 'run.json')[:2000]}"]
        for log in (
            rd / "logs" / "supervisor.log",
            rd / "logs" / "driver.log",
            self.home / "ray" / "head.log",
        ):
            tail = "\n    ".join(text(log).splitlines()[-15:])
            parts.append(f"{log.name} (tail):\n    {tail}")
        return "\n".join(parts)


def text(path: Path) -> str:
    """A file's text, or "" while it does not exist yet."""
    try:
        return path.read_text()
    except FileNotFoundError:
        return ""


def wait_for(
    cond: Callable[[], bool],
    timeout: float = 60.0,
    what: str = "condition",
    explain: Callable[[], str] | None = None,
) -> None:
    """Poll a condition until it holds (bounded): the event has no other way to be awaited.
    On a timeout, `explain()` says what the state was (a CI failure must carry its own why).
    The pause between looks grows from 0.05 s to 1 s: many looks are a `tau` process (about a
    CPU-second each), which every 0.05 s kept a core busy for as long as a test waited."""
    deadline = time.monotonic() + timeout
    pause = 0.05
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(min(pause, max(0.0, deadline - time.monotonic())))
        pause = min(pause * 1.5, 1.0)
    why = f"\n{explain()}" if explain is not None else ""
    raise AssertionError(f"timed out after {timeout}s waiting for {what}{why}")


@pytest.fixture(scope="session")
def tau(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Tau]:
    t = Tau(tmp_path_factory.mktemp("tauhome"))
    yield t
    t("local", "stop", timeout=60)


@pytest.fixture()
def project(tmp_path: Path) -> Callable[[str, str, str], Path]:
    """A throw-away project folder: tau.yaml text + one script."""

    def make(tau_yaml: str, script_name: str, script: str) -> Path:
        (tmp_path / "tau.yaml").write_text(tau_yaml)
        (tmp_path / script_name).write_text(script)
        return tmp_path

    return make


@pytest.fixture()
def example_copy(tmp_path: Path) -> Callable[[str], Path]:
    def make(name: str) -> Path:
        dst = tmp_path / name
        shutil.copytree(EXAMPLES / name, dst)
        return dst

    return make
