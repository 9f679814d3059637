"""Teams in the stack (#42): each team's queues carry its fair-sharing weight (and so does the
grant cohort that is its member of the declared cohort), Kueue is configured for fair sharing
and admission fair sharing, the cluster is told the teams and prices; bad weights, unknown or
empty teams and a price table missing a pool's VM size are refused with the fix."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import SMALL_PLATFORM

from taugrid.api.platform import PlatformConfigError, validate_platform
from taugrid.api.quantity import go_duration_seconds
from taugrid.cli.app import main
from taugrid.components import manifests as M

pytest.importorskip("pulumi", reason="the platform extra (pulumi) is not installed")

GOOD: dict[str, Any] = SMALL_PLATFORM


def with_teams(**extra: Any) -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load(yaml.safe_dump(GOOD))
    qs = doc["queues"]["clusterQueues"]
    qs[0]["flavors"][0]["nominalQuota"] = {"nvidia.com/gpu": 0}
    for name in ("vision", "nlp"):
        qs.append(
            {"name": name, "flavors": [{"pool": "a100", "nominalQuota": {"nvidia.com/gpu": 1}}]}
        )
    doc["workspaces"] = [
        {"name": "cv", "queues": ["vision"], "team": "vision"},
        {"name": "text", "queues": ["nlp"], "team": "nlp"},
    ]
    doc["teams"] = [{"name": "vision", "weight": 2}, {"name": "nlp", "weight": 1}]
    doc.update(extra)
    return doc


def by_kind(objs: list[dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    return {o["metadata"]["name"]: o for o in objs if o["kind"] == kind}


def test_teams_weights_reach_queues_cohorts_kueue_and_the_cluster() -> None:
    cfg = validate_platform(with_teams())
    objs = M.kueue_objects(cfg)
    cqs, cohorts = by_kind(objs, "ClusterQueue"), by_kind(objs, "Cohort")
    assert cqs["vision"]["spec"]["fairSharing"] == {"weight": "2"}
    assert cqs["nlp"]["spec"]["fairSharing"] == {"weight": "1"}
    assert "fairSharing" not in cqs["gpu"]["spec"]  # no team: Kueue's default weight
    # the grant cohort is the queue's member of the declared cohort: the weight counts there
    grant = cohorts["tau-grants-vision"]["spec"]
    assert grant == {"parentName": "taugrid", "fairSharing": {"weight": "2"}}
    assert all(
        q["spec"]["admissionScope"] == {"admissionMode": "UsageBasedAdmissionFairSharing"}
        for q in cqs.values()
    )
    conf = json.loads(M.kueue_values(cfg)["managerConfig"]["controllerManagerConfigYaml"])
    assert conf["fairSharing"]["preemptionStrategies"][0] == "LessThanOrEqualToFinalShare"
    assert conf["admissionFairSharing"]["usageHalfLifeTime"] == "168h"
    spec = M.tau_cluster(cfg, "t")["spec"]
    assert [(t["name"], t["weight"], t["queues"], t["workspaces"]) for t in spec["teams"]] == [
        ("vision", 2, ["vision"], ["cv"]),
        ("nlp", 1, ["nlp"], ["text"]),
    ]
    assert {w["name"]: w.get("team") for w in spec["workspaces"]} == {"cv": "vision", "text": "nlp"}


def test_without_teams_kueue_and_queues_are_as_before() -> None:
    cfg = validate_platform(GOOD)
    conf = json.loads(M.kueue_values(cfg)["managerConfig"]["controllerManagerConfigYaml"])
    assert "fairSharing" not in conf and "admissionFairSharing" not in conf
    (cq,) = by_kind(M.kueue_objects(cfg), "ClusterQueue").values()
    assert "fairSharing" not in cq["spec"] and "admissionScope" not in cq["spec"]
    assert "teams" not in M.tau_cluster(cfg, "t")["spec"]


def test_a_fractional_weight_is_a_kueue_quantity() -> None:
    doc = with_teams()
    doc["teams"][1]["weight"] = 0.5
    cqs = by_kind(M.kueue_objects(validate_platform(doc)), "ClusterQueue")
    assert cqs["nlp"]["spec"]["fairSharing"] == {"weight": "500m"}


def problems(doc: dict[str, Any]) -> str:
    with pytest.raises(PlatformConfigError) as e:
        validate_platform(doc)
    return str(e.value)


@pytest.mark.parametrize(
    ("weight", "needle"),
    [
        (0, "must be > 0"),
        (-1, "must be > 0"),
        ("high", "not str 'high'"),
        ("2", "not str '2'"),
        (True, "not bool"),
        (5000, "at most 1000"),
    ],
)
def test_a_bad_weight_is_refused_with_the_fix(weight: object, needle: str) -> None:
    doc = with_teams()
    doc["teams"][0]["weight"] = weight
    err = problems(doc)
    assert "teams[0].weight" in err and needle in err


def test_a_team_with_no_workspaces_is_named() -> None:
    doc = with_teams()
    doc["workspaces"][1].pop("team")
    err = problems(doc)
    assert "team nlp has no workspaces" in err and "team: nlp" in err


def test_a_workspaces_unknown_team_lists_the_known() -> None:
    doc = with_teams()
    doc["workspaces"][0]["team"] = "visoin"
    err = problems(doc)
    assert "workspaces[0].team" in err and "known: vision, nlp" in err


def test_a_team_without_its_queue_and_a_queue_of_two_teams() -> None:
    doc = with_teams()
    doc["teams"].append({"name": "speech", "weight": 1})
    doc["workspaces"].append({"name": "s", "queues": ["gpu"], "team": "speech"})
    assert "team speech owns no ClusterQueue speech" in problems(doc)
    doc["teams"][2]["queues"] = ["vision"]
    assert "ClusterQueue vision is owned by team vision already" in problems(doc)


def test_a_price_table_missing_a_pools_vm_size_is_named_with_the_fix() -> None:
    doc = with_teams(prices={"perNodeHour": {"Standard_NC24ads_A100_v4": 3.67}})
    err = problems(doc)
    assert "cpuPools[0].vmSize" in err and "Standard_D4s_v5" in err and "perNodeHour" in err
    doc["prices"]["perNodeHour"]["Standard_D4s_v5"] = -0.2
    assert "negative for Standard_D4s_v5" in problems(doc)
    doc["prices"]["perNodeHour"]["Standard_D4s_v5"] = 0.19
    assert validate_platform(doc).prices is not None


@pytest.mark.parametrize(
    ("fair", "needle"),
    [
        ({"usageHalfLife": "a week"}, "is not a duration"),
        ({"usageSamplingInterval": ""}, "is not a duration"),
        ({"preemption": ["LessThanInitialShare", "LessThanOrEqualToFinalShare"]}, "in that order"),
    ],
)
def test_bad_fair_sharing_settings(fair: dict[str, Any], needle: str) -> None:
    doc = with_teams()
    doc["queues"]["fairSharing"] = fair
    assert needle in problems(doc)


def test_durations() -> None:
    assert go_duration_seconds("168h") == 168 * 3600
    assert go_duration_seconds("1h30m") == 5400
    assert go_duration_seconds("45s") == 45
    with pytest.raises(ValueError, match="not a duration"):
        go_duration_seconds("5 minutes")


def test_plan_shows_the_weights_and_refuses_a_zero_weight(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "Pulumi.ok.yaml").write_text(
        yaml.safe_dump({"config": {"taugrid:platform": with_teams()}})
    )
    assert main(["platform", "plan", "--stack", "ok", "--stacks-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "teams: vision (weight 2), nlp (weight 1)" in out
    assert " vision weight=2" in out and "tau-grants-nlp weight=1" in out
    bad = with_teams()
    bad["teams"][0]["weight"] = 0
    (tmp_path / "Pulumi.bad.yaml").write_text(yaml.safe_dump({"config": {"taugrid:platform": bad}}))
    assert main(["platform", "plan", "--stack", "bad", "--stacks-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "teams[0].weight" in err and "Traceback" not in err
