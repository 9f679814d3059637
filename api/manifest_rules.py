"""tau.yaml's rules that span several fields: one function per rule, each yielding its problems
with their key paths (the models in api/manifest.py check each field on its own)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from decimal import Decimal
from typing import Any

from taugrid.api import constants as C
from taugrid.api.issues import Issue
from taugrid.api.manifest import (
    ENV_NAME,
    IDENTIFIER,
    LABEL_VALUE,
    RAY_LAUNCHERS,
    SEARCH_DOMAINS,
    SERVICE_ENV_NAME,
    Manifest,
    ServiceSpec,
    max_name_length,
)
from taugrid.api.quantity import parse_cpu, parse_memory


def _alias_conflicts(m: Manifest, what: str, given: list[tuple[str, str | None]]) -> list[Issue]:
    """The same setting under several names (TauGrid compatibility) must agree."""
    set_ = [(path, v) for path, v in given if v is not None]
    if len({v for _, v in set_}) <= 1:
        return []
    first_path, first = set_[0]
    block, _, key = first_path.rpartition(".")
    example = f"{block}: {{{key}: {first}}}" if block else f"{key}: {first}"
    message = f"contradicts {first_path}={first!r}: both set {what}; keep one"
    return [Issue(path, v, message, example) for path, v in set_[1:] if v != first]


def name_fits(m: Manifest) -> Iterator[Issue]:
    """The run id <name>-<5 chars> must stay within KubeRay's name limit."""
    limit = max_name_length(m.resource_naming.prefix)
    if len(m.name) > limit:
        prefix = m.resource_naming.prefix
        why = f" with resource_naming.prefix={prefix!r}" if prefix else ""
        yield Issue(
            "name",
            m.name,
            f"is {len(m.name)} characters; at most {limit} fit{why} (the run id "
            f"<name>-<5 chars> must stay within KubeRay's {C.KUBERAY_NAME_LIMIT})",
            "name: " + m.name[:limit].rstrip("-"),
        )


def entrypoint_is_a_script_inside(m: Manifest) -> Iterator[Issue]:
    ep, example = m.entrypoint_path, "run: {entrypoint: train.py}"
    if not ep and m.service is not None:
        return  # a service-only tau.yaml (`tau run` says what it needs: load.py)
    if not ep:
        yield Issue("run.entrypoint", None, "is required: the script to run", example)
    elif ep.startswith("/") or ".." in ep.split("/"):
        yield Issue("run.entrypoint", ep, "must be a path inside the tau.yaml folder", example)
    elif not ep.endswith((".py", ".sh")):
        yield Issue("run.entrypoint", ep, "must be a .py or .sh file", example)


def aliases_agree(m: Manifest) -> Iterator[Issue]:
    """The same setting under several names (TauGrid compatibility) must agree."""
    yield from _alias_conflicts(
        m,
        "the script to run",
        [
            ("run.entrypoint", m.run.entrypoint),
            ("run.script", m.run.script),
            ("entrypoint", m.entrypoint),
            ("script", m.script),
        ],
    )
    yield from _alias_conflicts(
        m,
        "the image",
        [("runtime.image", m.runtime.image), ("run.image", m.run.image), ("image", m.image)],
    )


def one_workload_kind(m: Manifest) -> Iterator[Issue]:
    if len({k for k in (m.run.workload_kind, m.compute.workload_kind) if k}) > 1:
        yield Issue(
            "compute.workload_kind",
            m.compute.workload_kind,
            f"contradicts run.workload_kind={m.run.workload_kind}",
            f"run: {{workload_kind: {m.run.workload_kind}}}",
        )


