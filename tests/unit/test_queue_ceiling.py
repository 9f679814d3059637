"""A run its queue can never admit is refused before anything is written (exit 3, with the
numbers): above what the ClusterQueue may use at most (nominal quota plus what it may borrow)."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from fakekit import prepared, tau_cluster

from taugrid.api.errors import EXIT_NOT_ADMITTED, TauError
from taugrid.kube import ceiling
from taugrid.kube.fake import FakeKube
from taugrid.runs.backends.base import SubmitOptions
from taugrid.runs.backends.kube.backend import KubeBackend


def cq(name: str, cohort: str | None, flavors: dict[str, dict[str, Any]]) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "resourceGroups": [
            {
                "coveredResources": ["cpu", "memory"],
                "flavors": [
                    {"name": f, "resources": [{"name": r, **q} for r, q in res.items()]}
                    for f, res in flavors.items()
                ],
            }
        ]
    }
    if cohort:
        spec["cohortName"] = cohort
    return {"metadata": {"name": name}, "spec": spec}


def cohort(
    name: str, parent: str | None, flavors: dict[str, dict[str, Any]] | None = None
) -> dict[str, Any]:
    body = cq(name, None, flavors or {})
    if parent:
        body["spec"]["parentName"] = parent
    return body


D = Decimal


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("TAU_HOME", str(tmp_path / "home-a"))
    return tmp_path


def test_a_queue_without_a_cohort_may_use_its_nominal_quota() -> None:
    got = ceiling.ceilings("cpu", [cq("cpu", None, {"cpu": {"cpu": {"nominalQuota": "12"}}})], [])
    assert got == {("cpu", "cpu"): D(12)}


def test_borrowing_is_bounded_by_the_limit_and_by_what_the_tree_holds() -> None:
    queues = [
        cq("a", "team", {"cpu": {"cpu": {"nominalQuota": "8", "borrowingLimit": "4"}}}),
        cq("b", "team", {"cpu": {"cpu": {"nominalQuota": "20"}}}),
        cq("c", "team", {"cpu": {"cpu": {"nominalQuota": "2"}}}),
        cq("elsewhere", "other", {"cpu": {"cpu": {"nominalQuota": "100"}}}),
    ]
    assert ceiling.ceilings("a", queues, [])[("cpu", "cpu")] == D(12)  # 8 + limit 4
    queues.append(cq("d", "team", {"gpu": {"cpu": {"nominalQuota": "50"}}}))
    assert set(ceiling.ceilings("c", queues, [])) == {("cpu", "cpu")}  # not d's flavor
    assert ceiling.ceilings("c", queues, [])[("cpu", "cpu")] == D(30)  # the whole tree
    assert ceiling.ceilings("nope", queues, []) is None


def test_a_grant_cohort_and_its_parent_count_in_the_tree() -> None:
    """TauGrid puts each queue in its own grant cohort under the declared one: a queue may
    borrow from its siblings through the parent and use its grant."""
    queues = [
        cq("gpu", "tau-grants-gpu", {"cpu": {"cpu": {"nominalQuota": "4"}}}),
        cq("cpu", "tau-grants-cpu", {"cpu": {"cpu": {"nominalQuota": "10"}}}),
    ]
    cohorts = [
        cohort("team", None),
        cohort("tau-grants-gpu", "team", {"cpu": {"cpu": {"nominalQuota": "3"}}}),
        cohort("tau-grants-cpu", "team"),
    ]
    assert ceiling.ceilings("gpu", queues, cohorts)[("cpu", "cpu")] == D(17)


def ps(name: str, count: int, **req: str) -> ceiling.PodSet:
    return ceiling.PodSet(name, count, {k: D(v) for k, v in req.items()})


def test_a_pod_set_above_every_flavor_can_never_start_with_the_numbers() -> None:
    limits = {("cpu", "cpu"): D(12), ("big", "cpu"): D(8)}
    why = ceiling.never_admittable([ps("main", 2, cpu="7")], limits, "cpu")
    assert why is not None
    assert "pod set main needs 14 CPU; queue cpu may use at most 12 in flavor cpu" in why
    assert "it can never start here" in why and "tau quota request" in why


def test_a_run_above_all_flavors_together_can_never_start() -> None:
    limits = {("a", "cpu"): D(6), ("b", "cpu"): D(6)}
    sets = [ps("head", 1, cpu="5"), ps("workers", 1, cpu="5"), ps("more", 1, cpu="5")]
    why = ceiling.never_admittable(sets, limits, "q")
    assert why is not None and "needs 15 CPU in all; queue q may use at most 12" in why


@pytest.mark.parametrize(
    "sets",
    [
        [ps("main", 1, cpu="12")],  # exactly the ceiling: it may start
        [ps("head", 1, cpu="6"), ps("workers", 1, cpu="6")],
        [ps("main", 1, **{"example.com/fpga": "9"})],  # not covered by the queue: Kueue decides
    ],
)
def test_runs_that_may_fit_are_let_through(sets: list[ceiling.PodSet]) -> None:
    assert ceiling.never_admittable(sets, {("cpu", "cpu"): D(12)}, "cpu") is None


def test_memory_is_said_in_gi() -> None:
    why = ceiling.never_admittable(
        [ps("main", 1, memory=str(64 * 2**30))], {("cpu", "memory"): D(32 * 2**30)}, "cpu"
    )
    assert why is not None and "needs 64Gi memory; queue cpu may use at most 32Gi" in why


def test_podsets_of_a_rendered_job_and_rayjob() -> None:
    pod = {
        "containers": [
            {"resources": {"requests": {"cpu": "2", "memory": "1Gi"}}},
            {"resources": {"requests": {"cpu": "500m"}}},
        ]
    }
    job = {"kind": "Job", "spec": {"parallelism": 3, "template": {"spec": pod}}}
    rj = {
        "kind": "RayJob",
        "spec": {
            "rayClusterSpec": {
                "headGroupSpec": {"template": {"spec": pod}},
                "workerGroupSpecs": [
                    {"groupName": "w", "replicas": 2, "numOfHosts": 2, "template": {"spec": pod}}
                ],
            }
        },
    }
    sets = ceiling.podsets([{"kind": "ConfigMap"}, job, rj])
    assert [(s.name, s.count, s.requests["cpu"]) for s in sets] == [
        ("main", 3, D("2.5")),
        ("head", 1, D("2.5")),
        ("w", 4, D("2.5")),
    ]


def _cluster(cpu_quota: str, cohorts_readable: bool = True) -> FakeKube:
    fake = FakeKube(
        {
            "TauCluster": [tau_cluster()],
            "LocalQueue": [
                {"metadata": {"name": q, "namespace": "research"}, "spec": {"clusterQueue": "cpu"}}
                for q in ("cpu", "gpu")
            ],
            "ClusterQueue": [
                cq(
                    "cpu",
                    "team",
                    {"cpu": {"cpu": {"nominalQuota": cpu_quota, "borrowingLimit": "0"}}},
                )
            ],
            "Cohort": [cohort("team", None)],
        }
    )
    if not cohorts_readable:
        fake.forbid.add(("list", "Cohort", None))
    return fake


def test_the_kube_backend_refuses_before_writing_anything(home: Path) -> None:
    fake = _cluster("500m")
    backend = KubeBackend(kube=fake)
    p = prepared(backend, home)
    with pytest.raises(TauError) as e:
        backend.submit(p, SubmitOptions(), lambda _m: None)
    assert e.value.exit_code == EXIT_NOT_ADMITTED
    assert "can never start here" in str(e.value) and "queue cpu may use at most 500m" in str(
        e.value
    )
    assert not any(v == "apply" for v, _k, _ns in fake.calls)  # nothing sent
    assert not list((home / "home-a").rglob("run.json"))  # nothing recorded


@pytest.mark.parametrize(("quota", "readable"), [("64", True), ("500m", False)])
def test_a_run_that_may_fit_or_an_unknown_ceiling_is_submitted(
    home: Path, quota: str, readable: bool
) -> None:
    fake = _cluster(quota, cohorts_readable=readable)
    backend = KubeBackend(kube=fake)
    rd = backend.submit(prepared(backend, home), SubmitOptions(), lambda _m: None)
    assert rd.read_record().handle.sent  # type: ignore[union-attr]


def test_the_room_of_a_queue_is_its_ceiling_less_what_it_uses() -> None:
    gpu = cq(
        "gpu",
        None,
        {
            "a100": {"nvidia.com/gpu": {"nominalQuota": "2"}},
            "h100": {"nvidia.com/gpu": {"nominalQuota": "8"}},
        },
    )
    gpu["status"] = {
        "flavorsUsage": [
            {"name": "a100", "resources": [{"name": "nvidia.com/gpu", "total": "2"}]},
            {"name": "h100", "resources": [{"name": "nvidia.com/gpu", "total": "3"}]},
        ]
    }
    assert ceiling.room("gpu", [gpu], []) == {
        ("a100", "nvidia.com/gpu"): D(0),
        ("h100", "nvidia.com/gpu"): D(5),
    }
    assert ceiling.room("nosuch", [gpu], []) is None


def test_podsets_of_a_rayservice_are_its_head_and_replicas() -> None:
    pod = {"containers": [{"resources": {"requests": {"nvidia.com/gpu": "1", "cpu": "4"}}}]}
    rs = {
        "kind": "RayService",
        "spec": {
            "rayClusterConfig": {
                "headGroupSpec": {
                    "template": {
                        "spec": {"containers": [{"resources": {"requests": {"cpu": "1"}}}]}
                    }
                },
                "workerGroupSpecs": [
                    {"groupName": "replicas", "replicas": 3, "template": {"spec": pod}}
                ],
            }
        },
    }
    head, replicas = ceiling.podsets([rs])
    assert (head.name, head.count, replicas.name, replicas.count) == ("head", 1, "replicas", 3)
    assert replicas.total("nvidia.com/gpu") == D(3)
