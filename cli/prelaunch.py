"""Early submission: hand Ray the run's job before tau has finished loading and checking it.

Ray's job supervisor is a fresh Python worker that takes 1.2-1.8 s to start on a small machine;
tau's own start-up, validation and evidence writes take ~0.4 s more. Done one after the other,
a warm run's first log line came after ~2.4 s. So `tau run` first reads tau.yaml the cheap way
(plain YAML, no models), and when it is clearly a rayjob for a running local head, submits the
job right away with the launcher (cli/launch.py) as its entrypoint. The launcher waits for the
plan that tau writes only after full validation and the evidence record, so nothing of the
user's runs early; if tau then refuses the run (or is interrupted), it stops the job.

Better still, a warm head usually has a *standby*: a job that a previous run's supervisor
submitted ahead of time, already past Ray's start-up and waiting in the launcher. `tau run`
claims it (an atomic rename) instead of submitting, and the first log line follows tau's own
~0.4 s. The run's Ray submission id is then the standby's (`tau-standby-xxxxx`, in run.json).
Runs with secrets do not use standbys: their values reach Ray only in a job's runtime_env.
TAU_LOCAL_STANDBY=0 turns standbys off.

Everything here is best effort: any surprise means "no early submission" and the normal path.
Stdlib + PyYAML only: this runs before the models are imported.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from taugrid.api import naming
from taugrid.cli import paths, raylocal

STANDBY_PREFIX = "tau-standby"
STANDBY_START_S = 120.0  # a submitted standby that has not announced itself by then is lost


@dataclass
class Early:
    run_id: str
    submission_id: str  # the run id, or the claimed standby's id
    head: raylocal.Head
    manifest: Path
    secret_names: frozenset[str]
    done: bool = False

    @property
    def run_dir(self) -> Path:
        return paths.runs_root() / self.run_id

    def abort(self) -> None:
        """Stop the job: tau refused the run, or was interrupted, before writing its plan."""
        if self.done:
            return
        self.done = True
        with contextlib.suppress(OSError, ValueError):
            raylocal.stop_job(self.head.dashboard, self.submission_id)
        if self.submission_id != self.run_id:  # a claimed standby: its files go with it
            for suffix in ("taken", "claim"):
                (standby_dir(self.head) / f"{self.submission_id}.{suffix}").unlink(missing_ok=True)


def _raw_manifest(file: str | None) -> tuple[Path, dict[str, Any]] | None:
    import yaml

    p = Path(file) if file else Path.cwd()
    if p.is_dir():
        found = paths.find_manifest(p)
        if found is None:
            return None
        p = found
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    data = yaml.load(p.read_bytes(), Loader=loader)
    return (p.resolve(), data) if isinstance(data, dict) else None


def _section(doc: dict[str, Any], key: str) -> dict[str, Any]:
    v = doc.get(key)
    return v if isinstance(v, dict) else {}


def plan_early(doc: dict[str, Any]) -> tuple[str, frozenset[str]] | None:
    """(run id stem, secret names) if the raw document is plainly a rayjob, else None."""
    run, compute, runtime = _section(doc, "run"), _section(doc, "compute"), _section(doc, "runtime")
    name = doc.get("name")
    prefix = _section(doc, "resource_naming").get("prefix")
    gpus, workers = compute.get("gpus", 0), compute.get("workers", 1)
    explicit = run.get("workload_kind") or compute.get("workload_kind")
    if not isinstance(name, str) or not (prefix is None or isinstance(prefix, str)):
        return None
    if not isinstance(gpus, int) or not isinstance(workers, int):
        return None
    if explicit not in (None, "job", "rayjob"):
        return None
    if naming.infer_workload_kind(explicit, gpus, workers) != "rayjob":
        return None
    secrets = runtime.get("env_from_secret") or {}
    if not isinstance(secrets, dict):
        return None
    return naming.run_id_stem(prefix, name), frozenset(str(k) for k in secrets)


_pending: list[tuple[str | None, Early | None]] = []


def claim(file: str | None) -> Early | None:
    """The early submission made for `file` by the console script (cli/entry.py), or one made
    now (in-process callers); None when there is none."""
    if _pending:
        made_for, early = _pending.pop()
        if made_for == file:
            return early
        if early is not None:
            early.abort()
    return submit_early(file, keep=False)


def submit_early(file: str | None, keep: bool = True) -> Early | None:
    """Submit the run's Ray job now, if that is plainly possible; else None (never raises)."""
    early = _submit_early(file)
    if keep:
        _pending.append((file, early))
    return early