def launcher_fits(m: Manifest) -> Iterator[Issue]:
    """torchrun is a Job (one pod per node) running a .py file; its settings need it."""
    yield from _alias_conflicts(
        m,
        "the launcher",
        [("run.launcher", m.run.launcher), ("execution.launcher", m.execution.launcher)],
    )
    yield from _alias_conflicts(
        m,
        "the processes per node",
        [
            ("run.nproc_per_node", str(m.run.nproc_per_node) if m.run.nproc_per_node else None),
            (
                "execution.processes_per_node",
                str(m.execution.processes_per_node) if m.execution.processes_per_node else None,
            ),
        ],
    )
    if (
        m.execution.nodes is not None
        and "workers" in m.compute.model_fields_set
        and (m.execution.nodes != m.compute.workers)
    ):
        yield Issue(
            "execution.nodes",
            m.execution.nodes,
            f"contradicts compute.workers={m.compute.workers}: both set the nodes; keep one",
            f"compute: {{workers: {m.execution.nodes}}}",
        )
    yield from _ray_launcher_issues(m)
    if m.launcher != "torchrun":
        yield from _torchrun_fields_elsewhere(m)
        return
    if m.workload_kind() == "rayjob":
        yield Issue(
            "run.launcher",
            "torchrun",
            "runs as a Job, one pod per node (a RayJob runs Ray's own launchers)",
            "run: {launcher: torchrun, workload_kind: job}",
        )
    ep = m.entrypoint_path
    if ep and not ep.endswith(".py"):
        yield Issue(
            "run.entrypoint",
            ep,
            "torchrun starts a Python file in each process",
            "run: {entrypoint: train.py, launcher: torchrun}",
        )
    if m.compute.gpus and m.nproc_per_node > m.compute.gpus:
        yield Issue(
            "run.nproc_per_node",
            m.nproc_per_node,
            f"is more than the node's compute.gpus={m.compute.gpus} (one process per GPU)",
            f"run: {{nproc_per_node: {m.compute.gpus}}}",
        )


def _torchrun_fields_elsewhere(m: Manifest) -> Iterator[Issue]:
    """Processes per node or more than one node under a launcher that is not torchrun."""
    if m.run.nproc_per_node or m.execution.processes_per_node:
        yield Issue(
            "run.nproc_per_node",
            m.run.nproc_per_node or m.execution.processes_per_node,
            "is torchrun's: processes per node need run.launcher: torchrun",
            "run: {launcher: torchrun, nproc_per_node: 4}",
        )
    if m.execution.nodes is not None and m.execution.nodes > 1:
        yield Issue(
            "execution.nodes",
            m.execution.nodes,
            "is torchrun's: more than one node needs run.launcher: torchrun",
            "run: {launcher: torchrun}\ncompute: {workers: 4}",
        )


def _ray_launcher_issues(m: Manifest) -> Iterator[Issue]:
    """ray-train and ray-tune: a RayJob, a function of a .py entrypoint, and for a sweep a
    metric and a search space that parses."""
    e = m.execution
    tune_set = m.tune is not None or any(
        v is not None for v in (e.metric, e.mode, e.num_samples, e.max_concurrent_trials, e.configs)
    )
    if m.launcher not in RAY_LAUNCHERS:
        yield from _ray_fields_elsewhere(m, tune_set)
        return
    if m.workload_kind() != "rayjob":
        yield Issue(
            "run.launcher",
            m.launcher,
            "runs on a RayJob (Ray's launchers need Ray)",
            f"run: {{launcher: {m.launcher}, workload_kind: rayjob}}",
        )
    ep = m.entrypoint_path
    if ep and not ep.endswith(".py"):
        yield Issue(
            "run.entrypoint",
            ep,
            f"{m.launcher} calls a function of a Python file",
            f"run: {{entrypoint: train.py, launcher: {m.launcher}}}",
        )
    if m.run.function is not None and not IDENTIFIER.match(m.run.function):
        yield Issue(
            "run.function",
            m.run.function,
            "must be a Python function name",
            "run: {function: objective}",
        )
    if m.launcher == "ray-train":
        if tune_set:
            yield _TUNE_NEEDS_RAY_TUNE
        return
    yield from _sweep_issues(m)


_TUNE_NEEDS_RAY_TUNE = Issue(
    "tune",
    None,
    "is a Ray Tune sweep: it needs run.launcher: ray-tune",
    "run: {launcher: ray-tune}",
)


