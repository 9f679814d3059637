"""tau_ray: the driver of a Ray Train or Ray Tune run (run.launcher: ray-train | ray-tune).

    python tau_ray.py ENTRYPOINT [ARGS...]

Carried in every run's code beside tau_run (stdlib at import; Ray is imported when it runs). It
loads the entrypoint as a module (its `if __name__ == "__main__":` block does not run) and calls
`run.function` of it the way the launcher says, sized by the run's compute, so the script never
needs to know the cluster:

- ray-train: a data-parallel trainer (TorchTrainer when torch is importable, which sets up the
  process group; else Ray's DataParallelTrainer) of TAU_NUM_WORKERS workers with
  TAU_GPUS_PER_WORKER GPUs each, calling `train_loop_per_worker(config)` with
  `config = {"args": [ARGS...]}`; it reports with `ray.train.report`. The final metrics go to
  the run's metrics and `outputs/train.json`.
- ray-tune: a Tuner over `objective(config)` with the tune block (TAU_TUNE, JSON): the search
  space, metric, mode, samples, concurrency and scheduler. Each trial is recorded as it ends
  (`trials.jsonl`: its id, config, status, last metrics, iterations, checkpoint), the run's
  metrics get the best-so-far curve (one point per ended trial), and `outputs/tune.json` names
  the best trial. A sweep whose trials never report the metric fails, saying which metrics they
  did report.
"""

from __future__ import annotations

import json
import math
import os
import runpy
import sys
import time
from pathlib import Path
from typing import Any

EXIT_NO_METRIC = 4  # the trainable never reported the sweep's metric
# what Ray Tune adds to every result (not the trainable's own metrics)
TUNE_KEYS = frozenset(
    {
        "done",
        "iterations_since_restore",
        "pid",
        "time_since_restore",
        "time_this_iter_s",
        "time_total_s",
        "timestamp",
        "training_iteration",
        "trial_id",
        "date",
        "hostname",
        "node_ip",
        "checkpoint_dir_name",
    }
)


def _env_int(name: str, default: int) -> int:
    try:
        return int(os.environ.get(name, default))
    except ValueError:
        return default


def load_function(path: str, name: str) -> Any:
    """`name` from the entrypoint, run as a module named after the file (not "__main__")."""
    sys.path.insert(0, str(Path(path).resolve().parent))
    module = runpy.run_path(path, run_name=Path(path).stem)
    fn = module.get(name)
    if not callable(fn):
        defined = sorted(k for k, v in module.items() if callable(v) and not k.startswith("_"))
        raise SystemExit(
            f"tau_ray: {path} defines no function {name!r} (run.function); it "
            f"defines: {', '.join(defined[:12]) or 'none'}"
        )
    return fn


def search_space(space: dict[str, Any]) -> dict[str, Any]:
    """The tune block's search space as Ray Tune's samplers (validated by tau before)."""
    from ray import tune

    out: dict[str, Any] = {}
    for key, value in space.items():
        if not isinstance(value, dict):
            out[key] = value
            continue
        ((domain, args),) = value.items()
        out[key] = (
            getattr(tune, domain)(args)
            if domain in ("choice", "grid_search")
            else getattr(tune, domain)(*args)
        )
    return out


def _plain(value: Any) -> Any:
    """A JSON-safe copy of a trial's config or result (samplers' values are plain already)."""
    try:
        return json.loads(json.dumps(value, default=str))
    except (TypeError, ValueError):
        return str(value)


class Recorder:
    """Each ended trial, recorded at once: trials.jsonl, and the best-so-far curve."""

    def __init__(self, run_dir: Path, metric: str, mode: str) -> None:
        self.path = run_dir / "trials.jsonl"
        self.metric, self.mode = metric, mode
        self.best: float | None = None
        self.ended = 0
        self.seen_metrics: set[str] = set()
        self.latest: dict[str, dict[str, Any]] = {}
        self.best_row: dict[str, Any] = {}

    def better(self, value: float) -> bool:
        if self.best is None:
            return True
        return value < self.best if self.mode == "min" else value > self.best

    def result(self, trial: Any, result: dict[str, Any]) -> None:
        """Every result a trial reports: the metric names seen, its latest value of the metric
        (a trial's last result may lack it: e.g. the value its function returns, `_metric`)."""
        numbers = {k: v for k, v in result.items() if isinstance(v, int | float)}
        self.seen_metrics |= set(numbers) - {"_metric"}
        if self.metric in numbers:
            self.latest[trial.trial_id] = numbers
        elif trial.trial_id not in self.latest:
            self.latest[trial.trial_id] = {}

    def trial_ended(self, trial: Any, status: str) -> None:
        import tau_run

        last = dict(getattr(trial, "last_result", None) or {})
        if self.metric not in last:
            last = {**last, **self.latest.get(trial.trial_id, {})}
        value = last.get(self.metric)
        ckpt = getattr(trial, "checkpoint", None)
        row = {
            "trial": trial.trial_id,
            "status": status,
            "config": _plain(trial.config),
            "metric": self.metric,
            "value": value,
            "iterations": last.get("training_iteration"),
            "metrics": _plain(
                {
                    k: v
                    for k, v in last.items()
                    if isinstance(v, int | float) and k not in TUNE_KEYS | {"_metric"}
                }
            ),
            "checkpoint": getattr(ckpt, "path", None) if ckpt is not None else None,
            "ended_at": time.time(),
        }
        with self.path.open("a", encoding="utf-8") as f:
            f.write(json.dumps(row, sort_keys=True) + "\n")
        self.ended += 1
        if isinstance(value, int | float) and not math.isnan(value) and self.better(value):
            self.best = float(value)
            self.best_row = row
        if self.best is not None:  # the best-so-far curve: one point per ended trial
            point = {f"best_{self.metric}": self.best}
            if isinstance(value, int | float):
                point[self.metric] = float(value)
            tau_run.log(self.ended, **point)


