"""A recorded cluster run is looked at through the context the person asks for: `--context` or
TAU_CONTEXT first, else the recorded one when the kubeconfig has it, else the current one (said
once); and whatever the context, a TauRun of the same name that is another run is refused."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fakekit import prepared, tau_cluster

from taugrid.api.errors import TauError
from taugrid.api.vocabulary import Phase
from taugrid.kube.fake import FakeKube
from taugrid.kube.kubeconfig import choose_context, contexts
from taugrid.runs.backends import base
from taugrid.runs.backends.base import SubmitOptions
from taugrid.runs.backends.kube.backend import KubeBackend, adopt_remote
from taugrid.runs.evidence import RunDir

ADMIN_KUBECONFIG = """apiVersion: v1
kind: Config
current-context: admin
clusters: [{name: c, cluster: {server: "https://127.0.0.1:6443"}}]
users: [{name: u, user: {token: t}}]
contexts:
- {name: admin, context: {cluster: c, user: u}}
- {name: taugrid-sandbox, context: {cluster: c, user: u}}
"""
KNOWN = (["admin", "taugrid-sandbox"], "admin")


# --- the choice (pure) ------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("explicit", "recorded", "known", "want", "noted"),
    [
        ("taugrid-sandbox", "team-research-member", KNOWN, "taugrid-sandbox", False),
        ("taugrid-sandbox", "admin", KNOWN, "taugrid-sandbox", False),  # asked for: wins
        ("elsewhere", None, KNOWN, "elsewhere", False),
        (None, "admin", KNOWN, "admin", False),  # the recorded one, the kubeconfig has it
        (None, "taugrid-sandbox", KNOWN, "taugrid-sandbox", False),  # ... not the current one
        (None, "team-research-member", KNOWN, "admin", True),  # not there: the current, said
        (None, "team-research-member", None, "team-research-member", False),  # unreadable file
        (None, "team-research-member", (["x"], None), "team-research-member", False),
        (None, None, KNOWN, None, False),  # nothing recorded: the client's default
    ],
)
def test_the_context_chosen(
    explicit: str | None,
    recorded: str | None,
    known: tuple[list[str], str | None] | None,
    want: str | None,
    noted: bool,
) -> None:
    got = choose_context(explicit, recorded, known)
    assert got.context == want
    assert (got.note is not None) == noted
    if noted:
        assert got.note is not None
        assert f"submitted with context {recorded!r}; using {want!r}" in got.note


def test_the_kubeconfigs_contexts_are_read_or_none(tmp_path: Path) -> None:
    f = tmp_path / "kc.yaml"
    f.write_text(ADMIN_KUBECONFIG)
    assert contexts(f) == KNOWN
    f.write_text(ADMIN_KUBECONFIG.replace("current-context: admin\n", ""))
    assert contexts(f) == (["admin", "taugrid-sandbox"], None)  # names without a current one
    for bad in ("", "a: [b\n", "- a\n", "contexts: 3\n"):
        f.write_text(bad)
        assert contexts(f) is None
    assert contexts(tmp_path / "missing.yaml") is None


# --- through the client: every command that reads or acts on a recorded run --------------------
@pytest.fixture
def admin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """A run a researcher submitted with context team-research-member; the admin's kubeconfig
    (contexts admin, taugrid-sandbox; current admin). Each backend made records its context and
    talks to the one fake cluster."""
    monkeypatch.setenv("TAU_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("TAU_CONTEXT", raising=False)
    fake = FakeKube({"TauCluster": [tau_cluster()]}, context="team-research-member")
    rd = KubeBackend(kube=fake).submit(
        prepared(KubeBackend(kube=fake), tmp_path), SubmitOptions(), lambda _m: None
    )
    kc = tmp_path / "admin.kubeconfig"
    kc.write_text(ADMIN_KUBECONFIG)
    monkeypatch.setenv("KUBECONFIG", str(kc))
    used: list[str | None] = []

    def get(target: str, **kw: Any) -> KubeBackend:
        used.append(kw.get("context"))
        fake.context = kw.get("context") or "admin"
        return KubeBackend(kube=fake)

    monkeypatch.setattr(base, "get", get)
    return {"rd": rd, "fake": fake, "used": used}


def _each_command(run: str, context: str | None) -> list[list[str]]:
    """status, statuses, watch, logs, verify, cancel: what each said."""
    import contextlib
    import io

    from taugrid.client import runs

    calls = [
        lambda say: runs.status(run, context=context, say=say),
        lambda say: runs.statuses([run], context=context, say=say),
        lambda say: next(iter(runs.watch(run, context=context, say=say))),
        lambda say: runs.logs(run, io.StringIO(), context=context, say=say),
        lambda say: runs.verify(run, context=context, say=say),
        lambda say: runs.cancel(run, context=context, say=say),
    ]
    out = []
    for call in calls:
        said: list[str] = []
        with contextlib.suppress(TauError):  # logs: no pod on the fake (after the choice)
            call(said.append)
        out.append(said)
    return out


@pytest.mark.parametrize(
    ("flag", "env", "want", "noted"),
    [
        (None, None, "admin", True),  # the recorded context is not in this kubeconfig
        ("admin", None, "admin", False),  # the case: --context admin
        (None, "admin", "admin", False),  # ... and TAU_CONTEXT=admin
        ("taugrid-sandbox", "admin", "taugrid-sandbox", False),  # the flag over the variable
    ],
)
def test_an_explicit_context_wins_over_the_recorded_one(
    admin: dict[str, Any],
    monkeypatch: pytest.MonkeyPatch,
    flag: str | None,
    env: str | None,
    want: str,
    noted: bool,
) -> None:
    if env:
        monkeypatch.setenv("TAU_CONTEXT", env)
    said = _each_command(admin["rd"].run_id, flag)
    assert admin["used"] and set(admin["used"]) == {want}
    for one in said:  # each command says the switch once, or not at all
        notes = [m for m in one if "submitted with context" in m]
        assert len(notes) == (1 if noted else 0), said
    if noted:
        assert "'team-research-member'; using 'admin'" in said[0][0]
    assert admin["fake"].get("TauRun", admin["rd"].run_id, "research") is None  # cancelled


def test_the_recorded_context_is_used_when_the_kubeconfig_has_it(
    admin: dict[str, Any], tmp_path: Path
) -> None:
    from taugrid.client import runs

    kc = tmp_path / "admin.kubeconfig"
    kc.write_text(
        ADMIN_KUBECONFIG + "- {name: team-research-member, context: {cluster: c, user: u}}\n"
    )
    said: list[str] = []
    runs.status(admin["rd"].run_id, say=said.append)
    assert admin["used"] == ["team-research-member"] and said == []


def test_a_command_says_the_switch_once(admin: dict[str, Any]) -> None:
    """follow (backend, then its looks) and attach then follow reach the choice more than once:
    the CLI's say_once writes the note once."""
    from taugrid.cli.output import say_once
    from taugrid.client import runs

    fake, rd = admin["fake"], admin["rd"]
    job = fake.objects[("Job", "research", rd.run_id)]
    job["status"] = {"succeeded": 1, "conditions": [{"type": "Complete", "status": "True"}]}
    written: list[str] = []
    import taugrid.cli.output as output

    orig = output.say
    output.say = written.append  # type: ignore[assignment]
    try:
        once = say_once()
        for _ in range(3):
            runs.status(rd.run_id, say=once)
    finally:
        output.say = orig  # type: ignore[assignment]
    assert len(written) == 1 and "using 'admin'" in written[0]


