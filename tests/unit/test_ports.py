"""Ports a sandbox picks: the kernel's, or a slice of its own (TAUGRID_PORT_RANGE) when several
sandboxes start at once on one machine (the e2e suite's workers)."""

from __future__ import annotations

import socket

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


def test_without_a_range_the_kernel_picks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ports.PORT_RANGE_ENV, raising=False)
    port = ports.free_port()
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
