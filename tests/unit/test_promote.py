"""`tau platform promote SRC DST`: only along promotesTo, only a verified lock, only the lock
(pools, queues and workspaces stay), and the destination file keeps its comments."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from conftest import ROOT
from conftest import run_tau as tau

pytest.importorskip("pulumi", reason="the platform extra (pulumi) is not installed")
from taugrid.api.versionlock import lock_hash, version_lock
from taugrid.infra.promote import record_verified
from taugrid.infra.stackfile import validated


@pytest.fixture()
def stacks(tmp_path: Path) -> Path:
    folder = tmp_path / "stacks"
    shutil.copytree(ROOT / "stacks", folder, symlinks=False)
    # dev tests a newer Kueue
    dev = folder / "Pulumi.dev.yaml"
    dev.write_text(
        dev.read_text().replace(
            "      nodeProblemDetector: {enabled: true}\n",
            "      nodeProblemDetector: {enabled: true}\n      kueue: {version: 0.19.3}\n",
            1,
        )
    )
    assert validated("dev", folder).components.kueue.version == "0.19.3"
    return folder


def promote(home: Path, stacks: Path, *args: str) -> tuple[int, str, str]:
    res = tau(home, "platform", "promote", *args, "--stacks-dir", str(stacks))
    return res.returncode, res.stdout, res.stderr


def test_an_unverified_lock_is_not_promoted(tmp_path: Path, stacks: Path) -> None:
    before = (stacks / "Pulumi.staging.yaml").read_bytes()
    rc, _, err = promote(tmp_path, stacks, "dev", "staging", "--yes")
    assert rc == 2
    assert "no recorded verification" in err and "tau platform ci down ID --passed" in err
    assert (stacks / "Pulumi.staging.yaml").read_bytes() == before


def test_only_along_promotes_to(tmp_path: Path, stacks: Path) -> None:
    record_verified("dev", version_lock(validated("dev", stacks)), "ci-x", stacks)
    rc, _, err = promote(tmp_path, stacks, "dev", "prod", "--yes")
    assert rc == 2
    assert "dev promotes to staging" in err and "tau platform promote dev staging" in err


def test_a_backwards_promotion_is_told_the_forward_way_never_a_cycle(
    tmp_path: Path, stacks: Path
) -> None:
    """prod -> staging used to hint "set promotesTo: staging in prod's stack file" (a cycle)."""
    rc, _, err = promote(tmp_path, stacks, "prod", "staging", "--yes")
    assert rc == 2
    assert "promotesTo: staging" not in err
    assert "promotion goes forward (staging -> prod)" in err
    assert "tau platform promote staging prod" in err
    rc, _, err = promote(tmp_path, stacks, "prod", "dev", "--yes")
    assert "(dev -> staging -> prod)" in err and "tau platform promote dev staging" in err


def test_a_verified_lock_moves_and_nothing_else(tmp_path: Path, stacks: Path) -> None:
    staging = stacks / "Pulumi.staging.yaml"
    before_cfg = validated("staging", stacks)
    record_verified("dev", version_lock(validated("dev", stacks)), "ci-e2e1", stacks)

    # without a terminal and without --yes: shown, not written
    rc, out, err = promote(tmp_path, stacks, "dev", "staging")
    assert rc == 2 and "pass --yes" in err
    assert "components.kueue.version: 0.19.2 -> 0.19.3" in out
    assert "version: 0.19.2 -> 0.19.3" in out.split("offline preview")[1]  # the Helm release
    assert "verified: dev's lock" in out and "ci-e2e1" in out

    rc, out, err = promote(tmp_path, stacks, "dev", "staging", "--yes", "-o", "json")
    assert rc == 0, err
    doc = json.loads(out)
    assert doc["written"] is True
    assert doc["changes"] == [
        {"path": "components.kueue.version", "old": "0.19.2", "new": "0.19.3"}
    ]
    after = validated("staging", stacks)
    assert after.components.kueue.version == "0.19.3"
    # the rest of staging is staging's: pools, queues, workspaces, its Kubernetes version
    assert after.model_dump(exclude={"components"}) == before_cfg.model_dump(exclude={"components"})
    text = staging.read_text()
    assert text.startswith("# staging: an AKS cluster")  # comments kept
    # promoted again: nothing to change
    rc, out, _ = promote(tmp_path, stacks, "dev", "staging", "--yes")
    assert rc == 0 and "nothing to change" in out


def test_a_lock_changed_after_its_verification_is_refused(tmp_path: Path, stacks: Path) -> None:
    lock = version_lock(validated("dev", stacks))
    record_verified("dev", lock, "ci-e2e1", stacks)
    dev = stacks / "Pulumi.dev.yaml"
    dev.write_text(dev.read_text().replace("kueue: {version: 0.19.3}", "kueue: {version: 0.19.4}"))
    assert lock_hash(version_lock(validated("dev", stacks))) != lock_hash(lock)
    rc, _, err = promote(tmp_path, stacks, "dev", "staging", "--yes")
    assert rc == 2 and "no recorded verification" in err


def _changed_lines(before: str, after: str) -> tuple[list[str], list[str]]:
    import difflib

    diff = list(difflib.unified_diff(before.splitlines(), after.splitlines(), lineterm="", n=0))
    removed = [d[1:] for d in diff if d.startswith("-") and not d.startswith("---")]
    added = [d[1:] for d in diff if d.startswith("+") and not d.startswith("+++")]
    return removed, added


def test_the_diff_of_a_promotion_is_exactly_what_it_moves(tmp_path: Path, stacks: Path) -> None:
    """The round-trip writer re-indented every list of the target (a 30-line diff for a
    one-line version bump). A missing key is added; an existing value is replaced in place,
    in its quoting; nothing else changes."""
    staging = stacks / "Pulumi.staging.yaml"
    before = staging.read_text()
    record_verified("dev", version_lock(validated("dev", stacks)), "ci-x", stacks)
    rc, _, err = promote(tmp_path, stacks, "dev", "staging", "--yes")
    assert rc == 0, err
    removed, added = _changed_lines(before, staging.read_text())
    assert removed == [] and [a.strip() for a in added] == ["kueue:", "version: 0.19.3"]
    assert validated("staging", stacks).components.kueue.version == "0.19.3"

    # an existing value, in a flow mapping and quoted: one line changes, its quotes kept
    dev = stacks / "Pulumi.dev.yaml"
    dev.write_text(
        dev.read_text().replace("kueue: {version: 0.19.3}", 'kueue: {version: "0.19.4"}')
    )
    record_verified("dev", version_lock(validated("dev", stacks)), "ci-y", stacks)
    staging.write_text(
        staging.read_text().replace(
            "      kueue:\n        version: 0.19.3\n",
            '      kueue: {enabled: true, version: "0.19.3"}  # pinned\n',
        )
    )
    before = staging.read_text()
    rc, _, err = promote(tmp_path, stacks, "dev", "staging", "--yes")
    assert rc == 0, err
    removed, added = _changed_lines(before, staging.read_text())
    assert removed == ['      kueue: {enabled: true, version: "0.19.3"}  # pinned']
    assert added == ['      kueue: {enabled: true, version: "0.19.4"}  # pinned']


def test_uncommitted_edits_in_the_target_are_not_promoted_unseen(
    tmp_path: Path, stacks: Path
) -> None:
    import subprocess

    git = ["git", "-c", "user.email=t@t", "-c", "user.name=t"]
    subprocess.run([*git, "init", "-q"], cwd=stacks, check=True)
    subprocess.run([*git, "add", "."], cwd=stacks, check=True)
    subprocess.run([*git, "commit", "-qm", "stacks"], cwd=stacks, check=True)
    staging = stacks / "Pulumi.staging.yaml"
    staging.write_text(staging.read_text().replace("maxCount: 4", "maxCount: 40", 1))
    edited = staging.read_bytes()
    record_verified("dev", version_lock(validated("dev", stacks)), "ci-x", stacks)
    rc, _, err = promote(tmp_path, stacks, "dev", "staging", "--yes")
    assert rc == 2 and "uncommitted changes" in err and "commit or stash" in err
    assert staging.read_bytes() == edited


def test_only_what_the_ci_cluster_ran_is_verified_and_promoted(
    tmp_path: Path, stacks: Path
) -> None:
    """`ci down --passed` recorded the whole lock, the node problem detector's version too,
    which the CI template never deploys: promotion could then move an untested version."""
    from taugrid.infra.ci import TEMPLATE, ci_config
    from taugrid.infra.promote import covered

    dev = stacks / "Pulumi.dev.yaml"
    dev.write_text(
        dev.read_text().replace(
            "      nodeProblemDetector: {enabled: true}\n",
            "      nodeProblemDetector: {enabled: true, version: 9.9.9}\n",
            1,
        )
    )
    lock = version_lock(validated("dev", stacks))
    tested = covered(lock, ci_config(validated(TEMPLATE, stacks), "x", lock))
    assert "components.nodeProblemDetector.version" not in tested
    assert tested["components.kueue.version"] == "0.19.3"
    record_verified(
        "dev", tested, "ci-x", stacks, not_covered=["components.nodeProblemDetector.version"]
    )
    rc, out, err = promote(tmp_path, stacks, "dev", "staging", "--yes", "-o", "json")
    assert rc == 0, err
    doc = json.loads(out)
    assert [c["path"] for c in doc["changes"]] == ["components.kueue.version"]
    assert [c["path"] for c in doc["untested"]] == ["components.nodeProblemDetector.version"]
    staging = validated("staging", stacks)
    assert staging.components.kueue.version == "0.19.3"
    assert staging.components.nodeProblemDetector.version != "9.9.9"  # held back
    rc, out, _ = promote(tmp_path, stacks, "dev", "staging")
    assert "held back (not run on the CI cluster" in out
