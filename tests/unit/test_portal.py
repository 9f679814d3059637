"""The portal's routes through the ASGI test client, on run records written here (no Ray, no
cluster): the runs page (filter, sort, pages), a run's page (signals, metrics chart, log), the
live log, compare, cancel (confirmation, CSRF), the token gate, error pages, and the chart
downsampling that keeps peaks."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("starlette", reason="the portal extra is not installed")
from portalkit import make_run, supervisor
from starlette.testclient import TestClient

from taugrid.api.vocabulary import Phase
from taugrid.portal.app import Settings, create_app
from taugrid.portal.charts import Series, downsample, svg
from taugrid.runs.evidence import RunDir


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("TAU_HOME", str(tmp_path))
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "no-kubeconfig"))
    return tmp_path


@pytest.fixture
def web(home: Path) -> TestClient:
    return TestClient(create_app(Settings(page_size=3, poll_s=0.01)), base_url="http://127.0.0.1")


def test_the_runs_page_lists_filters_sorts_and_pages(home: Path, web: TestClient) -> None:
    make_run(home, "train-aaaaa", created_at="2026-12-01T00:00:01Z")
    make_run(home, "train-bbbbb", phase=Phase.Failed, created_at="2026-12-01T00:00:02Z")
    make_run(home, "eval-ccccc", created_at="2026-12-01T00:00:03Z")
    make_run(home, "eval-ddddd", created_at="2026-12-01T00:00:04Z")
    res = web.get("/runs")
    assert res.status_code == 200
    ids = _ids(res.text)
    assert ids == ["eval-ddddd", "eval-ccccc", "train-bbbbb"]  # newest first, 3 a page
    assert "4 of 4 run(s), page 1 of 2" in res.text
    assert _ids(web.get("/runs?page=2").text) == ["train-aaaaa"]
    assert _ids(web.get("/runs?page=99").text) == ["train-aaaaa"]  # clamped, not an error
    assert _ids(web.get("/runs?phase=Failed").text) == ["train-bbbbb"]
    assert _ids(web.get("/runs?q=EVAL").text) == ["eval-ddddd", "eval-ccccc"]
    assert _ids(web.get("/runs?sort=name&order=asc").text) == [
        "eval-ccccc",
        "eval-ddddd",
        "train-aaaaa",
    ]
    assert "No runs match" in web.get("/runs?q=nothing-like-it").text
    assert web.get("/runs?page=x&sort=bogus").status_code == 200  # bad params fall back


def test_runs_filter_by_experiment_and_workspace(home: Path, web: TestClient) -> None:
    make_run(home, "a-aaaaa", experiment="lr-sweep", workspace="research")
    make_run(home, "b-bbbbb", experiment="lr-sweep", workspace="llm")
    make_run(home, "c-ccccc", workspace="research")
    page = web.get("/runs").text
    assert '<option value="lr-sweep">' in page and '<option value="llm">' in page
    assert sorted(_ids(web.get("/runs?experiment=lr-sweep").text)) == ["a-aaaaa", "b-bbbbb"]
    assert sorted(_ids(web.get("/runs?workspace=research").text)) == ["a-aaaaa", "c-ccccc"]
    assert _ids(web.get("/runs?workspace=llm&experiment=lr-sweep").text) == ["b-bbbbb"]


def test_a_runs_page_shows_its_signals_chart_and_log(home: Path, web: TestClient) -> None:
    make_run(home, "train-aaaaa", metrics=3000, log=[f"step {i}" for i in range(500)])
    res = web.get("/runs/train-aaaaa")
    assert res.status_code == 200
    text = res.text
    assert "Succeeded" in text and "Where is it, and why" in text
    charts = text.count('<svg class="chart"')
    assert charts == 2  # acc and loss
    series = [ln for ln in text.splitlines() if 'class="series"' in ln]
    assert len(series) == 2
    points = max(len(s.split('points="')[1].split('"')[0].split()) for s in series)
    assert 0 < points <= 1000  # 3,000 rows downsampled
    log = text.split('<pre id="log"')[1].split(">", 1)[1].split("</pre>")[0].splitlines()
    assert log == [f"step {i}" for i in range(300, 500)]  # the last 200 lines
    assert 'data-live="no"' in text and "Cancel this run" not in text  # it ended


def test_the_live_log_streams_new_lines_and_ends_with_the_run(home: Path, web: TestClient) -> None:
    rd = make_run(home, "live-aaaaa", phase=Phase.Running, log=["one", "two"])
    rd.driver_log.write_text("one\ntwo\nthree\n")
    rd.transition(Phase.Succeeded, "ended", exit_code=0)
    with web.stream("GET", "/runs/live-aaaaa/log/stream?from=2") as res:
        assert res.headers["content-type"].startswith("text/event-stream")
        body = "".join(res.iter_text())
    assert "data: three" in body and "data: one" not in body
    assert "event: end\ndata: Succeeded" in body


@pytest.fixture
def supervised(home: Path) -> Iterator[RunDir]:
    with supervisor(make_run(home, "wait-aaaaa", phase=Phase.Pending)) as rd:
        yield rd


def test_cancel_asks_first_and_needs_the_forms_token(
    home: Path, web: TestClient, supervised: RunDir
) -> None:
    page = web.get("/runs/wait-aaaaa/cancel")
    assert page.status_code == 200 and "Yes, cancel wait-aaaaa" in page.text
    token = page.text.split('name="csrf" value="')[1].split('"')[0]
    refused = web.post("/runs/wait-aaaaa/cancel", data={"csrf": "guess"})
    assert refused.status_code == 403 and "nothing was cancelled" in refused.text
    assert RunDir(home / "data" / "runs" / "wait-aaaaa").read_record().phase is Phase.Pending
    done = web.post("/runs/wait-aaaaa/cancel", data={"csrf": token}, follow_redirects=False)
    assert done.status_code == 303 and done.headers["location"] == "/runs/wait-aaaaa"
    assert RunDir(home / "data" / "runs" / "wait-aaaaa").read_record().phase is Phase.Cancelled
    assert "nothing to cancel" in web.get("/runs/wait-aaaaa/cancel").text


def test_compare_overlays_one_metric_and_diffs_the_configs(home: Path, web: TestClient) -> None:
    make_run(home, "a-aaaaa", metrics=10, config="run: {entrypoint: t.py}\nlr: 0.1\n")
    make_run(home, "b-bbbbb", metrics=20, config="run: {entrypoint: t.py}\nlr: 0.3\n")
    res = web.get("/compare?run=a-aaaaa&run=b-bbbbb&metric=loss")
    assert res.status_code == 200
    assert res.text.count('class="series"') == 2
    assert "<code>lr</code>" in res.text and "0.1" in res.text and "0.3" in res.text
    assert "run.entrypoint" not in res.text  # the same in both: not a difference
    assert "Check 2 to 20 runs" in web.get("/compare").text


@pytest.mark.parametrize(
    "path", ["/runs/no-such-run", "/runs/%2e%2e", "/runs/.hidden", "/runs/a..b"]
)
def test_an_unknown_run_is_a_page_that_says_so(web: TestClient, path: str) -> None:
    res = web.get(path)
    assert res.status_code == 404
    assert "Not found" in res.text and "Traceback" not in res.text


def test_a_token_is_needed_on_every_request_when_set(home: Path) -> None:
    make_run(home, "train-aaaaa")
    web = TestClient(create_app(Settings(token="s3cret")), base_url="http://127.0.0.1")
    assert web.get("/runs").status_code == 401
    assert web.get("/runs?token=wrong").status_code == 401
    assert web.get("/static/portal.css").status_code == 401
    first = web.get("/runs?token=s3cret&phase=Succeeded", follow_redirects=False)
    assert first.status_code == 303 and first.headers["location"] == "/runs?phase=Succeeded"
    assert web.get("/runs").status_code == 200  # the cookie carries it now
    fresh = TestClient(create_app(Settings(token="s3cret")), base_url="http://127.0.0.1")
    assert fresh.get("/runs", headers={"Authorization": "Bearer s3cret"}).status_code == 200


def test_pages_have_labels_and_a_skip_link(home: Path, web: TestClient) -> None:
    make_run(home, "train-aaaaa", metrics=5)
    for path in ("/runs", "/runs/train-aaaaa"):
        text = web.get(path).text
        assert '<html lang="en">' in text and 'href="#main"' in text and 'id="main"' in text
        assert 'aria-label="Main"' in text
    assert 'aria-label="compare train-aaaaa"' in web.get("/runs").text
    assert 'role="img" aria-label="loss"' in web.get("/runs/train-aaaaa").text


def test_downsampling_keeps_every_peak_and_dip() -> None:
    pts = [(float(i), math.sin(i / 50)) for i in range(100_000)]
    pts[31_337] = (31_337.0, 50.0)  # a spike
    pts[77_000] = (77_000.0, -50.0)  # a dip
    got = downsample(pts)
    assert len(got) <= 1000
    assert (31_337.0, 50.0) in got and (77_000.0, -50.0) in got
    assert [x for x, _ in got] == sorted(x for x, _ in got)
    assert downsample(pts[:10]) == pts[:10]
    assert downsample([(0.0, math.nan), (1.0, 2.0)]) == [(1.0, 2.0)]
    assert "no values" in svg([Series("a", [])], "loss")


def _ids(html: str) -> list[str]:
    return [
        ln.split('data-run="')[1].split('"')[0]
        for ln in html.splitlines()
        if '<tr class="run"' in ln
    ]


# --- the cluster's pages: queues, quota requests, GPU nodes (an in-memory cluster) -----------
def cluster_objects() -> dict[str, list[dict[str, Any]]]:
    import yaml
    from conftest import PROFILES

    from taugrid.api.kubetime import k8s_time

    snap = yaml.safe_load(PROFILES.read_text())
    gpu = {
        "name": "a100x1",
        "resources": [{"name": "nvidia.com/gpu", "nominalQuota": "8", "borrowingLimit": "4"}],
    }
    cq = {
        "metadata": {"name": "gpu"},
        "spec": {
            "cohortName": "research",
            "resourceGroups": [{"coveredResources": ["nvidia.com/gpu"], "flavors": [gpu]}],
        },
        "status": {
            "pendingWorkloads": 3,
            "admittedWorkloads": 2,
            "conditions": [{"type": "Active", "status": "True"}],
            "flavorsUsage": [
                {
                    "name": "a100x1",
                    "resources": [{"name": "nvidia.com/gpu", "total": "10", "borrowed": "2"}],
                }
            ],
        },
    }

    def node(
        name: str, *, quarantined: bool = False, fault: bool = False, cleared: str | None = None
    ) -> dict[str, Any]:
        conds = [{"type": "Ready", "status": "True"}]
        if fault:
            conds.append(
                {
                    "type": "XIDErrors",
                    "status": "True",
                    "reason": "Xid79",
                    "lastTransitionTime": "2026-12-01T10:00:00Z",
                }
            )
        if cleared:
            conds.append({"type": "XIDErrors", "status": "False", "lastTransitionTime": cleared})
        labels = {"tau.azure.com/pool": "a100x1", "tau.azure.com/gpu-class": "a100"}
        if quarantined:
            labels["tau.azure.com/quarantine-reason"] = "XIDErrors"
        return {
            "metadata": {
                "name": name,
                "labels": labels,
                "annotations": {"tau.azure.com/quarantined-at": "2026-12-01T10:00:05Z"}
                if quarantined
                else {},
            },
            "spec": {
                "taints": [{"key": "tau.azure.com/gpu-unhealthy", "effect": "NoSchedule"}]
                if quarantined
                else []
            },
            "status": {"allocatable": {"nvidia.com/gpu": "1"}, "conditions": conds},
        }

    request = {
        "metadata": {
            "name": "more-gpus",
            "namespace": "research",
            "creationTimestamp": "2026-12-01T00:00:00Z",
        },
        "spec": {
            "workspace": "research",
            "flavor": "a100x1",
            "requested": 2,
            "reason": "deadline",
            "duration": "48h",
            "requestedBy": "alice",
        },
    }

    def validated(n: dict[str, Any]) -> dict[str, Any]:
        """Two verdicts kept on the node by `tau cluster validate nodes`: a failed, a passed."""
        kept = [
            {"at": "2026-12-02T09:00:00Z", "passed": False, "failed": {"gpus": "7 of the 8"}},
            {"at": "2026-12-02T10:00:00Z", "passed": True, "failed": {}},
        ]
        n["metadata"]["annotations"]["tau.azure.com/validation"] = json.dumps(kept)
        return n

    held = {
        "type": "RemediationHeld",
        "status": "True",
        "reason": "CircuitBreaker",
        "message": "at most 1 of 2 GPU nodes quarantined at once",
        "lastTransitionTime": "2026-12-01T00:00:00Z",
    }
    return {
        "TauCluster": [
            {
                "metadata": {"name": "cluster"},
                "spec": {
                    "stack": snap["cluster"],
                    "workspaces": snap["workspaces"],
                    "defaultWorkspace": snap["defaultWorkspace"],
                    "workloadProfiles": snap["profiles"],
                },
                "status": {"conditions": [held]},
            }
        ],
        "ClusterQueue": [cq],
        "Node": [
            node("a100x1-0", cleared=k8s_time()),
            node("a100x1-1", quarantined=True, fault=True),
            validated(node("a100x1-2", cleared="2026-01-01T00:00:00Z")),
            {"metadata": {"name": "cpu-0", "labels": {}}, "status": {}},
        ],
        "TauQuotaRequest": [request],
    }


@pytest.fixture
def cluster(monkeypatch: pytest.MonkeyPatch) -> Any:
    from taugrid.client import cluster as client_cluster
    from taugrid.client import quota as client_quota
    from taugrid.kube.discovery import Discovery
    from taugrid.kube.fake import FakeKube

    fake = FakeKube(cluster_objects())
    monkeypatch.setattr(client_cluster, "discovery", lambda context=None: Discovery(fake))
    monkeypatch.setattr(client_quota, "discovery", lambda context=None: Discovery(fake))
    return fake


def test_the_queues_page_shows_quota_use_and_requests(web: TestClient, cluster: Any) -> None:
    res = web.get("/queues")
    assert res.status_code == 200, res.text
    row = next(ln for ln in res.text.split("<tr") if 'data-queue="gpu"' in ln)
    cells = [c.split(">", 1)[1].split("<")[0] for c in row.split("<td")[1:]]
    assert cells[:9] == ["research", "a100x1", "nvidia.com/gpu", "8", "10", "2", "4", "-", "3"]
    assert 'data-request="more-gpus"' in res.text and "deadline" in res.text
    assert "Approve…" in res.text  # an admin here (may list every namespace)


def test_the_queues_page_shows_teams_shares_when_the_stack_declares_teams(
    web: TestClient, cluster: Any
) -> None:
    assert 'class="teams"' not in web.get("/queues").text  # no teams: no table
    tc = cluster.get("TauCluster", "cluster")
    tc["spec"]["teams"] = [
        {"name": "research", "weight": 2, "queues": ["gpu"], "workspaces": ["research"]}
    ]
    cluster.put("TauCluster", tc)
    text = web.get("/queues").text
    row = next(ln for ln in text.split("<tr") if 'data-team="research"' in ln)
    cells = [c.split(">", 1)[1].split("<")[0] for c in row.split("<td")[1:]]
    # the gpu queue: 8 GPUs nominal, 10 in use, 2 borrowed, 3 pending (the fixture's numbers)
    assert cells[:5] == ["2", "gpu", "8", "10", "2"] and cells[7] == "3"
    assert cells[8].startswith("borrowing")


def test_the_queues_page_lists_waiting_runs_in_kueues_order(web: TestClient, cluster: Any) -> None:
    assert "visibility API (pendingworkloads) is not served" in web.get("/queues").text
    second = {
        "metadata": {"name": "job-b-1", "ownerReferences": [{"kind": "Job", "name": "b-run"}]},
        "positionInLocalQueue": 1,
        "positionInClusterQueue": 4,
        "priority": 10,
    }
    first = {
        "metadata": {"name": "job-a-1", "ownerReferences": [{"kind": "RayJob", "name": "a-run"}]},
        "positionInLocalQueue": 0,
        "positionInClusterQueue": 2,
        "priority": 100,
    }
    cluster.pending_items = {("research", "research"): [second, first]}
    text = web.get("/queues").text
    rows = [ln for ln in text.split("<tr") if 'class="pending"' in ln]
    assert [r.split('data-run="')[1].split('"')[0] for r in rows] == ["a-run", "b-run"]
    cells = [c.split(">", 1)[1].split("<")[0] for c in rows[0].split("<td")[1:]]
    assert cells[:4] == ["research", "research", "1", "3"]
    assert "not served" not in text


def test_an_admin_approves_through_a_confirmation(web: TestClient, cluster: Any) -> None:
    page = web.get("/queues/research/more-gpus/approve")
    assert page.status_code == 200 and "Yes, approve more-gpus" in page.text
    token = page.text.split('name="csrf" value="')[1].split('"')[0]
    assert web.post("/queues/research/more-gpus/approve", data={"csrf": "x"}).status_code == 403
    assert (cluster.get("TauQuotaRequest", "more-gpus", "research").get("status") or {}) == {}
    done = web.post(
        "/queues/research/more-gpus/approve",
        data={"csrf": token, "note": "ok"},
        follow_redirects=False,
    )
    assert done.status_code == 303
    decision = cluster.get("TauQuotaRequest", "more-gpus", "research")["status"]["decision"]
    assert (decision["verdict"], decision["note"]) == ("Approved", "ok")
    assert web.get("/queues/research/more-gpus/maybe").status_code == 404


def test_a_researcher_sees_their_requests_without_the_decide_buttons(
    web: TestClient, cluster: Any
) -> None:
    cluster.forbid.add(("list", "TauQuotaRequest", ""))  # not cluster-wide: not an admin
    res = web.get("/queues")
    assert res.status_code == 200 and "(your workspaces)" in res.text
    assert 'data-request="more-gpus"' in res.text and "Approve…" not in res.text


def test_the_nodes_page_shows_pools_health_and_quarantine(web: TestClient, cluster: Any) -> None:
    res = web.get("/nodes")
    assert res.status_code == 200
    assert "3 GPU node(s), 1 quarantined" in res.text
    assert 'data-node="cpu-0"' not in res.text  # not a GPU node
    bad = next(ln for ln in res.text.split("<tr") if 'data-node="a100x1-1"' in ln)
    assert "quarantined" in bad and "XIDErrors=True (Xid79)" in bad
    assert "yes: XIDErrors since 2026-12-01T10:00:05Z" in bad
    assert "XIDErrors since 2026-12-01T10:00:00Z" in bad
    fine = next(ln for ln in res.text.split("<tr") if 'data-node="a100x1-0"' in ln)
    assert "XIDErrors cleared at" in fine  # a fault that cleared within the day
    old = next(ln for ln in res.text.split("<tr") if 'data-node="a100x1-2"' in ln)
    assert "cleared" not in old  # long ago: not recent
    assert "passed (2026-12-02T10:00:00Z)" in old and 'title="2 kept"' in old  # the last of 2
    assert ">never<" in fine  # never validated
    breaker = next(ln for ln in res.text.split("<tr") if 'data-condition="RemediationHeld"' in ln)
    assert "CircuitBreaker" in breaker and "at most 1 of 2 GPU nodes" in breaker


def test_a_cluster_page_that_is_forbidden_says_so(web: TestClient, cluster: Any) -> None:
    cluster.forbid.add(("list", "Node", None))
    res = web.get("/nodes")
    assert res.status_code == 403 and "Forbidden" in res.text and "Traceback" not in res.text


def test_a_status_cache_spares_ended_runs_until_their_record_changes(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What keeps the runs page fast with thousands of runs: an ended run's status is computed
    once; a run still going is computed each time; a record that changes is computed again."""
    from taugrid.client import runs as client
    from taugrid.runs import evidence

    ended = make_run(home, "done-aaaaa")
    with supervisor(make_run(home, "going-bbbbb", phase=Phase.Running)) as going:
        cache = client.StatusCache()
        first = {s.run_id: s.phase for s in client.list_runs(cache=cache)}
        assert first == {"done-aaaaa": Phase.Succeeded, "going-bbbbb": Phase.Running}
        reads: list[str] = []
        real = evidence.RunDir.read_record

        def counted(self: evidence.RunDir) -> Any:
            reads.append(self.run_id)
            return real(self)

        monkeypatch.setattr(evidence.RunDir, "read_record", counted)
        again = {s.run_id: s.phase for s in client.list_runs(cache=cache)}
        assert again == first
        assert "done-aaaaa" not in reads and "going-bbbbb" in reads
        going.transition(Phase.Succeeded, "ended", exit_code=0)
        reads.clear()
        now = {s.run_id: s.phase for s in client.list_runs(cache=cache)}
        assert now["going-bbbbb"] is Phase.Succeeded and "done-aaaaa" not in reads
    assert ended.read_record().phase is Phase.Succeeded