# --- the same run, whatever the context ----------------------------------------------------------
def test_the_taurun_uid_is_recorded_when_sent_and_when_adopted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TAU_HOME", str(tmp_path / "a"))
    fake = FakeKube({"TauCluster": [tau_cluster()]})
    rd = KubeBackend(kube=fake).submit(
        prepared(KubeBackend(kube=fake), tmp_path), SubmitOptions(), lambda _m: None
    )
    uid = fake.get("TauRun", rd.run_id, "research")["metadata"]["uid"]  # type: ignore[index]
    assert rd.read_record().handle.uid == uid  # type: ignore[union-attr]
    monkeypatch.setenv("TAU_HOME", str(tmp_path / "b"))
    other = adopt_remote(rd.run_id, None, KubeBackend(kube=fake))
    assert other is not None and other.read_record().handle.uid == uid  # type: ignore[union-attr]


def _same_named_elsewhere(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, config_hash: str | None = None
) -> tuple[RunDir, FakeKube]:
    """A run submitted to cluster A; cluster B holds a TauRun of the same name (another run)."""
    monkeypatch.setenv("TAU_HOME", str(tmp_path / "home"))
    a = FakeKube({"TauCluster": [tau_cluster()]}, context="cluster-a")
    rd = KubeBackend(kube=a).submit(
        prepared(KubeBackend(kube=a), tmp_path, run_id="train-7"), SubmitOptions(), lambda _m: None
    )
    b = FakeKube({"TauCluster": [tau_cluster()]}, context="cluster-b")
    twin = dict(a.get("TauRun", "train-7", "research") or {})
    twin["metadata"] = {**twin["metadata"], "uid": "uid-of-another-run"}
    if config_hash:
        twin["spec"] = {**twin["spec"], "configHash": config_hash}
    b.put("TauRun", twin)
    b.objects.update({k: v for k, v in a.objects.items() if k[0] == "Job"})
    return rd, b


def test_another_run_of_the_same_name_is_refused_naming_both(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rd, b = _same_named_elsewhere(tmp_path, monkeypatch)
    backend = KubeBackend(kube=b)
    for act in (
        lambda: backend.observe([rd]),
        lambda: backend.cancel(rd),
        lambda: backend.logs(rd, __import__("io").StringIO()),
    ):
        with pytest.raises(TauError) as e:
            act()
        msg = e.value.message
        assert "another run" in msg and "'cluster-b'" in msg and "'cluster-a'" in msg
        assert e.value.exit_code == 4 and "--context" in (e.value.hint or "")
    assert b.get("TauRun", "train-7", "research") is not None  # nothing was cancelled
    assert rd.read_record().phase not in (Phase.Cancelled,)


def test_an_older_record_without_a_uid_compares_the_config(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rd, b = _same_named_elsewhere(tmp_path, monkeypatch, config_hash="0" * 16)
    rd.update_handle(uid=None)  # written by a tau that did not keep the uid
    with pytest.raises(TauError, match="its config hash is 0000000000000000"):
        KubeBackend(kube=b).observe([rd])
    rd2, b2 = _same_named_elsewhere(tmp_path / "2", monkeypatch)
    rd2.update_handle(uid=None)
    assert KubeBackend(kube=b2).observe([rd2])[0].cluster is not None  # the same config: it
