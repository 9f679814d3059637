"""A canary's traffic split, run by Ray Serve (never imported by `tau`): on the local head as
`taugrid.serve.split`, on a cluster carried in the canary's code as `tau_split.py` (so it uses
nothing but Ray Serve, starlette and aiohttp, which Ray's images have).

During a canary the service's route belongs to this small application: it forwards each HTTP
request, unchanged, to the serving revision or to the canary revision (locally both run as
their own Ray Serve applications on hidden routes of the same proxy; on a cluster the canary
answers on this proxy and the serving revision on its own RayService's Service). The split is
deterministic, not random: with a share of 20%, exactly one request in five goes to the canary
(per router replica), so the share `tau serve status` prints is the share requests get. The share
is the deployment's `user_config`: changing it (promote) reconfigures the running replica
without restarting it. Every answer carries the revision that made it (`x-tau-revision`).
"""

from __future__ import annotations

from typing import Any

import aiohttp
from ray import serve
from starlette.requests import Request
from starlette.responses import Response

REVISION_HEADER = "x-tau-revision"
HOP_HEADER = "x-tau-split-hop"  # a request the split sent on once (never twice: no loop)
# Hop-by-hop headers (RFC 9110 7.6.1) and the ones the client library sets again.
_DROP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "host",
        "content-length",
    }
)


def pick(count: int, percent: int) -> bool:
    """Whether request number `count` (from 0) goes to the canary: spread evenly, exactly
    `percent` of every 100 consecutive requests."""
    return (count + 1) * percent // 100 > count * percent // 100


@serve.deployment(ray_actor_options={"num_cpus": 0}, max_ongoing_requests=1000)
class Split:
    def __init__(
        self,
        stable_url: str,
        canary_url: str,
        stable_revision: int,
        canary_revision: int,
        public_url: str | None = None,
    ) -> None:
        self.routes = {
            False: (stable_url.rstrip("/"), stable_revision),
            True: (canary_url.rstrip("/"), canary_revision),
        }
        self.public = public_url.rstrip("/") if public_url else None
        self.percent = 0
        self.count = 0
        self.session: aiohttp.ClientSession | None = None

    def reconfigure(self, config: dict[str, Any]) -> None:
        self.percent = max(0, min(100, int(config.get("canary_percent", 0))))

    async def __call__(self, request: Request) -> Response:
        to_canary = pick(self.count, self.percent)
        self.count += 1
        base, revision = self.routes[to_canary]
        root = str(request.scope.get("root_path") or "")
        path = request.url.path
        if root and path.startswith(root):
            path = path[len(root) :]
        url = base + (path if path.startswith("/") or not path else "/" + path)
        if request.url.query:
            url += "?" + request.url.query
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _DROP}
        data = await request.body()
        tail = url[len(base) :]
        try:
            status, body, out = await self._send(request.method, url, headers, data)
            if (
                status == 404
                and not to_canary
                and self.public
                and HOP_HEADER not in headers
                and _route_gone(body)
            ):
                # the route is being handed back: the serving revision answers on the service's
                # own route now (this request reached the split just before the change)
                headers[HOP_HEADER] = "1"
                status, body, out = await self._send(
                    request.method, self.public + tail, headers, data
                )
        except aiohttp.ClientError as e:
            return Response(
                content=f"revision {revision} did not answer: {e}\n".encode(),
                status_code=502,
                headers={REVISION_HEADER: str(revision)},
            )
        out[REVISION_HEADER] = str(revision)
        return Response(content=body, status_code=status, headers=out)

    async def _send(
        self, method: str, url: str, headers: dict[str, str], data: bytes
    ) -> tuple[int, bytes, dict[str, str]]:
        if self.session is None:
            self.session = aiohttp.ClientSession(
                auto_decompress=False, timeout=aiohttp.ClientTimeout(total=None, sock_connect=10)
            )
        async with self.session.request(
            method, url, headers=headers, data=data, allow_redirects=False
        ) as resp:
            body = await resp.read()
            out = {k: v for k, v in resp.headers.items() if k.lower() not in _DROP}
            return resp.status, body, out


def _route_gone(body: bytes) -> bool:
    """Ray Serve's proxy saying no application has the path (not the application's own 404)."""
    return body.startswith(b"Path '") and b"' not found. Ping " in body


def app(args: dict[str, Any]) -> Any:
    """The builder Ray Serve calls with the application's args."""
    return Split.bind(  # type: ignore[attr-defined]
        str(args["stable_url"]),
        str(args["canary_url"]),
        int(args["stable_revision"]),
        int(args["canary_revision"]),
        args.get("public_url"),
    )