def test_a_runs_page_lists_its_checkpoints_outputs_and_resumes(home: Path, web: TestClient) -> None:
    rd = make_run(home, "train-aaaaa")
    rec = rd.read_record()
    ckpt = rd.checkpoint_dir(rec.checkpoint_subdir)
    (ckpt / "step-00000010").mkdir(parents=True)
    (ckpt / "step-00000020").mkdir()  # not in the index: incomplete, not shown
    (ckpt / "index.json").write_text(
        json.dumps({"complete": [{"step": 10, "path": "step-00000010", "ts": 1}]})
    )
    (rd.path / rec.output_subdir / "plots").mkdir(parents=True)
    (rd.path / rec.output_subdir / "plots" / "loss.png").write_bytes(b"png")
    rd.record_child("train-bbbbb", "step-00000010")
    text = web.get("/runs/train-aaaaa").text
    assert "1 complete checkpoint(s)" in text and "step-00000010" in text
    assert "step-00000020" not in text
    assert "<code>plots/loss.png</code>" in text
    assert '<a href="/runs/train-bbbbb">train-bbbbb</a>' in text


def test_a_runs_page_names_the_models_registered_from_it(home: Path, web: TestClient) -> None:
    from taugrid.api.data import Created, Lineage
    from taugrid.data.store import default_store

    make_run(home, "train-aaaaa")
    weights = home / "w"
    weights.mkdir()
    (weights / "model.bin").write_bytes(b"weights")
    who = Created(by="alice@lab", at="2026-12-01T12:00:00Z", host="lab")
    got = default_store().register(
        "model", "clf", weights, who, lineage=Lineage(run="train-aaaaa", checkpoint="step-00000010")
    )
    default_store().register("model", "other", weights, who, lineage=Lineage(run="someone-else"))
    text = web.get("/runs/train-aaaaa").text
    assert f"<code>clf@{got.record.short}</code> (checkpoint step-00000010)" in text
    assert "other@" not in text


