"""`tau platform preview | up | destroy` before the engine runs: what is refused, and how."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from conftest import ROOT
from conftest import run_tau as tau

from taugrid.api.errors import TauError

pytest.importorskip("pulumi", reason="the platform extra (pulumi) is not installed")
from taugrid.infra import engine


def no_engine_env(tmp_path: Path) -> dict[str, str]:
    return {
        "PATH": "/usr/bin:/bin",
        engine.CACHE_ENV: str(tmp_path / "nothing"),
        engine.BIN_ENV: "",
    }


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
    res = tau(
        tmp_path,
        "platform",
        "preview",
        "--stack",
        "bad",
        "--stacks-dir",
        str(stacks),
        env=no_engine_env(tmp_path),
    )
    assert res.returncode == 2, res.stderr
    assert "cluster" in res.stderr


def test_a_stack_whose_kubeconfig_is_a_secret_is_sent_to_pulumi_up(tmp_path: Path) -> None:
    stacks = tmp_path / "stacks"
    stacks.mkdir()
    text = (ROOT / "stacks" / "Pulumi.sandbox.yaml").read_text()
    text = text.replace("context: taugrid-sandbox", "kubeconfigSecret: kubeconfig")
    (stacks / "Pulumi.sec.yaml").write_text(text)
    res = tau(
        tmp_path,
        "platform",
        "preview",
        "--stack",
        "sec",
        "--stacks-dir",
        str(stacks),
        env=no_engine_env(tmp_path),
    )
    assert res.returncode == 2, res.stderr
    assert "only its own secrets provider can decrypt" in res.stderr


@pytest.fixture
def no_login(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """No backend anywhere: an empty Pulumi home, no PULUMI_BACKEND_URL, no passphrase."""
    monkeypatch.setenv("TAU_HOME", str(tmp_path / "tau"))
    monkeypatch.setenv("PULUMI_HOME", str(tmp_path / "pulumi-home"))
    for var in ("PULUMI_BACKEND_URL", *engine.PASSPHRASE_VARS):
        monkeypatch.delenv(var, raising=False)
    return tmp_path


def login(home: Path, url: str) -> None:
    """What `pulumi login URL` leaves in the CLI's home (the format of credentials.json)."""
    (home / "pulumi-home").mkdir(exist_ok=True)
    (home / "pulumi-home" / "credentials.json").write_text(
        json.dumps({"current": url, "accessTokens": {url: ""}, "accounts": {url: {}}})
    )


def project(root: Path, extra: str = "") -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "Pulumi.yaml").write_text(
        f"name: taugrid\nruntime: python\nstackConfigDir: stacks\n{extra}"
    )
    (root / "stacks").mkdir(exist_ok=True)
    return root


def test_with_no_backend_anywhere_a_team_stack_is_refused_with_the_fix(no_login: Path) -> None:
    with pytest.raises(TauError, match="no Pulumi backend") as e:
        engine.choose_backend(None, "prod")
    assert e.value.exit_code == 4
    assert "pulumi login" in (e.value.hint or "") and "PULUMI_BACKEND_URL" in (e.value.hint or "")
    assert not (no_login / "tau" / "pulumi" / "state").exists()  # no private state was made


def test_the_backend_is_the_one_pulumi_uses_in_its_order(no_login: Path) -> None:
    proj = project(no_login / "proj")
    login(no_login, "file:///team/state")
    got = engine.choose_backend(proj, "prod")
    assert (got.url, got.local) == ("file:///team/state", False)
    assert "pulumi login" in got.source
    # the project file's backend.url comes before the login
    project(proj, "backend:\n  url: azblob://team-state\n")
    assert engine.choose_backend(proj, "prod").url == "azblob://team-state"
    # and PULUMI_BACKEND_URL before both
    os.environ["PULUMI_BACKEND_URL"] = "s3://elsewhere"
    try:
        assert engine.choose_backend(proj, "prod").url == "s3://elsewhere"
    finally:
        del os.environ["PULUMI_BACKEND_URL"]


