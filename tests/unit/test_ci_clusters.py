"""CI cluster stacks without an engine: names unique per pipeline (AKS under mocks), a source
stack's lock applied, ids and TTLs checked."""

from __future__ import annotations

from datetime import timedelta

import pytest

from taugrid.api.errors import TauError
from taugrid.api.versionlock import version_lock
from taugrid.infra.stackfile import validated

pytest.importorskip("pulumi", reason="the platform extra (pulumi) is not installed")
from taugrid.infra import ci, plan


def aks_names(ci_id: str) -> dict[str, str]:
    cfg = ci.ci_config(validated("ci"), ci_id)
    inv = plan.evaluate(f"ci-{ci_id}", cfg)
    mc = next(r for r in inv.resources if r.type.endswith(":ManagedCluster"))
    rg = next(r for r in inv.resources if r.type.endswith(":ResourceGroup"))
    return {
        "cluster": mc.inputs["resourceName"],
        "group": rg.inputs["resourceGroupName"],
        "dns": mc.inputs["dnsPrefix"],
    }


def test_two_pipelines_at_once_get_different_clusters() -> None:
    a, b = aks_names("pr-12"), aks_names("pr-13")
    assert a == {
        "cluster": "taugrid-ci-pr-12",
        "group": "taugrid-ci-pr-12-rg",
        "dns": "taugrid-ci-pr-12",
    }
    assert all(a[k] != b[k] for k in a)


def test_the_source_stacks_lock_is_applied_and_nothing_else() -> None:
    template, staging = validated("ci"), validated("staging")
    cfg = ci.ci_config(template, "x1", version_lock(staging))
    assert version_lock(cfg) == {k: v for k, v in version_lock(staging).items()}
    assert [p.name for p in cfg.gpuPools] == [p.name for p in template.gpuPools]  # its own pools
    assert cfg.promotesTo is None


@pytest.mark.parametrize("bad", ["PR_12", "a" * 21, "-x", "x y"])
def test_a_bad_name_is_refused_with_an_example(bad: str) -> None:
    with pytest.raises(TauError, match="lowercase letters, digits") as e:
        ci.new_id(bad)
    assert e.value.exit_code == 2


def test_ids_come_from_the_ci_system(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GITHUB_RUN_ID", "9876543210")
    monkeypatch.delenv("CI_PIPELINE_ID", raising=False)
    assert ci.new_id() == "9876543210"
    monkeypatch.delenv("GITHUB_RUN_ID")
    assert ci.new_id() != ci.new_id()  # random otherwise


@pytest.mark.parametrize(
    ("ttl", "delta"),
    [
        ("30m", timedelta(minutes=30)),
        ("2h", timedelta(hours=2)),
        ("1d", timedelta(days=1)),
        ("45s", timedelta(seconds=45)),
    ],
)
def test_ttls(ttl: str, delta: timedelta) -> None:
    assert ci.parse_ttl(ttl) == delta


@pytest.mark.parametrize("ttl", ["0h", "2 hours", "h", "-1h", "1w"])
def test_bad_ttls(ttl: str) -> None:
    with pytest.raises(TauError, match="a duration like"):
        ci.parse_ttl(ttl)
