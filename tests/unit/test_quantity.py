from __future__ import annotations

from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from taugrid.api.quantity import (
    QuantityError,
    canonical,
    format_cpu,
    format_memory,
    parse_cpu,
    parse_memory,
)


@pytest.mark.parametrize(
    ("raw", "n"),
    [
        ("64Gi", 64 * 2**30),
        ("512Mi", 512 * 2**20),
        ("1G", 10**9),
        ("1.5Gi", 3 * 2**29),
        (1024, 1024),
    ],
)
def test_memory_ok(raw: object, n: int) -> None:
    assert parse_memory(raw) == n


@pytest.mark.parametrize(
    ("raw", "hint"),
    [
        ("4gi", "4Gi"),
        ("64gb", "64Gi"),
        ("512m", "512Mi"),
        ("0Gi", None),
        ("-1Gi", None),
        (" 1Gi", None),
        ("1Zi", None),
        (True, None),
        (1.5, None),
        ("9999Ti", None),
    ],
)
def test_memory_bad(raw: object, hint: str | None) -> None:
    with pytest.raises(QuantityError) as e:
        parse_memory(raw)
    if hint:
        assert f"did you mean {hint}?" in str(e.value)


@pytest.mark.parametrize(
    ("raw", "n"),
    [(4, Decimal(4)), ("500m", Decimal("0.5")), (0.25, Decimal("0.25")), ("2", Decimal(2))],
)
def test_cpu_ok(raw: object, n: Decimal) -> None:
    assert parse_cpu(raw) == n


@pytest.mark.parametrize("raw", [0, -1, "abc", "1.5m", 0.0001, 5000, True, None, "4 "])
def test_cpu_bad(raw: object) -> None:
    with pytest.raises(QuantityError):
        parse_cpu(raw)


@given(st.integers(1, 2**45))
def test_memory_roundtrip(n: int) -> None:
    assert parse_memory(format_memory(n)) == n


@given(st.integers(1, 1024 * 1000))
def test_cpu_roundtrip(milli: int) -> None:
    cores = Decimal(milli) / 1000
    assert parse_cpu(format_cpu(cores)) == cores


# What Go's resource.Quantity.String() writes (apimachinery's canonical form), the form Kueue
# writes a ClusterQueue's quotas back in.
@pytest.mark.parametrize(
    ("raw", "go"),
    [
        (6, "6"),
        ("6", "6"),
        (0, "0"),
        ("24Gi", "24Gi"),
        ("2048Mi", "2Gi"),
        ("1536Mi", "1536Mi"),
        ("1.5Gi", "1536Mi"),
        ("1000m", "1"),
        ("0.5", "500m"),
        (1000, "1k"),
        ("1500", "1500"),
        ("100G", "100G"),
        ("1073741824", "1073741824"),
        ("1Ki", "1Ki"),
        ("2.5", "2500m"),
        ("512", "512"),
        ("1e3", "1e3"),
    ],
)
def test_canonical_quantities_are_what_go_writes(raw: object, go: str) -> None:
    assert canonical(raw) == go


_MULT = {
    "": 1,
    "m": Decimal("0.001"),
    "k": 1000,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "P": 10**15,
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
    "Pi": 2**50,
    "E": 10**18,
    "Ei": 2**60,
}


def amount(q: str) -> Decimal:
    i = len(q.rstrip("mkMGKiTPE"))
    return Decimal(q[:i]) * _MULT[q[i:]]


@given(
    st.integers(min_value=0, max_value=10**7),
    st.sampled_from(["", "m", "k", "M", "Ki", "Mi", "Gi"]),
)
def test_canonical_keeps_the_amount_and_is_a_fixed_point(n: int, suffix: str) -> None:
    raw = f"{n}{suffix}"
    c = canonical(raw)
    assert canonical(c) == c
    assert amount(c) == amount(raw)


def test_a_kept_answer_never_stands_for_another_question() -> None:
    """Good parses are kept: the same question again gets the same answer, but a bool is not
    the int it equals, and a bound is part of the question."""
    assert parse_cpu(1) == parse_cpu(1) == Decimal(1)
    with pytest.raises(QuantityError):
        parse_cpu(True)
    assert parse_memory(1) == 1
    with pytest.raises(QuantityError):
        parse_memory(True)
    assert parse_memory("2Gi") == 2 * 2**30
    with pytest.raises(QuantityError, match="larger than"):
        parse_memory("2Gi", most=2**30)
    assert parse_cpu("8") == 8
    with pytest.raises(QuantityError, match="more than 4"):
        parse_cpu("8", most=4)
    with pytest.raises(QuantityError):
        parse_memory(["64Gi"])  # not hashable: refused, not a TypeError
