"""Faults around the local backend: a Ray head that dies, a data root that is full or read-only."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from localkit import EXAMPLES, Tau, have_ray, text, wait_for

pytestmark = pytest.mark.local


@pytest.fixture()
def own_tau(tmp_path: Path) -> Iterator[Tau]:
    t = Tau(tmp_path / "home")
    yield t
    t("local", "stop", timeout=60)


@pytest.mark.skipif(not have_ray(), reason="Ray is not installed")
def test_ray_head_that_dies_fails_the_run_and_the_next_run_restarts_it(
    own_tau: Tau, project: Callable[[str, str, str], Path]
) -> None:
    folder = project(
        "schema_version: 1\nname: headless\nrun: {entrypoint: s.py, workload_kind: rayjob}\n",
        "s.py",
        "import time\nprint('up', flush=True)\ntime.sleep(120)\n",
    )
    run_id = own_tau("run", str(folder), "-d").stdout.strip()
    wait_for(
        lambda: "up" in text(own_tau.run_dir(run_id) / "logs" / "driver.log"),
        timeout=300,  # a first Ray head on a loaded 2-core machine; the why is shown if not
        what="the driver",
        explain=lambda: own_tau.explain(run_id),
    )
    head = json.loads((own_tau.home / "ray" / "head.json").read_text())
    os.killpg(head["pid"], signal.SIGKILL)
    wait_for(
        lambda: own_tau.record(run_id)["phase"] == "Failed",
        timeout=90,
        what="the run to notice",
        explain=lambda: own_tau.explain(run_id),
    )
    rec = own_tau.record(run_id)
    assert "Ray head" in rec["reason"]
    st = json.loads(own_tau("run", "status", run_id, "-o", "json").stdout)
    assert "Ray head" in st["summary"]
    assert own_tau("local", "status", "-o", "json").stdout.count('"running": false') == 1
    res = own_tau("run", str(EXAMPLES / "cpu-multi-interest-ray"), timeout=300)
    assert res.returncode == 0, res.stderr
    assert "starting a local Ray head" in res.stderr


def _mount_tmpfs(path: Path, *opts: str) -> bool:
    path.mkdir(parents=True, exist_ok=True)
    res = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", ",".join(opts), "tmpfs", str(path)],
        capture_output=True,
        check=False,
    )
    return res.returncode == 0


@pytest.fixture()
def mounted(tmp_path: Path) -> Iterator[Callable[..., Path]]:
    mounts: list[Path] = []

    def mount(*opts: str) -> Path:
        p = tmp_path / f"mnt{len(mounts)}"
        if os.geteuid() != 0 or not _mount_tmpfs(p, *opts):
            pytest.skip("needs root and tmpfs mounts to make a full or read-only data root")
        mounts.append(p)
        return p

    yield mount
    for p in mounts:
        subprocess.run(["umount", "-l", str(p)], capture_output=True, check=False)


def test_read_only_data_root(mounted: Callable[..., Path]) -> None:
    home = mounted("ro", "size=1m")
    res = Tau(home)("run", str(EXAMPLES / "batch-job"))
    assert res.returncode == 4
    assert "not writable" in res.stderr and "Read-only file system" in res.stderr
    assert "Traceback" not in res.stderr


def test_full_data_root(mounted: Callable[..., Path]) -> None:
    home = mounted("size=64k")
    (home / "data" / "runs").mkdir(parents=True)
    fd = os.open(home / "ballast", os.O_WRONLY | os.O_CREAT)  # fill it up
    try:
        while os.write(fd, b"\0" * 4096):
            pass
    except OSError:
        pass
    finally:
        os.close(fd)
    res = Tau(home)("run", str(EXAMPLES / "batch-job"))
    assert res.returncode == 4
    assert "No space left on device" in res.stderr and "TAU_HOME" in res.stderr
