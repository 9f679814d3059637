"""The entrypoint of every local Ray job: waits for the run's plan, then becomes its driver.

    python -m taugrid.runs.backends.local.launch RUN_DIR [--attempt N] [--resume-from PATH]

The user's code does not start until tau writes the plan (config/manifests/local-rayjob.json),
which it does last, after the evidence record; if tau refuses the run instead, it stops the
job and this process never runs anything.

The run's environment travels in the plan, not in the job's runtime_env (a standby job was
submitted before the run existed). So that Ray tasks and actors of the run see the same environment
as on a
cluster, it is also added to the job config that Ray hands the driver. Secrets come in the
runtime_env (never on disk). Stdlib only: this runs on every attempt's critical path.

    python -m taugrid.runs.backends.local.launch --standby STANDBY_DIR/ID

A standby: a job submitted ahead of time (after a run starts, for the next one), so that even
Ray's job start-up is off the path of a warm `tau run`. It announces itself with ID.ready (its
pid), waits for tau to claim it (tau renames ID.ready to ID.taken, then writes ID.claim naming
the run folder), and from there goes on as above. Unclaimed for STANDBY_IDLE_S, it leaves.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import time
from pathlib import Path
from typing import Any

from taugrid.api import constants as C
from taugrid.runs.backends.local.plan import LocalPlan, plan_path
from taugrid.runs.paths import write_atomic

PLAN_WAIT_S = 120.0
STANDBY_IDLE_S = 30 * 60.0
CLAIM_POLL_S = 0.02  # an idle standby costs ~1% of a core
# Set by Ray's job supervisor for the driver: the job's config, whose runtime_env the driver's
# ray.init() applies to every task and actor of the job.
RAY_JOB_CONFIG_ENV = "RAY_JOB_CONFIG_JSON_ENV_VAR"
EXIT_NO_PLAN = 3


def _command(*args: str, python: str | None = None) -> str:
    argv = [python or sys.executable, "-m", "taugrid.runs.backends.local.launch", *args]
    return "exec " + " ".join(shlex.quote(a) for a in argv)


def entrypoint(
    run_dir: Path, attempt: int = 0, resume_from: str | None = None, python: str | None = None
) -> str:
    """The shell command Ray runs for one attempt of a local rayjob. With `python="python"`
    (--ray-pip) the launcher, and so the driver, runs in the Python of the env Ray built."""
    resume = ["--resume-from", resume_from] if resume_from else []
    return _command(str(run_dir), "--attempt", str(attempt), *resume, python=python)


def standby_entrypoint(base: Path) -> str:
    return _command("--standby", str(base))


def ray_runtime_env(plan: LocalPlan, secrets: dict[str, str]) -> dict[str, Any]:
    """The job's runtime_env: the secrets only (the run's env travels in the plan), and pip
    with --ray-pip."""
    runtime_env: dict[str, Any] = {"env_vars": secrets} if secrets else {}
    if plan.pip:
        runtime_env["pip"] = plan.pip
    return runtime_env


def attempt_env(plan: LocalPlan, attempt: int, resume_from: str | None) -> dict[str, str]:
    """The run's own env for one attempt: the contract, user env, attempt and resume point."""
    env = dict(plan.env)
    env[C.ENV_ATTEMPT] = str(attempt)
    if resume_from:
        env[C.ENV_RESUME_FROM] = resume_from
    else:
        env.pop(C.ENV_RESUME_FROM, None)
    return env


def secret_env(plan: LocalPlan, environ: dict[str, str] | None = None) -> dict[str, str]:
    """Secret values by name from the submitter's environment (they never enter the record)."""
    source = os.environ if environ is None else environ
    return {n: source[n] for n in plan.secret_env if n in source}


def _suffixed(base: Path, suffix: str) -> Path:
    return base.parent / f"{base.name}.{suffix}"


