"""`tau serve` without Ray: the service block of tau.yaml, Ray Serve's config for a revision,
the status as a pure function of what Ray Serve reports, the change that keeps every other
application, and bad input refused with exit 2 before anything is deployed."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import pytest
from conftest import run_tau

from taugrid.api import serve as S
from taugrid.api.errors import TauError
from taugrid.api.manifest import Manifest
from taugrid.runs.backends.local import rayhead
from taugrid.serve import local as L
from taugrid.serve.status import compute

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "serve-model"
BASE = "schema_version: 1\nname: iris\n"


def write(folder: Path, service: str, extra: str = "") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "tau.yaml").write_text(BASE + extra + service)
    (folder / "serve_app.py").write_text("app = None\n")
    return folder


# --- the contract ---------------------------------------------------------------------------------
def test_the_service_block_is_in_the_json_schema() -> None:
    schema = Manifest.model_json_schema()
    svc = schema["properties"]["service"]
    ref = svc["anyOf"][0]["$ref"].split("/")[-1]
    props = schema["$defs"][ref]["properties"]
    assert {
        "import_path",
        "model",
        "from_run",
        "replicas",
        "autoscaling",
        "gpus",
        "route_prefix",
        "readiness_path",
        "env",
        "rollout",
    } <= set(props)
    assert schema["$defs"][ref]["additionalProperties"] is False


@pytest.mark.parametrize(
    ("service", "where", "words"),
    [
        ("service: {import_path: serve_app}\n", "service.import_path", "module:attribute"),
        ("service: {import_path: 'a:b', model: iris}\n", "service.model", "version or an alias"),
        (
            "service: {import_path: 'a:b', model: iris@prod, from_run: r1}\n",
            "service.from_run",
            "one model",
        ),
        (
            "service: {import_path: 'a:b', replicas: 2, autoscaling: {max_replicas: 3}}\n",
            "service.replicas",
            "keep one",
        ),
        (
            "service: {import_path: 'a:b', autoscaling: {min_replicas: 3, max_replicas: 2}}\n",
            "min_replicas",
            "above max_replicas",
        ),
        (
            "service: {import_path: 'a:b', env: {TAU_MODEL_DIR: x}}\n",
            "service.env.TAU_MODEL_DIR",
            "belong to tau",
        ),
        ("service: {import_path: 'a:b', env: {'1bad': x}}\n", "service.env.1bad", "not a valid"),
        (
            "service: {import_path: 'a:b', route_prefix: 'no-slash'}\n",
            "service.route_prefix",
            "path",
        ),
        ("service: {import_path: 'a:b', replicas: 65}\n", "service.replicas", "64"),
        ("service: {import_path: 'a:b', gpus: 9}\n", "service.gpus", "8"),
        (
            "service: {import_path: 'a:b', rollout: {strategy: yolo}}\n",
            "service.rollout.strategy",
            "rolling",
        ),
        ("service: {import_path: 'a:b', replica: 2}\n", "service.replica", "replicas"),
    ],
)
def test_bad_service_blocks_are_located(
    tmp_path: Path, service: str, where: str, words: str
) -> None:
    folder = write(tmp_path / "p", service)
    res = run_tau(tmp_path / "home", "serve", "deploy", str(folder))
    assert res.returncode == 2, res.stderr
    assert where in res.stderr and words in res.stderr, res.stderr
    assert not (tmp_path / "home" / "services" / "iris").exists()


def test_a_service_only_file_is_not_a_run_and_a_run_file_is_not_a_service(tmp_path: Path) -> None:
    folder = write(tmp_path / "svc", "service: {import_path: 'serve_app:app'}\n")
    res = run_tau(tmp_path / "home", "run", str(folder))
    assert res.returncode == 2 and "tau serve deploy" in res.stderr, res.stderr
    runs = tmp_path / "run"
    runs.mkdir()
    (runs / "tau.yaml").write_text(BASE + "run: {entrypoint: t.py}\n")
    (runs / "t.py").write_text("")
    res = run_tau(tmp_path / "home", "serve", "deploy", str(runs))
    assert res.returncode == 2 and "service" in res.stderr and "is required" in res.stderr


def test_the_example_declares_both_a_run_and_a_service() -> None:
    from taugrid.runs.load import load_manifest

    assert load_manifest(EXAMPLE, purpose="run").manifest.entrypoint_path == "train.py"
    svc = load_manifest(EXAMPLE, purpose="service").manifest.service
    assert svc is not None and svc.model == "iris@prod" and svc.readiness_path == "/"


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--name", "Bad_Name"], "service name"),
        (["--name", "a" * 41], "at most 40"),
        (["--target", "mars"], "not a target"),
        (["--port", "80"], "1024..65535"),
        (["--model", "nosuch@prod"], "nosuch"),
        (["--model", "iris"], "version or an alias"),
    ],
)
def test_bad_deploy_options_are_refused_before_anything_runs(
    tmp_path: Path, args: list[str], words: str
) -> None:
    folder = write(tmp_path / "p", "service: {import_path: 'serve_app:app'}\n")
    res = run_tau(tmp_path / "home", "serve", "deploy", str(folder), *args)
    assert res.returncode == 2, res.stderr
    assert words in res.stderr, res.stderr
    assert not (tmp_path / "home" / "services" / "iris").exists()
    assert not (tmp_path / "home" / "ray" / "head.json").exists()  # no head was started


def test_gpus_above_this_machine_and_a_reserved_route_are_refused(tmp_path: Path) -> None:
    home = tmp_path / "home"
    gpu = write(tmp_path / "gpu", "service: {import_path: 'serve_app:app', gpus: 8}\n")
    res = run_tau(home, "serve", "deploy", str(gpu))
    assert res.returncode == 2 and "8 GPU(s) per replica; this machine has" in res.stderr
    for route in ("/_tau", "/_tau/x/stable"):  # where a canary's revisions answer
        taken = write(
            tmp_path / "r", f"service: {{import_path: 'serve_app:app', route_prefix: {route}}}\n"
        )
        res = run_tau(home, "serve", "deploy", str(taken))
        assert res.returncode == 2 and "TauGrid's" in res.stderr, res.stderr
    assert not (home / "services").exists() or not any((home / "services").iterdir())


@pytest.mark.parametrize(
    "args",
    [
        ["status", "ghost"],
        ["rollout", "ghost"],
        ["rollback", "ghost"],
        ["scale", "ghost", "--replicas", "1"],
        ["invoke", "ghost"],
        ["logs", "ghost"],
        ["delete", "ghost"],
        ["promote", "ghost"],
    ],
)
def test_an_unknown_service_is_a_clear_error(tmp_path: Path, args: list[str]) -> None:
    res = run_tau(tmp_path, "serve", *args)
    assert res.returncode == 2, res.stderr
    assert "no service 'ghost' on this machine" in res.stderr
    assert "Traceback" not in res.stderr


def test_serve_list_with_nothing_says_how_to_start(tmp_path: Path) -> None:
    res = run_tau(tmp_path, "serve", "list")
    assert res.returncode == 0 and "tau serve deploy" in res.stdout
    res = run_tau(tmp_path, "serve", "list", "-o", "json")
    assert json.loads(res.stdout) == []


# --- revisions ------------------------------------------------------------------------------------
def spec(**kw: Any) -> S.ServiceSpec:
    return S.ServiceSpec.model_validate({"import_path": "serve_app:app", **kw})


PIN = S.ModelPin(ref="iris@prod", name="iris", version="sha256:" + "a" * 64)


def test_a_revision_is_its_code_config_and_model_not_its_scale() -> None:
    h = S.config_hash(spec(replicas=1), PIN, "sha256:code")
    assert S.config_hash(spec(replicas=5), PIN, "sha256:code") == h
    assert S.config_hash(spec(autoscaling={"max_replicas": 3}), PIN, "sha256:code") == h
    assert S.config_hash(spec(rollout={"strategy": "blue-green"}), PIN, "sha256:code") == h
    other = PIN.model_copy(update={"version": "sha256:" + "b" * 64})
    assert S.config_hash(spec(replicas=1), other, "sha256:code") != h
    assert S.config_hash(spec(replicas=1), PIN, "sha256:code2") != h
    assert S.config_hash(spec(env={"A": "1"}), PIN, "sha256:code") != h
    # the same version named by its alias or by its digest: the same revision
    assert S.config_hash(spec(replicas=1, model="iris@sha256:aaaa"), PIN, "sha256:code") == h


def revision(n: int, **kw: Any) -> S.Revision:
    return S.Revision(
        number=n,
        created_at="2026-12-01T00:00:00Z",
        created_by="alice",
        config_hash=f"sha256:{n}",
        code_digest="sha256:c",
        model=PIN,
        spec=spec(**kw),
        source="/p/tau.yaml",
    )


def shape() -> L.AppShape:
    return L.AppShape(ingress="Classifier", deployments=["Pre", "Classifier"])


def test_the_config_of_a_revision_pins_model_code_and_resources(tmp_path: Path) -> None:
    rev = revision(2, cpus=0.5, gpus=1, env={"LOG": "debug"}, args={"k": 1})
    cfg = L.app_config(
        "iris",
        "/iris",
        rev,
        S.Scale(replicas=3),
        "rolling",
        shape(),
        tmp_path / "code",
        tmp_path / "model",
    )
    env = cfg["runtime_env"]["env_vars"]
    assert env == {
        "LOG": "debug",
        "TAU_SERVICE": "iris",
        "TAU_SERVICE_REVISION": "2",
        "TAU_MODEL_DIR": str(tmp_path / "model"),
        "TAU_MODEL_VERSION": PIN.version,
    }
    assert cfg["runtime_env"]["working_dir"] == f"local://{tmp_path / 'code'}"
    assert cfg["route_prefix"] == "/iris" and cfg["args"] == {"k": 1}
    by_name = {d["name"]: d for d in cfg["deployments"]}
    assert by_name["Classifier"]["num_replicas"] == 3
    assert by_name["Classifier"]["ray_actor_options"] == {"num_cpus": 0.5, "num_gpus": 1}
    assert "num_replicas" not in by_name["Pre"] and "ray_actor_options" not in by_name["Pre"]
    # every deployment starts new replicas before stopping old ones
    assert all(d["max_surge_percent"] > 0 for d in cfg["deployments"])
    again = L.app_config(
        "iris",
        "/iris",
        rev,
        S.Scale(replicas=3),
        "rolling",
        shape(),
        tmp_path / "code",
        tmp_path / "model",
    )
    assert again == cfg


def test_strategies_and_autoscaling_map_to_ray_serve_options(tmp_path: Path) -> None:
    rev = revision(1)
    auto = S.Scale(autoscaling=S.Autoscaling(min_replicas=0, max_replicas=4, downscale_delay_s=5))
    bg = L.app_config("iris", "/iris", rev, auto, "blue-green", shape(), tmp_path, None)
    ingress = next(d for d in bg["deployments"] if d["name"] == "Classifier")
    assert ingress["rolling_update_percentage"] == 1.0 and ingress["max_surge_percent"] == 100
    assert ingress["autoscaling_config"] == {
        "min_replicas": 0,
        "max_replicas": 4,
        "target_ongoing_requests": 2,
        "downscale_delay_s": 5,
    }
    assert "num_replicas" not in ingress
    assert "TAU_MODEL_DIR" not in bg["runtime_env"]["env_vars"]  # no model dir: not set
    rolling = L.app_config("iris", "/iris", rev, auto, "rolling", shape(), tmp_path, None)
    ing = next(d for d in rolling["deployments"] if d["name"] == "Classifier")
    assert ing["rolling_update_percentage"] < 1.0


# --- status ---------------------------------------------------------------------------------------
def record(**kw: Any) -> S.ServiceRecord:
    base: dict[str, Any] = {
        "name": "iris",
        "target": "local",
        "created_at": "2026-12-01T00:00:00Z",
        "created_by": "alice",
        "route_prefix": "/iris",
        "endpoint": "http://127.0.0.1:8000/iris",
        "revisions": [revision(1), revision(2)],
        "serving": 2,
    }
    return S.ServiceRecord.model_validate({**base, **kw})


def obs(**kw: Any) -> L.Observed:
    base: dict[str, Any] = {
        "head_up": True,
        "exists": True,
        "status": "RUNNING",
        "revision": 2,
        "wanted": 2,
        "running": 2,
        "started_at": [100.0, 101.0],
        "port": 8000,
    }
    return L.Observed(**{**base, **kw})


def test_status_says_what_the_service_does() -> None:
    st = compute(record(), obs(), answered=True)
    assert (st.phase, st.healthy, st.serving) == ("Ready", True, True)
    assert st.summary == "serving revision 2 on http://127.0.0.1:8000/iris: 2/2 replicas ready"
    assert [r["state"] for r in st.revisions] == ["", "serving"]
    assert st.model == "iris@sha256:aaaaaaaaaaaa"


def test_status_during_a_rollout_counts_the_new_replicas_and_the_traffic() -> None:
    rec = record(previous=1, rollout_done=False, rollout_started_at="1970-01-01T00:01:40.500Z")
    st = compute(rec, obs(status="DEPLOYING", running=2, started_at=[90.0, 101.0]))
    assert st.phase == "Updating"
    assert st.replicas.new_ready == 1
    assert st.rollout == {
        "from": 1,
        "to": 2,
        "strategy": "rolling",
        "new_ready": 1,
        "wanted": 2,
        "traffic": {"2": 50, "1": 50},
    }
    assert "rolling out revision 2 (rolling) over revision 1" in st.summary


@pytest.mark.parametrize(
    ("rec_kw", "obs_kw", "answered", "phase", "words"),
    [
        (
            {"previous": 1},
            {"status": "DEPLOY_FAILED", "message": "Traceback\nValueError: no model.json"},
            None,
            "Failed",
            "ValueError: no model.json; `tau serve rollback iris` returns to revision 1",
        ),
        (
            {},
            {"head_up": False, "exists": False},
            None,
            "Unhealthy",
            "local Ray head is not running",
        ),
        ({}, {"exists": False}, None, "Unhealthy", "`tau serve rollout iris` puts revision 2 back"),
        (
            {"scale": {"autoscaling": {"min_replicas": 0, "max_replicas": 2}}},
            {"wanted": 0, "running": 0, "started_at": []},
            None,
            "ScaledToZero",
            "next request starts a replica",
        ),
        ({}, {}, False, "Unhealthy", "readiness request got"),
        ({}, {"status": "UNHEALTHY", "message": "replica died"}, None, "Unhealthy", "replica died"),
        ({"deleted_at": "2026-12-01T01:00:00Z"}, {}, None, "Deleted", "deleted at"),
        (
            {},
            {
                "status": "DEPLOYING",
                "running": 0,
                "message": "Deployment has 1 replicas that have taken more than 30s to be "
                "scheduled",
            },
            None,
            "Deploying",
            "taken more than 30s",
        ),
    ],
)
def test_status_names_the_cause(
    rec_kw: dict[str, Any], obs_kw: dict[str, Any], answered: bool | None, phase: str, words: str
) -> None:
    st = compute(
        record(**rec_kw), obs(**obs_kw), answered, probe_status=500 if answered is False else None
    )
    assert st.phase == phase, st.summary
    assert words in st.summary, st.summary


# --- one change of Ray Serve's config keeps every other application -------------------------------
class FakeServe:
    """Ray Serve's REST API as `rayhead._http` sees it: a GET and a PUT of every application."""

    def __init__(self, apps: dict[str, Any], port: int | None = 8123) -> None:
        self.apps, self.port, self.puts = apps, port, []  # type: list[dict[str, Any]]
        self.timeout: float | None = None  # the proxy's request timeout once a PUT started it

    def __call__(self, method: str, url: str, body: Any = None, timeout: float = 10.0) -> Any:
        if method == "PUT":
            self.puts.append(body)
            if not self.port:  # a running proxy keeps its HTTP options (Ray Serve's rule)
                self.timeout = body["http_options"].get("request_timeout_s")
            self.port = body["http_options"]["port"]
            self.apps = {
                a["name"]: {
                    "deployed_app_config": a,
                    "source": "declarative",
                    "status": "DEPLOYING",
                    "last_deployed_time_s": len(self.puts),
                }
                for a in body["applications"]
            }
            return None
        state: dict[str, Any] = {"applications": self.apps}
        if self.port:
            http = {"port": self.port, "request_timeout_s": self.timeout}
            state.update(http_options=http, proxies={"n": {}})
        return state


