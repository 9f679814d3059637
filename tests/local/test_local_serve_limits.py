"""A local service keeps its promises at its edges with real Ray Serve (127.0.0.1): a request
that takes longer than the service's `request_timeout_s` is answered 408 by the proxy instead of
holding its caller without end, and a burst beyond `max_ongoing_requests` +
`max_queued_requests` is answered 503 at once instead of waiting."""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from localkit import Tau, have_ray

pytestmark = pytest.mark.skipif(not have_ray(), reason="Ray is not installed")

APP = """
import asyncio

from ray import serve
from starlette.requests import Request


@serve.deployment
class Slow:
    async def __call__(self, request: Request) -> dict[str, float]:
        seconds = float(request.query_params.get("s", "0"))
        await asyncio.sleep(seconds)
        return {"slept": seconds}


app = Slow.bind()
"""

TAU_YAML = """schema_version: 1
name: slow
run: {entrypoint: serve_app.py}
service:
  import_path: serve_app:app
  replicas: 1
  cpus: 0.5
  request_timeout_s: 20
  max_ongoing_requests: 1
  max_queued_requests: 1
"""


def get(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=600) as r:
            return int(r.status)
    except urllib.error.HTTPError as e:
        return int(e.code)


@pytest.fixture()
def own_head(tmp_path: Path) -> Iterator[Tau]:
    """A head of its own: the proxy takes its request timeout from the first service deployed on
    it, so a head shared with other tests' services would keep theirs (300 s)."""
    t = Tau(tmp_path / "home")
    yield t
    t("local", "stop", timeout=60)


def test_a_slow_request_times_out_and_a_burst_is_refused_at_once(
    own_head: Tau, tmp_path: Path
) -> None:
    tau = own_head
    (tmp_path / "serve_app.py").write_text(APP)
    (tmp_path / "tau.yaml").write_text(TAU_YAML)
    res = tau("serve", "deploy", str(tmp_path), "-o", "json")
    assert res.returncode == 0, res.stdout + res.stderr
    url = json.loads(res.stdout)["endpoint"].rstrip("/")
    assert get(f"{url}?s=0") == 200
    assert get(f"{url}?s=120") == 408  # the proxy's request timeout (20 s), not two minutes
    # six at once, each held 8 s: one works, one waits (done at 16 s, inside the timeout), and
    # the rest are refused at once: they come back before the first one is answered
    done: list[int] = []
    lock = threading.Lock()

    def one() -> None:
        code = get(f"{url}?s=8")
        with lock:
            done.append(code)

    burst = [threading.Thread(target=one, daemon=True) for _ in range(6)]
    for t in burst:
        t.start()
    for t in burst:
        t.join(300)
    assert sorted(set(done)) == [200, 503], done
    assert done.count(200) <= 2 and done[0] == 503, done  # refused before anything finished
