"""A broken kubeconfig is named, with what is wrong, exit 4: never "internal error"."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import run_tau
from hypothesis import given, settings
from hypothesis import strategies as st

from taugrid.api.errors import TauError
from taugrid.kube.kubeconfig import check

GOOD = """apiVersion: v1
kind: Config
current-context: dev
clusters: [{name: c, cluster: {server: "https://127.0.0.1:6443"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: dev, context: {cluster: c, user: u}}, {name: other, context: {cluster: c, user: u}}]
"""  # noqa: E501 (data: its lines are what they are)

CASES = [
    ("", "is empty"),
    ("a: [b\n", "is not valid YAML (line"),
    ("just some text\n", "is not a kubeconfig"),
    ("- a\n- b\n", "is not a kubeconfig"),
    ("apiVersion: v1\nclusters: []\n", "has no contexts"),
    (GOOD.replace("current-context: dev\n", ""), "sets no current-context"),
    (
        GOOD.replace("current-context: dev", "current-context: gone"),
        "has no context 'gone' (contexts: dev, other)",
    ),
    (
        GOOD.replace("{cluster: c, user: u}}, {", "{cluster: x, user: u}}, {"),
        "names cluster 'x', which is not in its clusters (c)",
    ),
    (GOOD.replace('server: "https://127.0.0.1:6443"', "insecure: true"), "has no server address"),
    (
        GOOD.replace("users: [{name: u,", "users: [{name: v,"),
        "names user 'u', which is not in its users (v)",
    ),
]


@pytest.mark.parametrize(("text", "words"), CASES)
def test_each_problem_is_named(tmp_path: Path, text: str, words: str) -> None:
    f = tmp_path / "kc.yaml"
    f.write_text(text)
    with pytest.raises(TauError) as e:
        check(f, None)
    assert e.value.exit_code == 4 and str(f) in e.value.message and words in e.value.message


def test_a_good_file_gives_its_context(tmp_path: Path) -> None:
    f = tmp_path / "kc.yaml"
    f.write_text(GOOD)
    assert check(f, None) == "dev" and check(f, "other") == "other"
    with pytest.raises(TauError, match="has no context 'nope'"):
        check(f, "nope")
    with pytest.raises(TauError, match="no such file"):
        check(tmp_path / "missing.yaml", None)


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=200))
def test_any_text_is_a_tau_error_or_a_context(text: str) -> None:
    import tempfile

    with tempfile.NamedTemporaryFile("w", suffix=".yaml") as f:
        f.write(text)
        f.flush()
        try:
            check(Path(f.name), None)
        except TauError as e:
            assert e.exit_code == 4


@pytest.mark.parametrize(
    "command",
    [
        ["workspaces"],
        ["profiles"],
        ["run", "status", "some-run"],
        ["run", "list", "--cluster"],
        ["quota", "list"],
    ],
)
def test_cluster_commands_say_which_file_and_what(tmp_path: Path, command: list[str]) -> None:
    kc = tmp_path / "kc.yaml"
    kc.write_text("a: [b\n")
    res = run_tau(tmp_path / "home", *command, env={"KUBECONFIG": str(kc)})
    assert res.returncode in (2, 4), res.stderr
    assert "internal error" not in res.stderr and "Traceback" not in res.stderr
    assert f"kubeconfig {kc}: is not valid YAML" in res.stderr


def test_tau_context_is_honoured(tmp_path: Path) -> None:
    kc = tmp_path / "kc.yaml"
    kc.write_text(GOOD)
    res = run_tau(
        tmp_path / "home", "workspaces", env={"KUBECONFIG": str(kc), "TAU_CONTEXT": "nope"}
    )
    assert res.returncode == 4 and "has no context 'nope'" in res.stderr