def head() -> rayhead.Head:
    return rayhead.Head(
        pid=1, gcs_port=1, dashboard_port=2, temp_dir="/tmp/x", started_at=0, num_cpus=2, num_gpus=0
    )


def test_a_change_keeps_the_applications_tau_did_not_deploy(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("TAU_HOME", str(tmp_path))
    theirs = {"name": "theirs", "route_prefix": "/t", "import_path": "t:app"}
    fake = FakeServe({"theirs": {"deployed_app_config": theirs, "source": "declarative"}})
    monkeypatch.setattr(rayhead, "_http", fake)
    port = L.LocalServe(head()).apply("iris", {"name": "iris", "route_prefix": "/iris"})
    assert port == 8123
    assert [a["name"] for a in fake.puts[-1]["applications"]] == ["theirs", "iris"]
    assert fake.puts[-1]["applications"][0] == theirs
    assert fake.puts[-1]["http_options"] == {
        "host": "127.0.0.1",
        "port": 8123,
        "request_timeout_s": 300.0,  # a proxy started by someone else: ours asked, theirs held
    }
    L.LocalServe(head()).apply("iris", None)  # removing one leaves the others
    assert [a["name"] for a in fake.puts[-1]["applications"]] == ["theirs"]
    with pytest.raises(TauError, match=r"listens on 127\.0\.0\.1:8123"):
        L.LocalServe(head()).apply("iris", {"name": "iris"}, want_port=9999)


def test_the_proxy_takes_the_first_service_s_request_timeout_and_a_later_one_is_told(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("TAU_HOME", str(tmp_path))
    fake = FakeServe({}, port=None)
    monkeypatch.setattr(rayhead, "_http", fake)
    said: list[str] = []

    def note(line: str) -> None:  # the timeout notes only, not the controller's start stages
        if "timeout" in line:
            said.append(line)

    L.LocalServe(head(), note).apply("a", {"name": "a"}, timeout_s=12.5)
    assert fake.puts[-1]["http_options"]["request_timeout_s"] == 12.5 and said == []
    L.LocalServe(head(), note).apply("b", {"name": "b"}, timeout_s=12.5)
    assert said == []  # the same: nothing to say
    L.LocalServe(head(), note).apply("c", {"name": "c"}, timeout_s=60)
    assert fake.puts[-1]["http_options"]["request_timeout_s"] == 12.5  # the running one's, as is
    assert len(said) == 1 and "request timeout is 12.5s" in said[0]
    assert "request_timeout_s 60s" in said[0] and "tau local stop" in said[0]
    L.LocalServe(head(), note).apply("c", None)  # no service asked: nothing said
    assert len(said) == 1


def test_a_service_s_request_timeout_is_a_setting_of_its_revision() -> None:
    from taugrid.api.manifest import ServiceSpec
    from taugrid.api.serve import config_hash

    base = {"import_path": "app:app"}
    plain = config_hash(ServiceSpec.model_validate(base), None, "sha256:c")
    same = ServiceSpec.model_validate({**base, "request_timeout_s": 300})
    assert config_hash(same, None, "sha256:c") == plain  # the default: revisions made before
    other = ServiceSpec.model_validate({**base, "request_timeout_s": 30})
    assert config_hash(other, None, "sha256:c") != plain
    for bad in (0, -1, 100_000, "soon"):
        with pytest.raises(ValueError, match="request_timeout_s"):
            ServiceSpec.model_validate({**base, "request_timeout_s": bad})


def test_an_application_deployed_from_python_is_not_dropped(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("TAU_HOME", str(tmp_path))
    fake = FakeServe({"nb": {"source": "imperative", "deployed_app_config": None}})
    monkeypatch.setattr(rayhead, "_http", fake)
    with pytest.raises(TauError, match="deployed from Python"):
        L.LocalServe(head()).apply("iris", {"name": "iris"})
    assert fake.puts == []


def test_a_port_in_use_is_refused_before_ray_serve_starts(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import socket

    monkeypatch.setenv("TAU_HOME", str(tmp_path))
    fake = FakeServe({}, port=None)
    monkeypatch.setattr(rayhead, "_http", fake)
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        taken = busy.getsockname()[1]
        with pytest.raises(TauError, match=rf"port {taken} on 127\.0\.0\.1 is in use") as e:
            L.LocalServe(head()).apply("iris", {"name": "iris"}, want_port=taken)
    assert e.value.exit_code == 4 and fake.puts == []


def test_a_run_with_no_checkpoint_is_refused_before_anything_runs(tmp_path: Path) -> None:
    from portalkit import make_run

    home = tmp_path / "home"
    make_run(home, "train-aaaaa")  # ended, no checkpoint
    folder = write(
        tmp_path / "p", "service: {import_path: 'serve_app:app', from_run: train-aaaaa}\n"
    )
    res = run_tau(home, "serve", "deploy", str(folder))
    assert res.returncode == 2, res.stderr
    assert "run train-aaaaa has no complete checkpoint" in res.stderr
    assert not (home / "services" / "iris").exists()
    res = run_tau(home, "serve", "deploy", str(folder), "--from-run", "nosuch-zzzzz")
    assert res.returncode == 2 and "nosuch-zzzzz" in res.stderr and "Traceback" not in res.stderr


def test_local_services_are_the_ones_the_local_head_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from taugrid.client import serve
    from taugrid.serve.records import ServiceDir

    monkeypatch.setenv("TAU_HOME", str(tmp_path))
    assert serve.local_services() == []
    for name, target in (("iris", "local"), ("clf", "kube")):
        ServiceDir(name).write(record(name=name, target=target))
    assert serve.local_services() == ["iris"]  # what `tau local stop` says it stopped


# --- canaries ------------------------------------------------------------------------------------
@pytest.mark.parametrize("percent", [0, 1, 7, 20, 33, 50, 99, 100])
def test_the_split_sends_exactly_its_share_in_every_hundred_requests(percent: int) -> None:
    pytest.importorskip("ray.serve")
    from taugrid.serve.split import pick

    picks = [pick(i, percent) for i in range(1000)]
    for start in (0, 13, 250, 900):  # any hundred consecutive requests, not only the first
        assert sum(picks[start : start + 100]) == percent
    if 0 < percent < 100:  # spread evenly, not in bursts
        at = [i for i, p in enumerate(picks) if p]
        gaps = {b - a for a, b in itertools.pairwise(at)}
        assert max(gaps) - min(gaps) <= 1 and max(gaps) == -(-100 // percent)


def canary(**kw: Any) -> S.Canary:
    return S.Canary.model_validate(
        {"revision": 3, "percent": 20, "started_at": "2026-12-01T00:01:00Z", **kw}
    )


def test_a_canary_s_status_says_the_share_and_how_it_ends() -> None:
    rec = record(revisions=[revision(1), revision(2), revision(3)], canary=canary(routed=True))
    st = compute(rec, obs(canary=obs(revision=3, wanted=1, running=1), split="RUNNING"), True)
    assert st.phase == "Canary" and st.revision == 2 and st.healthy
    assert st.rollout is not None and st.rollout["traffic"] == {"3": 20, "2": 80}
    assert st.rollout["new_ready"] == 1 and st.rollout["step"] == 20
    assert "tau serve promote iris" in st.summary and "tau serve rollback iris" in st.summary
    assert [r["state"] for r in st.revisions] == ["", "serving", "canary"]
    # not yet routed: the serving revision takes every request
    rec = record(revisions=[revision(1), revision(2), revision(3)], canary=canary())
    st = compute(rec, obs(canary=obs(revision=3, status="DEPLOYING", running=0, wanted=1)))
    assert st.phase == "Updating" and st.rollout is not None
    assert st.rollout["traffic"] == {"3": 0, "2": 100}


@pytest.mark.parametrize(
    ("canary_kw", "obs_kw", "phase", "words"),
    [
        ({"routed": True}, {}, "Unhealthy", "gone from the target"),
        (
            {"routed": True},
            {"canary": {"status": "DEPLOY_FAILED", "message": "boom"}},
            "Unhealthy",
            "failed to deploy: boom",
        ),
        (
            {},
            {"canary": {"admitted": False, "waiting": "queue gpu is full"}},
            "Waiting",
            "queue gpu is full",
        ),
        ({"routed": True, "promoting": True}, {"canary": {}}, "Updating", "promoting revision 3"),
    ],
)
def test_a_canary_that_cannot_serve_says_why(
    canary_kw: dict[str, Any], obs_kw: dict[str, Any], phase: str, words: str
) -> None:
    rec = record(revisions=[revision(1), revision(2), revision(3)], canary=canary(**canary_kw))
    kw = dict(obs_kw)
    if "canary" in kw:
        kw["canary"] = obs(revision=3, **kw["canary"])
    st = compute(rec, obs(**kw))
    assert st.phase == phase and words in st.summary, st.summary


def test_ending_a_canary_hands_the_route_back_before_the_split_and_the_canary_go(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("TAU_HOME", str(tmp_path))
    split = L.split_config("iris", "/iris", 8123, 2, 3, 20, "/iris")
    fake = FakeServe(
        {
            "iris": {
                "deployed_app_config": {"name": "iris", "route_prefix": "/_tau/iris/stable"},
                "source": "declarative",
            },
            "iris.canary": {
                "deployed_app_config": {"name": "iris.canary"},
                "source": "declarative",
            },
            "iris.split": {"deployed_app_config": split, "source": "declarative"},
        }
    )
    monkeypatch.setattr(rayhead, "_http", fake)
    monkeypatch.setattr(L, "TAKEN_S", 0.0)
    L.LocalServe(head()).route_back("iris", {"name": "iris", "route_prefix": "/iris"})
    routes = [{a["name"]: a.get("route_prefix") for a in put["applications"]} for put in fake.puts]
    # 1: the service's own application takes its route back, the split moves aside (one change)
    assert routes[0]["iris"] == "/iris" and routes[0]["iris.split"] == "/_tau/iris/split"
    assert "iris.canary" in routes[0]
    # 2: the split goes (it finishes the requests it holds); 3: then the canary
    assert "iris.split" not in routes[1] and "iris.canary" in routes[1]
    assert set(routes[2]) == {"iris"}


def test_a_split_restarts_nothing_when_it_takes_the_route() -> None:
    """Its args are part of Ray Serve's code version: the split on its hidden route and on the
    service's route must differ only by the route (a lightweight change, no new replica)."""
    hidden = L.split_config("iris", "/_tau/iris/split", 8123, 2, 3, 20, "/iris")
    routed = L.split_config("iris", "/iris", 8123, 2, 3, 20, "/iris")
    assert {k: v for k, v in hidden.items() if k != "route_prefix"} == {
        k: v for k, v in routed.items() if k != "route_prefix"
    }


def test_a_request_caught_by_the_route_handover_is_answered_by_the_serving_revision() -> None:
    """A request that reached the split just before the service's route was handed back finds
    the hidden route gone (Ray Serve's own 404): the split sends it once to the service's route;
    the application's own 404s are answers, passed on as they are."""
    pytest.importorskip("ray.serve")
    import asyncio

    from aiohttp import web
    from starlette.requests import Request

    from taugrid.serve.split import HOP_HEADER, Split

    seen: list[tuple[str, str | None]] = []

    async def handler(req: web.Request) -> web.Response:
        seen.append((req.path, req.headers.get(HOP_HEADER)))
        if req.path.startswith("/_tau/iris/stable"):
            return web.Response(
                status=404, text=f"Path '{req.path}' not found. Ping http://x/-/routes"
            )
        if req.path == "/iris/missing":
            return web.Response(status=404, text="no such thing")  # the application's own
        return web.json_response({"revision": "2", "path": req.path})

    async def main() -> list[tuple[int, bytes, str]]:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", handler)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        base = f"http://127.0.0.1:{port}"
        split = Split.func_or_class(
            base + "/_tau/iris/stable", base + "/_tau/iris/canary", 2, 3, base + "/iris"
        )
        split.reconfigure({"canary_percent": 0})
        out = []
        for path in ("/iris/predict", "/iris/missing"):
            scope = {
                "type": "http",
                "method": "POST",
                "path": path,
                "root_path": "/iris",
                "query_string": b"",
                "headers": [(b"content-type", b"application/json")],
            }

            async def receive() -> dict[str, Any]:
                return {"type": "http.request", "body": b"{}", "more_body": False}

            resp = await split(Request(scope, receive))
            out.append((resp.status_code, bytes(resp.body), resp.headers["x-tau-revision"]))
        await split.session.close()
        await runner.cleanup()
        return out

    (ok_status, ok_body, rev), (miss_status, miss_body, _) = asyncio.run(main())
    assert ok_status == 200 and json.loads(ok_body)["path"] == "/iris/predict" and rev == "2"
    assert seen[:2] == [("/_tau/iris/stable/predict", None), ("/iris/predict", "1")]
    # the application's own 404 on the hidden route would be passed on; here the route is gone,
    # so it is sent on once, and the application's 404 there is the answer
    assert miss_status == 404 and miss_body == b"no such thing"
    assert seen[2:] == [("/_tau/iris/stable/missing", None), ("/iris/missing", "1")]


def test_invoke_sends_json_only_when_it_is_json(tmp_path: Path) -> None:
    from taugrid.api.errors import TauError
    from taugrid.cli.serve import _body

    assert _body('{"features": [1, 2]}', None) == (b'{"features": [1, 2]}', "application/json")
    assert _body(None, "plain text, not JSON") == (
        b"plain text, not JSON",
        "application/octet-stream",
    )
    assert _body(None, None) == (None, "application/json")
    f = tmp_path / "req.json"
    f.write_text('{"a": 1}')
    assert _body(f"@{f}", None)[0] == b'{"a": 1}'
    for bad, words in (
        ("features: [1, 2]", "not JSON (line 1, column 1)"),
        ('{"a": 1', "not JSON"),
        (f"@{tmp_path / 'none'}", "cannot read"),
    ):
        with pytest.raises(TauError, match=words.replace("(", r"\(").replace(")", r"\)")) as e:
            _body(bad, None)
        assert e.value.exit_code == 2
    with pytest.raises(TauError, match="give one"):
        _body("{}", "x")
    res = run_tau(tmp_path, "serve", "invoke", "ghost", "--data", "features: 1")
    assert res.returncode == 2 and "--data is not JSON" in res.stderr and "--data-raw" in res.stderr


@pytest.mark.parametrize(
    ("message", "want"),
    [
        (
            "Deploying app 'iris' failed with "
            "exception:\nray::ServeReplica:iris:Classifier.initialize_and_get_metadata()\n"
            'Traceback (most recent call last):\n  File "serve_app.py", line 9, in __init__\n'
            "FileNotFoundError: [Errno 2] No such file or directory: 'missing.json'\n",
            "FileNotFoundError: [Errno 2] No such file or directory: 'missing.json'",
        ),
        (
            "The deployment failed to start 3 times in a "
            "row.\nray.exceptions.RayTaskError(ValueError): boom\n"
            "ValueError: bad weights",
            "ValueError: bad weights",
        ),
        ("just one line", "just one line"),
        ("", "(no message)"),
    ],
)
def test_a_failed_deploy_names_the_replicas_own_error(message: str, want: str) -> None:
    from taugrid.serve.status import cause

    assert cause(message) == want


def test_a_service_whose_first_deploy_was_undone_says_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from taugrid.api.errors import TauError
    from taugrid.serve.records import ServiceDir

    monkeypatch.setenv("TAU_HOME", str(tmp_path))
    sd = ServiceDir("nomodel")
    sd.event("failed", "revision 1 failed to deploy: FileNotFoundError: 'missing.json'", 1)
    where = sd.retire()
    with pytest.raises(TauError) as e:
        ServiceDir("nomodel").read()
    assert "its deploy failed" in e.value.message and "missing.json" in e.value.message
    assert str(where) in e.value.message
    with pytest.raises(TauError) as e:
        ServiceDir("nomode").read()  # another name: nothing of that one is said
    assert "failed" not in e.value.message
