"""Kubernetes timestamps (RFC 3339, whole seconds, `Z`): the one way TauGrid writes and reads
them in objects' status (conditions, grants, quarantine annotations, timelines)."""

from __future__ import annotations

from datetime import UTC, datetime


def k8s_time(t: datetime | None = None) -> str:
    """`t` (default: now) as the API server writes times: 2026-12-01T12:00:00Z."""
    return (t or datetime.now(UTC)).isoformat(timespec="seconds").replace("+00:00", "Z")


def parse_k8s_time(s: str | None) -> datetime | None:
    """A timestamp from an object; None when absent or not a timestamp."""
    if not s:
        return None
    try:
        return datetime.fromisoformat(s.replace("Z", "+00:00"))
    except ValueError:
        return None
