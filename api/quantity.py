"""Kubernetes resource quantities, parsed strictly (as the API server would).

The reference implementation accepted lower-case suffixes (`4gi`, `512m` as megabytes) that
Kubernetes reads differently or rejects; here they are refused with a suggestion instead.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from datetime import timedelta
from decimal import Decimal, InvalidOperation
from typing import TypeVar

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {"": 1, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18}
_QUANTITY = re.compile(
    r"^(?P<num>[0-9]+(?:\.[0-9]+)?)(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E|m)?$"
)
_LOOSE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([a-zA-Z]*)\s*$")

MAX_MEMORY_BYTES = 64 * 2**40  # 64 TiB per pod: anything above is a typo
MAX_CPUS = 1024
# A queue's quota is a whole fleet's (100 A100 nodes: 2,400 cores, 22 TiB): its typo bounds
MAX_QUOTA_CPUS = 1_000_000
MAX_QUOTA_MEMORY_BYTES = 2**60  # 1 EiB


class QuantityError(ValueError):
    """A quantity that Kubernetes would reject or misread; message says what to write."""


# What people write for memory -> the binary unit they almost always mean (RAM sizes are
# binary: a "16 GB" machine has 16 GiB).
_MEMORY_UNITS = {
    "g": "Gi",
    "gb": "Gi",
    "gib": "Gi",
    "gi": "Gi",
    "m": "Mi",
    "mb": "Mi",
    "mib": "Mi",
    "mi": "Mi",
    "k": "Ki",
    "kb": "Ki",
    "kib": "Ki",
    "ki": "Ki",
    "t": "Ti",
    "tb": "Ti",
    "tib": "Ti",
    "ti": "Ti",
}
UNITS_EXPLAINED = (
    "Gi is 2^30 bytes, what '16 GB' of RAM means; G is 10^9 bytes; a lowercase m is 1/1000"
)


def unitless_memory(value: float) -> str:
    """Why a bare number is (almost surely) a mistake for a memory size, and what to write."""
    shown = int(value) if float(value).is_integer() else value
    return (
        f"is a number without a unit: Kubernetes would read {shown} as {shown} bytes; "
        f"write {shown}Gi. {UNITS_EXPLAINED}"
    )


def memory_with_unit(value: object) -> object:
    """pydantic field validator for memory a person writes (tau.yaml): a unit is required."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError(f"is {value}: a memory size is a finite quantity like 64Gi")
        raise ValueError(unitless_memory(value))
    return memory_field(value)


def _suggest_memory(raw: str) -> str | None:
    m = _LOOSE.match(raw)
    if not m:
        return None
    num, suffix = m.groups()
    fixed = _MEMORY_UNITS.get(suffix.lower())
    return f"{num}{fixed}" if fixed else None


# Good answers kept (a render parses the same few quantities ~10 times; a bad one is parsed
# each time, to say why); keyed by type too, so True is never taken for 1.
_MEMORY_SEEN: dict[tuple[type, object, int], int] = {}
_CPU_SEEN: dict[tuple[type, object, int], Decimal] = {}
_SEEN_MAX = 4096
T = TypeVar("T")


def _kept(
    seen: dict[tuple[type, object, int], T],
    value: object,
    most: int,
    parse: Callable[[object, int], T],
) -> T:
    key = (type(value), value, most)
    try:
        return seen[key]
    except (KeyError, TypeError):  # TypeError: not hashable (refused by `parse`)
        pass
    got = parse(value, most)
    if len(seen) < _SEEN_MAX:
        seen[key] = got
    return got


def parse_memory(value: object, most: int = MAX_MEMORY_BYTES) -> int:
    """Return bytes for a Kubernetes memory quantity such as `512Mi` or `64Gi` (at most `most`:
    one pod's bound by default; a typo above it is refused)."""
    return _kept(_MEMORY_SEEN, value, most, _parse_memory)


