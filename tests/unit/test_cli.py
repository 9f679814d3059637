"""The CLI as a user runs it: commands, output formats, exit codes, and lazy imports."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import EXAMPLES, PROFILES, ROOT

from taugrid.cli.app import main

HEAVY = (
    "ray",
    "pulumi",
    "kubernetes",
    "pulumi_kubernetes",
    "pulumi_azure_native",
    "kopf",
    "lightkube",
)


def test_render_yaml_and_json(capsys: pytest.CaptureFixture[str]) -> None:
    q = str(EXAMPLES / "quickstart")
    assert main(["run", "render", q, "--profiles", str(PROFILES), "--run-id", "tau-q-abcde"]) == 0
    docs = list(yaml.safe_load_all(capsys.readouterr().out))
    assert [d["kind"] for d in docs] == ["ConfigMap", "RayJob"]
    assert docs[1]["metadata"]["name"] == "tau-q-abcde"
    assert main(["run", "render", q, "-p", str(PROFILES), "-o", "json"]) == 0
    lst = json.loads(capsys.readouterr().out)
    assert lst["kind"] == "List" and [i["kind"] for i in lst["items"]] == ["ConfigMap", "RayJob"]


def test_dry_run_shorthand_equals_render(capsys: pytest.CaptureFixture[str]) -> None:
    q = str(EXAMPLES / "batch-job")
    args = ["--profiles", str(PROFILES), "--run-id", "batch-score-aaaaa"]
    assert main(["run", "render", q, *args]) == 0
    rendered = capsys.readouterr().out
    assert main(["run", q, "--dry-run", *args]) == 0
    # identical except the submitter/revision stamps, which are stable within one process
    assert capsys.readouterr().out == rendered


def test_the_seed_s_spellings_config_and_version_short(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """TauGrid's own quickstart: `tau run --config FILE`, `tau version --short`."""
    from importlib.metadata import version

    q = EXAMPLES / "batch-job"
    args = ["--profiles", str(PROFILES), "--run-id", "batch-score-aaaaa"]
    assert main(["run", str(q), "--dry-run", *args]) == 0
    rendered = capsys.readouterr().out
    assert main(["run", "--config", str(q / "tau.yaml"), "--dry-run", *args]) == 0
    assert capsys.readouterr().out == rendered
    assert main(["run", "x.yaml", "--config", "y.yaml", "--dry-run", *args]) == 2
    assert "two tau.yaml files given" in capsys.readouterr().err
    assert main(["version", "--short"]) == 0
    assert capsys.readouterr().out.strip() == version("taugrid")


def test_render_without_profiles_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "render", str(EXAMPLES / "quickstart")]) == 2
    assert "--profiles" in capsys.readouterr().err