def test_the_data_pages_list_versions_aliases_and_lineage(home: Path, web: TestClient) -> None:
    from taugrid.api.data import Created, DataInput, Lineage
    from taugrid.data.store import default_store

    store = default_store()
    who = Created(by="alice@lab", at="2026-12-01T12:00:00Z", host="lab")
    (home / "d1").mkdir()
    (home / "d1" / "a.txt").write_text("one")
    v1 = store.register("dataset", "corpus", home / "d1", who).record
    (home / "d1" / "b.txt").write_text("two")
    v2 = store.register("dataset", "corpus", home / "d1", who).record
    store.set_alias("dataset", "corpus", "prod", v1.version, "alice", "2026-12-01T12:01:00Z")
    store.set_alias("dataset", "corpus", "prod", v2.version, "bob", "2026-12-01T12:02:00Z")
    m = store.register(
        "model",
        "clf",
        home / "d1",
        who,
        lineage=Lineage(run="train-aaaaa", inputs=[DataInput(name="corpus", version=v2.version)]),
    ).record
    index = web.get("/data").text
    assert 'data-name="corpus"' in index and 'data-name="clf"' in index
    assert f"prod → <code>{v2.short}</code>" in index
    item = web.get("/data/dataset/corpus").text
    rows = [
        r.split('data-version="')[1].split('"')[0]
        for r in item.split("<tr")[1:]
        if "data-version" in r
    ]
    assert rows == [v2.short, v1.short]  # newest first
    assert item.count("<li>") == 2 and "bob" in item  # both alias moves
    model = web.get("/data/model/clf").text
    assert 'href="/runs/train-aaaaa"' in model and 'href="/data/dataset/corpus"' in model
    assert m.short in model
    assert web.get("/data/dataset/nothing").status_code == 404
    assert web.get("/data/table/corpus").status_code == 404


