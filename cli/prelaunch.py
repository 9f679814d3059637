"""Early submission: hand Ray the run's job before tau has finished loading and checking it.

Ray's job supervisor is a fresh Python worker that takes 1.2-1.8 s to start on a small machine;
tau's own start-up, validation and evidence writes take ~0.4 s more. Done one after the other,
a warm run's first log line came after ~2.4 s. So `tau run` first reads tau.yaml the cheap way
(plain YAML, no models), and when it is clearly a rayjob for a running local head, submits the
job right away with the launcher (cli/launch.py) as its entrypoint. The launcher waits for the
plan that tau writes only after full validation and the evidence record, so nothing of the
user's runs early; if tau then refuses the run (or is interrupted), it stops the job.

Everything here is best effort: any surprise means "no early submission" and the normal path.
Stdlib + PyYAML only: this runs before the models are imported.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from taugrid.api import naming
from taugrid.cli import paths, raylocal


@dataclass
class Early:
    run_id: str
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
            raylocal.stop_job(self.head.dashboard, self.run_id)


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
        secrets = {n: os.environ[n] for n in secret_names if n in os.environ}
        from taugrid.cli import launch

        raylocal.submit_job(
            head,
            run_id,
            launch.entrypoint(paths.runs_root() / run_id),
            {"env_vars": secrets} if secrets else {},
        )
    except Exception:  # best effort by design: the normal path reports real problems
        return None
    return Early(run_id=run_id, head=head, manifest=found[0], secret_names=secret_names)