def _scheduler(tune_cfg: dict[str, Any]) -> Any:
    from ray.tune.schedulers import ASHAScheduler, FIFOScheduler

    if tune_cfg.get("scheduler") == "asha":
        return ASHAScheduler(
            max_t=int(tune_cfg.get("max_t", 100)), grace_period=int(tune_cfg.get("grace_period", 1))
        )
    return FIFOScheduler()  # type: ignore[no-untyped-call]


def run_tune(fn: Any, run_dir: Path, tune_cfg: dict[str, Any]) -> int:
    from ray import tune

    metric, mode = tune_cfg["metric"], tune_cfg.get("mode", "min")
    # a trial that does not report the metric is recorded, and the sweep says so at its end
    # in one sentence (Ray Tune would stop the first such trial with a traceback)
    os.environ.setdefault("TUNE_DISABLE_STRICT_METRIC_CHECKING", "1")
    workers = _env_int("TAU_NUM_WORKERS", 1)
    gpus = _env_int("TAU_GPUS_PER_WORKER", 0)
    recorder = Recorder(run_dir, metric, mode)

    class Record(tune.Callback):
        def on_trial_result(
            self, iteration: int, trials: list[Any], trial: Any, result: dict[str, Any], **info: Any
        ) -> None:
            recorder.result(trial, result)

        def on_trial_complete(
            self, iteration: int, trials: list[Any], trial: Any, **info: Any
        ) -> None:
            recorder.trial_ended(trial, "TERMINATED")

        def on_trial_error(
            self, iteration: int, trials: list[Any], trial: Any, **info: Any
        ) -> None:
            recorder.trial_ended(trial, "ERROR")

    trainable = tune.with_resources(fn, {"cpu": 1, "gpu": gpus}) if gpus else fn
    tuner = tune.Tuner(
        trainable,
        param_space=search_space(tune_cfg.get("search_space") or {}),
        tune_config=tune.TuneConfig(
            metric=metric,
            mode=mode,
            num_samples=int(tune_cfg.get("num_samples", 1)),
            max_concurrent_trials=tune_cfg.get("max_concurrent") or workers,
            scheduler=_scheduler(tune_cfg),
        ),
        run_config=tune.RunConfig(
            storage_path=str(run_dir / "tune"), name="sweep", callbacks=[Record()], verbose=1
        ),
    )
    results = tuner.fit()
    return _tune_summary(run_dir, recorder, metric, mode, results.num_errors)


def _tune_summary(run_dir: Path, recorder: Recorder, metric: str, mode: str, errors: int) -> int:
    """outputs/tune.json: the best trial (its value, config, checkpoint), or why there is
    none (no trial reported the metric: exit EXIT_NO_METRIC, said in one sentence)."""
    out = Path(os.environ.get("TAU_OUTPUT_DIR") or run_dir / "outputs")
    out.mkdir(parents=True, exist_ok=True)
    if recorder.best is None:
        said = ", ".join(sorted(recorder.seen_metrics - TUNE_KEYS)) or "no metric"
        msg = (
            f"tau_ray: no trial reported the sweep's metric {metric!r} (tune.metric); the "
            f"trials reported: {said}"
        )
        (out / "tune.json").write_text(
            json.dumps(
                {
                    "metric": metric,
                    "mode": mode,
                    "best": None,
                    "error": msg,
                    "trials": recorder.ended,
                }
            )
            + "\n"
        )
        print(msg, file=sys.stderr, flush=True)
        return EXIT_NO_METRIC
    row = recorder.best_row  # the best value each trial reported, as recorded when it ended
    summary: dict[str, Any] = {
        "metric": metric,
        "mode": mode,
        "trials": recorder.ended,
        "errors": errors,
        "best": {
            "value": row["value"],
            "config": row["config"],
            "trial": row["trial"],
            "checkpoint": row["checkpoint"],
        },
    }
    (out / "tune.json").write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n")
    b = summary["best"]
    print(
        f"tau_ray: best of {recorder.ended} trial(s): {metric}={b['value']} with {b['config']} "
        f"(trial {b['trial']})",
        flush=True,
    )
    return 0