def test_the_services_pages_show_revisions_events_and_why(home: Path, web: TestClient) -> None:
    from taugrid.api import serve as S
    from taugrid.serve.records import ServiceDir

    assert "No services on this machine" in web.get("/services").text
    pin = S.ModelPin(ref="iris@prod", name="iris", version="sha256:" + "b" * 64)
    revs = [
        S.Revision(
            number=n,
            created_at=f"2026-12-01T00:0{n}:00Z",
            created_by="alice",
            config_hash=f"sha256:{n}{n}",
            code_digest="sha256:c",
            model=pin,
            spec=S.ServiceSpec(import_path="serve_app:app"),
            source="/p/tau.yaml",
            reason="deploy" if n == 1 else "rollout",
        )
        for n in (1, 2)
    ]
    sd = ServiceDir("iris")
    sd.write(
        S.ServiceRecord(
            name="iris",
            target="local",
            created_at="2026-12-01T00:01:00Z",
            created_by="alice",
            route_prefix="/iris",
            endpoint="http://127.0.0.1:8000/iris",
            revisions=revs,
            serving=1,
            previous=2,
        )
    )
    sd.event("rollback", "revision 2 -> revision 1", 1, "bob")
    index = web.get("/services").text
    assert 'data-name="iris"' in index and "<code>http://127.0.0.1:8000/iris</code>" in index
    # no local Ray head here: the page says so, with what puts it back
    assert "the local Ray head is not running" in index
    item = web.get("/services/iris").text
    assert [
        r.split('data-revision="')[1].split('"')[0]
        for r in item.split("<tr")[1:]
        if "data-revision" in r
    ] == ["2", "1"]
    assert "revision 2 -&gt; revision 1" in item and "(bob)" in item
    assert "tau serve rollout iris" in item
    assert web.get("/services/ghost").status_code == 404
    assert web.get("/services/..%2Fx").status_code == 404