def _parse_memory(value: object, most: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise QuantityError("must be a Kubernetes memory quantity like 512Mi or 64Gi")
    if isinstance(value, float) and not math.isfinite(value):
        raise QuantityError(f"is {value}: a memory size is a finite quantity like 64Gi")
    if isinstance(value, float):
        raise QuantityError(unitless_memory(value))
    raw = str(value)
    if raw != raw.strip():
        raise QuantityError("must not have surrounding whitespace")
    m = _QUANTITY.match(raw)
    if not m or m.group("suffix") == "m":
        hint = _suggest_memory(raw)
        extra = f": did you mean {hint}? {UNITS_EXPLAINED}" if hint and hint != raw else ""
        raise QuantityError(f"must be a Kubernetes memory quantity like 512Mi or 64Gi{extra}")
    suffix = m.group("suffix") or ""
    mult = _BINARY.get(suffix) or _DECIMAL[suffix]
    try:
        n = Decimal(m.group("num")) * mult
    except InvalidOperation as e:  # pragma: no cover - regex guarantees a number
        raise QuantityError("must be a number with a unit, like 64Gi") from e
    if n <= 0:
        raise QuantityError("must be greater than zero")
    if n > most:
        if most == MAX_MEMORY_BYTES:
            raise QuantityError("is larger than any node (over 64Ti); check the unit")
        raise QuantityError(f"is larger than {format_memory(most)}; check the unit")
    return int(n)


def parse_cpu(value: object, most: int = MAX_CPUS) -> Decimal:
    """Return cores for a CPU amount: an integer, a decimal (`0.5`) or millicores (`500m`), at
    most `most` (one pod's bound by default)."""
    return _kept(_CPU_SEEN, value, most, _parse_cpu)


def _parse_cpu(value: object, most: int) -> Decimal:
    if isinstance(value, bool):
        raise QuantityError("must be a number of cores like 4, 0.5 or 500m")
    if isinstance(value, float) and not math.isfinite(value):
        raise QuantityError(f"is {value}: a CPU amount is a finite number like 4, 0.5 or 500m")
    if isinstance(value, (int, float)):
        n = Decimal(str(value))
    elif isinstance(value, str):
        m = re.fullmatch(r"([0-9]+(?:\.[0-9]+)?)(m?)", value)
        if not m:
            raise QuantityError("must be a number of cores like 4, 0.5 or 500m")
        n = Decimal(m.group(1)) / (1000 if m.group(2) else 1)
    else:
        raise QuantityError("must be a number of cores like 4, 0.5 or 500m")
    if n <= 0:
        raise QuantityError("must be greater than zero")
    if n > most:
        raise QuantityError(f"is more than {most} cores; check the value")
    if n * 1000 != int(n * 1000):
        raise QuantityError("has a precision finer than 1m (one millicore)")
    return n


def format_cpu(cores: Decimal) -> str:
    """Canonical Kubernetes form: whole cores as `4`, fractions as millicores `500m`."""
    if cores == int(cores):
        return str(int(cores))
    return f"{int(cores * 1000)}m"


def format_memory(n_bytes: int) -> str:
    """Shortest exact binary form (`64Gi`), else plain bytes."""
    for suffix in ("Ei", "Pi", "Ti", "Gi", "Mi", "Ki"):
        mult = _BINARY[suffix]
        if n_bytes % mult == 0:
            return f"{n_bytes // mult}{suffix}"
    return str(n_bytes)


def cpu_field(value: object) -> object:
    """pydantic field validator: a CPU amount, or ValueError with the reason."""
    if value is not None:
        try:
            parse_cpu(value)
        except QuantityError as e:
            raise ValueError(str(e)) from None
    return value


def memory_field(value: object) -> object:
    """pydantic field validator: a memory quantity, or ValueError with the reason."""
    if value is not None:
        try:
            parse_memory(value)
        except QuantityError as e:
            raise ValueError(str(e)) from None
    return value


_DECIMAL_SUFFIX = {
    -9: "n",
    -6: "u",
    -3: "m",
    0: "",
    3: "k",
    6: "M",
    9: "G",
    12: "T",
    15: "P",
    18: "E",
}


def canonical(value: object) -> str:
    """The form the API server and Go controllers write a quantity in (resource.Quantity's
    String): `6` -> "6", `1000` -> "1k", "0.5" -> "500m", "2048Mi" -> "2Gi", "1.5Gi" ->
    "1536Mi". Objects that a controller re-writes (Kueue's ClusterQueues) must be applied in this
    form, or the field changes hands at each write and the next apply conflicts."""
    raw = str(value).strip()
    m = _QUANTITY.match(raw)
    if m is None:
        return raw  # exponent forms and anything unusual: as written (the API server decides)
    number, suffix = Decimal(m["num"]), m["suffix"] or ""
    if suffix in _BINARY:
        n = number * _BINARY[suffix]
        if n == int(n) and n >= 1024:
            n_int, exp = int(n), 0
            while n_int % 1024 == 0 and exp < 6:
                n_int, exp = n_int // 1024, exp + 1
            return f"{n_int}{['', 'Ki', 'Mi', 'Gi', 'Ti', 'Pi', 'Ei'][exp]}"
        amount = n
    else:
        amount = number * (Decimal("0.001") if suffix == "m" else _DECIMAL[suffix])
    if amount == 0:
        return "0"
    exp = -9
    mantissa = amount * Decimal(10) ** 9
    if mantissa != int(mantissa):  # finer than a nano: round up, as Kubernetes does
        mantissa = Decimal(math.ceil(mantissa))
    whole = int(mantissa)
    while whole % 1000 == 0 and exp < 18:
        whole, exp = whole // 1000, exp + 3
    return f"{whole}{_DECIMAL_SUFFIX[exp]}"


def parse_quantity(value: object) -> Decimal:
    """Any Kubernetes quantity (`8`, `500m`, `2Gi`, `1k`) as a number."""
    m = _QUANTITY.match(str(value).strip())
    if m is None or isinstance(value, bool):
        raise QuantityError(f"{value!r} is not a quantity (like 8, 500m or 2Gi)")
    number, suffix = Decimal(m["num"]), m["suffix"] or ""
    if suffix in _BINARY:
        return number * _BINARY[suffix]
    return number * (Decimal("0.001") if suffix == "m" else _DECIMAL[suffix])


_DURATION = re.compile(r"^([1-9][0-9]*)([smhd])$")  # api.crds.DURATION_PATTERN
_DURATION_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days"}


def duration(text: str) -> timedelta:
    """`30m`, `48h`, `7d` (one whole number and one unit) as a timedelta."""
    m = _DURATION.fullmatch(text.strip())
    if not m:
        raise QuantityError(
            f"{text!r} is not a duration: write a whole number and s, m, h or d (30m, 48h, 7d)"
        )
    return timedelta(**{_DURATION_UNITS[m[2]]: int(m[1])})


_GO_DURATION = re.compile(r"^([0-9]+h)?([0-9]+m)?([0-9]+s)?$")


def go_duration_seconds(v: str) -> int:
    """A Go duration as Kueue's configuration takes it ('168h', '5m', '1h30m', '0s': whole
    hours, minutes, seconds) in seconds; ValueError says the form. `duration` above is tau's
    own (one unit, days allowed, never 0)."""
    m = _GO_DURATION.match(v.strip())
    if not v.strip() or m is None:
        raise ValueError(f"{v!r} is not a duration: use hours, minutes, seconds, e.g. 168h or 5m")
    h, mi, s = (int(g[:-1]) if g else 0 for g in m.groups())
    return h * 3600 + mi * 60 + s
