"""The portal in a real headless Chromium (Debian's `chromium`, driven by Playwright for Python
with `executable_path`; `make browser` installs both): the runs page and its filter, a run's
chart drawn, a live log line appearing, compare, cancel through its confirmation, and the
keyboard path. Screenshots go to $TAU_ARTIFACTS (default tests/browser/artifacts)."""

from __future__ import annotations

import os
import shutil
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from portalkit import make_run, supervisor

from taugrid.api.vocabulary import Phase
from taugrid.runs.evidence import RunDir

pytest.importorskip("starlette", reason="the portal extra is not installed")
sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed")

pytestmark = pytest.mark.browser
CHROMIUM = os.environ.get("TAU_CHROMIUM") or shutil.which("chromium") or ""
ARTIFACTS = Path(os.environ.get("TAU_ARTIFACTS") or Path(__file__).parent / "artifacts")


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    home = tmp_path_factory.mktemp("portalhome")
    saved = os.environ.get("TAU_HOME")
    os.environ["TAU_HOME"] = str(home)
    make_run(
        home,
        "train-aaaaa",
        metrics=400,
        created_at="2026-12-01T00:00:01Z",
        config="run: {entrypoint: t.py}\nlr: 0.1\n",
        log=["epoch 1", "epoch 2"],
    )
    make_run(
        home,
        "train-bbbbb",
        metrics=600,
        created_at="2026-12-01T00:00:02Z",
        config="run: {entrypoint: t.py}\nlr: 0.3\n",
    )
    make_run(home, "eval-ccccc", phase=Phase.Failed, created_at="2026-12-01T00:00:03Z")
    yield home
    if saved is None:
        os.environ.pop("TAU_HOME", None)
    else:
        os.environ["TAU_HOME"] = saved


