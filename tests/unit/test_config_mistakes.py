"""Mistakes new users made, by class: each gets exit 2, the key path or line, and the fix, and
never an internal error. Through the real CLI entry point (`tau run validate`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from taugrid.cli.app import main

GOOD = "schema_version: 1\nname: x\nrun: {entrypoint: train.py}\n"


def validate(
    tmp_path: Path, text: str, capsys: pytest.CaptureFixture[str], *args: str
) -> tuple[int, str]:
    (tmp_path / "train.py").write_text("print('hi')\n")
    (tmp_path / "tau.yaml").write_text(text)
    code = main(["run", "validate", str(tmp_path), *args])
    out = capsys.readouterr()
    return code, out.out + out.err


# (what, the document, words the message must have)
CASES = [
    (
        "tab in indentation",
        "schema_version: 1\nname: x\nrun:\n\tentrypoint: train.py\n",
        ["tau.yaml:4", "tab", "spaces"],
    ),
    ("empty", "", ["is empty", "example: schema_version: 1"]),
    ("only comments", "# nothing here yet\n   # still nothing\n", ["is empty", "only comments"]),
    (
        "unclosed brace, reported where it opened",
        "schema_version: 1\nname: x\nrun: {entrypoint: train.py\ncompute: {gpus: 1}\n",
        ["tau.yaml:3", "'{' opened on this line", "gave up at line 4"],
    ),
    (
        "unclosed list",
        "schema_version: 1\nname: x\nrun: {args: [a, b}\n",
        ["tau.yaml:3", "'[' opened on this line"],
    ),
    (
        "unclosed quote",
        'schema_version: 1\nname: "x\nrun: {entrypoint: train.py}\n',
        ["tau.yaml:2", "quote opened on this line"],
    ),
    (
        "memory as a bare int",
        GOOD + "compute: {memory: 16}\n",
        ["compute.memory (line 4)", "without a unit", "16 bytes", "16Gi", "2^30", "10^9"],
    ),
    (
        "memory in GB",
        GOOD + "compute: {memory: 16GB}\n",
        ["compute.memory (line 4)", "did you mean 16Gi?", "G is 10^9"],
    ),
    ("NaN cpus", GOOD + "compute: {cpus: .nan}\n", ["compute.cpus (line 4)", "finite"]),
    ("infinite memory", GOOD + "compute: {memory: .inf}\n", ["compute.memory (line 4)", "finite"]),
    (
        "uppercase and underscore in the name",
        "schema_version: 1\nname: My_Run\nrun: {entrypoint: train.py}\n",
        ["name (line 2)", "uppercase letters (M, R)", "'_'", "try 'my-run'"],
    ),
    (
        "name starting with a digit",
        "schema_version: 1\nname: 9lives\nrun: {entrypoint: train.py}\n",
        ["name (line 2)", "digit first", "try 'run-9lives'"],
    ),
    (
        "uppercase Secret name",
        GOOD + "runtime: {env_from_secret: {HF_TOKEN: 'HF-Secret:token'}}\n",
        [
            "runtime.env_from_secret",
            "Secret name 'HF-Secret'",
            "uppercase letters",
            "try 'hf-secret:token'",
        ],
    ),
    (
        "Secret reference without a key",
        GOOD + "runtime: {env_from_secret: {HF_TOKEN: hf-secret}}\n",
        ["has no ':'", "<secret-name>:<key>"],
    ),
    (
        "entrypoint typo",
        "schema_version: 1\nname: x\nrun: {entrypoint: trian.py}\n",
        ["run.entrypoint (line 3)", "did you mean 'train.py'?"],
    ),
    (
        "entrypoint aliases that disagree",
        "schema_version: 1\nname: x\nrun: {entrypoint: train.py, script: other.py}\n",
        ["run.script", "contradicts run.entrypoint='train.py'", "keep one"],
    ),
    (
        "top-level alias that disagrees",
        "schema_version: 1\nname: x\nentrypoint: other.py\nrun: {entrypoint: train.py}\n",
        ["entrypoint (line 3)", "contradicts run.entrypoint"],
    ),
    (
        "the image given three ways",
        GOOD.replace("train.py}", "train.py, image: a}") + "runtime: {image: b}\nimage: c\n",
        ["2 problems", "run.image", "image (line 5)", "contradicts runtime.image='b'"],
    ),
    (
        "invalid pip requirement",
        GOOD + "runtime: {pip: ['torch>>2', 'ok>=1']}\n",
        ["runtime.pip (line 4)", "item 0 ('torch>>2') is not a valid requirement", "torch>=2.4"],
    ),
    (
        "pip option in pip",
        GOOD + "runtime: {pip: ['-r requirements.txt']}\n",
        ["is a pip option, not a requirement"],
    ),
]


@pytest.mark.parametrize(("what", "text", "words"), CASES, ids=[c[0] for c in CASES])
def test_each_class_of_mistake_gets_a_clear_message(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], what: str, text: str, words: list[str]
) -> None:
    code, out = validate(tmp_path, text, capsys)
    assert code == 2, out
    assert "internal error" not in out and "Traceback" not in out
    for w in words:
        assert w in out, f"{what}: {w!r} not in:\n{out}"


def test_env_as_a_map_reports_the_bad_value_only(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out = validate(tmp_path, GOOD + "runtime: {env: {A: 1, B: ok}}\n", capsys)
    assert code == 2
    assert "runtime.env.A" in out and "must be a string" in out
    assert "must be a list" not in out  # the map form was meant; no false error beside it
    assert "runtime.env.B" not in out


def test_a_python_file_where_a_tau_yaml_is_expected(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "train.py").write_text("print('hi')\n")
    code = main(["run", "validate", str(tmp_path / "train.py")])
    err = capsys.readouterr().err
    assert code == 2 and "is a Python script, not a tau.yaml" in err
    assert "write a tau.yaml beside it with run: {entrypoint: train.py}" in err
    (tmp_path / "tau.yaml").write_text(GOOD)
    code = main(["run", "validate", str(tmp_path / "train.py")])
    err = capsys.readouterr().err
    assert code == 2 and f"pass {tmp_path / 'tau.yaml'}" in err


def test_name_suggestions_are_valid_names() -> None:
    from taugrid.api import naming

    for raw in ["My_Run", "9lives", "--a--b--", "Ünïcode Name", "x" * 80, "a.b.c", "UPPER"]:
        fixed = naming.suggest_name(raw)
        assert fixed == "" or naming.is_dns_label(fixed), (raw, fixed)
        assert fixed == "" or naming.DNS_1035.match(fixed), (raw, fixed)
        assert naming.name_problem(raw) is not None
    assert naming.name_problem("good-name") is None


@pytest.mark.parametrize(
    ("module", "argv", "extra"),
    [
        ("taugrid.infra.plan", ["platform", "plan", "--stack", "prod"], "platform"),
        ("plotext", None, "local"),
        ("matplotlib", None, "plot"),
    ],
)
def test_a_missing_extra_says_the_exact_install_command(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    module: str,
    argv: list[str] | None,
    extra: str,
) -> None:
    import sys

    import taugrid.infra
    from taugrid.api.errors import TauError
    from taugrid.cli import plots

    monkeypatch.setitem(sys.modules, module, None)  # importing it now fails
    monkeypatch.delattr(taugrid.infra, "plan", raising=False)
    want = f"pip install 'taugrid[{extra}]'"
    if argv is not None:
        assert main(argv) == 4
        assert want in capsys.readouterr().err
        return
    rows = [{"step": 1, "loss": 1.0}, {"step": 2, "loss": 0.5}]
    with pytest.raises(TauError) as e:
        if module == "plotext":
            plots.to_text(rows, ["loss"], title="t")
        else:
            plots.to_png(rows, ["loss"], Path("/nonexistent/x.png"), title="t")
    assert e.value.exit_code == 4 and want in (e.value.hint or "")
    assert f"pip install -e '.[{extra}]'" in (e.value.hint or "")
