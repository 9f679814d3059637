"""tau.yaml validation: the seed and examples pass; every kind of bad input gets one clear error."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from conftest import EXAMPLE_DIRS, ROOT
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from taugrid.api.manifest import Manifest
from taugrid.api.manifest_rules import semantic_issues
from taugrid.cli.app import main

SEED = """\
schema_version: 1
name: aks-gpu-quickstart
run: {entrypoint: train.py, workload_kind: rayjob}      # rayjob | job
compute: {gpus: 1, workers: 1, cpus: 16, memory: 64Gi}   # per worker
runtime: {image: rayproject/ray:2.56.0-py312-gpu, pip: ["torch>=2.4.0"]}
"""


def write(tmp_path: Path, text: str, entry: str | None = "train.py") -> Path:
    if entry:
        (tmp_path / entry).write_text("print('hello')\n")
    p = tmp_path / "tau.yaml"
    p.write_text(text)
    return p


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_seed_validates_unchanged(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    p = write(tmp_path, SEED)
    code, out, err = run_cli(capsys, "run", "validate", str(p))
    assert code == 0, err
    assert "rayjob" in out
    m = Manifest.model_validate(yaml.safe_load(SEED))
    assert (m.compute.gpus, m.compute.workers, m.compute.cpus, m.compute.memory) == (
        1,
        1,
        16,
        "64Gi",
    )
    assert semantic_issues(m) == []


@pytest.mark.parametrize("folder", EXAMPLE_DIRS, ids=lambda p: p.name)
def test_examples_validate(folder: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(capsys, "run", "validate", str(folder / "tau.yaml"), "-o", "json")
    assert code == 0, err
    assert json.loads(out)["valid"] is True


def test_workload_kind_inference() -> None:
    base = {"schema_version": 1, "name": "x", "run": {"entrypoint": "t.py"}}
    assert Manifest.model_validate({**base, "compute": {"gpus": 1}}).workload_kind() == "job"
    assert Manifest.model_validate({**base, "compute": {"gpus": 0}}).workload_kind() == "rayjob"
    assert (
        Manifest.model_validate({**base, "compute": {"gpus": 1, "workers": 3}}).workload_kind()
        == "rayjob"
    )


# (document, key path expected in the message, bad value expected in the message)
BAD = [
    ("schema_version: 1\nname: x\nrun: {entrypoint: train.py}\nbogus: 1\n", "bogus", "1"),
    (
        "schema_version: 1\nname: x\nrun: {entrypoint: train.py}\ncompute: {gpu: 1}\n",
        "compute.gpu",
        "did you mean 'compute.gpus'",
    ),
    (
        "schema_version: 1\nname: x\nrun: {entrypoint: train.py}\ncompute: {gpus: two}\n",
        "compute.gpus",
        "'two'",
    ),
    (
        "schema_version: 1\nname: x\nrun: {entrypoint: train.py}\ncompute: {gpus: -1}\n",
        "compute.gpus",
        "-1",
    ),
    (
        "schema_version: 1\nname: x\nrun: {entrypoint: train.py}\ncompute: {gpus: 100}\n",
        "compute.gpus",
        "100",
    ),
    (
        "schema_version: 1\nname: x\nrun: {entrypoint: train.py}\ncompute: {workers: 0}\n",
        "compute.workers",
        "0",
    ),
    (
        "schema_version: 1\nname: x\nrun: {entrypoint: train.py}\ncompute: {workers: 100000}\n",
        "compute.workers",
        "100000",
    ),
    (
        "schema_version: 1\nname: x\nrun: {entrypoint: train.py}\ncompute: {memory: 64gb}\n",
        "compute.memory",
        "did you mean 64G",
    ),
    (
        "schema_version: 1\nname: x\nrun: {entrypoint: train.py}\ncompute: {memory: 4gi}\n",
        "compute.memory",
        "4Gi",
    ),
    (
        "schema_version: 1\nname: x\nrun: {entrypoint: train.py}\ncompute: {memory: 512m}\n",
        "compute.memory",
        "'512m'",
    ),
    (
        "schema_version: 1\nname: x\nrun: {entrypoint: train.py}\ncompute: {cpus: -2}\n",
        "compute.cpus",
        "-2",
    ),
    (
        "schema_version: 1\nname: x\nrun: {entrypoint: train.py}\ncompute: {cpus: 8, cpu_limit: "
        "4}\n",
        "compute.cpu_limit",
        "4",
    ),
    ("schema_version: 1\nname: x\ncompute: {gpus: 1}\n", "run.entrypoint", "required"),
    ("schema_version: 1\nname: x\nrun: {entrypoint: missing.py}\n", "run.entrypoint", "missing.py"),
    ("schema_version: 1\nname: x\nrun: {entrypoint: ../up.py}\n", "run.entrypoint", "../up.py"),
    ("schema_version: 1\nname: My_Run\nrun: {entrypoint: train.py}\n", "name", "My_Run"),
    ("schema_version: 1\nname: 9lives\nrun: {entrypoint: train.py}\n", "name", "9lives"),
    (
        "schema_version: 1\nname: " + "a" * 50 + "\nrun: {entrypoint: train.py}\n",
        "name",
        "at most 41",
    ),
    (
        "schema_version: 1\nname: x\nrun: {entrypoint: train.py}\nruntime: {env: [{name: "
        "TAU_RUN_ID, value: x}]}\n",
        "runtime.env[0].name",
        "TAU_RUN_ID",
    ),
    (
        "schema_version: 1\nname: x\nrun: {entrypoint: train.py}\nruntime: {env: {tau_data_dir: "
        "/x}}\n",
        "runtime.env.tau_data_dir",
        "tau_data_dir",
    ),
    ("schema_version: 2\nname: x\nrun: {entrypoint: train.py}\n", "schema_version", "2"),
    ("name: x\nrun: {entrypoint: train.py}\n", "schema_version", "required"),
    # ray-train and ray-tune: a RayJob, a function, a sweep that parses
    (
        "schema_version: 1\nname: x\nrun: {entrypoint: o.py, launcher: ray-tune, workload_kind: "
        "job}\n"
        "tune: {metric: loss, search_space: {lr: 0.1}}\n",
        "run.launcher",
        "runs on a RayJob",
    ),
    (
        "schema_version: 1\nname: x\nrun: {entrypoint: o.py, launcher: ray-tune}\ntune: "
        "{search_space: {lr: 0.1}}\n",
        "tune.metric",
        "is required",
    ),
    (
        "schema_version: 1\nname: x\nrun: {entrypoint: o.py, launcher: ray-tune}\ntune: {metric: "
        "loss}\n",
        "tune.search_space",
        "is required",
    ),
    (
        "schema_version: 1\nname: x\nrun: {entrypoint: o.py, launcher: ray-tune}\ntune: {metric: "
        "loss, search_space: {lr: {normal: [0, 1]}}}\n",
        "tune.search_space.lr",
        "'normal' is not a domain",
    ),
    (
        "schema_version: 1\nname: x\nrun: {entrypoint: o.py, launcher: ray-tune}\ntune: {metric: "
        "loss, search_space: {lr: {loguniform: [0, 1]}}}\n",
        "tune.search_space.lr",
        "above 0",
    ),
    (
        "schema_version: 1\nname: x\nrun: {entrypoint: o.py, launcher: ray-tune}\ntune: {metric: "
        "loss, search_space: {lr: {uniform: [1, 0]}}}\n",
        "tune.search_space.lr",
        "lower bound",
    ),
    (
        "schema_version: 1\nname: x\nrun: {entrypoint: o.py, launcher: ray-tune}\ntune: {metric: "
        "loss, search_space: {n: {randint: [1.5, 4]}}}\n",
        "tune.search_space.n",
        "2 integers",
    ),
    (
        "schema_version: 1\nname: x\nrun: {entrypoint: o.py, launcher: ray-tune}\ntune: {metric: "
        "loss, num_samples: 0, search_space: {lr: 0.1}}\n",
        "tune.num_samples",
        "0",
    ),
    (
        "schema_version: 1\nname: x\nrun: {entrypoint: o.py, launcher: ray-tune}\ntune: {metric: "
        "loss, mode: up, search_space: {lr: 0.1}}\n",
        "tune.mode",
        "up",
    ),
    (
        "schema_version: 1\nname: x\nrun: {entrypoint: o.py, launcher: ray-tune}\ntune: {metric: "
        "loss, scheduler: asha, max_t: 5, grace_period: 9, "
        "search_space: {lr: 0.1}}\n",
        "tune.grace_period",
        "above tune.max_t=5",
    ),
    (
        "schema_version: 1\nname: x\nrun: {entrypoint: o.py, launcher: ray-tune, function: "
        "'my-fn'}\n"
        "tune: {metric: loss, search_space: {lr: 0.1}}\n",
        "run.function",
        "a Python function name",
    ),
    (
        "schema_version: 1\nname: x\nrun: {entrypoint: o.py, function: objective}\n",
        "run.function",
        "needs run.launcher: ray-train or ray-tune",
    ),
    (
        "schema_version: 1\nname: x\nrun: {entrypoint: o.py, launcher: ray-train}\n"
        "tune: {metric: loss}\n",
        "tune",
        "needs run.launcher: ray-tune",
    ),
    (
        "schema_version: 1\nname: x\nrun: {entrypoint: o.sh, launcher: ray-train}\n",
        "run.entrypoint",
        "a function of a Python file",
    ),
    (
        "schema_version: 1\nname: x\nrun: {entrypoint: train.py, workload_kind: spark}\n",
        "run.workload_kind",
        "spark",
    ),
    (
        "schema_version: 1\nname: x\nrun: {entrypoint: train.py, workload_kind: job}\ncompute: "
        "{workers: 3}\n",
        "compute.workers",
        "3",
    ),
    (
        "schema_version: 1\nname: x\nrun: {entrypoint: train.py}\nruntime: {pip: ['torch', '']}\n",
        "runtime.pip",
        "blank",
    ),
    (
        "schema_version: 1\nname: x\nrun: {entrypoint: train.py}\n"
        "resilience: {max_retries: 1000}\n",
        "resilience.max_retries",
        "1000",
    ),
    (
        "schema_version: 1\nname: x\nrun: {entrypoint: train.py}\ngpus: 1\n",
        "gpus",
        "did you mean 'compute.gpus'",
    ),
    (
        "schema_version: 1\nname: x\nrun: {entrypoint: train.py}\nstorage: {checkpoint: /abs}\n",
        "storage.checkpoint",
        "/abs",
    ),
    ("schema_version: 1\nname: x\nrun: {entrypoint: train.py}\ncompute: 4\n", "compute", "4"),
    # torchrun: a Job (a pod per node) running a .py file; its settings need it
    (
        "schema_version: 1\nname: x\nrun: {entrypoint: train.py, launcher: torchrun, "
        "workload_kind: rayjob}\n",
        "run.launcher",
        "runs as a Job",
    ),
    (
        "schema_version: 1\nname: x\nrun: {entrypoint: run.sh, launcher: torchrun}\n",
        "run.entrypoint",
        "a Python file",
    ),
    (
        "schema_version: 1\nname: x\nrun: {entrypoint: train.py, nproc_per_node: 4}\n",
        "run.nproc_per_node",
        "need run.launcher: torchrun",
    ),
    (
        "schema_version: 1\nname: x\nrun: {entrypoint: train.py, launcher: torchrun, "
        "nproc_per_node: 4}\ncompute: {gpus: 2}\n",
        "run.nproc_per_node",
        "compute.gpus=2",
    ),
    (
        "schema_version: 1\nname: x\nrun: {entrypoint: train.py, launcher: torchrun}\n"
        "execution: {launcher: python}\n",
        "execution.launcher",
        "contradicts run.launcher",
    ),
    (
        "schema_version: 1\nname: x\nrun: {entrypoint: train.py, launcher: torchrun}\n"
        "execution: {nodes: 4}\ncompute: {workers: 2}\n",
        "execution.nodes",
        "compute.workers=2",
    ),
    (
        "schema_version: 1\nname: x\nrun: {entrypoint: train.py}\nexecution: {nodes: 4}\n",
        "execution.nodes",
        "needs run.launcher: torchrun",
    ),
    (
        "schema_version: 1\nname: x\nrun: {entrypoint: train.py, launcher: mpirun}\n",
        "run.launcher",
        "mpirun",
    ),
    (
        "schema_version: 1\nname: x\nrun: {entrypoint: train.py, launcher: torchrun, "
        "nproc_per_node: 0}\n",
        "run.nproc_per_node",
        "0",
    ),
    ("schema_version: 1\nname: x\nname: y\nrun: {entrypoint: train.py}\n", "tau.yaml:3", "twice"),
]


@pytest.mark.parametrize(("doc", "path", "needle"), BAD, ids=[b[1] + ":" + b[2][:12] for b in BAD])
def test_bad_documents_exit_2_with_path_value_and_example(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], doc: str, path: str, needle: str
) -> None:
    p = write(tmp_path, doc)
    code, out, err = run_cli(capsys, "run", "validate", str(p))
    assert code == 2
    assert "Traceback" not in err + out
    assert str(p) in err
    assert path in err
    assert needle in err
    if ":" not in path:  # key-path errors (not file-level ones) always show a good example
        assert "example:" in err


@pytest.mark.parametrize(
    ("setup", "needle"),
    [
        (lambda d: d / "nope.yaml", "no such tau.yaml"),
        (lambda d: (d / "sub").mkdir() or d / "sub", "is a directory with no tau.yaml"),
        (
            lambda d: ((d / "tau.yaml").write_text("") and d / "tau.yaml") or d / "tau.yaml",
            "is empty",
        ),
        (lambda d: (d / "tau.yaml").write_text("   \n\n") and d / "tau.yaml", "is empty"),
        (lambda d: (d / "tau.yaml").write_text("a: [1, 2\n") and d / "tau.yaml", "not valid YAML"),
        (
            lambda d: (d / "tau.yaml").write_text("- 1\n- 2\n") and d / "tau.yaml",
            "must be a mapping",
        ),
        (
            lambda d: (d / "tau.yaml").write_text("just text") and d / "tau.yaml",
            "must be a mapping",
        ),
        (
            lambda d: (d / "tau.yaml").write_bytes(b"\xff\xfe\x00bin") and d / "tau.yaml",
            "not UTF-8",
        ),
    ],
    ids=["missing", "directory", "empty", "blank", "not-yaml", "list", "scalar", "binary"],
)
def test_bad_files_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], setup: object, needle: str
) -> None:
    target = setup(tmp_path)  # type: ignore[operator]
    code, _out, err = run_cli(capsys, "run", "validate", str(target))
    assert code == 2
    assert needle in err
    assert str(target) in err
    assert "Traceback" not in err


def test_folder_argument_discovers_tau_yaml(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "run", "validate", str(ROOT / "examples" / "batch-job"))
    assert code == 0 and "job" in out


def test_json_errors_for_scripts(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    p = write(
        tmp_path, "schema_version: 1\nname: x\nrun: {entrypoint: train.py}\ncompute: {gpus: 9}\n"
    )
    code, out, _ = run_cli(capsys, "run", "validate", str(p), "-o", "json")
    assert code == 2
    doc = json.loads(out)
    assert doc["valid"] is False
    (e,) = doc["errors"]
    assert e["path"].startswith("compute.gpus") and e["value"] == 9 and e["example"]


def test_line_numbers_in_messages(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    p = write(
        tmp_path,
        "schema_version: 1\nname: x\nrun: {entrypoint: train.py}\ncompute:\n  gpus: 1\n  workers: "
        "-4\n",
    )
    _, _, err = run_cli(capsys, "run", "validate", str(p))
    assert "compute.workers (line 6)" in err


def test_several_problems_reported_together(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    p = write(
        tmp_path,
        "schema_version: 1\nname: x\nrun: {entrypoint: train.py}\ncompute: {gpus: -1, workers: "
        "-1}\n",
    )
    _, _, err = run_cli(capsys, "run", "validate", str(p))
    assert "2 problems" in err and "compute.gpus" in err and "compute.workers" in err


# --- property-based: any document gives exit 0 or one clean error (2), never a traceback ----
_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(10**6), 10**6),
    st.floats(allow_nan=False),
    st.text(max_size=12),
)
_keys = st.sampled_from(
    [
        "schema_version",
        "name",
        "run",
        "compute",
        "runtime",
        "gpus",
        "workers",
        "entrypoint",
        "memory",
        "cpus",
        "env",
        "pip",
        "policy",
        "storage",
        "bogus",
        "workload_kind",
        "image",
        "args",
        "resilience",
    ]
)
_docs = st.recursive(
    _scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=4), st.dictionaries(_keys, children, max_size=5)
    ),
    max_leaves=20,
)


def _near_valid() -> st.SearchStrategy[dict[str, object]]:
    base = {"schema_version": 1, "name": "x", "run": {"entrypoint": "train.py"}}
    return st.builds(
        lambda block, key, value: {**base, block: {key: value}},
        st.sampled_from(
            ["compute", "runtime", "storage", "policy", "resilience", "run", "metrics"]
        ),
        st.sampled_from(
            [
                "gpus",
                "workers",
                "cpus",
                "memory",
                "worker_memory",
                "pip",
                "env",
                "image",
                "entrypoint",
                "checkpoint",
                "max_retries",
                "profile",
                "args",
                "retry_on",
                "x",
            ]
        ),
        _scalars
        | st.lists(_scalars, max_size=3)
        | st.dictionaries(st.text(max_size=5), _scalars, max_size=3),
    )


def _check(tmp_path: Path, capsys: pytest.CaptureFixture[str], doc: object) -> None:
    p = tmp_path / "tau.yaml"
    p.write_text(yaml.safe_dump(doc))
    (tmp_path / "train.py").write_text("")
    code, _out, err = run_cli(capsys, "run", "validate", str(p))
    assert code in (0, 2), err
    assert "Traceback" not in err and "internal error" not in err
    if code == 2:
        assert err.startswith("error: ") and str(p) in err


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(doc=_docs)
def test_random_documents_never_crash(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], doc: object
) -> None:
    _check(tmp_path, capsys, doc)


@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(doc=_near_valid())
def test_near_valid_documents_name_the_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], doc: dict[str, object]
) -> None:
    _check(tmp_path, capsys, doc)
    p = tmp_path / "tau.yaml"
    code = main(["run", "validate", str(p)])
    _, err = capsys.readouterr()
    if code == 2:
        block = (
            next(k for k in doc if k not in ("schema_version", "name", "run"))
            if len(doc) > 3
            else "run"
        )
        assert block in err


# --- requirements in their common forms are checked without importing packaging -------------
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


@settings(max_examples=200, deadline=None)
@given(
    st.from_regex(
        __import__("taugrid.api.manifest", fromlist=["x"]).SIMPLE_REQUIREMENT, fullmatch=True
    ).filter(lambda s: s == s.strip() and "\n" not in s)
)
def test_every_requirement_the_fast_check_accepts_is_valid(req: str) -> None:
    from packaging.requirements import Requirement

    Requirement(req)  # raises if the fast path accepted an invalid one


@pytest.mark.parametrize(
    "req",
    [
        "torch>=2.4.0",
        "numpy==2.1.*",
        "transformers",
        "ray[default,tune]>=2.50,<3",
        "foo~=1.2",
        "bar!=1.0.post1",
    ],
)
def test_common_requirements_take_the_fast_path(req: str) -> None:
    from taugrid.api.manifest import SIMPLE_REQUIREMENT

    assert SIMPLE_REQUIREMENT.fullmatch(req)


@pytest.mark.parametrize("req", ["torch>=2.*", "foo~=1", "bar>=1.0abc", "x; python_version<'3.8'"])
def test_the_rest_goes_to_packaging(req: str) -> None:
    from taugrid.api.manifest import SIMPLE_REQUIREMENT

    assert not SIMPLE_REQUIREMENT.fullmatch(req)


_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.text(max_size=20),
    st.floats(allow_nan=False),
    st.datetimes().map(lambda d: d.replace(microsecond=0)),
)
_DOCS = st.recursive(
    _SCALARS,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None)
@given(_DOCS)
def test_documents_are_built_as_pyyaml_builds_them(doc: object) -> None:
    """tau's YAML reading builds most nodes itself (a faster path than PyYAML's): any document
    PyYAML's safe_dump writes reads back as yaml.safe_load reads it."""
    from taugrid.api.documents import parse_yaml

    text = yaml.safe_dump({"doc": doc}, allow_unicode=True)
    assert parse_yaml(text, "x.yaml") == yaml.safe_load(text)
    assert parse_yaml(text, "x.yaml") == yaml.safe_load(text)  # the plain scalars' tags kept


