"""The local backend: the same resolved run, on this machine, with the same contract.

`rayjob` runs go to a local Ray head (started on first use, then reused) through Ray's job API;
`job` runs are a subprocess. A detached supervisor (supervisor.py) owns each run; this module
prepares the evidence record, starts the supervisor, and reads runs back.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

import tau_evidence

from taugrid.api.errors import EXIT_PLATFORM, EXIT_USAGE, TauError
from taugrid.api.evidence import LocalHandle, TerminalStateError
from taugrid.api.manifest import Manifest
from taugrid.api.observations import Observations, RunProgress
from taugrid.api.profiles import ProfileSnapshot, WorkerSize, WorkloadProfile, WorkspaceRef
from taugrid.api.vocabulary import TERMINAL, Phase, TerminationReason
from taugrid.host.procs import pid_alive
from taugrid.runs.backends.base import Backend, Say, SubmitOptions, Template
from taugrid.runs.backends.local import procs, rayhead
from taugrid.runs.backends.local.plan import LocalPlan
from taugrid.runs.evidence import RunDir, ensure_writable, now_iso
from taugrid.runs.paths import data_root, runs_root, tau_home, write_atomic
from taugrid.runs.prepare import PreparedRun, RunRequest, prepare
from taugrid.runs.pull import FolderSource

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


class LocalBackend(Template):
    name = LOCAL

    def __init__(self, **_options: object) -> None:
        """Local runs take no target options."""
        # a recorded run's plan, head and standby claim, from `record` to `start`
        self._starting: dict[str, tuple[LocalPlan, rayhead.Head | None, Any]] = {}

    # --- submitting -----------------------------------------------------------------------------
    def prepare(self, request: RunRequest) -> PreparedRun:
        m = request.loaded.manifest
        local = replace(request, workspace=LOCAL, profile=LOCAL)
        return prepare(local, local_snapshot(m), include_helper=False)

    def check_options(self, prepared: PreparedRun, options: SubmitOptions) -> None:
        if options.ray_pip and prepared.kind != "rayjob":
            raise TauError(
                "--ray-pip lets Ray build the environment; a `job` runs as a plain subprocess",
                exit_code=EXIT_USAGE,
            )

    def record(self, prepared: PreparedRun, options: SubmitOptions, say: Say) -> RunDir:
        """The run's folder and record; for a rayjob, the local Ray head and a standby job are
        made ready first (the record names them), but nothing of the run starts yet."""
        m, kind = prepared.manifest, prepared.kind
        gpus_here = detect_gpus()
        warnings = _warnings(m, gpus_here, options, kind, say)
        note = prepared.bundle.left_out_summary()
        if note:  # this run sees them; the same run on a cluster would not
            say(f"note: on a cluster, {note}")
        root = runs_root()
        ensure_writable(root)
        rd = RunDir(root / prepared.run_id)
        try:
            rd.path.mkdir(parents=True)
            for sub in ("config/manifests", "logs", m.checkpoint_subdir, m.output_subdir):
                (rd.path / sub).mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise TauError(
                f"cannot create {rd.path}: {e.strerror or e}", exit_code=EXIT_PLATFORM
            ) from None
        plan = _plan(prepared, options)
        head = claim = None
        if kind == "rayjob":
            head = rayhead.ensure_head(num_gpus=gpus_here, say=say)
            plan = replace(plan, ray_dashboard=head.dashboard)
            if not m.runtime.env_from_secret and not options.ray_pip:
                from taugrid.runs.backends.local import standby

                claim = standby.claim_standby(head, rd.path)
        try:
            self._record(prepared, rd, plan, gpus_here, warnings, head, claim)
        except BaseException:
            if claim is not None:
                claim.abort()
            raise
        self._starting[rd.run_id] = (plan, head, claim)
        return rd

    def start(self, run: RunDir, prepared: PreparedRun, options: SubmitOptions, say: Say) -> None:
        plan, head, claim = self._starting.pop(run.run_id)
        try:
            plan.write(run.path)  # for a rayjob its presence is the launcher's go signal
        except BaseException:
            if claim is not None:
                claim.abort()
            raise
        if claim is not None:
            claim.done = True  # the record and the supervisor own the job from here
        elif head is not None:
            self._submit_attempt0(run, head, plan, say)
        self._start_supervisor(run, prepared.kind)

    def _record(
        self,
        prepared: PreparedRun,
        rd: RunDir,
        plan: LocalPlan,
        gpus_here: int,
        warnings: list[str],
        head: rayhead.Head | None,
        claim: object | None,
    ) -> None:
        from taugrid.api.yamlio import dump

        m, r = prepared.manifest, prepared.resolved
        write_atomic(rd.path / "config" / "tau.yaml", prepared.loaded.text.encode())
        resolved = {
            "run_id": prepared.run_id,
            "target": LOCAL,
            "workload_kind": prepared.kind,
            "workers": r.workers,
            "gpus_per_worker": r.gpus,
            "gpus_available": gpus_here,
            "worker": r.worker.resources(),
            "env": plan.env,
            "secret_env": {n: f"<secret {ref}>" for n, ref in m.runtime.env_from_secret.items()},
            "resume_from": prepared.meta.resume_from,
            "config_hash": m.config_hash(),
            "code_digest": prepared.bundle.digest,
        }
        write_atomic(rd.path / "config" / "resolved.yaml", dump(resolved).encode())
        sub_id = getattr(claim, "submission_id", None) or prepared.run_id
        handle = LocalHandle(
            ray_address=head.dashboard if head else None,
            ray_submission_id=sub_id if head else None,
        )
        rd.create(
            prepared.new_record(
                handle,
                created_at=now_iso(),
                image=m.image_ref or "(local python)",
                gpus_available=gpus_here,
                warnings=warnings,
            )
        )

    def _submit_attempt0(self, rd: RunDir, head: rayhead.Head, plan: LocalPlan, say: Say) -> None:
        """Submit attempt 0 right away (the supervisor would take ~0.5 s more to start)."""
        from taugrid.runs.backends.local import launch

        try:
            rayhead.submit_job(
                head,
                rd.run_id,
                launch.entrypoint(rd.path, python=plan.python),
                launch.ray_runtime_env(plan, launch.secret_env(plan)),
                say=say,
            )
        except (OSError, ValueError) as e:
            why = f"could not submit to the local Ray head: {e}"
            rd.transition(Phase.Failed, why, termination=TerminationReason.NodeFailure)
            raise TauError(why, exit_code=EXIT_PLATFORM) from None

    def _start_supervisor(self, rd: RunDir, kind: str, adopt: bool = False) -> None:
        # A rayjob's supervisor only does bookkeeping (the driver is Ray's child, not its own),
        # so it yields the CPU to Ray while the run starts. A job's supervisor is the process's
        # parent (children inherit niceness), so it keeps the normal priority.
        nice = ["nice", "-n", "10"] if kind == "rayjob" and shutil.which("nice") else []
        module = "taugrid.runs.backends.local.supervisor"
        with (rd.logs / "supervisor.log").open("ab") as log:
            proc = subprocess.Popen(
                [
                    *nice,
                    sys.executable,
                    "-m",
                    module,
                    str(rd.path),
                    *(["--adopt"] if adopt else []),
                ],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )
        rd.update_handle(supervisor_pid=proc.pid)

    # --- reading runs back ------------------------------------------------------------------------
    def observe(self, runs: Sequence[RunDir], now: float | None = None) -> list[Observations]:
        t = now if now is not None else time.time()
        return [_observe(rd, t) for rd in runs]

    def logs(self, run: RunDir, out: TextIO) -> None:
        if not run.driver_log.exists():
            sys.stderr.write(f"no log yet for {run.run_id}\n")
            return
        with run.driver_log.open("rb") as f:
            while chunk := f.read(1 << 16):
                out.write(chunk.decode("utf-8", "replace"))

    def follow(self, run: RunDir, out: TextIO, err: TextIO, *, transitions: bool = True) -> Phase:
        from taugrid.runs.backends.local.follow import follow

        return follow(run, out=out, err=err, transitions=transitions)

    def attach(self, run: RunDir, say: Say) -> bool:
        """Re-attach a run whose supervisor died: a new supervisor adopts it if any of its
        processes (or its Ray job) still runs; else the record is closed as Failed. True when
        a supervisor now owns the run."""
        rec = run.read_record()
        if rec.phase in TERMINAL:
            return False
        h = rec.local
        if pid_alive(h.supervisor_pid):
            say(f"{run.run_id} has its supervisor (pid {h.supervisor_pid}); following it")
            return True
        alive = procs.run_processes(run.run_id, h.process_group)
        if not alive and rec.workload_kind == "rayjob" and h.ray_address and h.ray_submission_id:
            with contextlib.suppress(OSError, ValueError):
                info = rayhead.job_info(h.ray_address, h.ray_submission_id)
                alive = [0] if info.get("status") in ("PENDING", "RUNNING") else []
        if not alive:
            why = "the local supervisor process died, and nothing of the run is left running"
            with contextlib.suppress(TerminalStateError):
                run.transition(Phase.Failed, why, termination=TerminationReason.SupervisorLost)
            return False
        say(f"{run.run_id}: a new supervisor adopts the run ({len(alive)} process(es) still run)")
        self._start_supervisor(run, rec.workload_kind, adopt=True)
        return True

    def record_source(self, run: RunDir) -> FolderSource:
        return FolderSource(run.path)

    def newest_checkpoint(self, run: RunDir) -> str | None:
        return run.newest_checkpoint(run.read_record().checkpoint_subdir)

    def ended_on_its_own(self, run: RunDir) -> Phase | None:
        return None  # the supervisor records a local run's end itself

    def stop(self, run: RunDir, wait_s: float = 30.0) -> str:
        """Stop a run: its supervisor stops it and records the end; without one, what it left
        behind (the Ray job, every process of the run) is stopped here."""
        h = run.read_record().local
        if pid_alive(h.supervisor_pid):
            assert h.supervisor_pid is not None
            os.kill(h.supervisor_pid, signal.SIGTERM)
            deadline = time.monotonic() + wait_s
            while time.monotonic() < deadline:
                if run.read_record().phase in TERMINAL:
                    return "cancelled by the user"
                time.sleep(0.1)
            raise TauError(
                f"run {run.run_id} did not stop within {wait_s:.0f}s", exit_code=EXIT_PLATFORM
            )
        if h.ray_submission_id and h.ray_address:
            with contextlib.suppress(OSError, ValueError):
                rayhead.stop_job(h.ray_address, h.ray_submission_id)
        procs.stop_run_processes(run.run_id, h.process_group)
        return "cancelled by the user (the supervisor was already gone)"


def _warnings(
    m: Manifest, gpus_here: int, options: SubmitOptions, kind: str, say: Say
) -> list[str]:
    warnings: list[str] = []
    if m.compute.gpus > gpus_here:
        msg = (
            f"compute.gpus={m.compute.gpus} but this machine has {gpus_here or 'no'} GPU(s): "
            "the run uses CPU"
        )
        if options.strict:
            raise TauError(
                msg.replace("the run uses CPU", "refusing (--strict)"), exit_code=EXIT_PLATFORM
            )
        warnings.append(msg)
        say(f"warning: {msg} (--strict fails instead)")
    if m.runtime.pip and not options.ray_pip:
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
        msg = (
            f"{', '.join(missing_secrets)} come from Kubernetes Secrets on a cluster; set them "
            "in your environment to pass them locally"
        )
        warnings.append(msg)
        say(f"warning: {msg}")
    return warnings


def helper_lib() -> Path:
    """A folder holding a copy of the stdlib-only `tau_run` helper, put on every local run's
    PYTHONPATH, so that `import tau_run` works in the user's own interpreter too."""
    import tau_ray

    import tau_run

    lib = tau_home() / "lib"
    for module in (tau_run, tau_ray):  # tau_ray: the driver of ray-train and ray-tune runs
        src = Path(str(module.__file__)).read_bytes()
        dst = lib / Path(str(module.__file__)).name
        try:
            same = dst.read_bytes() == src
        except OSError:
            same = False
        if not same:
            write_atomic(dst, src)
    return lib