# --- the portal lets no page in: Host, Origin, a CSRF token tied to the session --------------
@pytest.mark.parametrize(
    "host", ["evil.example", "evil.example:8800", "127.0.0.1.nip.io", "10.0.0.5"]
)
def test_a_host_the_portal_does_not_serve_is_refused_by_name(home: Path, host: str) -> None:
    web = TestClient(create_app(Settings()), base_url=f"http://{host}")
    for path in ("/runs", "/runs/train-aaaaa", "/static/portal.css"):
        got = web.get(path)
        assert got.status_code == 421 and f"refused Host {host!r}" in got.text, (path, got.text)
        assert "train-aaaaa" not in got.text and "set-cookie" not in got.headers


@pytest.mark.parametrize("host", ["127.0.0.1:8800", "localhost", "LOCALHOST:1", "[::1]:8800"])
def test_loopback_names_and_allowed_hosts_are_served(home: Path, host: str) -> None:
    assert (
        TestClient(create_app(Settings()), base_url=f"http://{host}").get("/runs").status_code
        == 200
    )
    other = Settings(allowed_hosts=("127.0.0.1", "portal.lab"))
    assert (
        TestClient(create_app(other), base_url="http://portal.lab:8800").get("/runs").status_code
        == 200
    )


def test_a_post_from_another_origin_or_another_session_changes_nothing(
    home: Path, web: TestClient, supervised: RunDir
) -> None:
    page = web.get("/runs/wait-aaaaa/cancel")
    token = page.text.split('name="csrf" value="')[1].split('"')[0]
    for origin in ("http://evil.example", "http://evil.example:8800", "null"):
        got = web.post("/runs/wait-aaaaa/cancel", data={"csrf": token}, headers={"origin": origin})
        assert got.status_code == 403 and f"origin {origin!r}" in got.text
    got = web.post(
        "/runs/wait-aaaaa/cancel",
        data={"csrf": token},
        headers={"referer": "http://evil.example/page"},
    )
    assert got.status_code == 403
    other = TestClient(web.app, base_url="http://127.0.0.1")  # another browser, the same portal
    other.get("/runs")  # its own session cookie
    assert other.post("/runs/wait-aaaaa/cancel", data={"csrf": token}).status_code == 403
    bare = TestClient(web.app, base_url="http://127.0.0.1", cookies={})
    assert bare.post("/runs/wait-aaaaa/cancel", data={"csrf": token}).status_code == 403
    assert RunDir(home / "data" / "runs" / "wait-aaaaa").read_record().phase is Phase.Pending
    done = web.post(
        "/runs/wait-aaaaa/cancel",
        data={"csrf": token},
        headers={"origin": "http://127.0.0.1"},
        follow_redirects=False,
    )
    assert done.status_code == 303
    assert RunDir(home / "data" / "runs" / "wait-aaaaa").read_record().phase is Phase.Cancelled


