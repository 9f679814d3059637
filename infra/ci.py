"""Disposable CI clusters: stack `ci-<id>` from the `ci` stack file, one per pipeline.

`up` names everything of the cluster after the id (an AKS cluster `<name>-<id>` in its own
resource group), so two pipelines at once never collide; an existing-cluster template holds one
CI platform at a time, and a second is refused. Each stack carries tags in the backend (expiry,
the stack whose version lock it runs and that lock's hash), so `reap` on any machine destroys
the expired ones, and `down --passed` records that the lock passed (see promote.py).
"""

from __future__ import annotations

import os
import re
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from taugrid.api.errors import EXIT_PLATFORM, EXIT_USAGE, TauError
from taugrid.api.platform import AksClusterSpec, PlatformConfig, validate_platform
from taugrid.api.quantity import QuantityError, duration
from taugrid.api.versionlock import lock_hash, version_lock, with_lock
from taugrid.infra.engine import Engine, Outcome
from taugrid.infra.stackfile import find_stacks_dir, validated

TEMPLATE = "ci"
PREFIX = "ci-"
ID_LIMIT = 20
TAG_EXPIRES, TAG_FROM, TAG_LOCK, TAG_TEMPLATE = "tau-expires", "tau-from", "tau-lock", "tau-ci"
Say = Callable[[str], None]


def new_id(name: str | None = None) -> str:
    """The pipeline's id: --name, else the CI system's run id, else random; a DNS label."""
    raw = name or os.environ.get("CI_PIPELINE_ID") or os.environ.get("GITHUB_RUN_ID") or ""
    if not raw:
        return secrets.token_hex(3)
    cleaned = re.sub(r"[^a-z0-9-]+", "-", raw.lower()).strip("-")[:ID_LIMIT].strip("-")
    if name is not None and cleaned != name:
        raise TauError(
            f"--name {name!r}: use lowercase letters, digits and '-', at most "
            f"{ID_LIMIT} characters (e.g. {cleaned or 'pr-123'})",
            exit_code=EXIT_USAGE,
        )
    return cleaned or secrets.token_hex(3)


def parse_ttl(ttl: str) -> timedelta:
    try:
        return duration(ttl)
    except QuantityError:
        raise TauError(
            f"--ttl {ttl!r}: a duration like 30m, 2h or 1d", exit_code=EXIT_USAGE
        ) from None


def ci_config(
    template: PlatformConfig, ci_id: str, lock: dict[str, str] | None = None
) -> PlatformConfig:
    """The template with the pipeline's names (AKS) and, optionally, another stack's lock."""
    data: dict[str, Any] = template.model_dump(mode="json", exclude_none=True, by_alias=True)
    if isinstance(template.cluster, AksClusterSpec):
        c = data["cluster"]
        c["name"] = f"{template.cluster.name}-{ci_id}"
        c["resourceGroup"] = f"{template.cluster.resourceGroup or template.cluster.name}-{ci_id}-rg"
        c["tags"] = {**c.get("tags", {}), TAG_TEMPLATE: ci_id}
    data.pop("promotesTo", None)
    return with_lock(validate_platform(data), lock or {})


@dataclass
class CiStack:
    id: str
    expires: str | None
    source: str | None
    lock: str | None

    @property
    def expired(self) -> bool:
        return bool(self.expires) and datetime.fromisoformat(str(self.expires)) <= datetime.now(UTC)

    def doc(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "stack": PREFIX + self.id,
            "expires": self.expires,
            "expired": self.expired,
            "from": self.source,
            "lock": self.lock,
        }


def _noop() -> None:
    """Destroying needs no program: the stack's state says what to delete."""


def _engine(ci_id: str, program: Callable[[], None] = _noop) -> Engine:
    return Engine(PREFIX + ci_id, program)


def list_ci() -> list[CiStack]:
    probe = Engine("ci-probe", _noop, tau_own=True)  # lists stacks only
    out = []
    for name in probe.list_stacks():
        if not name.startswith(PREFIX):
            continue
        tags = _engine(name.removeprefix(PREFIX)).tags()
        out.append(
            CiStack(
                name.removeprefix(PREFIX),
                tags.get(TAG_EXPIRES),
                tags.get(TAG_FROM),
                tags.get(TAG_LOCK),
            )
        )
    return out