def test_explicit_profile_out_of_bounds_gives_numbers(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(
        [
            "run",
            "render",
            str(EXAMPLES / "multi-worker-gpu"),
            "-p",
            str(PROFILES),
            "--profile",
            "a100x1",
        ]
    )
    assert code == 2
    assert "compute.gpus=2 exceeds profile a100x1: nodes have 1 GPU" in capsys.readouterr().err


def test_unknown_profile_and_workspace(capsys: pytest.CaptureFixture[str]) -> None:
    q = str(EXAMPLES / "quickstart")
    assert main(["run", "render", q, "-p", str(PROFILES), "--profile", "tpu"]) == 2
    assert "available:" in capsys.readouterr().err
    assert main(["run", "render", q, "-p", str(PROFILES), "--workspace", "nope"]) == 2
    assert "known: research, llm" in capsys.readouterr().err


def test_bad_run_id_rejected(capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        main(
            [
                "run",
                "render",
                str(EXAMPLES / "quickstart"),
                "-p",
                str(PROFILES),
                "--run-id",
                "Bad_ID",
            ]
        )
        == 2
    )
    assert "--run-id" in capsys.readouterr().err


def test_bad_snapshot_reports_key_path(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    snap = yaml.safe_load(PROFILES.read_text())
    snap["profiles"][1]["gpusPerWorker"] = "one"
    p = tmp_path / "snap.yaml"
    p.write_text(yaml.safe_dump(snap))
    assert main(["run", "render", str(EXAMPLES / "quickstart"), "-p", str(p)]) == 2
    err = capsys.readouterr().err
    assert "profiles[1].gpusPerWorker" in err and str(p) in err


def test_snapshot_hash_is_checked(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    snap = yaml.safe_load(PROFILES.read_text())
    snap["profileSetHash"] = "sha256:" + "0" * 64
    p = tmp_path / "snap.yaml"
    p.write_text(yaml.safe_dump(snap))
    assert main(["run", "validate", str(EXAMPLES / "quickstart"), "-p", str(p)]) == 2
    assert "does not match" in capsys.readouterr().err


def test_schema_is_json_schema_that_accepts_the_examples(
    capsys: pytest.CaptureFixture[str],
) -> None:
    import jsonschema

    assert main(["run", "schema"]) == 0
    schema = json.loads(capsys.readouterr().out)
    for f in EXAMPLES.glob("*/tau.yaml"):
        jsonschema.validate(yaml.safe_load(f.read_text()), schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"schema_version": 1, "name": "x", "bogus": 1}, schema)


@pytest.mark.parametrize("target", ["kube", "pulumi"])
def test_cluster_targets_without_a_kubeconfig_say_how_to_get_one(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    target: str,
) -> None:
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing"))
    assert main(["run", str(EXAMPLES / "quickstart"), "--target", target]) == 4
    err = capsys.readouterr().err
    assert "missing: no such file" in err and "tau sandbox kubeconfig" in err


def test_bad_target_from_env(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TAU_TARGET", "mars")
    assert main(["run", str(EXAMPLES / "quickstart")]) == 2
    assert "TAU_TARGET='mars'" in capsys.readouterr().err


def _modules_after(argv: list[str]) -> set[str]:
    # A meta-path hook records every attempt to import a top-level module, so an import of a
    # heavy package counts even on a machine where that package is not installed.
    code = (
        "import sys\nattempts = set()\n"
        "class Spy:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        attempts.add(name.split('.')[0])\n"
        "        return None\n"
        "sys.meta_path.insert(0, Spy())\n"
        "from taugrid.cli.app import main\n"
        f"rc = main({argv!r})\n"
        "import json\nseen = attempts | {m.split('.')[0] for m in sys.modules}\n"
        "print(json.dumps(sorted(seen)), file=sys.stderr)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=False
    )
    return set(json.loads(proc.stderr.strip().splitlines()[-1]))


@pytest.mark.parametrize(
    "argv",
    [
        ["--help"],
        ["run", "validate", str(EXAMPLES / "quickstart")],
        ["run", "render", str(EXAMPLES / "quickstart"), "-p", str(PROFILES)],
        ["quota", "--help"],
        ["controller", "run", "--help"],
    ],
    ids=["help", "validate", "render", "quota-help", "controller-help"],
)
def test_no_heavy_imports(argv: list[str]) -> None:
    loaded = _modules_after(argv)
    assert "taugrid" in loaded
    assert not (loaded & set(HEAVY)), loaded & set(HEAVY)


def test_validate_does_not_scan_installed_packages_for_pydantic_plugins() -> None:
    """tau's own process asks importlib.metadata nothing (pydantic's plugin lookup would read
    every installed package's entry points), and its models still validate."""
    code = (
        "import sys\nfrom taugrid.cli.app import main\n"
        f"rc = main(['run', 'validate', {str(EXAMPLES / 'quickstart')!r}])\n"
        "print(rc, 'importlib.metadata' in sys.modules, file=sys.stderr)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=False
    )
    assert proc.stderr.strip().splitlines()[-1] == "0 False", proc.stderr
    assert "is valid" in proc.stdout


def test_help_does_not_import_pydantic_or_yaml() -> None:
    loaded = _modules_after(["--help"])
    assert "pydantic" not in loaded and "yaml" not in loaded


def test_list_shows_cluster_runs_from_their_records_when_the_cluster_does_not_answer(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from taugrid.api.evidence import KubeHandle, RunRecord
    from taugrid.runs.evidence import RunDir

    monkeypatch.setenv("TAU_HOME", str(tmp_path))
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing"))
    rd = RunDir(tmp_path / "data" / "runs" / "kq-abcde")
    rd.path.mkdir(parents=True)
    rd.create(
        RunRecord(
            run_id="kq-abcde",
            name="kq",
            workspace="research",
            profile="a100x1",
            workload_kind="rayjob",
            handle=KubeHandle(namespace="research"),
            submitter="a",
            code_folder="/x",
            code_revision="u",
            code_digest="d",
            config_hash="h",
            image="i",
            entrypoint="t.py",
            created_at="2026-12-01T00:00:00+00:00",
        )
    )
    assert main(["run", "list", "-o", "json"]) == 0
    out = capsys.readouterr()
    assert [r["run_id"] for r in json.loads(out.out)] == ["kq-abcde"]
    assert "shown from their local records" in out.err and "kubeconfig" in out.err
    assert (
        json.loads(out.out)[0]["summary"]
        == "pending when last recorded here; its cluster was not observed"
    )


def test_the_tau_executable_starts_with_a_high_young_gc_threshold(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # `tau` is taugrid.cli:main, which raises the collector's young threshold before the CLI's
    # imports (a start-up makes ~50,000 objects and no cycles worth ~75 passes).
    import gc
    from importlib.metadata import entry_points

    import taugrid.cli

    (ep,) = [e for e in entry_points(group="console_scripts") if e.name == "tau"]
    assert ep.value == "taugrid.cli:main"
    before = gc.get_threshold()
    monkeypatch.setattr(sys, "argv", ["tau", "version"])
    try:
        assert taugrid.cli.main() == 0
        assert gc.get_threshold()[0] == taugrid.cli.GC_YOUNG_THRESHOLD
        assert gc.get_threshold()[1:] == before[1:]
    finally:
        gc.set_threshold(*before)
    assert capsys.readouterr().out.strip()
