"""`tau usage` and `tau quota status` against a fake cluster (#42): what one may read decides
what one sees (admins everything, a researcher their workspaces, a named workspace one may not
read is exit 4), bad --since / --team / --workspace are exit 2 with the fix, and the team rows
say who is starved (with Kueue's reason in TauGrid's words) and who borrows or lends."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from fakekit import cluster_api

from taugrid.api.kubetime import k8s_time
from taugrid.api.usage import ledger_name
from taugrid.cli.app import main
from taugrid.kube.client import Forbidden
from taugrid.kube.fake import FakeKube
from taugrid.kube.kinds import KINDS

NOW = datetime.now(UTC).replace(microsecond=0)


def at(hours_ago: float) -> str:
    return k8s_time(NOW - timedelta(hours=hours_ago))


def ledger(ns: str, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    by: dict[str, dict[str, Any]] = {}
    for r in rows:
        name = ledger_name(r["run"], r["created"])
        obj = by.setdefault(name, {"metadata": {"name": name, "namespace": ns}, "spec": {}})
        obj["spec"].setdefault("runs", {})[r["run"]] = r
        obj["spec"]["month"] = r["created"][:7]
    return list(by.values())


def row(run: str, ws: str, user: str, gpus: int, start: float, end: float | None) -> dict[str, Any]:
    iv = {"start": at(start), **({"end": at(end), "why": "Finished"} if end is not None else {})}
    return {
        "run": run,
        "workspace": ws,
        "user": user,
        "gpus": gpus,
        "cpus": 4.0,
        "queue": ws,
        "flavor": "t4x1",
        "created": at(start),
        "admitted": [iv],
    }


def cq(name: str, nominal: int, used: int, borrowed: int, pending: int = 0) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {
            "cohortName": f"tau-grants-{name}",
            "resourceGroups": [
                {
                    "flavors": [
                        {
                            "name": "t4x1",
                            "resources": [{"name": "nvidia.com/gpu", "nominalQuota": str(nominal)}],
                        }
                    ]
                }
            ],
        },
        "status": {
            "pendingWorkloads": pending,
            "flavorsUsage": [
                {
                    "name": "t4x1",
                    "resources": [
                        {"name": "nvidia.com/gpu", "total": str(used), "borrowed": str(borrowed)}
                    ],
                }
            ],
            "fairSharing": {"weightedShare": borrowed * 100},
        },
    }


def objects() -> dict[str, list[dict[str, Any]]]:
    tc = {
        "metadata": {"name": "cluster"},
        "spec": {
            "stack": "t",
            "workloadProfiles": [],
            "workspaces": [
                {"name": n, "namespace": n, "pvc": f"{n}-data", "team": n}
                for n in ("vision", "nlp")
            ],
            "teams": [
                {"name": "vision", "weight": 2, "queues": ["vision"], "workspaces": ["vision"]},
                {"name": "nlp", "weight": 1, "queues": ["nlp"], "workspaces": ["nlp"]},
            ],
            "prices": {
                "currency": "EUR",
                "pools": {
                    "t4x1": {
                        "vmSize": "Standard_NC4as_T4_v3",
                        "perNodeHour": 0.5,
                        "gpusPerNode": 1,
                        "cpusPerNode": 4,
                    }
                },
            },
        },
    }
    waiting = {
        "metadata": {"name": "wl-1", "namespace": "nlp", "creationTimestamp": at(0.1)},
        "status": {
            "conditions": [
                {
                    "type": "QuotaReserved",
                    "status": "False",
                    "message": "couldn't assign flavors to pod set main: insufficient unused "
                    "quota for nvidia.com/gpu in flavor t4x1, 1 more needed",
                }
            ]
        },
    }
    return {
        "TauCluster": [tc],
        "TauUsage": [
            *ledger(
                "vision",
                [row("v1", "vision", "carol", 2, 5, 3), row("v2", "vision", "carol", 1, 2, None)],
            ),
            *ledger("nlp", [row("n1", "nlp", "dan", 1, 6, 4)]),
        ],
        "ClusterQueue": [
            cq("vision", 0, 4, 4),
            cq("nlp", 0, 0, 0, pending=2),
            cq("spare", 6, 0, 0),
            cq("tau-validation", 0, 0, 0),
        ],
        "Cohort": [],
        "Workload": [waiting],
    }


def run_cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    got = capsys.readouterr()
    return code, got.out, got.err


def test_an_admin_sees_every_team_with_cost_and_idle_quota(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    cluster_api(monkeypatch)(objects())
    code, out, err = run_cli(capsys, "usage", "--by", "team", "--since", "1d", "-o", "json")
    assert code == 0, err
    doc = json.loads(out)
    rows = {r["group"]: r for r in doc["rows"]}
    assert doc["scope"] == "cluster" and doc["runs"] == 3
    # v2's admission is open: it counts up to the report's end
    until = datetime.fromisoformat(doc["until"].replace("Z", "+00:00"))
    open_h = (until - (NOW - timedelta(hours=2))).total_seconds() / 3600
    assert rows["vision"]["gpuHours"] == pytest.approx(2 * 2 + 1 * open_h, rel=1e-3)
    assert rows["nlp"]["gpuHours"] == pytest.approx(2, rel=1e-3)
    assert (
        rows["vision"]["cost"] == pytest.approx(0.5 * (4 + open_h), rel=1e-2)
        and rows["nlp"]["currency"] == "EUR"
    )
    # the spare queue's 6 GPUs for a day, less what the teams borrowed of them
    assert doc["idleQuotaHours"] == {"spare": pytest.approx(6 * 24 - (4 + open_h + 2), rel=1e-3)}
    code, out, _ = run_cli(capsys, "usage", "--by", "user", "-o", "csv")
    assert out.splitlines()[0].startswith("group,runs,") and {"carol", "dan"} <= {
        line.split(",")[0] for line in out.splitlines()[1:]
    }
    code, out, _ = run_cli(capsys, "usage", "--by", "workspace")
    assert code == 0 and "COST (EUR)" in out and "vision" in out


class ResearcherKube(FakeKube):
    """A member of `vision` only: no cluster-wide list of ledgers, none of nlp's."""

    def list(self, kind_name: str, namespace: str | None = None, *a: Any, **kw: Any) -> Any:
        if kind_name in ("TauUsage", "Workload") and namespace in (None, "nlp"):
            raise Forbidden("list", KINDS[kind_name], namespace, "denied")
        return super().list(kind_name, namespace, *a, **kw)


