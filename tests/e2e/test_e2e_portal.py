"""The portal against the sandbox, as two researchers of two workspaces: each one's cluster
runs page shows their workspace's runs and not the other's (RBAC decides, the portal never
uses more rights than the CLI), and the queues and GPU nodes pages read the real Kueue and
nodes."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import run_tau as tau
from sandboxkit import cpu_job, kube_env, submit

pytestmark = pytest.mark.e2e
pytest.importorskip("starlette", reason="the portal extra is not installed")


def portal_as(sandbox: Path, who: str, monkeypatch: pytest.MonkeyPatch) -> object:
    from starlette.testclient import TestClient

    from taugrid.portal.app import Settings, create_app

    monkeypatch.setenv("TAU_HOME", str(sandbox))
    monkeypatch.setenv("KUBECONFIG", kube_env(sandbox, who)["KUBECONFIG"])
    return TestClient(create_app(Settings()), base_url="http://127.0.0.1")


def test_each_researcher_sees_only_their_workspaces_runs(
    sandbox: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    mine = submit(sandbox, cpu_job(tmp_path / "r", "portal-mine", {"SANDBOX_RUN_SECONDS": "600"}))
    project = cpu_job(
        tmp_path / "b",
        "portal-theirs",
        {"SANDBOX_RUN_SECONDS": "600"},
        extra="policy: {workspace: llm}\n",
    )
    res = tau(sandbox, "run", str(project), "-d", env=kube_env(sandbox, "bob"))
    assert res.returncode == 0, res.stderr
    theirs = res.stdout.strip()
    try:
        web = portal_as(sandbox, "researcher", monkeypatch)
        page = web.get("/runs?scope=cluster")  # type: ignore[attr-defined]
        assert page.status_code == 200, page.text
        assert f'data-run="{mine}"' in page.text and f'data-run="{theirs}"' not in page.text
        refused = web.get("/runs?scope=cluster&workspace=llm")  # type: ignore[attr-defined]
        assert refused.status_code in (403, 400) and "Traceback" not in refused.text

        in_browser(f'data-run="{mine}"', f'data-run="{theirs}"')

        web = portal_as(sandbox, "bob", monkeypatch)
        page = web.get("/runs?scope=cluster")  # type: ignore[attr-defined]
        assert f'data-run="{theirs}"' in page.text and f'data-run="{mine}"' not in page.text

        web = portal_as(sandbox, "admin", monkeypatch)
        queues = web.get("/queues")  # type: ignore[attr-defined]
        assert queues.status_code == 200 and 'data-queue="gpu"' in queues.text
        nodes = web.get("/nodes")  # type: ignore[attr-defined]
        assert nodes.status_code == 200 and "GPU node(s)" in nodes.text
        assert 'data-node="a100x1-0"' in nodes.text or 'data-node="a100' in nodes.text
    finally:
        tau(sandbox, "run", "cancel", mine, env=kube_env(sandbox))
        tau(sandbox, "run", "cancel", theirs, env=kube_env(sandbox, "bob"))


def in_browser(seen: str, unseen: str) -> None:
    """The same page in headless Chromium (when `make browser` installed it): the portal served
    for real as the identity of the current KUBECONFIG."""
    import shutil
    import socket
    import threading

    chromium = shutil.which("chromium")
    sync_api = pytest.importorskip("playwright.sync_api")
    if not chromium:
        return
    import uvicorn
    from kubekit import wait_until

    from taugrid.portal.app import Settings, create_app

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(create_app(Settings()), log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        wait_until(lambda: server.started or not thread.is_alive(), 30, "the portal to start")
        with sync_api.sync_playwright() as p:
            browser = p.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
            page = browser.new_page()
            page.goto(f"http://127.0.0.1:{sock.getsockname()[1]}/runs?scope=cluster")
            html = page.content()
            browser.close()
        assert seen in html and unseen not in html
    finally:
        server.should_exit = True
        thread.join(timeout=10)