def test_the_cli_serves_loopback_and_what_it_is_told() -> None:
    import socket

    from taugrid.cli.portal import _allowed

    assert _allowed("127.0.0.1", []) == ("127.0.0.1", "localhost", "::1")
    assert "lab.example" in _allowed("127.0.0.1", ["lab.example, other"])
    wide = _allowed("0.0.0.0", [])
    assert socket.gethostname().lower() in wide and "0.0.0.0" not in wide
    assert "192.0.2.7" in _allowed("192.0.2.7", [])


def test_a_managers_runs_page_says_which_worker_cluster_runs_each(
    web: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a MultiKueue manager, the cluster's runs page has a worker column (a run not
    dispatched yet: "-"); a single cluster's has none."""
    from runkit import dispatched_status

    import taugrid.portal.app as portal

    st = dispatched_status
    runs = [st("a-00001", ["worker-1", "worker-2"]), st("b-00002", [])]
    monkeypatch.setattr(portal, "_runs", lambda *a, **k: runs)
    page = web.get("/runs?scope=cluster").text
    assert "Worker cluster" in page
    cells = page.split('class="worker">')[1:]
    assert [c.split("<")[0] for c in cells] == ["worker-2", "-"] or [
        c.split("<")[0] for c in cells
    ] == ["-", "worker-2"]
    monkeypatch.setattr(portal, "_runs", lambda *a, **k: [st("b-00002", [])])
    assert "Worker cluster" not in web.get("/runs?scope=cluster").text
