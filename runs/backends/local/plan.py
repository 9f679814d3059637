"""The local execution plan of a run (config/manifests/local-<kind>.json): what the supervisor
and the launcher execute. Stdlib only: the launcher reads it on every attempt's critical path.
For a rayjob, the plan's presence is the launcher's go signal, so it is written last.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from taugrid.runs.paths import write_atomic


def plan_path(run_dir: Path, kind: str) -> Path:
    return run_dir / "config" / "manifests" / f"local-{kind}.json"


@dataclass(frozen=True)
class LocalPlan:
    kind: str  # "job" | "rayjob"
    script: str  # the shell that runs the entrypoint (and tees its log)
    cwd: str
    env: dict[str, str]  # the contract env + the user's env (no secrets)
    checkpoint_subdir: str
    secret_env: list[str] = field(default_factory=list)  # names; values come from the submitter
    max_retries: int = 0
    retry_on: list[str] = field(default_factory=list)
    auto_resume: bool = True
    resume_from: str | None = None
    pip: list[str] | None = None  # --ray-pip: Ray builds this env
    python: str | None = None  # the launcher's interpreter; "python" = the Ray env's (--ray-pip)
    ray_dashboard: str | None = None

    def write(self, run_dir: Path) -> None:
        write_atomic(plan_path(run_dir, self.kind), json.dumps(asdict(self), indent=2).encode())

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> LocalPlan:
        known = cls.__dataclass_fields__
        return cls(**{k: v for k, v in data.items() if k in known})

    @classmethod
    def read(cls, run_dir: Path) -> LocalPlan:
        found = sorted((run_dir / "config" / "manifests").glob("local-*.json"))
        if not found:
            raise FileNotFoundError(f"{run_dir}: no local plan in config/manifests/")
        return cls.from_json(json.loads(found[0].read_bytes()))
