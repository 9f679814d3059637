"""Promotion: one stack's tested version lock onto the next stack's file, and the record of tests.

The version lock is every setting marked promotable (`api.versionlock.version_lock`: component
versions, the AKS Kubernetes version); pools, queues and workspaces belong to one cluster and
never move. A lock may be promoted only after it was verified: `tau platform ci down ID
--passed` records that the lock a CI cluster ran passed the pipeline's tests, in
`<stacks>/verified/<stack>.json` (in the project, next to the stack files, so it is reviewed and
versioned with them). The destination file is edited in place (comments and order kept).
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from taugrid.api.errors import EXIT_USAGE, TauError
from taugrid.api.platform import CONFIG_KEY, PlatformConfig
from taugrid.api.versionlock import lock_hash, version_lock, with_lock
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


def covered(lock: dict[str, str], ran: PlatformConfig) -> dict[str, str]:
    """The part of `lock` that the platform `ran` exercised: its paths that platform has, and
    of component versions only those of the components it deployed (a CI template without
    the node problem detector tested no version of it)."""
    has = version_lock(ran)
    return {
        p: v
        for p, v in lock.items()
        if p in has
        and (not p.startswith("components.") or getattr(ran.components, p.split(".")[1]).enabled)
    }


def record_verified(
    stack: str,
    lock: dict[str, str],
    where: str,
    stacks_dir: Path,
    note: str = "",
    not_covered: list[str] | None = None,
) -> dict[str, Any]:
    """Add a record: `lock` (taken from `stack`: what ran on `where`) passed the tests there;
    `not_covered`: the paths of the stack's lock that did not run there."""
    entry = {
        "hash": lock_hash(lock),
        "lock": lock,
        "verifiedOn": where,
        "at": datetime.now(UTC).isoformat(timespec="seconds"),
        "by": os.environ.get("GITHUB_ACTOR") or os.environ.get("USER") or "unknown",
        **({"notCovered": not_covered} if not_covered else {}),
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
    """The newest record whose tested values are all the stack's current ones (what it did not
    cover is the promotion's to hold back)."""
    found = [
        r
        for r in records(stack, stacks_dir)
        if r.get("lock") and all(lock.get(p) == v for p, v in r["lock"].items())
    ]
    return found[-1] if found else None


# --- the promotion ---------------------------------------------------------------------------
@dataclass
class Promotion:
    src: str
    dst: str
    changes: list[Change]
    verified: dict[str, Any] | None
    dst_file: Path
    untested: list[Change] = field(default_factory=list)  # held back: not run on a CI cluster

    def doc(self) -> dict[str, Any]:
        return {
            "from": self.src,
            "to": self.dst,
            "file": str(self.dst_file),
            "changes": [asdict(c) for c in self.changes],
            "verified": self.verified,
            "untested": [asdict(c) for c in self.untested],
        }

    def lines(self) -> list[str]:
        out = [f"promote {self.src} -> {self.dst} ({self.dst_file}):"]
        out += [f"  {c.path}: {c.old} -> {c.new}" for c in self.changes] or ["  nothing to change"]
        if self.untested:
            out.append("held back (not run on the CI cluster that verified the lock):")
            out += [f"  {c.path}: {c.old} -> {c.new}" for c in self.untested]
        if self.verified:
            v = self.verified
            out.append(
                f"verified: {self.src}'s lock {v['hash']} passed on {v['verifiedOn']} "
                f"at {v['at']} ({v['by']})"
            )
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
            hint = (
                f"promotion goes forward ({' -> '.join([dst, *ahead[: ahead.index(src) + 1]])}): "
                f"tau platform promote {dst} {b.promotesTo}"
            )
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
    untested: list[Change] = []
    if verified is not None:  # only what the CI cluster ran moves
        untested = [c for c in changes if c.path not in verified["lock"]]
        changes = [c for c in changes if c.path in verified["lock"]]
    if changes and verified is None:
        raise TauError(
            f"{src}'s version lock {lock_hash(lock)} has no recorded verification: nothing "
            "unverified is promoted",
            exit_code=EXIT_USAGE,
            hint=f"verify it on a CI cluster: tau platform ci up --from {src} --name ID; run "
            "the pipeline's tests; tau platform ci down ID --passed",
        )
    return Promotion(src, dst, changes, verified, stacks_dir / f"Pulumi.{dst}.yaml", untested)


def write_promotion(p: Promotion) -> None:
    """Set each changed path in DST's stack file, byte for byte the same but the changed values
    (a missing key is added as new lines under its parent): the git diff of a promotion is
    exactly what it moves. Refused if the file has uncommitted edits (they would be promoted
    unseen)."""
    _refuse_uncommitted(p.dst_file)
    text = p.dst_file.read_text(encoding="utf-8")
    edited = edit_values(text, [CONFIG_KEY], {c.path: c.new for c in p.changes})
    tmp = p.dst_file.with_suffix(".tmp")
    tmp.write_text(edited, encoding="utf-8")
    try:
        _check(tmp, p.dst)  # never leave a broken stack file behind
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    tmp.replace(p.dst_file)


def _refuse_uncommitted(path: Path) -> None:
    import subprocess

    try:
        res = subprocess.run(
            ["git", "status", "--porcelain", "--", path.name],
            cwd=path.parent,
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return  # no git here: nothing to compare with
    if res.returncode == 0 and res.stdout.strip():
        raise TauError(
            f"{path} has uncommitted changes: a promotion would carry them in unseen",
            exit_code=EXIT_USAGE,
            hint=f"commit or stash them first (git diff -- {path.name})",
        )


def _scalar(value: str) -> str:
    """`value` as a plain YAML scalar if it reads back as that string, else double-quoted."""
    import yaml

    try:
        plain = yaml.safe_load(f"v: {value}")
    except yaml.YAMLError:
        plain = None
    return value if isinstance(plain, dict) and plain.get("v") == value else json.dumps(value)


_TOKEN = r"""(?:"(?:[^"\\]|\\.)*"|'(?:[^']|'')*'|[^\s,#}\]]+(?:[ \t]+[^\s,#}\]]+)*)"""


def edit_values(text: str, root: list[str], values: dict[str, str]) -> str:
    """`text` (a YAML document) with each dotted path under `config.<root>` set to its value,
    every other byte kept: an existing scalar is replaced where it stands (in its quoting), a
    missing key is added as lines under the deepest block mapping that exists."""
    import re

    from ruamel.yaml import YAML
    from ruamel.yaml.comments import CommentedMap

    lines = text.splitlines(keepends=True)
    for path, value in sorted(values.items()):
        doc = YAML().load("".join(lines))
        node: Any = doc["config"]
        for key in root:
            node = node[key]
        parts = path.split(".")
        depth = 0
        while depth < len(parts) - 1 and isinstance(node.get(parts[depth]), CommentedMap):
            node = node[parts[depth]]
            depth += 1
        leaf = parts[depth]
        if depth == len(parts) - 1 and leaf in node and not isinstance(node[leaf], CommentedMap):
            row, col = node.lc.value(leaf)
            line = lines[row]
            m = re.match(_TOKEN, line[col:])
            if m is None:
                raise TauError(f"cannot edit {path} in place", exit_code=EXIT_USAGE)
            old = m.group(0)
            new = (
                json.dumps(value)
                if old.startswith('"')
                else "'" + value.replace("'", "''") + "'"
                if old.startswith("'")
                else _scalar(value)
            )
            lines[row] = line[:col] + new + line[col + len(old) :]
            continue
        if node.fa.flow_style() or not node:
            raise TauError(f"cannot add {path} under a flow mapping in place", exit_code=EXIT_USAGE)
        keys = list(node)
        indent = node.lc.key(keys[0])[1]
        last = node.lc.key(keys[-1])[0]
        end = last + 1  # after the last entry's own lines (deeper, blank or comment lines)
        while end < len(lines) and (
            not lines[end].strip() or len(lines[end]) - len(lines[end].lstrip()) > indent
        ):
            end += 1
        new_lines = []
        for i, key in enumerate(parts[depth:]):
            pad = " " * (indent + 2 * i)
            tail = f" {_scalar(value)}" if i == len(parts) - depth - 1 else ""
            new_lines.append(f"{pad}{key}:{tail}\n")
        lines[end:end] = new_lines
    return "".join(lines)


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