def test_only_the_sandbox_falls_back_to_taus_local_backend(no_login: Path) -> None:
    got = engine.choose_backend(None, "sandbox")
    assert got.local and got.url == (no_login / "tau" / "pulumi" / "state").as_uri()
    assert "sandbox" in got.line()
    login(no_login, "file:///team/state")  # logged in: the sandbox's stack is shared too
    assert engine.choose_backend(None, "sandbox").url == "file:///team/state"


def test_a_stack_with_a_passphrase_needs_the_passphrase_pulumi_uses(no_login: Path) -> None:
    stacks = project(no_login / "proj") / "stacks"
    (stacks / "Pulumi.dev.yaml").write_text("config: {}\nencryptionsalt: v1:abc\n")
    shared = engine.Backend("azblob://team", "PULUMI_BACKEND_URL")
    secrets = engine.Secrets.of("dev", stacks / "Pulumi.dev.yaml")
    with pytest.raises(TauError, match="passphrase") as e:
        engine.engine_env(no_login / "bin", shared, secrets)
    assert str(stacks / "Pulumi.dev.yaml") in e.value.message  # where its salt is
    assert "PULUMI_CONFIG_PASSPHRASE" in (e.value.hint or "")
    os.environ["PULUMI_CONFIG_PASSPHRASE"] = "team secret"
    try:  # given: passed through untouched, never replaced by tau's own
        env = engine.engine_env(no_login / "bin", shared, secrets)
        assert "PULUMI_CONFIG_PASSPHRASE" not in env
    finally:
        del os.environ["PULUMI_CONFIG_PASSPHRASE"]


@pytest.mark.parametrize(
    ("backend", "stack_file", "needs"),
    [
        ("azblob://team", "config: {}\n", True),  # a new stack on a self-managed backend
        ("https://api.pulumi.com", "config: {}\n", False),  # the service keeps its secrets
        ("https://api.pulumi.com", "encryptionsalt: v1:x\n", True),  # unless made with one
        ("file:///team", "secretsprovider: azurekeyvault://v/keys/k\n", False),
        ("file:///team", "secretsprovider: passphrase\n", True),
    ],
)
def test_which_stacks_need_a_passphrase(
    no_login: Path, backend: str, stack_file: str, needs: bool
) -> None:
    path = no_login / "Pulumi.x.yaml"
    path.write_text(stack_file)
    secrets = engine.Secrets.of("x", path)
    assert secrets.needs_passphrase(engine.Backend(backend, "test")) is needs


def test_taus_own_stacks_and_the_local_backend_default_to_no_passphrase(no_login: Path) -> None:
    local = engine.choose_backend(None, "sandbox")
    env = engine.engine_env(no_login / "bin", local, engine.Secrets("sandbox", None, None))
    assert env["PULUMI_CONFIG_PASSPHRASE"] == ""
    assert (no_login / "tau" / "pulumi" / "state").is_dir()
    assert env["PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION"] == "true"
    assert env["PATH"].split(os.pathsep)[0] == str(no_login / "bin")
    assert "PULUMI_HOME" not in env  # the CLI's own home: its login and credentials
    run_stack = engine.Secrets("run-x", None, None, tau_own=True)
    shared = engine.Backend("azblob://team", "test")
    assert engine.engine_env(no_login / "bin", shared, run_stack)["PULUMI_CONFIG_PASSPHRASE"] == ""


def test_the_project_of_a_stacks_folder(tmp_path: Path) -> None:
    from taugrid.infra.stackfile import project_dir

    proj = project(tmp_path / "proj")
    assert project_dir(proj / "stacks") == proj.resolve()
    assert project_dir(ROOT / "stacks") == ROOT.resolve()
    (tmp_path / "loose").mkdir()
    assert project_dir(tmp_path / "loose") is None  # stack files outside any project
    assert project_dir(proj) is None  # the project keeps its stacks elsewhere


def test_platform_commands_without_a_backend_say_how_to_log_in(tmp_path: Path) -> None:
    res = tau(tmp_path, "platform", "preview", "--stack", "dev")
    assert res.returncode == 4, res.stderr
    assert "no Pulumi backend" in res.stderr and "pulumi login" in res.stderr
    assert "Traceback" not in res.stderr


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