def run_train(fn: Any, run_dir: Path, args: list[str]) -> int:
    from ray.train import RunConfig, ScalingConfig

    import tau_run

    workers = _env_int("TAU_NUM_WORKERS", 1)
    gpus = _env_int("TAU_GPUS_PER_WORKER", 0)
    scaling = ScalingConfig(
        num_workers=workers,
        use_gpu=gpus > 0,
        resources_per_worker={"GPU": gpus} if gpus else {"CPU": 1},
    )
    trainer_cls, v2 = _trainer_class()
    callbacks: list[Any] = [_report_callback()] if v2 else []
    trainer = trainer_cls(
        fn,
        train_loop_config={"args": args},
        scaling_config=scaling,
        run_config=RunConfig(
            storage_path=str(run_dir / "train"), name="train", callbacks=callbacks
        ),
    )
    result = trainer.fit()
    metrics = {k: v for k, v in (result.metrics or {}).items() if isinstance(v, int | float)}
    out = Path(os.environ.get("TAU_OUTPUT_DIR") or run_dir / "outputs")
    out.mkdir(parents=True, exist_ok=True)
    ckpt = getattr(result.checkpoint, "path", None) if result.checkpoint else None
    (out / "train.json").write_text(
        json.dumps(
            {"workers": workers, "gpus_per_worker": gpus, "metrics": metrics, "checkpoint": ckpt},
            indent=2,
            sort_keys=True,
        )
        + "\n"
    )
    if metrics and not callbacks:  # (Ray Train's former API: the final metrics only)
        step = int(metrics.get("training_iteration", 1))
        tau_run.log(step, **{k: v for k, v in metrics.items() if k != "training_iteration"})
    print(f"tau_ray: trained on {workers} worker(s); final metrics: {metrics}", flush=True)
    return 0


def _trainer_class() -> tuple[Any, bool]:
    """Ray Train's trainer (Torch's where torch is installed: a process group for DDP on the
    workers), and whether Ray Train's current API (v2) is on."""
    import importlib.util

    import ray.train

    v2 = bool(getattr(ray.train, "is_v2_enabled", lambda: False)())
    if importlib.util.find_spec("torch") is not None:
        from ray.train.torch import TorchTrainer

        return TorchTrainer, v2
    if v2:
        from ray.train.v2.api.data_parallel_trainer import DataParallelTrainer

        return DataParallelTrainer, v2
    from ray.train.data_parallel_trainer import DataParallelTrainer as Former

    return Former, v2


def _report_callback() -> Any:
    """(Ray Train v2) rank 0's reports, as they come, into the run's metrics."""
    import ray.train

    import tau_run

    metrics_file = os.environ.get("TAU_METRICS_FILE", "")

    class Report(ray.train.UserCallback):
        def __init__(self) -> None:
            self.step = 0

        def after_report(
            self, run_context: Any, metrics: list[dict[str, Any]], checkpoint: Any
        ) -> None:
            self.step += 1
            first = metrics[0] if metrics else {}
            numbers = {k: v for k, v in first.items() if isinstance(v, int | float)}
            if numbers and metrics_file:
                os.environ["TAU_METRICS_FILE"] = metrics_file  # (this runs in Ray's controller)
                tau_run.log(self.step, **numbers)

    return Report()


def main(argv: list[str]) -> int:
    if not argv:
        print("usage: python tau_ray.py ENTRYPOINT [ARGS...]", file=sys.stderr)
        return 2
    launcher = os.environ.get("TAU_LAUNCHER", "ray-train")
    path, args = argv[0], argv[1:]
    fn = load_function(
        path,
        os.environ.get("TAU_RAY_FUNCTION")
        or ("objective" if launcher == "ray-tune" else "train_loop_per_worker"),
    )
    run_dir = Path(os.environ.get("TAU_RUN_DIR") or "tau-run")
    run_dir.mkdir(parents=True, exist_ok=True)
    import ray

    if not ray.is_initialized():
        ray.init(address=os.environ.get("RAY_ADDRESS") or None, log_to_driver=True)
    if launcher == "ray-tune":
        return run_tune(fn, run_dir, json.loads(os.environ.get("TAU_TUNE") or "{}"))
    return run_train(fn, run_dir, args)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
