"""The portal's routes through the ASGI test client, on run records written here (no Ray, no
cluster): the runs page (filter, sort, pages), a run's page (signals, metrics chart, log), the
live log, compare, cancel (confirmation, CSRF), the token gate, error pages, and the chart
downsampling that keeps peaks."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("starlette", reason="the portal extra is not installed")
from starlette.testclient import TestClient

from taugrid.api.evidence import RunRecord
from taugrid.api.vocabulary import Phase
from taugrid.portal.app import Settings, create_app
from taugrid.portal.charts import Series, downsample, svg
from taugrid.runs.evidence import RunDir


def record(run_id: str, **kw: Any) -> RunRecord:
    base: dict[str, Any] = dict(
        run_id=run_id, name=run_id.rsplit("-", 1)[0], workspace="local", profile="local",
        workload_kind="job", handle={"target": "local"}, submitter="alice@lab", code_folder="/x",
        code_revision="u", code_digest="d", config_hash="h", image="i", entrypoint="t.py",
        created_at=kw.pop("created_at", "2026-12-01T00:00:00Z"),
    )  # fmt: skip
    base.update(kw)
    return RunRecord.model_validate(base)


def make_run(home: Path, run_id: str, *, phase: Phase = Phase.Succeeded, metrics: int = 0,
             log: list[str] | None = None, config: str = "run: {entrypoint: t.py}\n",
             created_at: str = "2026-12-01T00:00:00Z") -> RunDir:  # fmt: skip
    rd = RunDir(home / "data" / "runs" / run_id)
    (rd.path / "logs").mkdir(parents=True)
    (rd.path / "config").mkdir()
    (rd.path / "config" / "tau.yaml").write_text(config)
    rd.create(record(run_id, created_at=created_at))
    if metrics:
        with rd.metrics_path.open("w") as f:
            for step in range(metrics):
                f.write(json.dumps({"step": step, "ts": step, "loss": 1 / (step + 1),
                                    "acc": step / metrics}) + "\n")  # fmt: skip
    rd.driver_log.write_text("".join(f"{line}\n" for line in log or []))
    if phase is not Phase.Pending:
        rd.transition(Phase.Running, "started")
    if phase in (Phase.Succeeded, Phase.Failed):
        rd.transition(phase, "ended", exit_code=0 if phase is Phase.Succeeded else 3)
    return rd


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("TAU_HOME", str(tmp_path))
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "no-kubeconfig"))
    return tmp_path


@pytest.fixture
def web(home: Path) -> TestClient:
    return TestClient(create_app(Settings(page_size=3, poll_s=0.01)))


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
        "eval-ccccc", "eval-ddddd", "train-aaaaa"]  # fmt: skip
    assert "No runs match" in web.get("/runs?q=nothing-like-it").text
    assert web.get("/runs?page=x&sort=bogus").status_code == 200  # bad params fall back


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


SUPERVISOR = """
import signal, sys, time
from pathlib import Path
from taugrid.api.vocabulary import Phase
from taugrid.runs.evidence import RunDir
def stop(*_):
    RunDir(Path(sys.argv[1])).transition(Phase.Cancelled, "cancelled by the user")
    sys.exit(0)
signal.signal(signal.SIGTERM, stop)
print("ready", flush=True)
time.sleep(120)
"""


@pytest.fixture
def supervised(home: Path) -> Iterator[RunDir]:
    """A waiting local run with a stand-in for its supervisor (a process that records the
    cancel when it gets SIGTERM, as the real one does)."""
    rd = make_run(home, "wait-aaaaa", phase=Phase.Pending)
    proc = subprocess.Popen([sys.executable, "-c", SUPERVISOR, str(rd.path)],
                            stdout=subprocess.PIPE, text=True, start_new_session=True)  # fmt: skip
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    rd.update_handle(supervisor_pid=proc.pid)
    try:
        yield rd
    finally:
        proc.kill()
        proc.wait()


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
    web = TestClient(create_app(Settings(token="s3cret")))
    assert web.get("/runs").status_code == 401
    assert web.get("/runs?token=wrong").status_code == 401
    assert web.get("/static/portal.css").status_code == 401
    first = web.get("/runs?token=s3cret&phase=Succeeded", follow_redirects=False)
    assert first.status_code == 303 and first.headers["location"] == "/runs?phase=Succeeded"
    assert web.get("/runs").status_code == 200  # the cookie carries it now
    fresh = TestClient(create_app(Settings(token="s3cret")))
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
    return [ln.split('data-run="')[1].split('"')[0] for ln in html.splitlines()
            if '<tr class="run"' in ln]  # fmt: skip
