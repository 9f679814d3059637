"""Status of a cluster run reads TauRun.status first: the controller's record is the answer
while the controller is alive (its heartbeat on the TauCluster is recent) and the run is past
the queue, or when the run ended; otherwise the client computes it from the run's objects."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from fakekit import cluster_objects, observe_with

from taugrid.api import constants as C
from taugrid.api.kubetime import k8s_time
from taugrid.controller import decide as D
from taugrid.kube.facts import current_status
from taugrid.runs import status

NOW = datetime(2026, 12, 1, 12, 0, 0, tzinfo=UTC)


def taurun(phase: str | None, **extra: Any) -> dict[str, Any]:
    st = (
        {
            "phase": phase,
            "summary": f"{(phase or '').lower()} (the controller's words)",
            "observedAt": "2026-12-01T11:00:00Z",
            "signals": [{"name": "Scheduled", "state": "true", "reason": "1 pod on a100x1-7"}],
            **extra,
        }
        if phase
        else {}
    )
    return {"metadata": {"name": "r1", "namespace": "research"}, "status": st}


def beat(seconds_ago: float) -> str:
    return k8s_time(NOW - timedelta(seconds=seconds_ago))


@pytest.mark.parametrize(
    ("phase", "heartbeat", "trusted"),
    [
        ("Running", beat(5), True),
        ("Running", beat(C.HEARTBEAT_FRESH_S - 1), True),
        ("Starting", beat(5), False),  # its record lags its objects: the client computes
        ("Running", beat(-20), True),  # a controller clock a little ahead
        ("Running", beat(C.HEARTBEAT_FRESH_S + 1), False),  # the controller is gone: compute
        ("Running", None, False),  # no controller ever ran
        ("Running", "not a time", False),
        ("Queued", beat(5), False),  # positions and never-admittable numbers are the client's
        ("Pending", beat(5), False),
        ("Succeeded", None, True),  # an ended run keeps what it ended with
        ("Failed", beat(10_000), True),
        (None, beat(5), False),  # no status written yet
    ],
)
def test_when_the_taurun_status_is_the_answer(
    phase: str | None, heartbeat: str | None, trusted: bool
) -> None:
    got = current_status(taurun(phase), heartbeat, NOW.timestamp())
    assert (got is not None) == trusted
    if got is not None:
        assert got.phase == phase


def test_an_unreadable_status_is_not_trusted() -> None:
    obj = {"metadata": {"name": "r1"}, "status": {"phase": "Sideways"}}
    assert current_status(obj, beat(1), NOW.timestamp()) is None


def _cluster(heartbeat: str | None, phase: str = "Running") -> dict[str, Any]:
    objs = cluster_objects(["r1"])
    objs["TauRun"] = [taurun(phase)]
    objs["TauCluster"] = [
        {
            "metadata": {"name": C.CLUSTER_OBJECT},
            "status": {"controllerHeartbeat": heartbeat} if heartbeat else {},
        }
    ]
    return objs


def test_a_live_controller_s_status_is_read_with_two_requests(tmp_path: Path) -> None:
    """Two for the phase and signals; a running run's progress is one more, from the workspace
    volume's file server (not the API server's storage: its service proxy)."""
    fresh = k8s_time(datetime.now(UTC))
    fake, obs = observe_with(tmp_path, ["r1"], _cluster(fresh))
    assert sorted(v + " " + k for v, k, _ in fake.calls) == [
        "get Service",
        "get TauCluster",
        "get TauRun",
    ]
    st = status.compute(obs[0])
    assert st.phase == "Running"
    assert st.summary == "running (the controller's words)"
    assert st.signals[0].reason == "1 pod on a100x1-7"  # the controller's, not recomputed
    assert fresh in st.evidence and "TauRun status" in st.evidence


def test_a_record_that_still_says_starting_never_takes_back_a_run_the_objects_show_running(
    tmp_path: Path,
) -> None:
    """The controller records a run's phases a moment after its objects change: a watch that
    saw the pods running (the record then said Queued, so the objects were read) must not be
    told "starting" by the record on its next look (seen in CI under load: a dispatched run's
    watch went Running, Starting, Running)."""
    fresh = k8s_time(datetime.now(UTC))
    for recorded in ("Queued", "Starting"):
        _, obs = observe_with(tmp_path / recorded, ["r1"], _cluster(fresh, phase=recorded))
        st = status.compute(obs[0])
        assert st.phase == "Running", (recorded, st.phase, st.summary)
        assert "the controller's words" not in st.summary


def test_without_a_fresh_heartbeat_the_client_computes_from_the_objects(tmp_path: Path) -> None:
    stale = k8s_time(datetime.now(UTC) - timedelta(seconds=C.HEARTBEAT_FRESH_S * 3))
    fake, obs = observe_with(tmp_path, ["r1"], _cluster(stale))
    kinds = {k for _, k, _ in fake.calls}
    assert {"Pod", "Workload", "RayJob", "Node"} <= kinds
    assert fake.calls.count(("get", "TauRun", "research")) == 1  # read once, used twice
    st = status.compute(obs[0])
    assert "the controller's words" not in st.summary
    assert st.evidence == str(tmp_path / "r1")


def test_without_a_taucluster_the_client_computes(tmp_path: Path) -> None:
    objs = _cluster(None)
    del objs["TauCluster"]
    fake, obs = observe_with(tmp_path, ["r1"], objs)
    assert ("list", "Pod", "research") in fake.calls
    assert status.compute(obs[0]).phase in ("Running", "Starting")


def test_the_heartbeat_is_its_own_write_and_wakes_no_reconciler() -> None:
    body = D.heartbeat_body("cluster", NOW)
    assert body["status"] == {"controllerHeartbeat": k8s_time(NOW)}
    a = {
        "spec": {"stack": "s"},
        "status": {"phase": "Ready", "controllerHeartbeat": beat(1)},
        "metadata": {"resourceVersion": "1"},
    }
    b = {
        "spec": {"stack": "s"},
        "status": {"phase": "Ready", "controllerHeartbeat": beat(31)},
        "metadata": {"resourceVersion": "2"},
    }
    assert D.signature(a) == D.signature(b)
    c = {**b, "status": {"phase": "Degraded", "controllerHeartbeat": beat(31)}}
    assert D.signature(a) != D.signature(c)
