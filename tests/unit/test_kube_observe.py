"""The kube backend's status, without a cluster: API calls do not grow with the number of runs,
and the cluster facts become the right signals (a fake client records every call)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fakekit import cluster_objects, observe_with, record

from taugrid.api import constants as C
from taugrid.kube.fake import FakeKube
from taugrid.runs import status


def observe(tmp_path: Path, n: int, first_waits: bool = False) -> tuple[FakeKube, list[Any]]:
    ids = [f"run-{i:05d}" for i in range(n)]
    return observe_with(tmp_path, ids, cluster_objects(ids, first_waits))


def test_api_calls_do_not_grow_with_the_number_of_runs(tmp_path: Path) -> None:
    # a waiting run in both: the queue's visibility call is made once either way
    one, _ = observe(tmp_path / "one", 1, first_waits=True)
    hundred, obs = observe(tmp_path / "hundred", 100, first_waits=True)
    assert len(obs) == 100

    def others(calls: list[tuple[str, str, str | None]]) -> list[tuple[str, str, str | None]]:
        return sorted(c for c in calls if c[1] != "TauRun")

    assert others(one.calls) == others(hundred.calls)  # the same LISTs, once each
    assert len(hundred.calls) == len(set(hundred.calls))
    # the TauRuns: one run is a GET (its cost does not grow with the namespace), many one LIST
    assert [c for c in one.calls if c[1] == "TauRun"] == [("get", "TauRun", "research")]
    assert [c for c in hundred.calls if c[1] == "TauRun"] == [("list", "TauRun", "research")]


def test_cluster_facts_become_signals(tmp_path: Path) -> None:
    _, obs = observe(tmp_path, 2)
    admitted, waiting = (status.compute(o) for o in obs)
    sig = {s.name: s for s in admitted.signals}
    assert admitted.phase == "Running" and sig["Admitted"].state == "true"
    assert sig["Scheduled"].state == "true" and "a100x1-0" in sig["Scheduled"].reason
    assert (
        sig["GPUHealthy"].state == "false"
        and "GPUXidError=True (Xid79)" in sig["GPUHealthy"].reason
    )
    wsig = {s.name: s for s in waiting.signals}
    assert waiting.phase == "Queued" and wsig["Admitted"].state == "pending"
    assert "waiting for quota in queue gpu" in wsig["Admitted"].reason
    assert "1 more GPU needed in flavor a100x1" in waiting.summary  # in TauGrid's words
    assert "1 more needed" in (wsig["Admitted"].detail or "")  # Kueue's own, for -o json


@pytest.mark.parametrize(
    ("conds", "state", "words"),
    [
        (
            [
                {"type": "Admitted", "status": "True"},
                {
                    "type": "Evicted",
                    "status": "True",
                    "reason": "PodsReadyTimeout",
                    "message": "pods not ready in 30m",
                },
            ],
            "false",
            "evicted by Kueue (PodsReadyTimeout): pods not ready in 30m",
        ),
        # the last condition is not the state: Admitted=True listed first still counts
        (
            [{"type": "Admitted", "status": "True"}, {"type": "QuotaReserved", "status": "True"}],
            "true",
            "admitted",
        ),
        ([], "pending", "waiting for admission"),
    ],
)
def test_admitted_reads_conditions_by_type(
    conds: list[dict[str, str]], state: str, words: str
) -> None:
    from taugrid.api.observations import ClusterFacts

    facts = ClusterFacts(taurun=True, workload=True, kueue=conds, queue="gpu")
    s = status._admitted_cluster(facts)
    assert s.state == state and words in s.reason


@pytest.mark.parametrize("queue", [None, "gpu"])
def test_queue_position_from_kueues_visibility_api(tmp_path: Path, queue: str | None) -> None:
    """Asked once per queue: with the LISTs when the records name the queue, else after them
    for the queue of the waiting Workloads."""
    ids = [f"run-{i:05d}" for i in range(4)]  # runs 1 and 3 wait in queue gpu
    objects = cluster_objects(ids)
    objects["Pending"] = [
        {"metadata": {"name": "rayjob-run-00003"}, "positionInLocalQueue": 0},
        {"metadata": {"name": "rayjob-run-00001"}, "positionInLocalQueue": 1},
    ]
    fake, obs = observe_with(tmp_path, ids, objects, queue)
    st = {o.record.run_id: status.compute(o) for o in obs}
    adm = {rid: next(s for s in st[rid].signals if s.name == "Admitted") for rid in ids}
    assert "position 2" in adm["run-00001"].reason and "position 1" in adm["run-00003"].reason
    assert "position" not in adm["run-00000"].reason  # admitted: no queue
    assert [c for c in fake.calls if c[0] == "pending"] == [("pending", "gpu", "research")]


def test_without_the_visibility_api_the_position_is_unknown_with_the_reason(tmp_path: Path) -> None:
    _, obs = observe(tmp_path, 2)
    waiting = status.compute(obs[1])
    adm = next(s for s in waiting.signals if s.name == "Admitted")
    assert (
        "position unknown (Kueue's visibility API (pendingworkloads) is not served here)"
        in adm.reason
    )


# --- a node lost mid-run, an image that cannot be pulled: said at once, in words ---------------
def _running_on(node_list: list[dict[str, Any]], pod_extra: dict[str, Any] | None = None) -> Any:
    rec = record("lost-00001")
    pod = {
        "metadata": {
            "name": "lost-00001-worker",
            "namespace": "research",
            "labels": {C.LABEL_RUN_ID: "lost-00001"},
        },
        "spec": {"nodeName": "a100x1-2"},
        "status": {"phase": "Running", **(pod_extra or {})},
    }
    wl = {
        "metadata": {"name": "lost-00001", "namespace": "research"},
        "spec": {"suspend": False},
        "status": {},
    }
    kw = {
        "metadata": {
            "name": "rayjob-lost-00001",
            "namespace": "research",
            "ownerReferences": [{"name": "lost-00001"}],
        },
        "spec": {"queueName": "gpu"},
        "status": {"conditions": [{"type": "Admitted", "status": "True"}]},
    }
    from taugrid.kube.facts import node_problems, run_facts

    nodes, visible = node_problems(node_list)
    facts = run_facts(rec, True, wl, kw, [pod], {}, nodes, visible, "research")
    from taugrid.api.observations import Observations

    return status.compute(
        Observations(record=rec, history=[], now=0.0, owner_alive=None, cluster=facts)
    )


def _node(name: str, ready: str = "True", reason: str = "") -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {},
        "status": {"conditions": [{"type": "Ready", "status": ready, "reason": reason}]},
    }


@pytest.mark.parametrize(
    ("nodes", "words"),
    [
        ([_node("a100x1-0")], "a100x1-2, which is gone (deleted from the cluster)"),
        (
            [_node("a100x1-2", "Unknown", "NodeStatusUnknown")],
            "a100x1-2, which is NotReady (Ready=Unknown: NodeStatusUnknown)",
        ),
    ],
)
def test_a_pod_on_a_lost_node_is_said_at_once(nodes: list[dict[str, Any]], words: str) -> None:
    st = _running_on(nodes)
    sig = {s.name: s for s in st.signals}
    assert sig["Scheduled"].state == "false" and words in sig["Scheduled"].reason
    assert sig["GPUHealthy"].state == "false" and "a100x1-2" in sig["GPUHealthy"].reason
    assert words in st.summary
    healthy = _running_on([_node("a100x1-2")])
    assert {s.name: s.state for s in healthy.signals}["GPUHealthy"] == "true"


def test_an_image_that_cannot_be_pulled_is_named_on_its_node() -> None:
    waiting = {
        "containerStatuses": [
            {
                "name": "w",
                "state": {
                    "waiting": {
                        "reason": "ImagePullBackOff",
                        "message": 'Back-off pulling image "nope:1"',
                    }
                },
            }
        ]
    }
    st = _running_on([_node("a100x1-2")], waiting)
    sched = next(s for s in st.signals if s.name == "Scheduled")
    assert sched.state == "false"
    assert (
        "is scheduled on a100x1-2, but its image cannot be pulled (ImagePullBackOff" in sched.reason
    )
    assert "not scheduled" not in st.summary


def test_a_403_from_an_unserved_visibility_api_says_it_is_not_served() -> None:
    """RBAC answers before the API exists: a 403 is told apart by discovery."""
    pytest.importorskip("lightkube")
    from taugrid.kube.client import Forbidden, Kube
    from taugrid.kube.kinds import KINDS

    kube = Kube.__new__(Kube)

    def denied(*_a: Any, **_k: Any) -> Any:
        raise Forbidden("get", KINDS["PendingWorkloadsSummary"], "research", "no")

    class Client:
        get = staticmethod(denied)

    kube.client = Client()  # type: ignore[assignment]
    kube.server, kube.context = "https://fake", "x"
    for served, words in (
        (False, "is not served here"),
        (True, "may not read"),
        (None, "not served here, or your identity may not read it"),
    ):
        kube.served = lambda _g, s=served: s  # type: ignore[method-assign]
        got = kube.pending("research", "gpu")
        assert isinstance(got, str) and words in got


@pytest.mark.parametrize(
    ("priority", "counted"),
    [
        # Kueue v1beta2 (what the sandbox runs): the class by reference, evictions counted
        (
            {"priorityClassRef": {"kind": "WorkloadPriorityClass", "name": "high"}},
            {"schedulingStats": {"evictions": [{"reason": "Preempted", "count": 1}]}},
        ),
        ({"priorityClassName": "high"}, {"requeueState": {"count": 1}}),  # older Kueues
    ],
)
def test_a_preempted_run_is_told_which_run_took_its_quota_and_counts_an_attempt(
    tmp_path: Path, priority: dict[str, Any], counted: dict[str, Any]
) -> None:
    ids = ["low-00001", "high-00001"]
    objects = cluster_objects(ids)
    low, high = objects["Workload"]
    high["metadata"]["uid"] = "uid-high"
    high["spec"].update(priority)
    low["status"] = {
        **counted,
        "conditions": [
            {
                "type": "Preempted",
                "status": "True",
                "reason": "InClusterQueue",
                "message": "Preempted to accommodate a workload (UID: uid-high, JobUID: j-1) due "
                "to prioritization in the ClusterQueue",
            },
            {"type": "QuotaReserved", "status": "False", "reason": "Pending", "message": "waiting"},
        ],
    }
    _, obs = observe_with(tmp_path, ids, objects)
    st = status.compute(obs[0])
    adm = next(s for s in st.signals if s.name == "Admitted")
    assert adm.state == "false"
    assert "preempted by run high-00001 (workspace research, priority high)" in adm.reason
    assert "uid-high" not in adm.reason
    assert st.attempt == 1  # the preemption counts as an attempt


def test_a_preemptor_the_user_cannot_see_is_said_so() -> None:
    from taugrid.kube.facts import name_preemptor

    msg = "Preempted to accommodate a workload (UID: x-1, JobUID: y) due to prioritization"
    assert name_preemptor(msg, {}) == (
        "Preempted to accommodate a workload (a workload you cannot see: another workspace's) "
        "due to prioritization"
    )
    assert name_preemptor("no uid here", {}) == "no uid here"


# --- MultiKueue: which worker cluster runs a run, or which were offered it ---------------------
@pytest.mark.parametrize(
    ("kstatus", "state", "needle"),
    [
        (
            {
                "conditions": [{"type": "Admitted", "status": "True"}],
                "clusterName": "east",
                "admission": {"clusterQueue": "gpu"},
            },
            "true",
            "admitted to ClusterQueue gpu, running on worker cluster east (MultiKueue)",
        ),
        (
            {
                "conditions": [{"type": "QuotaReserved", "status": "True"}],
                "nominatedClusterNames": ["east", "west"],
            },
            "pending",
            "offered to worker clusters east, west (MultiKueue): the first to admit it runs it",
        ),
        (
            {"conditions": [{"type": "Admitted", "status": "True"}]},
            "true",
            "admitted",
        ),
    ],
)
def test_the_admitting_worker_cluster_is_named(
    kstatus: dict[str, Any], state: str, needle: str
) -> None:
    from taugrid.api.observations import Observations
    from taugrid.kube.facts import run_facts

    rec = record("multi-00001")
    kw = {
        "metadata": {"name": "job-multi-00001", "namespace": "research"},
        "spec": {"queueName": "gpu"},
        "status": kstatus,
    }
    wl = {"metadata": {"name": "multi-00001", "namespace": "research"}, "spec": {}, "status": {}}
    facts = run_facts(rec, True, wl, kw, [], {}, {}, True, "research")
    adm = status.admitted(
        Observations(record=rec, history=[], now=0.0, owner_alive=None, cluster=facts)
    )
    assert adm.state == state and adm.reason.startswith(needle)
    if not kstatus.get("clusterName") and not kstatus.get("nominatedClusterNames"):
        assert "MultiKueue" not in adm.reason  # one cluster: nothing said of workers


@pytest.mark.parametrize(
    ("job_status", "phase", "scheduled"),
    [
        ({"active": 1, "ready": 1}, "Running", "1 pod(s) ready on worker cluster east"),
        ({"active": 1, "ready": 0}, "Starting", "waiting for pods on worker cluster east"),
        ({}, "Starting", "waiting for pods on worker cluster east"),
        # its pod ended there and the copy has no Complete condition yet: never "starting" again
        (
            {"active": 0, "ready": 0, "succeeded": 1},
            "Running",
            "1 pod(s) ended on worker cluster east",
        ),
    ],
)
def test_a_dispatched_run_is_running_when_the_worker_says_its_pods_are_ready(
    job_status: dict[str, Any], phase: str, scheduled: str
) -> None:
    """A manager has no pods of a dispatched run: what MultiKueue copies back of the Job's
    status (its ready pods on the worker) says whether it runs, never "waiting for pods"."""
    from taugrid.api.observations import Observations
    from taugrid.kube.facts import run_facts

    rec = record("multi-00002", kind="job")
    kw = {
        "metadata": {"name": "job-multi-00002", "namespace": "research"},
        "spec": {"queueName": "gpu"},
        "status": {"conditions": [{"type": "Admitted", "status": "True"}], "clusterName": "east"},
    }
    wl = {"metadata": {"name": "multi-00002", "namespace": "research"}, "status": job_status}
    facts = run_facts(rec, True, wl, kw, [], {}, {}, True, "research")
    st = status.compute(
        Observations(record=rec, history=[], now=0.0, owner_alive=None, cluster=facts)
    )
    assert st.phase == phase
    sch = next(s for s in st.signals if s.name == "Scheduled")
    assert sch.reason == scheduled


def test_a_dispatched_rayjob_runs_when_its_deployment_does() -> None:
    from taugrid.api.observations import Observations
    from taugrid.kube.facts import run_facts

    rec = record("multi-00003")
    kw = {
        "metadata": {"name": "rayjob-multi-00003", "namespace": "research"},
        "status": {"conditions": [{"type": "Admitted", "status": "True"}], "clusterName": "west"},
    }
    for ds, phase in (("Running", "Running"), ("Initializing", "Starting")):
        wl = {"metadata": {"name": "multi-00003"}, "status": {"jobDeploymentStatus": ds}}
        facts = run_facts(rec, True, wl, kw, [], {}, {}, True, "research")
        obs = Observations(record=rec, history=[], now=0.0, owner_alive=None, cluster=facts)
        assert status.compute(obs).phase == phase


def test_a_dispatched_run_that_ran_is_never_starting_again_while_its_pod_exits() -> None:
    """The worker's pod exits: for a moment the copied Job status is active 1, ready 0,
    succeeded 0 (as at its start). A run recorded Running stays Running (seen in CI, where the
    watch showed Running -> Starting -> Succeeded); one that never ran is Starting."""
    from taugrid.api.observations import Observations
    from taugrid.kube.facts import run_facts

    rec = record("multi-00004", kind="job")
    kw = {
        "metadata": {"name": "job-multi-00004", "namespace": "research"},
        "spec": {"queueName": "cpu"},
        "status": {"conditions": [{"type": "Admitted", "status": "True"}], "clusterName": "east"},
    }
    wl = {"metadata": {"name": "multi-00004"}, "status": {"active": 1, "ready": 0}}
    for was, phase in ((True, "Running"), (False, "Starting")):
        facts = run_facts(rec, True, wl, kw, [], {}, {}, True, "research", was_running=was)
        obs = Observations(record=rec, history=[], now=0.0, owner_alive=None, cluster=facts)
        st = status.compute(obs)
        assert st.phase == phase, (was, st.phase, st.summary)