def _ray_fields_elsewhere(m: Manifest, tune_set: bool) -> Iterator[Issue]:
    """run.function or a sweep's fields under a launcher that is not Ray's."""
    if m.run.function:
        yield Issue(
            "run.function",
            m.run.function,
            "is the function Ray Train or Ray Tune calls: it needs run.launcher: "
            "ray-train or ray-tune",
            "run: {launcher: ray-tune, function: objective}",
        )
    if tune_set:
        yield _TUNE_NEEDS_RAY_TUNE


def _sweep_issues(m: Manifest) -> Iterator[Issue]:
    """ray-tune: a metric, a search space whose every domain parses, ASHA's bounds in order."""
    t = m.sweep()
    if not t.metric:
        yield Issue(
            "tune.metric",
            None,
            "is required: what the trainable reports and the sweep ranks",
            "tune: {metric: accuracy, mode: max}",
        )
    if not t.search_space:
        yield Issue(
            "tune.search_space",
            None,
            "is required: the parameters the sweep tries",
            "tune: {search_space: {lr: {loguniform: [0.0001, 0.1]}}}",
        )
    for key, value in t.search_space.items():
        problem = search_domain_problem(value)
        if problem:
            yield Issue(
                f"tune.search_space.{key}",
                value,
                problem,
                f"tune: {{search_space: {{{key}: {{uniform: [0, 1]}}}}}}",
            )
    if t.scheduler == "asha" and t.grace_period > t.max_t:
        yield Issue(
            "tune.grace_period",
            t.grace_period,
            f"is above tune.max_t={t.max_t}",
            "tune: {scheduler: asha, max_t: 100, grace_period: 1}",
        )


def search_domain_problem(value: Any) -> str | None:
    """Why a search-space value does not parse (None: it does): a scalar, or one domain."""
    if value is None or isinstance(value, str | int | float | bool):
        return None
    if not isinstance(value, dict) or len(value) != 1:
        return (
            "must be a value or one domain: {uniform: [a, b]}, {loguniform: [a, b]}, "
            "{quniform: [a, b, q]}, {randint: [a, b]}, {randn: [mean, sd]}, {choice: [...]}, "
            "{grid_search: [...]}"
        )
    ((domain, args),) = value.items()
    if domain not in SEARCH_DOMAINS:
        return f"{domain!r} is not a domain (one of: {', '.join(SEARCH_DOMAINS)})"
    if not isinstance(args, list) or not args:
        return f"{domain}: needs a list of values"
    want = SEARCH_DOMAINS[domain]
    if want is not None:
        numbers = all(isinstance(a, int | float) and not isinstance(a, bool) for a in args)
        if len(args) != want or not numbers:
            return f"{domain}: needs {want} numbers"
        if domain in ("uniform", "loguniform", "quniform", "randint") and args[0] >= args[1]:
            return f"{domain}: the lower bound must be below the upper"
        if domain == "loguniform" and args[0] <= 0:
            return "loguniform: the bounds must be above 0"
        if domain == "randint" and not all(isinstance(a, int) for a in args):
            return "randint: needs 2 integers"
    return None


def a_job_is_one_pod(m: Manifest) -> Iterator[Issue]:
    """A Job is one pod (torchrun: one pod per node, each sized like a Job's pod)."""
    if m.workload_kind() != "job":
        return
    c = m.compute
    if c.workers > 1 and m.launcher != "torchrun":
        yield Issue(
            "compute.workers",
            c.workers,
            "a job is a single pod; more than one worker needs workload_kind: rayjob "
            "(Ray), or run.launcher: torchrun (a pod per node)",
            "run: {workload_kind: rayjob}",
        )
    sizes = (c.worker_cpus, c.worker_memory, c.worker_cpu_limit, c.worker_memory_limit)
    if any(v is not None for v in sizes):
        yield Issue(
            "compute.worker_cpus",
            c.worker_cpus or c.worker_memory,
            "worker_* sizes apply to rayjob workers; a job pod is sized by cpus and memory",
            "compute: {cpus: 8, memory: 32Gi}",
        )