@pytest.mark.parametrize(
    "text",
    [
        "a: [x, 2, 3.5, true, null, ~, 0x1f, 0o17, 1_000, 1:30, .inf, 2001-12-14, yes, off]\n",
        "base: &b {x: 1}\nd:\n  <<: *b\n  y: 2\n  x: 5\n",  # merge keys, overridden
        "d:\n  <<: [{a: 1}, {b: 2}]\n  c: 3\n",
        "a: &x [1, {k: v}]\nb: *x\n",  # an alias: the same object
        "x: !!set {a, b}\ny: !!binary aGVsbG8=\nz: !!omap [a: 1]\n",
        "&a [*a]\n",  # an alias inside itself
        "'1': one\n1: int\n",
    ],
)
def test_yaml_features_read_as_pyyaml_reads_them(text: str) -> None:
    from taugrid.api.documents import parse_yaml

    got, want = parse_yaml(text, "x.yaml"), yaml.safe_load(text)
    assert repr(got) == repr(want)
    if "*x" in text:
        assert got["a"] is got["b"]


@pytest.mark.parametrize(
    ("text", "line"),
    [
        ("a: 1\nb: 2\na: 3\n", 3),
        ("d:\n  <<: {a: 1}\n  b: 2\n  b: 3\n", 4),
        ("x: {1: a, 1: b}\n", 1),
    ],
)
def test_a_key_twice_is_refused_on_either_path(text: str, line: int) -> None:
    from taugrid.api.documents import parse_yaml
    from taugrid.api.errors import TauError

    with pytest.raises(TauError, match=f"x.yaml:{line}: not valid YAML: key .* appears twice"):
        parse_yaml(text, "x.yaml")


def test_an_unhashable_key_is_pyyamls_error() -> None:
    from taugrid.api.documents import parse_yaml
    from taugrid.api.errors import TauError

    with pytest.raises(TauError, match="unhashable key"):
        parse_yaml("? [a, b]\n: 1\n", "x.yaml")
