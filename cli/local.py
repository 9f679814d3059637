"""The local backend: the same resolved run, on this machine, with the same contract.

`rayjob` runs go to a local Ray head (started on first use, then reused) through Ray's job API;
`job` runs are a subprocess. A detached supervisor (cli/supervisor.py) owns each run; this
module prepares the evidence record, starts the supervisor, and reads runs back.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from taugrid.api import constants as C
from taugrid.api.evidence import TERMINAL, Lineage, RunRecord
from taugrid.api.manifest import Manifest
from taugrid.api.profiles import ProfileSnapshot, WorkerSize, WorkloadProfile, WorkspaceRef
from taugrid.cli import paths, raylocal
from taugrid.cli.errors import EXIT_PLATFORM, EXIT_USAGE, TauError
from taugrid.cli.evidence import RunDir, ensure_writable, now_iso
from taugrid.cli.load import LoadedManifest
from taugrid.cli.paths import data_root, runs_root, write_atomic
from taugrid.cli.prelaunch import Early
from taugrid.cli.status import Snapshot

Say = Callable[[str], None]
LOCAL = "local"


def detect_gpus() -> int:
    smi = shutil.which("nvidia-smi")
    if not smi:
        return 0
    try:
        out = subprocess.run(
            [smi, "-L"], capture_output=True, text=True, timeout=10, check=False
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        return 0
    return sum(1 for line in out.splitlines() if line.startswith("GPU "))


def missing_requirements(reqs: list[str]) -> list[str]:
    """Requirements of runtime.pip that the current environment does not satisfy."""
    from importlib.metadata import PackageNotFoundError, version

    from packaging.requirements import InvalidRequirement, Requirement

    missing = []
    for raw in reqs:
        try:
            req = Requirement(raw)
        except InvalidRequirement:
            missing.append(raw)
            continue
        try:
            have = version(req.name)
        except PackageNotFoundError:
            missing.append(raw)
            continue
        if req.specifier and not req.specifier.contains(have, prereleases=True):
            missing.append(f"{raw} (have {have})")
    return missing


def local_snapshot(m: Manifest) -> ProfileSnapshot:
    """The local machine as a platform: one workspace, one profile that fits any request."""
    prof = WorkloadProfile(
        name=LOCAL,
        description="this machine",
        gpusPerWorker=8,
        allocatable=WorkerSize(cpu=1024, memory="64Ti"),
        flavor=LOCAL,
        clusterQueue=LOCAL,
        localQueue=LOCAL,
        priorityClasses=[m.policy.priority] if m.policy.priority else [],
        image=LOCAL,
    )
    ws = WorkspaceRef(name=LOCAL, namespace=LOCAL, pvc="local-data")
    return ProfileSnapshot(cluster=LOCAL, profiles=[prof], workspaces=[ws])


def submit(
    loaded: LoadedManifest,
    *,
    say: Say,
    strict: bool = False,
    ray_pip: bool = False,
    resume_from: str | None = None,
    parent: str | None = None,
    submitter: str = "unknown",
    code_revision: str = "unknown",
    early: Early | None = None,
) -> RunDir:
    """Record the run and start it. With `early` (cli/prelaunch.py), its Ray job is already
    submitted and waits for the plan; the caller stops it if this raises."""
    from taugrid.api import naming
    from taugrid.cli import codebundle, render, resolve

    m = loaded.manifest
    kind = m.workload_kind()
    if early is not None and not _early_fits(early, loaded, kind, ray_pip):
        early.abort()
        early = None
    if ray_pip and kind != "rayjob":
        raise TauError(
            "--ray-pip lets Ray build the environment; a `job` runs as a plain subprocess",
            exit_code=EXIT_USAGE,
        )
    gpus_here = detect_gpus()
    warnings: list[str] = []
    if m.compute.gpus > gpus_here:
        msg = (
            f"compute.gpus={m.compute.gpus} but this machine has {gpus_here or 'no'} GPU(s): "
            "the run uses CPU"
        )
        if strict:
            raise TauError(
                msg.replace("the run uses CPU", "refusing (--strict)"), exit_code=EXIT_PLATFORM
            )
        warnings.append(msg)
        say(f"warning: {msg} (--strict fails instead)")
    if m.runtime.pip and not ray_pip:
        missing = missing_requirements(list(m.runtime.pip))
        if missing:
            msg = f"runtime.pip not installed here: {', '.join(missing)}"
            warnings.append(msg)
            hint = "pip install them" + (
                ", or pass --ray-pip to let Ray build the env" if kind == "rayjob" else ""
            )
            say(f"warning: {msg}; tau does not install them locally ({hint})")
    missing_secrets = [n for n in m.runtime.env_from_secret if n not in os.environ]
    if missing_secrets:
        msg = f"{', '.join(missing_secrets)} come from Kubernetes Secrets on a cluster; set them in your environment to pass them locally"
        warnings.append(msg)
        say(f"warning: {msg}")

    r = resolve.resolve(m, local_snapshot(m), workspace=LOCAL, profile=LOCAL)
    root = runs_root()
    ensure_writable(root)
    run_id = early.run_id if early else naming.new_run_id(m.run_id_stem)
    rd = RunDir(root / run_id)
    try:
        rd.path.mkdir(parents=True)
        for sub in ("config/manifests", "logs", m.checkpoint_subdir, m.output_subdir):
            (rd.path / sub).mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise TauError(
            f"cannot create {rd.path}: {e.strerror or e}", exit_code=EXIT_PLATFORM
        ) from None

    meta = render.RunMeta(
        run_id=run_id, submitter=submitter, code_revision=code_revision, resume_from=resume_from
    )
    env = render.contract_env(r, meta, data_dir=str(data_root()))
    folder = loaded.folder.resolve()
    user_env = {e.name: e.value for e in m.runtime.env_items() if e.value is not None}
    pythonpath = os.pathsep.join(p for p in (str(folder), user_env.pop("PYTHONPATH", None)) if p)
    env.update({"PYTHONPATH": pythonpath, "PYTHONUNBUFFERED": "1", **user_env})
    script = render.command_script(m, code_dir=str(folder), python=sys.executable)
    bundle = codebundle.collect(loaded.folder, include_helper=False)
    plan: dict[str, Any] = {
        "kind": kind,
        "script": script,
        "cwd": str(folder),
        "env": env,
        "secret_env": sorted(m.runtime.env_from_secret),
        "max_retries": m.resilience.max_retries,
        "retry_on": list(m.resilience.retry_on),
        "auto_resume": m.resilience.auto_resume,
        "checkpoint_subdir": m.checkpoint_subdir,
        "resume_from": resume_from,
        "pip": list(m.runtime.pip) if ray_pip else None,
    }
    head = None
    if kind == "rayjob":
        head = early.head if early else raylocal.ensure_head(num_gpus=gpus_here, say=say)
        plan["ray_dashboard"] = head.dashboard
    # The record, written before anything runs: a run that never starts still has evidence.
    write_atomic(rd.path / "config" / "tau.yaml", loaded.text.encode())
    resolved = {
        "run_id": run_id,
        "target": LOCAL,
        "workload_kind": kind,
        "workers": r.workers,
        "gpus_per_worker": r.gpus,
        "gpus_available": gpus_here,
        "worker": r.worker.resources(),
        "env": env,
        "secret_env": {n: f"<secret {ref}>" for n, ref in m.runtime.env_from_secret.items()},
        "resume_from": resume_from,
        "config_hash": m.config_hash(),
        "code_digest": bundle.digest,
    }
    from taugrid.cli.yamlio import dump

    write_atomic(rd.path / "config" / "resolved.yaml", dump(resolved).encode())
    rec = RunRecord(
        run_id=run_id,
        name=m.name,
        workspace=LOCAL,
        profile=LOCAL,
        workload_kind=kind,
        target=LOCAL,
        submitter=submitter,
        code_folder=str(folder),
        code_revision=code_revision,
        code_digest=bundle.digest,
        config_hash=m.config_hash(),
        image=m.image_ref or "(local python)",
        entrypoint=m.entrypoint_path or "",
        created_at=now_iso(),
        max_retries=m.resilience.max_retries,
        workers=r.workers,
        gpus_per_worker=r.gpus,
        gpus_available=gpus_here,
        stall_after_seconds=m.metrics.stall_after_seconds,
        primary_metric=m.metrics.primary,
        warnings=warnings,
        resumed_from=Lineage(run_id=parent, checkpoint=resume_from) if parent else None,
        ray_address=head.dashboard if head else None,
        ray_submission_id=(early.submission_id if early else run_id) if head else None,
    )
    rd.write_record(rec)
    rd.append_history("Pending", "submitted")
    # Last, the plan: for a rayjob its presence is the launcher's go signal (cli/launch.py).
    write_atomic(paths.plan_path(rd.path, kind), json.dumps(plan, indent=2).encode())
    if early is not None:
        early.done = True  # the record and the supervisor own the job from here
    elif head is not None:
        # Submit attempt 0 right away (the supervisor would take ~0.5 s more to start).
        from taugrid.cli import launch

        try:
            raylocal.submit_job(
                head,
                run_id,
                launch.entrypoint(rd.path),
                launch.ray_runtime_env(plan, launch.secret_env(plan)),
            )
        except (OSError, ValueError) as e:
            rd.append_history("Failed", f"NodeFailure: could not submit to the local Ray head: {e}")
            rd.update(
                phase="Failed",
                reason=f"could not submit to the local Ray head: {e}",
                finished_at=now_iso(),
            )
            rd.seal()
            raise TauError(
                f"could not submit to the local Ray head: {e}", exit_code=EXIT_PLATFORM
            ) from None
    # A rayjob's supervisor only does bookkeeping (the driver is Ray's child, not its own), so
    # it yields the CPU to Ray while the run starts. A job's supervisor is the process's parent
    # (children inherit niceness), so it keeps the normal priority.
    nice = ["nice", "-n", "10"] if kind == "rayjob" and shutil.which("nice") else []
    with (rd.logs / "supervisor.log").open("ab") as log:
        proc = subprocess.Popen(
            [*nice, sys.executable, "-m", "taugrid.cli.supervisor", str(rd.path)],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
    rd.update(supervisor_pid=proc.pid)
    return rd


def _early_fits(early: Early, loaded: LoadedManifest, kind: str, ray_pip: bool) -> bool:
    """Whether the job submitted early is the one this validated run would have submitted."""
    m = loaded.manifest
    return (
        kind == "rayjob"
        and not ray_pip
        and early.manifest == loaded.path.resolve()
        and early.run_id.rsplit("-", 1)[0] == m.run_id_stem
        and early.secret_names == frozenset(m.runtime.env_from_secret)
    )


# --- reading runs back ------------------------------------------------------------------------
def workload_alive(rec: RunRecord, jobs: dict[str, Any] | None) -> bool:
    if rec.workload_kind == "job":
        if not rec.process_group:
            return False
        try:
            os.killpg(rec.process_group, 0)
            return True
        except (ProcessLookupError, PermissionError):
            return False
    if jobs is None or not rec.ray_submission_id:
        return False
    info = jobs.get(rec.ray_submission_id)
    return bool(info and info.get("status") in ("PENDING", "RUNNING"))


def snapshot(rd: RunDir, now: float | None = None) -> Snapshot:
    rec = rd.read_record()
    history = rd.read_history()
    alive = None if rec.phase in TERMINAL else raylocal.pid_alive(rec.supervisor_pid)
    rows = rd.metric_rows()
    ckpts = []
    with contextlib.suppress(OSError):
        sub = Path(
            json.loads(paths.plan_path(rd.path, rec.workload_kind).read_text())["checkpoint_subdir"]
        )
        ckpts = rd.complete_checkpoints(str(sub))
    out_dir = rd.path / "outputs"
    outputs = sum(1 for p in out_dir.rglob("*") if p.is_file()) if out_dir.is_dir() else 0
    log_ts = max(
        (p.stat().st_mtime for p in rd.logs.glob("*.log") if p.name != "supervisor.log"),
        default=None,
    )
    return Snapshot(
        record=rec,
        history=history,
        now=now if now is not None else time.time(),
        supervisor_alive=alive,
        last_metric_ts=rd.metrics_path.stat().st_mtime if rd.metrics_path.exists() else None,
        last_log_ts=log_ts,
        metric_rows=len(rows),
        last_step=rows[-1]["step"] if rows else None,
        checkpoints=len(ckpts),
        newest_checkpoint=ckpts[-1]["path"] if ckpts else None,
        sealed=rd.manifest_path.exists(),
        outputs=outputs,
    )


def cancel(rd: RunDir, wait_s: float = 30.0) -> str:
    """Stop a run. Returns the phase it ended in."""
    rec = rd.read_record()
    if rec.phase in TERMINAL:
        return rec.phase
    if raylocal.pid_alive(rec.supervisor_pid):
        assert rec.supervisor_pid is not None
        os.kill(rec.supervisor_pid, signal.SIGTERM)
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            rec = rd.read_record()
            if rec.phase in TERMINAL:
                return rec.phase
            time.sleep(0.1)
        raise TauError(
            f"run {rd.run_id} did not stop within {wait_s:.0f}s", exit_code=EXIT_PLATFORM
        )
    # The supervisor is gone: stop what it left behind, then close the record ourselves.
    if rec.workload_kind == "job" and rec.process_group:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(rec.process_group, signal.SIGKILL)
    elif rec.ray_submission_id and rec.ray_address:
        with contextlib.suppress(OSError, ValueError):
            raylocal.stop_job(rec.ray_address, rec.ray_submission_id)
    rd.append_history(
        "Cancelled", "cancelled by the user (the supervisor was already gone)", attempt=rec.attempt
    )
    rd.update(phase="Cancelled", reason="cancelled by the user", finished_at=now_iso())
    rd.seal()
    return "Cancelled"


def newest_checkpoint(rd: RunDir) -> str | None:
    sub = rd.plan().get("checkpoint_subdir", C.DEFAULT_CHECKPOINT_SUBDIR)
    ckpts = rd.complete_checkpoints(sub)
    return str(rd.checkpoint_dir(sub) / ckpts[-1]["path"]) if ckpts else None


def record_child(parent: RunDir, child_id: str, checkpoint: str | None) -> None:
    """Lineage in the parent's record: lineage.jsonl, then the seal is renewed over it."""
    line = json.dumps({"ts": now_iso(), "resumed_by": child_id, "checkpoint": checkpoint}) + "\n"
    with (parent.path / "lineage.jsonl").open("a", encoding="utf-8") as f:
        f.write(line)
    if parent.manifest_path.exists():
        parent.seal()