def as_researcher(monkeypatch: pytest.MonkeyPatch) -> None:
    from taugrid.client import cluster
    from taugrid.kube.discovery import Discovery

    kube = ResearcherKube(objects())
    monkeypatch.setattr(cluster, "discovery", lambda context=None: Discovery(kube))


def test_a_researcher_sees_their_workspaces_and_is_refused_another(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    as_researcher(monkeypatch)
    code, out, err = run_cli(capsys, "usage", "-o", "json")
    doc = json.loads(out)
    assert code == 0 and doc["scope"] == "workspaces" and doc["workspaces"] == ["vision"]
    assert [r["group"] for r in doc["rows"]] == ["vision"] and doc["idleQuotaHours"] == {}
    code, out, err = run_cli(capsys, "usage", "--workspace", "nlp")
    assert code == 4 and "may not read the usage of workspace nlp" in err
    assert "Traceback" not in err


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (("--since", "2999-01-01"), "is in the future"),
        (("--since", "last tuesday"), "is not a time"),
        (("--team", "nobody"), "no team 'nobody' (known: vision, nlp)"),
        (("--workspace", "nope"), "no workspace 'nope'"),
        (("--by", "colour"), "colour"),
    ],
)
def test_bad_usage_input_is_exit_2_with_the_fix(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    args: tuple[str, ...],
    needle: str,
) -> None:
    cluster_api(monkeypatch)(objects())
    code, _, err = run_cli(capsys, "usage", *args)
    assert code == 2 and needle in err and "Traceback" not in err


def test_quota_status_says_who_borrows_who_lends_and_who_starves(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    cluster_api(monkeypatch)(objects())
    code, out, err = run_cli(capsys, "quota", "status", "-o", "json")
    assert code == 0, err
    rows = {r["team"]: r for r in json.loads(out)}
    assert set(rows) == {"vision", "nlp", "(no team)"}  # the validation queue is not a team
    assert rows["vision"]["state"] == "borrowing" and rows["vision"]["borrowed"] == 4
    assert rows["vision"]["weighted_share"] == 400
    assert rows["(no team)"]["lent"] == 4 and rows["(no team)"]["nominal"] == 6
    nlp = rows["nlp"]
    assert nlp["state"] == "starved" and nlp["pending"] == 2
    assert nlp["why"] == "waiting for quota in queue nlp: 1 more GPU needed in flavor t4x1"
    code, out, _ = run_cli(capsys, "quota", "status", "--team", "nlp")
    assert code == 0 and "nlp is starved:" in out and "vision" not in out
    code, _, err = run_cli(capsys, "quota", "status", "--team", "art")
    assert code == 2 and "known: vision, nlp" in err
