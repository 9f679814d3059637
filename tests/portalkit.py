"""Run records for the portal's tests, written directly (no Ray, no cluster), and a stand-in
for a local run's supervisor (a process that records the cancel on SIGTERM, as the real one)."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from taugrid.api.evidence import RunRecord
from taugrid.api.vocabulary import Phase
from taugrid.runs.evidence import RunDir


def record(run_id: str, **kw: Any) -> RunRecord:
    base: dict[str, Any] = dict(
        run_id=run_id,
        name=run_id.rsplit("-", 1)[0],
        workspace="local",
        profile="local",
        workload_kind="job",
        handle={"target": "local"},
        submitter="alice@lab",
        code_folder="/x",
        code_revision="u",
        code_digest="d",
        config_hash="h",
        image="i",
        entrypoint="t.py",
        created_at=kw.pop("created_at", "2026-12-01T00:00:00Z"),
    )
    base.update(kw)
    return RunRecord.model_validate(base)


def make_run(
    home: Path,
    run_id: str,
    *,
    phase: Phase = Phase.Succeeded,
    metrics: int = 0,
    log: list[str] | None = None,
    config: str = "run: {entrypoint: t.py}\n",
    created_at: str = "2026-12-01T00:00:00Z",
    **fields: Any,
) -> RunDir:
    rd = RunDir(home / "data" / "runs" / run_id)
    (rd.path / "logs").mkdir(parents=True)
    (rd.path / "config").mkdir()
    (rd.path / "config" / "tau.yaml").write_text(config)
    rd.create(record(run_id, created_at=created_at, **fields))
    if metrics:
        with rd.metrics_path.open("w") as f:
            for step in range(metrics):
                f.write(
                    json.dumps(
                        {"step": step, "ts": step, "loss": 1 / (step + 1), "acc": step / metrics}
                    )
                    + "\n"
                )
    rd.driver_log.write_text("".join(f"{line}\n" for line in log or []))
    if phase is not Phase.Pending:
        rd.transition(Phase.Running, "started")
    if phase in (Phase.Succeeded, Phase.Failed):
        rd.transition(phase, "ended", exit_code=0 if phase is Phase.Succeeded else 3)
    return rd


SUPERVISOR = """
import signal, sys, time
from pathlib import Path
from taugrid.api.vocabulary import Phase
from taugrid.runs.evidence import RunDir
def stop(*_):
    RunDir(Path(sys.argv[1])).transition(Phase.Cancelled, "cancelled by the user")
    sys.exit(0)
signal.signal(signal.SIGTERM, stop)
print("ready", flush=True)
time.sleep(120)
"""


@contextlib.contextmanager
def supervisor(rd: RunDir) -> Iterator[RunDir]:
    """The run, with a live stand-in supervisor for as long as the block lasts."""
    proc = subprocess.Popen(
        [sys.executable, "-c", SUPERVISOR, str(rd.path)],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    rd.update_handle(supervisor_pid=proc.pid)
    try:
        yield rd
    finally:
        proc.kill()
        proc.wait()