def _diag(message: str, severity: str = "error") -> object:
    from types import SimpleNamespace

    return SimpleNamespace(
        resource_pre_event=None,
        res_outputs_event=None,
        policy_event=None,
        diagnostic_event=SimpleNamespace(severity=severity, message=message),
    )


def _failed_with(events: list[object], stderr: str) -> TauError:
    """What `tau platform up` raises when the engine fails after these events."""
    from types import SimpleNamespace

    from pulumi.automation import errors as auto_errors
    from pulumi.automation._cmd import CommandResult

    said: list[str] = []
    errors: list[str] = []
    for ev in events:
        engine._step(ev, [], said.append, "up", {}, errors)
    eng = SimpleNamespace(stack_name="prod", backend=SimpleNamespace(url="file:///team"))
    with pytest.raises(TauError) as caught, engine._engine_errors(eng, [], [], errors):  # type: ignore[arg-type]
        raise auto_errors.CommandError(CommandResult("", stderr, 255))
    assert said == [f"  error: {e}" for e in errors]  # each said once, as it came
    return caught.value


def test_a_program_error_is_reported_once_and_whole() -> None:
    """The engine repeats a program's error (as itself, as "an unhandled error occurred: ..."
    and in its stack summary); the user reads it once, every line of it."""
    why = "the worker's queues are not the manager's:\n  worker east: ClusterQueue gpu ..."
    err = _failed_with(
        [
            _diag(why),
            _diag(f"an unhandled error occurred: {why}"),
            _diag(f"Exception calling application: {why}"),
            _diag("a warning that is not the cause", severity="warning"),
            _diag("update failed"),
        ],
        stderr=f"error: {why}\n  pulumi:pulumi:Stack running error: {why}",
    )
    assert err.message == f"stack prod: {why}" and err.exit_code == 4
    assert err.hint is None


def test_a_reference_to_a_stack_the_backend_lacks_says_which_and_the_fix() -> None:
    err = _failed_with(
        [
            _diag('Preview failed: unknown stack "sandbox-worker-3"'),
            _diag("Resource monitor has terminated, shutting down"),
            _diag("preview failed"),
        ],
        stderr="error: preview failed",
    )
    assert err.message == 'stack prod: Preview failed: unknown stack "sandbox-worker-3"'
    assert err.hint is not None
    assert "sandbox-worker-3 not in file:///team" in err.hint
    assert "pulumi up that stack first" in err.hint


def test_without_the_engines_events_its_own_error_lines_are_kept() -> None:
    err = _failed_with([], stderr="noise\nerror: could not reach the backend\nmore noise")
    assert "error: could not reach the backend" in err.message and "noise" not in err.message


def test_a_manager_whose_worker_stacks_are_missing_names_each_before_the_engine_runs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from types import SimpleNamespace

    from taugrid.api.multicluster import MultiClusterSpec, WorkerRef
    from taugrid.infra import deploy

    workers = [
        WorkerRef(name="east", stack="east"),
        WorkerRef(name="west", stack="org/taugrid/west"),
        WorkerRef(name="far", stack="org/elsewhere/far"),  # another project: the engine's
        WorkerRef(name="north", stack="north"),
    ]
    cfg = SimpleNamespace(multiCluster=MultiClusterSpec(role="manager", workers=workers))
    listed: list[str] = ["organization/taugrid/north"]
    eng = SimpleNamespace(
        project="taugrid",
        stack_name="hub",
        backend=SimpleNamespace(url="file:///team"),
        list_stacks=lambda: listed,
    )
    check = deploy._workers_exist(cfg)  # type: ignore[arg-type]
    with pytest.raises(TauError) as caught:
        check(eng)  # type: ignore[arg-type]
    err = caught.value
    assert err.exit_code == 4
    assert "east (stack east), west (stack org/taugrid/west)" in err.message
    assert "far" not in err.message and "north" not in err.message
    assert err.hint and "tau platform up --stack east" in err.hint
    listed += ["east", "organization/taugrid/west"]
    check(eng)  # type: ignore[arg-type]  # all there: nothing to say
