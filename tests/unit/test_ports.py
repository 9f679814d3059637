"""Ports a sandbox picks: the kernel's, or a slice of its own (TAUGRID_PORT_RANGE) when several
sandboxes start at once on one machine (the e2e suite's workers)."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from taugrid.host import ports


def _hold_any_in(lo: int, hi: int) -> tuple[socket.socket, int]:
    """A socket bound to a port of lo..hi whose next port is free too, and that port."""
    for port in range(lo, hi + 1):
        if not ports.port_free(port + 1):
            continue
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            s.close()
            continue
        return s, port
    pytest.skip(f"no port of {lo}-{hi} is free on this machine")


def test_without_a_range_ports_come_from_below_the_kernels_ephemeral_range(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(ports.PORT_RANGE_ENV, raising=False)
    ephemeral = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    picked = [ports.free_port() for _ in range(20)]
    assert all(ports.DEFAULT_LOW <= p < ephemeral for p in picked), picked
    assert len(set(picked)) == 20
    assert all(ports.port_free(p) for p in picked)


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ("32768\t60999\n", (20000, 32767)),
        ("40000 65000", (20000, 39999)),
        ("20500 60999", None),  # fewer than 1000 ports below it
        ("1024 65535", None),
        ("", None),
        ("x y", None),
    ],
)
def test_the_default_range_ends_where_the_kernels_ephemeral_range_begins(
    tmp_path: Path, content: str, expected: tuple[int, int] | None
) -> None:
    f = tmp_path / "ip_local_port_range"
    f.write_text(content)
    assert ports.default_range(str(f)) == expected


def test_where_the_ephemeral_range_is_unknown_the_kernel_picks(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv(ports.PORT_RANGE_ENV, raising=False)
    ephemeral = int(Path(ports.EPHEMERAL_RANGE).read_text().split()[0])
    monkeypatch.setattr(ports, "EPHEMERAL_RANGE", str(tmp_path / "missing"))
    port = ports.free_port()
    assert port >= ephemeral  # the kernel's pick for bind(0) is from its ephemeral range
    assert ports.port_free(port)


def test_a_range_gives_ports_inside_it_never_the_same_twice_in_a_row(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(ports.PORT_RANGE_ENV, "21000-21049")
    picked = [ports.free_port() for _ in range(20)]
    assert all(21000 <= p <= 21049 for p in picked)
    assert len(set(picked)) == 20, "a port was handed out twice before the range went round"


def test_a_held_port_is_passed_over(monkeypatch: pytest.MonkeyPatch) -> None:
    held, port = _hold_any_in(21100, 21199)
    with held:
        monkeypatch.setenv(ports.PORT_RANGE_ENV, f"{port}-{port + 1}")
        assert all(ports.free_port() == port + 1 for _ in range(3))


def test_a_range_with_nothing_free_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    held, port = _hold_any_in(21200, 21299)
    with held:
        monkeypatch.setenv(ports.PORT_RANGE_ENV, f"{port}-{port}")
        with pytest.raises(OSError, match=f"no free port in TAUGRID_PORT_RANGE={port}-{port}"):
            ports.free_port()


@pytest.mark.parametrize("bad", ["20000", "20000-", "x-y", "30000-20000", "80-90", "1000-70000"])
def test_a_malformed_range_is_refused_with_what_it_should_be(
    monkeypatch: pytest.MonkeyPatch, bad: str
) -> None:
    monkeypatch.setenv(ports.PORT_RANGE_ENV, bad)
    with pytest.raises(ValueError, match="expected LO-HI"):
        ports.free_port()
