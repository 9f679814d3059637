"""A folder a user names for a command to write into is checked before anything is written:
a file, a path under a file, or a folder that cannot be made there is exit 2 in one line."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from taugrid.cli.app import main
from taugrid.host.folders import folder_problem


def test_a_folder_or_one_that_can_be_made_is_fine(tmp_path: Path) -> None:
    assert folder_problem(tmp_path) is None
    assert folder_problem(tmp_path / "new" / "deeper") is None


def test_a_file_and_a_path_under_a_file_are_named(tmp_path: Path) -> None:
    f = tmp_path / "notes.txt"
    f.write_text("x")
    assert folder_problem(f) == "is a file, not a folder"
    assert folder_problem(f / "sub" / "deeper") == f"is under {f}, which is a file"


def test_a_folder_that_cannot_be_written_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ro = tmp_path / "ro"
    ro.mkdir(mode=0o500)
    real = os.access
    # as root (CI) every folder is writable: the kernel's answer for another user, stood in
    monkeypatch.setattr(os, "access", lambda p, mode: False if Path(p) == ro else real(p, mode))
    assert folder_problem(ro / "x") == f"cannot be written: {ro} is not writable by this user"
    assert folder_problem(tmp_path / "x") is None


def _dests(tmp_path: Path) -> list[Path]:
    f = tmp_path / "a-file"
    f.write_text("keep me")
    return [f, f / "under"]


@pytest.mark.parametrize(
    "argv",
    [
        ["run", "pull", "some-run", "--to", "{dest}"],
        ["data", "dataset", "pull", "some-data", "{dest}"],
        ["data", "model", "pull", "some-model", "{dest}"],
    ],
)
@pytest.mark.parametrize("which", [0, 1])
def test_commands_that_write_into_a_folder_refuse_a_file_in_one_line(
    argv: list[str],
    which: int,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TAU_HOME", str(tmp_path / "home"))
    dest = _dests(tmp_path)[which]
    rc = main([a.replace("{dest}", str(dest)) for a in argv])
    err = capsys.readouterr().err
    assert rc == 2, err
    assert len(err.strip().splitlines()) == 1, err
    assert "is a file, not a folder" in err if which == 0 else "which is a file" in err
    assert "internal error" not in err
    assert (tmp_path / "a-file").read_text() == "keep me"
