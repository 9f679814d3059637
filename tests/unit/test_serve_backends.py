"""The serving seam: `taugrid.client.serve` decides the target once and its backend's template
keeps the order of every change (the record first; a send that fails puts the record back and
leaves no stray revision code). Driven through the public API with a backend whose target is a
dict, so each step can be made to fail."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from taugrid.api import serve as S
from taugrid.api.errors import TauError
from taugrid.serve import backends
from taugrid.serve.backends.base import (
    Answer,
    NewService,
    Placement,
    Request,
    ServiceTemplate,
    Started,
)
from taugrid.serve.records import ServiceDir
from taugrid.serve.status import Observed

BASE = "schema_version: 1\nname: iris\nservice: {import_path: 'serve_app:app'%s}\n"


class Boom(Exception):
    pass


class Dict(ServiceTemplate):
    """A target that is a dict: name -> the revision it runs. `fail` names the steps that
    raise; `seen` keeps what each step saw of the record on disk. It stands in for the local
    target (a record names one of the real targets)."""

    name = "local"
    poll_s = 0.0

    def __init__(self) -> None:
        self.running: dict[str, int] = {}
        self.fail: set[str] = set()
        self.seen: list[tuple[str, int | None]] = []
        self.left_on_target = False

    def _step(self, step: str, sd: ServiceDir) -> None:
        self.seen.append((step, sd.read().serving if sd.exists() else None))
        if step in self.fail:
            raise Boom(step)

    def check(self, spec: S.ServiceSpec, placement: Placement) -> None:
        if placement.port is not None:
            raise TauError("no ports here", exit_code=2)

    def new_registry(self, manifest: Any, spec: S.ServiceSpec, placement: Placement) -> None:
        return None

    def registry(self, rec: S.ServiceRecord) -> None:
        return None

    def prepare_first(self, sd: ServiceDir, new: NewService, rev: S.Revision, say: Any) -> Started:
        self._step("prepare_first", sd)
        return Started(fields={"endpoint": "dict://" + new.name}, where=" in the dict")

    def send_first(self, sd: ServiceDir, rec: S.ServiceRecord, plan: Any, say: Any) -> Any:
        self._step("send_first", sd)
        self.running[rec.name] = 1
        return rec

    def reached(self, sd: ServiceDir) -> bool:
        return self.left_on_target

    def prepare_change(
        self, sd: ServiceDir, rec: S.ServiceRecord, rev: S.Revision, strategy: str, say: Any
    ) -> Started:
        self._step("prepare_change", sd)
        return Started(fields={})

    def send_change(
        self, sd: ServiceDir, rec: S.ServiceRecord, rev: S.Revision, plan: Any, say: Any
    ) -> S.ServiceRecord:
        self._step("send_change", sd)
        self.running[rec.name] = rev.number
        return rec

    def prepare_canary(
        self, sd: ServiceDir, rec: S.ServiceRecord, rev: S.Revision, percent: int, say: Any
    ) -> Started:
        self._step("prepare_canary", sd)
        return Started(fields={})

    def send_canary(
        self, sd: ServiceDir, rec: S.ServiceRecord, rev: S.Revision, plan: Any, say: Any
    ) -> None:
        self._step("send_canary", sd)

    def end_canary(self, sd: ServiceDir, back: int, why: str, say: Any) -> None:
        raise NotImplementedError

    def promote(self, sd: ServiceDir, timeout_s: float, say: Any) -> None:
        raise NotImplementedError

    def scale(self, sd: ServiceDir, new: S.Scale, say: Any) -> tuple[S.ServiceRecord, bool]:
        raise NotImplementedError

    def remove(self, rec: S.ServiceRecord, timeout_s: float, say: Any) -> str:
        if "remove" in self.fail:
            raise TauError("still there", exit_code=1)
        self.running.pop(rec.name, None)
        return "removed from the dict"

    def observe(self, recs: Any) -> list[Observed]:
        return [
            Observed(head_up=True, exists=r.name in self.running, revision=self.running.get(r.name))
            for r in recs
        ]

    def invoke(self, rec: S.ServiceRecord, request: Request) -> Answer:
        return Answer(200, request.verb.encode(), 0.0, str(rec.endpoint) + request.suffix)

    def logs(self, rec: S.ServiceRecord, out: Any, **_: Any) -> None:
        out.write("a line\n")


@pytest.fixture
def target(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Dict:
    monkeypatch.setenv("TAU_HOME", str(tmp_path / "home"))
    the = Dict()

    def get(target: str) -> Any:
        return the if target == "local" else real_get(target)

    real_get = backends.get
    monkeypatch.setattr(backends, "get", get)
    monkeypatch.setattr(backends, "for_record", lambda rec: get(rec.target))
    return the


def project(tmp_path: Path, extra: str = "", code: str = "app = None\n") -> Path:
    folder = tmp_path / "p"
    folder.mkdir(exist_ok=True)
    (folder / "tau.yaml").write_text(BASE % extra)
    (folder / "serve_app.py").write_text(code)
    return folder


def test_a_deploy_is_recorded_before_it_is_sent(tmp_path: Path, target: Dict) -> None:
    from taugrid.client import serve

    st = serve.deploy(project(tmp_path), wait=False)
    assert target.seen == [("prepare_first", None), ("send_first", 1)]  # the record, then sent
    assert (st.name, st.target, st.revision) == ("iris", "local", 1)
    rec = ServiceDir("iris").read()
    assert rec.endpoint == "dict://iris"  # the target's fields
    assert [e.kind for e in ServiceDir("iris").events()] == ["deploy"]
    assert ServiceDir("iris").events()[0].message.endswith(" in the dict")


@pytest.mark.parametrize("step", ["prepare_first", "send_first"])
def test_a_deploy_that_sent_nothing_leaves_nothing_and_the_name_free(
    tmp_path: Path, target: Dict, step: str
) -> None:
    from taugrid.client import serve

    target.fail = {step}
    with pytest.raises(Boom):
        serve.deploy(project(tmp_path), wait=False)
    assert not ServiceDir("iris").path.exists()
    target.fail = set()
    assert serve.deploy(project(tmp_path), wait=False).revision == 1


def test_a_deploy_whose_send_reached_the_target_keeps_its_record(
    tmp_path: Path, target: Dict
) -> None:
    from taugrid.client import serve

    target.fail, target.left_on_target = {"send_first"}, True
    with pytest.raises(Boom):
        serve.deploy(project(tmp_path), wait=False)
    assert ServiceDir("iris").read().serving == 1  # `tau serve delete` can remove what was sent
    with pytest.raises(TauError) as e:
        serve.deploy(project(tmp_path), wait=False)
    assert e.value.exit_code == 2 and "exists" in e.value.message


@pytest.mark.parametrize("step", ["prepare_change", "send_change"])
def test_a_rollout_that_fails_leaves_the_serving_revision_recorded_and_no_stray_code(
    tmp_path: Path, target: Dict, step: str
) -> None:
    from taugrid.client import serve

    folder = project(tmp_path)
    serve.deploy(folder, wait=False)
    before = ServiceDir("iris").read()
    (folder / "serve_app.py").write_text("app = 2\n")  # new code: a new revision
    target.fail = {step}
    with pytest.raises(Boom):
        serve.rollout("iris", folder, wait=False)
    after = ServiceDir("iris").read()
    assert after == before  # serving 1, no revision 2, no rollout under way
    assert not ServiceDir("iris").code_dir(2).exists()
    assert ServiceDir("iris").code_dir(1).is_dir()
    target.fail = set()
    serve.rollout("iris", folder, wait=False)
    rec = ServiceDir("iris").read()
    assert (rec.serving, rec.previous, [r.number for r in rec.revisions]) == (2, 1, [1, 2])
    assert ("send_change", 2) in target.seen  # recorded before it was sent
    assert target.running["iris"] == 2


def test_the_same_config_again_is_no_new_revision_and_a_kept_one_comes_back(
    tmp_path: Path, target: Dict
) -> None:
    from taugrid.client import serve

    folder = project(tmp_path)
    serve.deploy(folder, wait=False)
    said: list[str] = []
    serve.rollout("iris", folder, wait=False, say=said.append)
    assert any("no change" in s for s in said), said
    assert [r.number for r in ServiceDir("iris").read().revisions] == [1]
    assert not ServiceDir("iris").code_dir(2).exists()  # the snapshot taken to compare: gone
    (folder / "serve_app.py").write_text("app = 2\n")
    serve.rollout("iris", folder, wait=False)
    (folder / "serve_app.py").write_text("app = None\n")  # revision 1's code again
    serve.rollout("iris", folder, wait=False, say=said.append)
    rec = ServiceDir("iris").read()
    assert (rec.serving, [r.number for r in rec.revisions]) == (1, [1, 2])
    assert any("revision 1 has this config" in s for s in said), said


def test_a_canary_whose_send_fails_is_not_recorded(tmp_path: Path, target: Dict) -> None:
    from taugrid.client import serve

    folder = project(tmp_path)
    serve.deploy(folder, wait=False)
    (folder / "serve_app.py").write_text("app = 2\n")
    target.fail = {"send_canary"}
    with pytest.raises(Boom):
        serve.rollout("iris", folder, strategy="canary", step=10, wait=False)
    rec = ServiceDir("iris").read()
    assert rec.canary is None and [r.number for r in rec.revisions] == [1]
    assert not ServiceDir("iris").code_dir(2).exists()
    target.fail = set()
    serve.rollout("iris", folder, strategy="canary", step=10, wait=False)
    c = ServiceDir("iris").read().canary
    assert c is not None and (c.revision, c.percent) == (2, 10)
    with pytest.raises(TauError) as e:  # the same again: it would compare it with itself
        serve.rollout("iris", folder, strategy="canary", step=10, wait=False)
    assert e.value.exit_code == 2 and "canary of revision 2" in e.value.message


def test_a_delete_the_target_refuses_changes_nothing(tmp_path: Path, target: Dict) -> None:
    from taugrid.client import serve

    serve.deploy(project(tmp_path), wait=False)
    target.fail = {"remove"}
    with pytest.raises(TauError):
        serve.delete("iris")
    assert ServiceDir("iris").read().deleted_at is None
    target.fail = set()
    rec = serve.delete("iris")
    assert rec.deleted_at and not ServiceDir("iris").path.exists()  # moved aside, name free
    assert serve.deploy(project(tmp_path), wait=False).revision == 1


def test_requests_and_logs_go_to_the_service_s_own_backend(tmp_path: Path, target: Dict) -> None:
    import io

    from taugrid.client import serve

    serve.deploy(project(tmp_path), wait=False)
    ans = serve.invoke("iris", b"{}", path="predict")
    assert (ans.status, ans.text, ans.url) == (200, "POST", "dict://iris/predict")
    assert serve.invoke("iris").text == "GET"
    out = io.StringIO()
    serve.logs("iris", out)
    assert out.getvalue() == "a line\n"


def test_an_unknown_target_is_refused_naming_the_targets(tmp_path: Path, target: Dict) -> None:
    from taugrid.client import serve

    with pytest.raises(TauError) as e:
        serve.deploy(project(tmp_path), target="nope")
    assert e.value.exit_code == 2 and "nope" in e.value.message
    assert "local" in (e.value.hint or "") and "kube" in (e.value.hint or "")
    assert not ServiceDir("iris").path.exists()


@pytest.mark.parametrize(
    ("target_name", "placement", "words"),
    [
        ("kube", Placement(port=9000), "--port"),
        ("local", Placement(context="c"), "--target kube"),
        ("local", Placement(workspace="w"), "--target kube"),
    ],
)
def test_each_target_refuses_the_other_s_options(
    target_name: str, placement: Placement, words: str
) -> None:
    spec = S.ServiceSpec.model_validate({"import_path": "m:a"})
    with pytest.raises(TauError) as e:
        backends.get(target_name).check(spec, placement)
    assert e.value.exit_code == 2 and words in e.value.message


def test_both_targets_are_whole_backends() -> None:
    from taugrid.serve.backends.base import REGISTRY, ServiceBackend

    for name in REGISTRY:
        backend = backends.get(name)
        assert isinstance(backend, ServiceBackend) and backend.name == name