def mig_is_consistent(m: Manifest) -> Iterator[Issue]:
    c = m.compute
    if c.gpus == 0 and (c.mig_profile or c.gpu_resource_mode == "mig"):
        yield Issue(
            "compute.mig_profile",
            c.mig_profile,
            "needs compute.gpus >= 1",
            "compute: {gpus: 1, mig_profile: 1g.10gb}",
        )
    if c.gpu_resource_mode == "mig" and not c.mig_profile:
        yield Issue(
            "compute.mig_profile",
            None,
            "is required when gpu_resource_mode is mig",
            "compute: {mig_profile: 1g.10gb}",
        )


def limits_cover_requests(m: Manifest) -> Iterator[Issue]:
    for req, lim, kind in (
        ("cpus", "cpu_limit", "cpu"),
        ("worker_cpus", "worker_cpu_limit", "cpu"),
        ("memory", "memory_limit", "mem"),
        ("worker_memory", "worker_memory_limit", "mem"),
    ):
        rv, lv = getattr(m.compute, req), getattr(m.compute, lim)
        if rv is None or lv is None:
            continue
        parse = parse_cpu if kind == "cpu" else parse_memory
        r: Decimal | int = parse(rv)
        li: Decimal | int = parse(lv)
        if li < r:
            yield Issue(
                f"compute.{lim}",
                lv,
                f"must be >= compute.{req}={rv}",
                f"compute: {{{req}: {rv}, {lim}: {rv}}}",
            )


def env_names(m: Manifest) -> Iterator[Issue]:
    """Valid, not TAU_* (the run contract's), each set once, from one source."""
    seen: set[str] = set()
    example = "runtime: {env: [{name: MY_FLAG, value: '1'}]}"
    listed = isinstance(m.runtime.env, list)
    for i, e in enumerate(m.runtime.env_items()):
        path = f"runtime.env[{i}].name" if listed else f"runtime.env.{e.name}"
        if not ENV_NAME.match(e.name):
            yield Issue(path, e.name, "is not a valid environment variable name", example)
        if e.name.upper().startswith(C.RESERVED_ENV_PREFIX):
            yield Issue(
                path,
                e.name,
                "TAU_* variables belong to the run contract and are set by "
                "tau; choose another name",
                example,
            )
        if e.name in seen:
            yield Issue(path, e.name, "is set twice", None)
        seen.add(e.name)
        if listed and (e.value is None) == (e.valueFrom is None):
            yield Issue(
                f"runtime.env[{i}]", e.name, "needs exactly one of value or valueFrom", example
            )
    for name in m.runtime.env_from_secret:
        path = f"runtime.env_from_secret.{name}"
        if name.upper().startswith(C.RESERVED_ENV_PREFIX):
            yield Issue(
                path, name, "TAU_* variables belong to the run contract; choose another name", None
            )
        elif name in seen:
            yield Issue(path, name, "is also set in runtime.env", None)
        elif not ENV_NAME.match(name):
            yield Issue(path, name, "is not a valid environment variable name", None)


def one_checkpoint_folder(m: Manifest) -> Iterator[Issue]:
    s, a = m.storage.checkpoint, m.artifacts.checkpoint
    if s and a and s != a:
        yield Issue("artifacts.checkpoint", a, f"contradicts storage.checkpoint={s}", None)


def mounts_are_distinct(m: Manifest) -> Iterator[Issue]:
    names, paths = set(), set()
    reserved_paths = (C.DATA_DIR, C.CODE_DIR, "/dev/shm", "/tmp")
    for i, mt in enumerate(m.storage.mounts):
        if mt.name in ("data", "code", "dshm") or mt.name in names:
            yield Issue(f"storage.mounts[{i}].name", mt.name, "is reserved or used twice", None)
        p = mt.mountPath
        if (
            not p.startswith("/")
            or p in paths
            or any(p == r or p.startswith(r + "/") for r in reserved_paths)
        ):
            yield Issue(
                f"storage.mounts[{i}].mountPath",
                p,
                "must be an absolute path outside /data, /code, /tmp and /dev/shm, used once",
                "mountPath: /datasets",
            )
        names.add(mt.name)
        paths.add(p)


