"""Every value a user types as text (an id, a name, a reference, a path) is refused by the
client when it is empty, only spaces or holds control characters: exit 2, one line naming the
parameter, before the command does anything. Found by walking every command of the CLI, so a
new command is covered as it is added. And a run reference that cannot name a run (a path, an
upper-case name) is refused before any lookup, here or on a cluster."""

from __future__ import annotations

from typing import Any

import click
import pytest
import typer.main

from taugrid.cli.app import GROUPS, app, main


def _commands() -> list[tuple[list[str], Any]]:
    root = typer.main.get_command(app)
    ctx = click.Context(root)
    found: list[tuple[list[str], Any]] = []

    def walk(cmd: Any, path: list[str]) -> None:
        if hasattr(cmd, "list_commands"):
            for name in cmd.list_commands(ctx):
                sub = cmd.get_command(ctx, name)
                if sub is not None and not getattr(sub, "hidden", False):
                    walk(sub, [*path, name])
        else:
            found.append((path, cmd))

    walk(root, [])
    assert {p[0] for p, _ in found} >= set(GROUPS), "the walk missed a command group"
    return found


def _text_params() -> list[tuple[list[str], str, bool, list[str]]]:
    """(command, parameter label, is an argument, the args before it) for every text parameter."""
    out = []
    for path, cmd in _commands():
        args = [p for p in cmd.params if getattr(p, "param_type_name", "") == "argument"]
        for p in cmd.params:
            if type(p.type).__name__ not in ("Guarded",):
                continue
            if p in args:
                before = ["x"] * args.index(p)
                out.append((path, str(p.name).upper(), True, before))
            else:
                out.append((path, max(p.opts, key=len), False, []))
    return out


TEXT_PARAMS = _text_params()


def test_the_walk_finds_the_commands_that_take_ids_names_and_paths() -> None:
    names = {(" ".join(path), label) for path, label, _, _ in TEXT_PARAMS}
    for expected in [
        ("run status", "RUN"),
        ("run pull", "RUN"),
        ("run pull", "--to"),
        ("logs", "RUN"),
        ("serve status", "NAME"),
        ("run submit", "FILE"),
    ]:
        assert expected in names, f"{expected} not guarded"
    assert len(TEXT_PARAMS) > 60


@pytest.mark.parametrize("bad", ["", "  ", "ab\x01c"])
@pytest.mark.parametrize(
    ("path", "label", "is_arg", "before"),
    TEXT_PARAMS,
    ids=[f"{' '.join(p)}:{label}" for p, label, _, _ in TEXT_PARAMS],
)
def test_a_blank_or_control_value_is_refused_naming_the_parameter(
    path: list[str],
    label: str,
    is_arg: bool,
    before: list[str],
    bad: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Any,
) -> None:
    monkeypatch.setenv("TAU_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "no-kubeconfig"))
    argv = [*path, *before, bad] if is_arg else [*path, label, bad]
    rc = main(argv)
    err = capsys.readouterr().err
    assert rc == 2, err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert lines[0].startswith(f"error: {label} "), err
    assert ("control characters" if "\x01" in bad else " empty" if not bad else "only spaces") in (
        lines[0]
    )
    assert "Traceback" not in err
    assert not (tmp_path / "home").exists(), "the command did something before refusing"


@pytest.mark.parametrize("ref", ["../x", "Foo", "a.b", "a/b", "x" * 64, "a_b", "é"])
@pytest.mark.parametrize("command", [["run", "status"], ["run", "pull"], ["run", "cancel"]])
def test_a_run_reference_that_cannot_name_a_run_is_refused_before_any_lookup(
    command: list[str],
    ref: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Any,
) -> None:
    monkeypatch.setenv("TAU_HOME", str(tmp_path / "home"))

    def no_cluster(*_a: Any, **_k: Any) -> None:
        raise AssertionError("a cluster was asked")

    monkeypatch.setattr("taugrid.runs.backends.kube.backend.adopt_remote", no_cluster)
    rc = main([*command, ref])
    err = capsys.readouterr().err
    assert rc == 2, err
    assert f"error: run {ref!r} " in err
    assert "tau run list" in err