def interpreter(value: str | None, folder: Path, from_cli: bool) -> str:
    """The Python that runs a local entrypoint: tau's own, or the one the user named
    (runtime.python or --python), checked to exist and run."""
    if not value:
        return sys.executable
    where = "--python" if from_cli else "runtime.python"
    if "/" in value or value.startswith("."):
        path = Path(value).expanduser()
        if not path.is_absolute():  # --python: from here; runtime.python: from tau.yaml
            path = (Path.cwd() if from_cli else folder) / path
        found = str(path) if path.is_file() and os.access(path, os.X_OK) else None
        looked = f" (looked for {path})"
    else:
        found, looked = shutil.which(value), " on PATH"
    if found is None:
        raise TauError(
            f"{where}={value!r}: no such interpreter{looked}",
            exit_code=EXIT_USAGE,
            hint="point it at your project's Python, e.g. .venv/bin/python (create the venv first)",
        )
    try:
        res = subprocess.run(
            [found, "-c", "import sys; print(sys.version_info[0])"],
            capture_output=True,
            text=True,
            timeout=20,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        raise TauError(f"{where}={value!r} does not run: {e}", exit_code=EXIT_USAGE) from None
    if res.returncode != 0 or res.stdout.strip() != "3":
        raise TauError(
            f"{where}={value!r} ({found}) is not a working Python 3", exit_code=EXIT_USAGE
        )
    return found


def _plan(prepared: PreparedRun, options: SubmitOptions) -> LocalPlan:
    from taugrid.runs import render

    m = prepared.manifest
    from taugrid.data.store import registry_url

    registry = registry_url().removeprefix("file://")
    env = render.contract_env(
        prepared.resolved, prepared.meta, data_dir=str(data_root()), registry_dir=registry
    )
    folder = prepared.loaded.folder.resolve()
    user_env = {e.name: e.value for e in m.runtime.env_items() if e.value is not None}
    # The code folder, then tau's helper (`import tau_run` in any interpreter), then the user's.
    paths_ = (str(folder), str(helper_lib()), user_env.pop("PYTHONPATH", None))
    env.update(
        {"PYTHONPATH": os.pathsep.join(p for p in paths_ if p), "PYTHONUNBUFFERED": "1", **user_env}
    )
    if options.ray_pip:
        python = "python"  # Ray puts the env it built first on the driver's PATH
    else:
        python = interpreter(options.python or m.runtime.python, folder, options.python is not None)
    # The exit code is also left in the run folder, for a supervisor that adopts the run after
    # the first one died (the processes are then not its children).
    script = render.command_script(
        m, code_dir=str(folder), python=python, helper_dir=str(helper_lib())
    ) + ('\nrc=$?; printf %s "$rc" > "$TAU_RUN_DIR/logs/.exit-$TAU_ATTEMPT"; exit "$rc"')
    return LocalPlan(
        kind=prepared.kind,
        script=script,
        cwd=str(folder),
        env=env,
        checkpoint_subdir=m.checkpoint_subdir,
        secret_env=sorted(m.runtime.env_from_secret),
        max_retries=m.resilience.max_retries,
        retry_on=list(m.resilience.retry_on),
        auto_resume=m.resilience.auto_resume,
        resume_from=prepared.meta.resume_from,
        pip=list(m.runtime.pip) if options.ray_pip else None,
        python="python" if options.ray_pip else None,
    )


def _observe(rd: RunDir, now: float) -> Observations:
    rec = rd.read_record()
    alive = None if rec.phase in TERMINAL else pid_alive(rec.local.supervisor_pid)
    # Without its supervisor, a run may still be running: count what is left of it.
    orphans = len(procs.run_processes(rec.run_id, rec.local.process_group)) if alive is False else 0
    # what the record says of its progress: the same function reads a cluster run's on its volume
    got = RunProgress.model_validate(
        tau_evidence.progress(rd.path, rec.checkpoint_subdir, rec.output_subdir)
    )
    return Observations(
        record=rec,
        history=rd.read_history(),
        now=now,
        owner_alive=alive,
        orphans=orphans,
        last_metric_ts=got.last_metric_ts,
        last_log_ts=got.last_log_ts,
        metric_rows=got.metric_rows,
        last_step=got.last_step,
        checkpoints=got.checkpoints,
        newest_checkpoint=got.newest_checkpoint,
        sealed=got.sealed,
        outputs=got.outputs,
        latest_metrics={k: v for k, v in got.latest_metrics.items() if v is not None},
        last_error=rd.last_error_line() if rec.phase in (Phase.Failed, Phase.Cancelled) else None,
        evidence=str(rd.path),
    )


if TYPE_CHECKING:  # mypy proves the class has the whole interface (the registry finds it by name)

    def _is_a_backend(b: LocalBackend) -> Backend:
        return b