def wait_for_claim(base: Path, idle_s: float) -> Path | None:
    """Announce this standby and wait to be claimed: the claimed run's folder, or None."""
    ready, claim = _suffixed(base, "ready"), _suffixed(base, "claim")
    write_atomic(ready, json.dumps({"pid": os.getpid()}).encode())
    _suffixed(base, "submitted").unlink(missing_ok=True)
    deadline = time.monotonic() + idle_s
    expired = False
    while True:
        try:
            run_dir = Path(json.loads(claim.read_bytes())["run_dir"])
        except (FileNotFoundError, ValueError, KeyError, TypeError):
            pass
        else:
            for leftover in (claim, _suffixed(base, "taken")):
                leftover.unlink(missing_ok=True)
            return run_dir
        if time.monotonic() >= deadline:
            if expired:
                return None  # taken, but the claim never came (tau was killed)
            try:
                os.rename(ready, _suffixed(base, "expired"))  # atomic: a claim cannot win too
            except FileNotFoundError:
                expired, deadline = True, time.monotonic() + 10.0  # just taken: the claim follows
                continue
            _suffixed(base, "expired").unlink(missing_ok=True)
            return None
        time.sleep(CLAIM_POLL_S)


def wait_for_plan(path: Path, timeout_s: float) -> LocalPlan | None:
    deadline = time.monotonic() + timeout_s
    delay = 0.005
    while True:
        try:
            return LocalPlan.from_json(json.loads(path.read_bytes()))
        except (FileNotFoundError, ValueError):  # not there yet (tau writes it atomically)
            pass
        if time.monotonic() >= deadline:
            return None
        time.sleep(delay)
        delay = min(delay * 2, 0.05)


def driver_env(environ: dict[str, str], run_env: dict[str, str]) -> dict[str, str]:
    """The driver's environment: Ray's (and the secrets) plus the run's, also in the job config."""
    env = {**environ, **run_env}
    raw = environ.get(RAY_JOB_CONFIG_ENV)
    if raw:
        try:
            cfg = json.loads(raw)
        except ValueError:
            return env
        runtime_env = cfg.get("runtime_env") or {}
        runtime_env["env_vars"] = {**(runtime_env.get("env_vars") or {}), **run_env}
        cfg["runtime_env"] = runtime_env
        env[RAY_JOB_CONFIG_ENV] = json.dumps(cfg)
    return env


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m taugrid.runs.backends.local.launch")
    ap.add_argument("run_dir", type=Path, nargs="?")
    ap.add_argument("--attempt", type=int, default=0)
    ap.add_argument("--resume-from", default=None)
    ap.add_argument("--standby", type=Path, default=None)
    args = ap.parse_args(argv)
    if args.standby is not None:
        args.run_dir = wait_for_claim(args.standby, STANDBY_IDLE_S)
        if args.run_dir is None:
            print("tau: standby not claimed; leaving", file=sys.stderr, flush=True)
            return 0
    if args.run_dir is None:
        ap.error("RUN_DIR or --standby is required")
    path = plan_path(args.run_dir, "rayjob")
    plan = wait_for_plan(path, PLAN_WAIT_S)
    if plan is None:
        print(
            f"tau: no plan at {path} after {PLAN_WAIT_S:.0f}s: the submission was not completed "
            "(tau was killed, or refused the run); nothing was run",
            file=sys.stderr,
            flush=True,
        )
        return EXIT_NO_PLAN
    resume = args.resume_from if args.attempt else (args.resume_from or plan.resume_from)
    env = driver_env(dict(os.environ), attempt_env(plan, args.attempt, resume))
    import tau_inputs

    log = Path(env.get(C.ENV_RUN_DIR, str(args.run_dir))) / "logs" / "driver.log"
    failed = tau_inputs.lay_out(env, log, "tau")
    if failed is not None:
        return failed
    os.chdir(plan.cwd)
    os.execvpe("bash", ["bash", "-c", plan.script], env)
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main())