def up(
    ci_id: str,
    ttl: timedelta,
    source: str | None,
    say: Say,
    stacks_dir: Path | None = None,
    policy_packs: list[str] | None = None,
) -> Outcome:
    stacks_dir = stacks_dir or find_stacks_dir()
    template = validated(TEMPLATE, stacks_dir)
    lock = version_lock(validated(source, stacks_dir)) if source else None
    cfg = ci_config(template, ci_id, lock)
    if not isinstance(template.cluster, AksClusterSpec):
        others = [s.id for s in list_ci() if s.id != ci_id]
        if others:
            raise TauError(
                f"the {TEMPLATE} template targets an existing cluster, which holds one CI platform "
                f"at a time: {', '.join(PREFIX + o for o in others)} is up",
                exit_code=EXIT_PLATFORM,
                hint=f"tau platform ci down {others[0]} (or reap the expired ones)",
            )
    name = PREFIX + ci_id

    def program() -> None:
        from taugrid.infra.program import build

        build(cfg, name)

    eng = _engine(ci_id, program)
    say(eng.where())
    expires = (datetime.now(UTC) + ttl).isoformat(timespec="seconds")
    eng.set_tags(
        {
            TAG_EXPIRES: expires,
            TAG_TEMPLATE: ci_id,
            TAG_FROM: source or "",
            TAG_LOCK: lock_hash(lock) if lock else "",
        }
    )
    say(
        f"CI cluster {name} (expires "
        f"{expires}){f' with the version lock of {source}' if source else ''}"
    )
    if policy_packs:
        eng.preview(say=None, policy_packs=policy_packs)  # a violation stops it before anything
    return eng.up(say=say)


def down(ci_id: str, passed: bool, say: Say, stacks_dir: Path | None = None) -> Outcome:
    eng = _engine(ci_id)
    say(eng.where())
    if PREFIX + ci_id not in eng.list_stacks():
        raise TauError(
            f"no CI stack {PREFIX + ci_id}", exit_code=EXIT_USAGE, hint="tau platform ci list"
        )
    tags = eng.tags()
    outcome = eng.destroy(say=say)
    eng.remove()
    if passed:
        _record(ci_id, tags, say, stacks_dir or find_stacks_dir())
    return outcome


def _record(ci_id: str, tags: dict[str, str], say: Say, stacks_dir: Path) -> None:
    from taugrid.infra.promote import covered, record_verified

    source, ran = tags.get(TAG_FROM), tags.get(TAG_LOCK)
    if not source or not ran:
        say(f"nothing recorded: {PREFIX + ci_id} was not started --from a stack")
        return
    lock = version_lock(validated(source, stacks_dir))
    if lock_hash(lock) != ran:
        raise TauError(
            f"{source}'s version lock changed since {PREFIX + ci_id} was started (it ran {ran}, "
            f"the stack file now has {lock_hash(lock)}): nothing recorded",
            exit_code=EXIT_USAGE,
        )
    # only what the CI platform ran is verified (its template may leave components out)
    tested = covered(lock, ci_config(validated(TEMPLATE, stacks_dir), ci_id, lock))
    left_out = sorted(set(lock) - set(tested))
    record_verified(source, tested, PREFIX + ci_id, stacks_dir, not_covered=left_out)
    say(
        f"recorded: {source}'s version lock passed on {PREFIX + ci_id} ({len(tested)} of "
        f"{len(lock)} settings ran there)"
        + (
            f"; not covered, so never promoted on this record: {', '.join(left_out)}"
            if left_out
            else ""
        )
    )


def reap(say: Say) -> list[str]:
    """Destroy (and remove) every expired CI stack; their ids."""
    gone = []
    for s in list_ci():
        if s.expired:
            say(f"reaping {PREFIX + s.id} (expired {s.expires})")
            eng = _engine(s.id)
            eng.destroy(say=None)
            eng.remove()
            gone.append(s.id)
    return gone
