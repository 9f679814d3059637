"""The code bundle says what it leaves out and why; .gitignore and .tauignore apply, with
.tauignore last (a `!pattern` re-includes); the size limit is enforced by validate too."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from taugrid.cli.app import main
from taugrid.runs.codebundle import DATA, collect


def tree(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return root


def test_defaults_leave_out_data_weights_and_hidden_things_with_a_reason(tmp_path: Path) -> None:
    tree(
        tmp_path,
        {
            "train.py": "x",
            "data/a.parquet": "x",
            "model.safetensors": "x",
            ".env": "SECRET=1",
            "__pycache__/m.pyc": "x",
            "pkg/util.py": "x",
        },
    )
    b = collect(tmp_path, include_helper=False)
    assert [rel for rel, _ in b.files] == ["pkg/util.py", "train.py"]
    why = {x.path: x.reason for x in b.left_out}
    assert why["data/a.parquet"] == DATA and why["model.safetensors"] == DATA
    assert ".env" in why and "__pycache__/" in why
    summary = b.left_out_summary()
    assert summary is not None
    assert "data/a.parquet (data or weights)" in summary and "/data" in summary
    assert ".env" not in summary  # hidden entries are left out quietly


def test_gitignore_and_tauignore_with_negation(tmp_path: Path) -> None:
    tree(
        tmp_path,
        {
            "train.py": "x",
            "build/o.txt": "x",
            "run.log": "x",
            "keep.bin": "x",
            "drop.bin": "x",
            "notes.md": "x",
            ".gitignore": "# comment\nbuild/\n*.log\n",
            ".tauignore": "!keep.bin\nnotes.md\n",
        },
    )
    b = collect(tmp_path, include_helper=False)
    assert [rel for rel, _ in b.files] == ["keep.bin", "train.py"]
    why = {x.path: x.reason for x in b.left_out}
    assert why["build/"] == ".gitignore: build/" and why["run.log"] == ".gitignore: *.log"
    assert why["notes.md"] == ".tauignore: notes.md" and why["drop.bin"] == DATA


def test_a_virtualenv_without_a_telltale_name_is_left_out(tmp_path: Path) -> None:
    tree(tmp_path, {"train.py": "x", "myenv/pyvenv.cfg": "home = /usr", "myenv/lib/x.py": "x"})
    assert [rel for rel, _ in collect(tmp_path, include_helper=False).files] == ["train.py"]


def test_the_helper_is_added_unless_the_folder_has_its_own(tmp_path: Path) -> None:
    tree(tmp_path, {"train.py": "x"})
    assert "tau_run.py" in dict(collect(tmp_path).files)
    tree(tmp_path, {"tau_run.py": "mine"})
    assert dict(collect(tmp_path).files)["tau_run.py"] == b"mine"


def test_validate_reports_left_out_files_and_enforces_the_size_limit(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tree(
        tmp_path,
        {
            "tau.yaml": "schema_version: 1\nname: x\nrun: {entrypoint: train.py}\n",
            "train.py": "print(1)\n",
            "data/a.npz": "x",
        },
    )
    assert main(["run", "validate", str(tmp_path), "-o", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["code_bundle"]["left_out"] == [{"path": "data/a.npz", "reason": DATA}]
    assert main(["run", "validate", str(tmp_path)]) == 0
    assert "left out of the code bundle: data/a.npz" in capsys.readouterr().err
    (tmp_path / "big.csv").write_text("x" * (800 * 1024))
    assert main(["run", "validate", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "over the 768 KiB" in err and "big.csv" in err and ".tauignore" in err
    (tmp_path / ".tauignore").write_text("big.csv\n")
    assert main(["run", "validate", str(tmp_path)]) == 0


# --- the defaults without pathspec read exactly as gitignore does ----------------------------
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from taugrid.runs.codebundle import DEFAULT_RULES  # noqa: E402

_TEXT = st.text(alphabet="abc._-pthzoybinsfgrwd5x", max_size=8)
_LITERALS = sorted(
    {part for glob, _ in DEFAULT_RULES for part in glob.strip("/").split("*") if part}
)
# random names, and names made around each rule's literal parts (so every rule is hit, and
# near misses: a suffix with more after it, a prefix not at the start)
_NAME = st.one_of(
    _TEXT,
    st.builds(lambda a, lit, b: a + lit + b, _TEXT, st.sampled_from(_LITERALS), _TEXT),
).filter(lambda n: n not in ("", ".", ".."))


@settings(max_examples=400, deadline=None)
@given(parents=st.lists(_NAME, max_size=2), name=_NAME, is_dir=st.booleans())
def test_the_default_rules_match_as_gitignore_reads_them(
    parents: list[str], name: str, is_dir: bool
) -> None:
    from pathspec import GitIgnoreSpec

    from taugrid.runs.codebundle import default_reason

    rel = "/".join([*parents, name]) + ("/" if is_dir else "")
    spec = GitIgnoreSpec.from_lines([p for p, _ in DEFAULT_RULES])
    hit = spec.check_file(rel)
    want = DEFAULT_RULES[hit.index][1] if hit.include and hit.index is not None else None
    # the walk never looks inside an ignored folder: only paths whose parents are kept count
    if any(default_reason(p + "/") for p in parents):
        return
    assert default_reason(rel) == want, rel
