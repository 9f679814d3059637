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
from sandboxkit import admin, gpu_rayjob, kube_env, status, submit

from taugrid.components.controller_manifests import CONTROLLER_USER

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
            body = json.dumps(e.get("requestObject"), sort_keys=True)  # what it wrote, to debug
            out.append(f"{e['verb']} {ref.get('subresource', '')} {e['stageTimestamp']} {body}")
    return out


A100 = ["a100x1-0", "a100x1-1", "a100x1-2", "a100x1-3"]


def cordon(home: Path, nodes: list[str], on: bool) -> None:
    api = admin(home).resources.get(api_version="v1", kind="Node")
    for n in nodes:
        api.patch(
            name=n,
            body={"spec": {"unschedulable": on}},
            content_type="application/merge-patch+json",
        )


def test_a_waiting_then_running_run_is_not_rewritten_when_nothing_changes(
    sandbox: Path, tmp_path: Path
) -> None:
    """It waits twice: in the queue (over quota), then with its two workers unschedulable
    (their nodes cordoned: the same FailedScheduling message on two pods, seconds apart: the
    repeats that made an earlier controller rewrite the status without end); then it runs."""
    (tmp_path / "run").mkdir()
    (tmp_path / "blocker").mkdir()
    project = gpu_rayjob(tmp_path / "run", "quiet", "policy: {profile: a100x1}\n")
    two = (project / "tau.yaml").read_text().replace("workers: 1", "workers: 2")
    (project / "tau.yaml").write_text(two)
    blocker = submit(
        sandbox, gpu_rayjob(tmp_path / "blocker", "blocker", "policy: {profile: a100x1}\n")
    )
    ids = [blocker]
    try:
        wait_until(lambda: status(sandbox, blocker)["phase"] == "Running", what="the blocker runs")
        run = submit(sandbox, project)  # 2 GPUs; the gpu queue has 2, the blocker holds 1
        ids.append(run)
        wait_until(lambda: status(sandbox, run)["phase"] == "Queued", what="the run queued")
        cordon(sandbox, A100, True)
        tau(sandbox, "run", "cancel", blocker, env=kube_env(sandbox))

        def unschedulable() -> bool:
            entries = status(sandbox, run).get("timeline") or []
            return sum(e["reason"] == "FailedScheduling" for e in entries) >= 1

        wait_until(unschedulable, timeout=120, what="its workers to fail scheduling")
        cordon(sandbox, A100, False)
        wait_until(
            lambda: status(sandbox, run)["phase"] == "Running",
            timeout=180,
            what="the waiting run to run",
        )
        audit = sandbox / "sandbox" / "audit.log"
        assert writes_to(audit, run, time.time() - 600), "the controller recorded its changes"
        time.sleep(SETTLE_S)
        quiet_from = time.time()
        time.sleep(QUIET_S)
        assert writes_to(audit, run, quiet_from) == []
        timeline = status(sandbox, run)["timeline"]
        assert all(e["count"] < 10 for e in timeline), timeline  # no runaway repeat counts
    finally:
        cordon(sandbox, A100, False)
        for i in ids:
            tau(sandbox, "run", "cancel", i, env=kube_env(sandbox))
