"""What a real node of the sandbox reaches on the host, served into its network namespace by one
process of the host (`python -m taugrid.sandbox.nodeproxy`):

- the API server: the node's 127.0.0.1:RELAY_PORT is relayed to the host's API server on
  127.0.0.1 (its certificate names 127.0.0.1, so TLS is the API server's own, end to end); the
  node's kubelet and kube-proxy use it, the pods cannot reach it (it is the node's loopback);
- DNS for `cluster.local` only, on the node's address, port 53 (the kubelet's clusterDNS): a
  Service's cluster IP, a headless Service's ready endpoints, a pod's `HOST.SUBDOMAIN.NS.svc`
  name and `A-B-C-D.NS.pod` names, from the API server. Any other name is answered NXDOMAIN at
  once: nothing is forwarded to the host's resolver or anywhere else.
"""

from __future__ import annotations

import argparse
import asyncio
import ipaddress
import socket
import threading
import time
from pathlib import Path
from typing import Any

from taugrid.sandbox.netns import socket_in

DOMAIN = "cluster.local."
REFRESH_S = 0.5  # a name not known is looked up again at most this often
TTL = 5


class Names:
    """cluster.local names from the API server: listed again when a name is not known (and the
    last list is older than REFRESH_S), so a Service made a moment ago resolves at once."""

    def __init__(self, kubeconfig: str) -> None:
        from taugrid.kube.client import Kube

        self.kube = Kube(kubeconfig=kubeconfig)
        self.lock = threading.Lock()
        self.table: dict[str, list[str]] = {}
        self.listed = 0.0

    def _list(self) -> None:
        table: dict[str, list[str]] = {}
        headless: set[str] = set()
        for svc in self.kube.list("Service"):  # (every namespace)
            md = svc["metadata"]
            base = f"{md['name']}.{md['namespace']}.svc.{DOMAIN}"
            ip = (svc.get("spec") or {}).get("clusterIP")
            if ip and ip != "None":
                table[base] = [ip]
            else:
                table[base] = []
                headless.add(base)
        for sl in self.kube.list("EndpointSlice"):
            md = sl["metadata"]
            svc_name = (md.get("labels") or {}).get("kubernetes.io/service-name")
            if not svc_name:
                continue
            base = f"{svc_name}.{md['namespace']}.svc.{DOMAIN}"
            for ep in sl.get("endpoints") or []:
                if (ep.get("conditions") or {}).get("ready") is False:
                    continue
                for addr in ep.get("addresses") or []:
                    if base in headless:
                        table[base].append(addr)
                    if ep.get("hostname"):
                        table.setdefault(f"{ep['hostname']}.{base}", []).append(addr)
        self.table, self.listed = table, time.monotonic()

    def lookup(self, name: str) -> list[str] | None:
        """The addresses of a cluster.local name; None: no such name."""
        pod = _pod_name(name)
        if pod is not None:
            return [pod]
        with self.lock:
            if name not in self.table and time.monotonic() - self.listed > REFRESH_S:
                self._list()
            got = self.table.get(name)
        return None if got is None else sorted(set(got))


def _pod_name(name: str) -> str | None:
    """`10-244-1-5.NS.pod.cluster.local.` -> 10.244.1.5"""
    parts = name.split(".")
    if len(parts) == 6 and parts[2] == "pod" and ".".join(parts[3:]) == DOMAIN.rstrip(".") + ".":
        try:
            return str(ipaddress.IPv4Address(parts[0].replace("-", ".")))
        except ValueError:
            return None
    return None


class Dns(asyncio.DatagramProtocol):
    def __init__(self, names: Names) -> None:
        self.names = names
        self.transport: asyncio.DatagramTransport | None = None

    def connection_made(self, transport: Any) -> None:
        self.transport = transport

    def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:
        loop = asyncio.get_running_loop()
        loop.run_in_executor(None, self._answer, data, addr)

    def _answer(self, data: bytes, addr: tuple[str, int]) -> None:
        import dns.flags
        import dns.message
        import dns.rcode
        import dns.rdataclass
        import dns.rdatatype
        import dns.rrset

        try:
            query = dns.message.from_wire(data)
        except Exception:  # (not DNS: no answer)
            return
        reply = dns.message.make_response(query)
        reply.flags |= dns.flags.AA
        reply.flags &= ~dns.flags.RA  # no recursion: nothing outside the cluster is looked up
        for q in query.question:
            name = q.name.to_text().lower()
            if not name.endswith("." + DOMAIN):
                reply.set_rcode(dns.rcode.NXDOMAIN)
                break
            try:
                found = self.names.lookup(name)
            except Exception:  # (the API server did not answer: try again later)
                reply.set_rcode(dns.rcode.SERVFAIL)
                break
            if found is None:
                reply.set_rcode(dns.rcode.NXDOMAIN)
                break
            if q.rdtype == dns.rdatatype.A and found:
                reply.answer.append(
                    dns.rrset.from_text_list(q.name, TTL, dns.rdataclass.IN, dns.rdatatype.A, found)
                )
        if self.transport is not None:
            self.transport.sendto(reply.to_wire(), addr)


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while chunk := await reader.read(1 << 16):
            writer.write(chunk)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        writer.close()


async def serve(
    netns: Path, relay: int, api: tuple[str, int], dns_at: tuple[str, int], kubeconfig: str
) -> None:
    async def relay_one(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(*api)
        except OSError:
            writer.close()
            return
        await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))

    listening = socket_in(netns, socket.SOCK_STREAM, ("127.0.0.1", relay))
    server = await asyncio.start_server(relay_one, sock=listening)
    udp = socket_in(netns, socket.SOCK_DGRAM, dns_at)
    loop = asyncio.get_running_loop()
    await loop.create_datagram_endpoint(lambda: Dns(Names(kubeconfig)), sock=udp)
    print(
        f"nodeproxy: relay 127.0.0.1:{relay} -> {api[0]}:{api[1]}, dns {dns_at[0]}:{dns_at[1]}",
        flush=True,
    )
    async with server:
        await server.serve_forever()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--netns", type=Path, required=True)
    ap.add_argument("--relay-port", type=int, required=True)
    ap.add_argument("--api-port", type=int, required=True)
    ap.add_argument("--dns", required=True, help="ADDRESS inside the namespace (port 53)")
    ap.add_argument("--kubeconfig", required=True)
    a = ap.parse_args()
    asyncio.run(serve(a.netns, a.relay_port, ("127.0.0.1", a.api_port), (a.dns, 53), a.kubeconfig))


if __name__ == "__main__":
    main()