@pytest.fixture(scope="module")
def portal(home: Path) -> Iterator[str]:
    """The portal on a free loopback port, served by uvicorn in a thread of this process."""
    import uvicorn

    from taugrid.portal.app import Settings, create_app

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(create_app(Settings(poll_s=0.2)), log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    from kubekit import wait_until

    wait_until(lambda: server.started or not thread.is_alive(), 30, "the portal to start")
    assert server.started, "the portal did not start"
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(timeout=10)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    if not CHROMIUM:
        pytest.skip("no chromium: `make browser` installs Debian's chromium")
    with sync_api.sync_playwright() as p:
        # rebind.test resolves to this machine: what a DNS-rebinding page's name does once it
        # has been rebound (nothing leaves loopback). Chromium's own local-network checks are
        # off, as in a browser without them: what is tested is the portal's defense.
        b = p.chromium.launch(
            executable_path=CHROMIUM,
            args=[
                "--no-sandbox",
                "--host-resolver-rules=MAP rebind.test 127.0.0.1",
                "--disable-features=PrivateNetworkAccessRespectPreflightResults,"
                "BlockInsecurePrivateNetworkRequests,PrivateNetworkAccessSendPreflights,"
                "LocalNetworkAccessChecks",
            ],
        )
        yield b
        b.close()


@pytest.fixture
def page(browser: Any, request: pytest.FixtureRequest) -> Iterator[Any]:
    pg = browser.new_page(viewport={"width": 1200, "height": 800})
    pg.set_default_timeout(15_000)
    yield pg
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    pg.screenshot(path=str(ARTIFACTS / f"{request.node.name}.png"), full_page=True)
    pg.close()


def test_the_runs_page_filters_and_opens_a_run_with_its_chart(portal: str, page: Any) -> None:
    page.goto(f"{portal}/runs")
    assert page.locator("tr.run").count() == 3
    page.select_option("select[name=phase]", "Failed")
    page.click("button:text('Filter')")
    page.wait_for_url("**phase=Failed**")
    assert page.locator("tr.run").count() == 1
    page.goto(f"{portal}/runs")
    page.click("a:text('train-aaaaa')")
    page.wait_for_url("**/runs/train-aaaaa")
    charts = page.locator("svg.chart")
    assert charts.count() == 2  # acc, loss
    # drawn: each chart has one series with real geometry on the screen
    for i in range(2):
        line = charts.nth(i).locator("polyline.series")
        assert line.count() == 1
        box = line.bounding_box()
        assert box is not None and box["width"] > 100 and box["height"] > 10


def test_a_live_log_line_appears_and_the_phase_follows(home: Path, portal: str, page: Any) -> None:
    with supervisor(make_run(home, "live-ddddd", phase=Phase.Running, log=["starting"])) as rd:
        page.goto(f"{portal}/runs/live-ddddd")
        log = page.locator("#log")
        assert "starting" in log.inner_text()
        with rd.driver_log.open("a") as f:
            f.write("a line written after the page was opened\n")
        page.wait_for_function(
            "document.getElementById('log').textContent.includes('written after the page')"
        )
        rd.transition(Phase.Succeeded, "ended", exit_code=0)
        page.wait_for_function("document.getElementById('phase').textContent === 'Succeeded'")


def test_compare_two_runs(portal: str, page: Any) -> None:
    page.goto(f"{portal}/runs")
    page.check("input[aria-label='compare train-aaaaa']")
    page.check("input[aria-label='compare train-bbbbb']")
    page.click("button:text('Compare the checked runs')")
    page.wait_for_url("**/compare?**")
    assert page.locator("svg.chart polyline.series").count() == 2
    assert page.locator("table.diff code:text('lr')").count() == 1


def test_cancel_asks_then_cancels(home: Path, portal: str, page: Any) -> None:
    with supervisor(make_run(home, "wait-eeeee", phase=Phase.Pending)):
        page.goto(f"{portal}/runs/wait-eeeee")
        page.click("text=Cancel this run")
        page.wait_for_url("**/runs/wait-eeeee/cancel")
        assert RunDir(home / "data" / "runs" / "wait-eeeee").read_record().phase is Phase.Pending
        page.click("button:text('Yes, cancel wait-eeeee')")
        page.wait_for_url("**/runs/wait-eeeee")
        assert page.locator("#phase").inner_text() == "Cancelled"


def test_the_keyboard_reaches_the_skip_link_then_the_runs(portal: str, page: Any) -> None:
    page.goto(f"{portal}/runs")
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.textContent") == "Skip to content"
    page.keyboard.press("Enter")
    assert page.url.endswith("#main")
    labels = page.eval_on_selector_all(
        "main input:not([type=hidden]), main select",
        "els => els.map(e => (e.labels && e.labels.length) || "
        "e.getAttribute('aria-label') ? 1 : 0)",
    )
    assert labels and all(labels)  # every control has a label


REBINDER = """<!doctype html><title>cute cats</title><script>
window.tried = (async () => {
  const got = {};
  for (const [what, path, init] of [
      ["read", "/runs", {}],
      ["token", "/runs/wait-rrrrr/cancel", {}],
      ["cancel", "/runs/wait-rrrrr/cancel", {method: "POST", credentials: "include",
        headers: {"content-type": "application/x-www-form-urlencoded"}, body: "csrf=guess"}]]) {
    try { const r = await fetch(path, init); got[what] = [r.status, await r.text()]; }
    catch (e) { got[what] = [0, String(e)]; }
  }
  return got;
})();
</script>"""


def test_a_rebinding_page_can_neither_read_nor_cancel(home: Path, portal: str, page: Any) -> None:
    """The page was loaded from the attacker's server as http://rebind.test:PORT; its name now
    resolves to 127.0.0.1 (rebound), so its same-origin requests reach the portal: every one is
    refused for its Host, nothing of the portal is read, and the run is not cancelled."""
    port = portal.rsplit(":", 1)[1]
    origin = f"http://rebind.test:{port}"
    page.route(
        f"{origin}/",
        lambda route: route.fulfill(status=200, body=REBINDER, content_type="text/html"),
    )
    with supervisor(make_run(home, "wait-rrrrr", phase=Phase.Pending)):
        page.goto(f"{origin}/")
        got = page.evaluate("window.tried")
        for what in ("read", "token", "cancel"):
            status, body = got[what]
            assert status == 421 and "refused Host 'rebind.test:" in body, (what, got[what])
            assert "wait-rrrrr" not in body and "csrf" not in body
        assert RunDir(home / "data" / "runs" / "wait-rrrrr").read_record().phase is Phase.Pending
        page.goto(f"{origin}/runs")  # and opened by hand: the same refusal, said in words
        assert "refused Host" in page.content()
        page.goto(f"{portal}/runs/wait-rrrrr")  # by its own name the portal answers
        assert page.locator("#phase").inner_text() == "Pending"
