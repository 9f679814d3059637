"""Promotion: one stack's tested version lock onto the next stack's file, and the record of tests.

The version lock is every setting marked promotable (`api.platform.version_lock`: component
versions, the AKS Kubernetes version); pools, queues and workspaces belong to one cluster and
never move. A lock may be promoted only after it was verified: `tau platform ci down ID
--passed` records that the lock a CI cluster ran passed the pipeline's tests, in
`<stacks>/verified/<stack>.json` (in the project, next to the stack files, so it is reviewed and
versioned with them). The destination file is edited in place (comments and order kept).
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from taugrid.api.errors import EXIT_USAGE, TauError
from taugrid.api.platform import (
    CONFIG_KEY,
    PlatformConfig,
    lock_hash,
    set_path,
    version_lock,
    with_lock,
)
from taugrid.infra.stackfile import find_stacks_dir, validated

VERIFIED_DIR = "verified"


@dataclass(frozen=True)
class Change:
    path: str
    old: str | None
    new: str


def lock_changes(src: PlatformConfig, dst: PlatformConfig) -> list[Change]:
    """What SRC's lock changes in DST's: the paths both stacks have (an existing cluster has no
    Kubernetes version to give an AKS one)."""
    a, b = version_lock(src), version_lock(dst)
    return [Change(p, b.get(p), v) for p, v in a.items() if p in b and b[p] != v]


# --- verification records --------------------------------------------------------------------
def _records_path(stack: str, stacks_dir: Path) -> Path:
    return stacks_dir / VERIFIED_DIR / f"{stack}.json"


def records(stack: str, stacks_dir: Path) -> list[dict[str, Any]]:
    path = _records_path(stack, stacks_dir)
    if not path.is_file():
        return []
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise TauError(f"{path}: not a verification record ({e})", exit_code=EXIT_USAGE) from None
    items = data.get("records") if isinstance(data, dict) else None
    return [r for r in items or [] if isinstance(r, dict)]


def record_verified(stack: str, lock: dict[str, str], where: str, stacks_dir: Path,
                    note: str = "") -> dict[str, Any]:  # fmt: skip
    """Add a record: `lock` (taken from `stack`) passed the tests on `where`."""
    entry = {
        "hash": lock_hash(lock),
        "lock": lock,
        "verifiedOn": where,
        "at": datetime.now(UTC).isoformat(timespec="seconds"),
        "by": os.environ.get("GITHUB_ACTOR") or os.environ.get("USER") or "unknown",
        **({"note": note} if note else {}),
    }
    path = _records_path(stack, stacks_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    items = [*records(stack, stacks_dir), entry]
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"stack": stack, "records": items}, indent=2) + "\n")
    tmp.replace(path)
    return entry


def verification(stack: str, lock: dict[str, str], stacks_dir: Path) -> dict[str, Any] | None:
    h = lock_hash(lock)
    found = [r for r in records(stack, stacks_dir) if r.get("hash") == h]
    return found[-1] if found else None


# --- the promotion ---------------------------------------------------------------------------
@dataclass
class Promotion:
    src: str
    dst: str
    changes: list[Change]
    verified: dict[str, Any] | None
    dst_file: Path

    def doc(self) -> dict[str, Any]:
        return {"from": self.src, "to": self.dst, "file": str(self.dst_file),
                "changes": [asdict(c) for c in self.changes], "verified": self.verified}  # fmt: skip

    def lines(self) -> list[str]:
        out = [f"promote {self.src} -> {self.dst} ({self.dst_file}):"]
        out += [f"  {c.path}: {c.old} -> {c.new}" for c in self.changes] or ["  nothing to change"]
        if self.verified:
            v = self.verified
            out.append(f"verified: {self.src}'s lock {v['hash']} passed on {v['verifiedOn']} "
                       f"at {v['at']} ({v['by']})")  # fmt: skip
        return out


def _path(start: str, nxt: str | None, stacks_dir: Path) -> list[str]:
    """The stacks after `start` along promotesTo (stops at an unreadable stack or a loop)."""
    out: list[str] = []
    while nxt and nxt not in out and nxt != start:
        out.append(nxt)
        try:
            nxt = validated(nxt, stacks_dir).promotesTo
        except TauError:
            break
    return out


def plan_promotion(src: str, dst: str, stacks_dir: Path | None = None) -> Promotion:
    """Check and compute a promotion (nothing is written): DST must be SRC's promotesTo, and
    SRC's lock must have a verification record (exit 2 otherwise, saying what to run)."""
    stacks_dir = stacks_dir or find_stacks_dir()
    a, b = validated(src, stacks_dir), validated(dst, stacks_dir)
    if a.promotesTo != dst:
        ahead = _path(dst, b.promotesTo, stacks_dir)
        if src in ahead:  # backwards: the fix leads forward, never to a cycle
            hint = (f"promotion goes forward ({' -> '.join([dst, *ahead[: ahead.index(src) + 1]])}): "
                    f"tau platform promote {dst} {b.promotesTo}")  # fmt: skip
        elif a.promotesTo:
            hint = f"promote along the path: tau platform promote {src} {a.promotesTo}"
        else:
            hint = f"set promotesTo: {dst} in {src}'s stack file first"
        raise TauError(
            f"{src} promotes to {a.promotesTo or 'nothing'} (its promotesTo), not {dst}",
            exit_code=EXIT_USAGE,
            hint=hint,
        )
    changes = lock_changes(a, b)
    lock = version_lock(a)
    verified = verification(src, lock, stacks_dir)
    if changes and verified is None:
        raise TauError(
            f"{src}'s version lock {lock_hash(lock)} has no recorded verification: nothing "
            "unverified is promoted",
            exit_code=EXIT_USAGE,
            hint=f"verify it on a CI cluster: tau platform ci up --from {src} --name ID; run "
            "the pipeline's tests; tau platform ci down ID --passed",
        )
    return Promotion(src, dst, changes, verified, stacks_dir / f"Pulumi.{dst}.yaml")


def write_promotion(p: Promotion) -> None:
    """Set each changed path in DST's stack file, keeping its comments and layout."""
    from ruamel.yaml import YAML

    yaml = YAML()
    yaml.preserve_quotes = True
    doc = yaml.load(p.dst_file.read_text(encoding="utf-8"))
    for c in p.changes:
        set_path(doc["config"][CONFIG_KEY], c.path, c.new)
    tmp = p.dst_file.with_suffix(".tmp")
    with tmp.open("w", encoding="utf-8") as f:
        yaml.dump(doc, f)
    try:
        _check(tmp, p.dst)  # never leave a broken stack file behind
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    tmp.replace(p.dst_file)


def _check(path: Path, stack: str) -> None:
    """The rewritten file still declares a valid platform (ConfigError otherwise)."""
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        (Path(d) / f"Pulumi.{stack}.yaml").write_bytes(path.read_bytes())
        validated(stack, Path(d))


def promoted_config(p: Promotion) -> PlatformConfig:
    """DST's declaration with the promotion applied (nothing written)."""
    return with_lock(validated(p.dst, p.dst_file.parent), {c.path: c.new for c in p.changes})


def preview_lines(p: Promotion) -> list[str]:
    """TARGET's resources that the promotion changes (offline, under Pulumi's mocks)."""
    if not p.changes:
        return []
    from taugrid.infra import plan
    from taugrid.infra.stackfile import validated

    before = plan.evaluate(p.dst, validated(p.dst, p.dst_file.parent))
    after = plan.evaluate(p.dst, promoted_config(p))
    after.stack = f"{p.dst}+{p.src}"
    return plan.format_diff(plan.diff(after, before))[1:]
