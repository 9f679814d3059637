"""The controller is quiet: a run that waited before it started (over quota, then admitted when
the quota came free) has its TauRun status written while something a user would see changes,
and not once in a quiet minute after it settles. Counted in the sandbox API server's audit log
of the controller's user (what bench/bench_controller.py counts too)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from conftest import run_tau as tau
from kubekit import wait_until
from sandboxkit import gpu_rayjob, kube_env, status, submit

from taugrid.components.manifests import CONTROLLER_USER

pytestmark = pytest.mark.e2e
SETTLE_S = 15.0  # what the last change set off is over by then
QUIET_S = 60.0


def writes_to(audit: Path, run_id: str, since: float) -> list[str]:
    """The controller's writes to the run's TauRun after `since` (unix seconds)."""
    out = []
    for line in audit.read_text().splitlines():
        e = json.loads(line)
        ref = e.get("objectRef") or {}
        if (e.get("user") or {}).get("username") != CONTROLLER_USER or ref.get("name") != run_id:
            continue
        if ref.get("resource") != "runs" or e.get("verb") not in ("create", "update", "patch"):
            continue
        stamp = time.strptime(e["stageTimestamp"][:19], "%Y-%m-%dT%H:%M:%S")
        if time.mktime(stamp) - time.timezone >= since:
            out.append(f"{e['verb']} {ref.get('subresource', '')} {e['stageTimestamp']}")
    return out


def test_a_waiting_then_running_run_is_not_rewritten_when_nothing_changes(
    sandbox: Path, tmp_path: Path
) -> None:
    project = gpu_rayjob(tmp_path, "quiet", "policy: {profile: a100x1}\n")
    # the gpu queue has 2 GPUs of a100x1 quota: the third one-GPU run waits
    ids = [submit(sandbox, project) for _ in range(3)]
    try:
        wait_until(lambda: status(sandbox, ids[2])["phase"] == "Queued", what="run 3 queued")
        tau(sandbox, "run", "cancel", ids[0], env=kube_env(sandbox))
        wait_until(lambda: status(sandbox, ids[2])["phase"] == "Running", timeout=120,
                   what="the waiting run to be admitted and run")  # fmt: skip
        audit = sandbox / "sandbox" / "audit.log"
        started = time.time() - 120
        assert writes_to(audit, ids[2], started), "the controller recorded the run's changes"
        time.sleep(SETTLE_S)
        quiet_from = time.time()
        time.sleep(QUIET_S)
        assert writes_to(audit, ids[2], quiet_from) == []
        timeline = status(sandbox, ids[2])["timeline"]
        assert all(e["count"] < 10 for e in timeline), timeline  # no runaway repeat counts
    finally:
        for i in ids:
            tau(sandbox, "run", "cancel", i, env=kube_env(sandbox))
