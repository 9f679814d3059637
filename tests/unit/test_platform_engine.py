"""`tau platform preview | up | destroy` before the engine runs: what is refused, and how."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from conftest import ROOT
from conftest import run_tau as tau

from taugrid.api.errors import TauError

pytest.importorskip("pulumi", reason="the platform extra (pulumi) is not installed")
from taugrid.infra import engine


def no_engine_env(tmp_path: Path) -> dict[str, str]:
    return {"PATH": "/usr/bin:/bin", engine.CACHE_ENV: str(tmp_path / "nothing"),
            engine.BIN_ENV: ""}  # fmt: skip


@pytest.mark.parametrize("args", [["preview", "-o", "json"], ["up", "--yes"], ["destroy", "--yes"]])
def test_without_a_pulumi_cli_each_command_says_how_to_get_one(
    tmp_path: Path, args: list[str]
) -> None:
    res = tau(tmp_path, "platform", *args, "--stack", "sandbox", env=no_engine_env(tmp_path))
    assert res.returncode == 4, res.stderr
    assert "no Pulumi CLI found" in res.stderr
    assert "make pulumi" in res.stderr
    assert "Traceback" not in res.stderr


def test_a_bad_stack_config_exits_2_before_the_engine_is_looked_for(tmp_path: Path) -> None:
    stacks = tmp_path / "stacks"
    stacks.mkdir()
    (stacks / "Pulumi.bad.yaml").write_text("config:\n  taugrid:platform:\n    cluster: {}\n")
    res = tau(tmp_path, "platform", "preview", "--stack", "bad", "--stacks-dir", str(stacks),
              env=no_engine_env(tmp_path))  # fmt: skip
    assert res.returncode == 2, res.stderr
    assert "cluster" in res.stderr


def test_a_stack_whose_kubeconfig_is_a_secret_is_sent_to_pulumi_up(tmp_path: Path) -> None:
    stacks = tmp_path / "stacks"
    stacks.mkdir()
    text = (ROOT / "stacks" / "Pulumi.sandbox.yaml").read_text()
    text = text.replace("context: taugrid-sandbox", "kubeconfigSecret: kubeconfig")
    (stacks / "Pulumi.sec.yaml").write_text(text)
    res = tau(tmp_path, "platform", "preview", "--stack", "sec", "--stacks-dir", str(stacks),
              env=no_engine_env(tmp_path))  # fmt: skip
    assert res.returncode == 2, res.stderr
    assert "only its own secrets provider can decrypt" in res.stderr


def test_a_shared_backend_needs_a_passphrase(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("PULUMI_BACKEND_URL", "azblob://tau-state")
    monkeypatch.delenv("PULUMI_CONFIG_PASSPHRASE", raising=False)
    monkeypatch.delenv("PULUMI_CONFIG_PASSPHRASE_FILE", raising=False)
    with pytest.raises(TauError, match="needs a secrets passphrase") as e:
        engine.engine_env(tmp_path)
    assert e.value.exit_code == 4


def test_the_default_backend_is_local_and_offline(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("TAU_HOME", str(tmp_path))
    monkeypatch.delenv("PULUMI_BACKEND_URL", raising=False)
    monkeypatch.delenv("PULUMI_CONFIG_PASSPHRASE", raising=False)
    monkeypatch.delenv("PULUMI_CONFIG_PASSPHRASE_FILE", raising=False)
    env = engine.engine_env(tmp_path / "bin")
    assert env["PULUMI_BACKEND_URL"] == (tmp_path / "pulumi" / "state").as_uri()
    assert (tmp_path / "pulumi" / "state").is_dir()
    assert env["PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION"] == "true"
    assert env["PATH"].split(os.pathsep)[0] == str(tmp_path / "bin")


def test_a_python_policy_pack_is_started_as_an_executable(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("TAU_HOME", str(tmp_path))
    launcher = Path(engine.policy_launcher(str(ROOT / "policies")))
    assert os.access(launcher, os.X_OK)
    assert (launcher.parent / "PulumiPolicy.yaml").read_text() == (
        ROOT / "policies" / "PulumiPolicy.yaml"
    ).read_text()
    assert engine.policy_launcher(str(ROOT / "policies")) == str(launcher)  # stable