def experiment_is_a_label(m: Manifest) -> Iterator[Issue]:
    exp = m.experiment.name or m.research.experiment
    if exp is not None and (len(exp) > 63 or not LABEL_VALUE.match(exp)):
        yield Issue(
            "experiment.name",
            exp,
            "must be a valid label value (<= 63 chars, alphanumerics, '-', '_', '.')",
            None,
        )


def data_inputs_are_references(m: Manifest) -> Iterator[Issue]:
    if not m.data.inputs:
        return  # (and the data models stay unimported: every command starts faster)
    from taugrid.api.data import check_path, parse_ref
    from taugrid.api.errors import TauError

    seen: set[str] = set()
    for i, inp in enumerate(m.data.inputs):
        try:
            name = parse_ref(inp.ref).name
        except TauError as e:
            yield Issue(
                f"data.inputs[{i}].ref", inp.ref, str(e).split(": ", 1)[-1], "ref: fineweb@prod"
            )
            continue
        path = inp.path or name
        try:
            check_path(path)
        except TauError:
            yield Issue(
                f"data.inputs[{i}].path", path, "must be relative, without '..'", "path: fineweb"
            )
            continue
        if path in seen:
            yield Issue(f"data.inputs[{i}].path", path, "is used by another input", None)
        seen.add(path)


def service_issues(spec: ServiceSpec, path: str = "service") -> Iterator[Issue]:
    """Rules that span several fields of a service block."""
    if spec.model and spec.from_run:
        yield Issue(
            f"{path}.from_run",
            spec.from_run,
            "contradicts service.model: serve one model",
            "service: {model: iris@prod}",
        )
    if spec.model and "@" not in spec.model:
        yield Issue(
            f"{path}.model",
            spec.model,
            "needs a version or an alias: the version served is pinned at deploy time",
            f"service: {{model: {spec.model}@prod}}",
        )
    if spec.replicas is not None and spec.autoscaling is not None:
        yield Issue(
            f"{path}.replicas",
            spec.replicas,
            "contradicts service.autoscaling: keep one",
            "service: {autoscaling: {min_replicas: 0, max_replicas: 2}}",
        )
    a = spec.autoscaling
    if a is not None and a.min_replicas > a.max_replicas:
        yield Issue(
            f"{path}.autoscaling.min_replicas",
            a.min_replicas,
            f"is above max_replicas={a.max_replicas}",
            "service: {autoscaling: {min_replicas: 0, max_replicas: 2}}",
        )
    for name in spec.env:
        if not SERVICE_ENV_NAME.match(name):
            yield Issue(
                f"{path}.env.{name}",
                name,
                "is not a valid environment variable name",
                "service: {env: {LOG_LEVEL: info}}",
            )
        elif name.upper().startswith(C.RESERVED_ENV_PREFIX):
            yield Issue(
                f"{path}.env.{name}",
                name,
                "TAU_* variables belong to tau (TAU_MODEL_DIR is set for you)",
                None,
            )


def service_is_consistent(m: Manifest) -> Iterator[Issue]:
    if m.service is not None:
        yield from service_issues(m.service)


RULES: list[Callable[[Manifest], Iterator[Issue]]] = [
    name_fits,
    entrypoint_is_a_script_inside,
    aliases_agree,
    one_workload_kind,
    launcher_fits,
    a_job_is_one_pod,
    mig_is_consistent,
    limits_cover_requests,
    env_names,
    one_checkpoint_folder,
    mounts_are_distinct,
    experiment_is_a_label,
    data_inputs_are_references,
    service_is_consistent,
]


def semantic_issues(m: Manifest) -> list[Issue]:
    """Rules that span several fields (RULES, in order). Empty list: the manifest is consistent."""
    return [issue for rule in RULES for issue in rule(m)]
