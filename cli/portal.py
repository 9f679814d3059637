"""`tau portal`: runs, metrics and logs in a browser (taugrid.portal, the `portal` extra)."""

from __future__ import annotations

import ipaddress
from typing import TYPE_CHECKING, Annotated

import typer

from taugrid.cli.options import ContextOpt
from taugrid.cli.output import say

if TYPE_CHECKING:
    import socket

LOOPBACK = ("127.0.0.1", "::1", "localhost")


def portal(
    port: Annotated[int, typer.Option("--port", help="The port (0: any free one)")] = 8800,
    host: Annotated[
        str,
        typer.Option(
            "--host",
            help="The address to listen on; any but loopback needs the "
            "token printed at start on every request",
        ),
    ] = "127.0.0.1",
    open_browser: Annotated[bool, typer.Option("--open", help="Open it in a browser")] = False,
    allowed_hosts: Annotated[
        list[str] | None,
        typer.Option(
            "--allowed-hosts",
            help="Another Host name it answers to (repeat, or comma-separated); loopback "
            "names always, and with --host the address and this machine's name",
        ),
    ] = None,
    context: ContextOpt = None,
) -> None:
    """Runs, their status, metrics and live logs in a browser, as you (your TAU_HOME and your
    kubeconfig identity): on this machine only unless --host says otherwise."""
    import secrets

    from taugrid.api.errors import EXIT_USAGE, TauError, missing_extra

    try:
        import uvicorn

        from taugrid.portal.app import Settings, create_app
    except ImportError as e:
        raise missing_extra("portal", f"the portal's libraries ({e.name})") from None
    if not 0 <= port <= 65535:
        raise TauError(f"--port {port}: a port is 0-65535", exit_code=EXIT_USAGE)
    token = None if _loopback(host) else secrets.token_urlsafe(24)
    sock = _bind(host, port)
    bound = sock.getsockname()[1]
    shown = f"[{host}]" if ":" in host else host
    url = f"http://{shown}:{bound}/" + (f"?token={token}" if token else "")
    say(f"TauGrid portal on {url}  (Ctrl-C stops it)")
    if token:
        say("it listens beyond this machine: every request needs that token")
    if open_browser:
        import webbrowser

        webbrowser.open(url)
    hosts = _allowed(host, allowed_hosts or [])
    if not _loopback(host) or allowed_hosts:
        say(f"it answers to the names {', '.join(hosts)} (--allowed-hosts adds one)")
    app = create_app(Settings(token=token, context=context, allowed_hosts=hosts))
    config = uvicorn.Config(app, log_level="warning", access_log=False)
    uvicorn.Server(config).run(sockets=[sock])


def _bind(host: str, port: int) -> socket.socket:
    """The portal's socket, bound first: a port in use is a clear error, not uvicorn's
    traceback."""
    import socket

    from taugrid.api.errors import EXIT_USAGE, TauError

    try:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
    except OSError as e:
        raise TauError(
            f"cannot listen on {host}:{port}: {e.strerror}",
            exit_code=EXIT_USAGE,
            hint="choose another --port (or --port 0 for any free one)",
        ) from None
    return sock


def _allowed(host: str, extra: list[str]) -> tuple[str, ...]:
    """The Host names the portal answers to: loopback's, what --allowed-hosts adds, and for a
    non-loopback --host the address itself (unless a wildcard) and this machine's names."""
    import socket

    from taugrid.portal.app import LOOPBACK_HOSTS

    names = list(LOOPBACK_HOSTS)
    names += [h.strip() for e in extra for h in e.split(",") if h.strip()]
    if not _loopback(host):
        if host not in ("0.0.0.0", "::"):
            names.append(host)
        names += [socket.gethostname(), socket.getfqdn()]
    return tuple(dict.fromkeys(n.lower() for n in names))


def _loopback(host: str) -> bool:
    if host in LOOPBACK:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
