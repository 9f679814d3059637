"""Bytes taken from a run are the ones it sealed: a checkpoint changed, added to or cut since
the seal is never registered, and one that changes during the registration is taken back; damage
in the store is named with the way out (#63)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from datakit import run_with_checkpoints, tree

from taugrid.api.data import parse_ref
from taugrid.api.errors import TauError

# pulls note what they wrote under tau's home: a home of the test's own
pytestmark = pytest.mark.usefixtures("own_tau_home")


@pytest.mark.parametrize("tamper", ["change", "add", "remove"])
def test_a_checkpoint_changed_since_the_run_sealed_it_is_never_registered(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tamper: str
) -> None:
    from taugrid.client import data
    from taugrid.runs.evidence import RunDir

    monkeypatch.setenv("TAU_HOME", str(tmp_path))
    run = run_with_checkpoints(tmp_path, {10: 0.9, 30: 0.5})
    rd = RunDir(tmp_path / "data" / "runs" / run)
    (rd.checkpoint_dir() / "step-00000030" / "opt.bin").write_bytes(b"o")
    rd.seal()
    folder = rd.checkpoint_dir() / "step-00000030"
    if tamper == "change":
        (folder / "weights.bin").write_bytes(b"tampered")
    elif tamper == "add":
        (folder / "extra.bin").write_bytes(b"x")
    else:
        (folder / "opt.bin").unlink()
    with pytest.raises(TauError) as e:
        data.register_model_from_run("clf", run)
    named = {"change": "weights.bin (changed)", "add": "extra.bin (added)", "remove": "opt.bin"}
    assert e.value.exit_code == 1 and named[tamper] in str(e.value), str(e.value)
    assert "sealed manifest" in str(e.value)
    assert data.list_("model") == []  # nothing registered
    # the intact checkpoint of the same run registers, checked
    got = data.register_model_from_run("clf", run, checkpoint="step-00000010")
    assert [f.path for f in got.record.files] == ["weights.bin"]


def test_a_checkpoint_that_changes_while_it_is_registered_is_taken_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from taugrid.client import data
    from taugrid.data import store as store_mod
    from taugrid.runs.evidence import RunDir

    monkeypatch.setenv("TAU_HOME", str(tmp_path))
    run = run_with_checkpoints(tmp_path, {30: 0.5})
    rd = RunDir(tmp_path / "data" / "runs" / run)
    rd.seal()
    real = store_mod.Store.register

    def changed_first(self: Any, kind: Any, name: Any, path: Path, *a: Any, **k: Any) -> Any:
        (Path(path) / "weights.bin").write_bytes(b"changed after the check")
        return real(self, kind, name, path, *a, **k)

    monkeypatch.setattr(store_mod.Store, "register", changed_first)
    with pytest.raises(TauError) as e:
        data.register_model_from_run("clf", run)
    assert "changed while it was registered" in str(e.value) and "weights.bin" in str(e.value)
    assert data.list_("model") == []


def test_damage_that_verify_finds_names_the_way_out_and_registering_again_says_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from taugrid.cli.app import main
    from taugrid.data.store import default_store

    monkeypatch.setenv("TAU_HOME", str(tmp_path / "home"))
    src = tree(tmp_path / "src", {"big.bin": os.urandom(2 << 20), "a.txt": b"A"})
    assert main(["data", "dataset", "register", "d", str(src)]) == 0
    rec = default_store().resolve("dataset", parse_ref("d"))
    big = next(f for f in rec.files if f.path == "big.bin")
    blob = default_store().blob(big.sha256)  # type: ignore[attr-defined]
    blob.chmod(0o644)
    with blob.open("r+b") as f:
        f.write(b"\0" * 16)
    capsys.readouterr()
    assert main(["data", "dataset", "verify", "d"]) == 1
    err = capsys.readouterr().err
    fix = f"tau data dataset repair d@{rec.short} --from PATH"
    assert f"fix: {fix}" in err
    assert main(["data", "dataset", "register", "d", str(src)]) == 0
    assert fix in capsys.readouterr().err  # "nothing changed", and how to heal it
    assert main(["data", "dataset", "repair", f"d@{rec.short}", "--from", str(src)]) == 0
    assert main(["data", "dataset", "verify", "d"]) == 0