def _submit_early(file: str | None) -> Early | None:
    try:
        found = _raw_manifest(file)
        planned = plan_early(found[1]) if found else None
        if found is None or planned is None:
            return None
        stem, secret_names = planned
        head = raylocal.read_head()
        if head is None or not raylocal.pid_alive(head.pid):
            return None
        run_id = naming.new_run_id(stem)
        run_dir = paths.runs_root() / run_id
        sub_id = None if secret_names else claim_standby(head, run_dir)
        if sub_id is None:
            from taugrid.cli import launch

            secrets = {n: os.environ[n] for n in secret_names if n in os.environ}
            sub_id = run_id
            raylocal.submit_job(
                head, run_id, launch.entrypoint(run_dir), {"env_vars": secrets} if secrets else {}
            )
    except Exception:  # best effort by design: the normal path reports real problems
        return None
    return Early(run_id, sub_id, head, manifest=found[0], secret_names=secret_names)


# --- standbys -------------------------------------------------------------------------------
def standby_enabled() -> bool:
    return os.environ.get("TAU_LOCAL_STANDBY", "1") not in ("0", "false", "no")


def standby_dir(head: raylocal.Head) -> Path:
    """Standbys of one head (a restarted head starts with none)."""
    return raylocal.ray_dir() / "standby" / str(head.pid)


def _pid_of(ready: Path) -> int | None:
    try:
        pid = json.loads(ready.read_bytes())["pid"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return pid if isinstance(pid, int) else None


def standby_count(head: raylocal.Head) -> int:
    """Live standbys of the head (ready to be claimed)."""
    d = standby_dir(head)
    return sum(raylocal.pid_alive(_pid_of(r)) for r in d.glob("*.ready")) if d.is_dir() else 0


def claim_standby(head: raylocal.Head, run_dir: Path) -> str | None:
    """Claim a live standby for `run_dir`: its submission id, or None if there is none."""
    if not standby_enabled():
        return None
    d = standby_dir(head)
    for ready in sorted(d.glob("*.ready")) if d.is_dir() else []:
        if not raylocal.pid_alive(_pid_of(ready)):
            ready.unlink(missing_ok=True)  # its job is gone (stopped, or the head was)
            continue
        sub_id = ready.name.removesuffix(".ready")
        try:
            os.rename(ready, d / f"{sub_id}.taken")  # atomic: one claimant wins
        except FileNotFoundError:
            continue
        paths.write_atomic(d / f"{sub_id}.claim", json.dumps({"run_dir": str(run_dir)}).encode())
        return sub_id
    return None


def ensure_standby(head: raylocal.Head) -> str | None:
    """Submit a standby unless one is ready or starting; its id, or None."""
    if not standby_enabled():
        return None
    d = standby_dir(head)
    d.mkdir(parents=True, exist_ok=True)
    if any(raylocal.pid_alive(_pid_of(r)) for r in d.glob("*.ready")):
        return None
    now = time.time()
    for sub in d.glob("*.submitted"):
        with contextlib.suppress(OSError):
            if now - sub.stat().st_mtime < STANDBY_START_S:
                return None
            sub.unlink()
    from taugrid.cli import launch

    sub_id = naming.new_run_id(STANDBY_PREFIX)
    (d / f"{sub_id}.submitted").touch()
    raylocal.submit_job(
        head,
        sub_id,
        launch.standby_entrypoint(d / sub_id),
        {},
        metadata={"tau_standby": "true"},
    )
    return sub_id
