"""The lifecycle recorder: timeline condensation, TauRun.status from a run's objects (the same
status engine as the CLI), NodeFailure on a faulty GPU node, and `tau run status` falling back
to the recorded status once pods and events are gone."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from runkit import job, kueue, pod, taurun

from taugrid.api.crds import TauRunStatus
from taugrid.api.evidence import KubeHandle, RunRecord
from taugrid.api.manifest import Resilience
from taugrid.api.observations import Observations
from taugrid.api.vocabulary import Phase, TerminationReason, TimelineEntry
from taugrid.controller import recorder as REC
from taugrid.controller.timeline import FOLDED, condense
from taugrid.kube.facts import namespace_facts
from taugrid.runs.status import compute

NOW = datetime(2026, 12, 1, 12, 0, 30, tzinfo=UTC)


def e(
    at: str, reason: str, message: str = "", count: int = 1, last: str | None = None
) -> TimelineEntry:
    return TimelineEntry(
        at=f"2026-12-01T12:00:{at}Z",
        reason=reason,
        message=message,
        count=count,
        last=f"2026-12-01T12:00:{last}Z" if last else None,
    )


def test_repeats_fold_and_reobserved_events_do_not_double() -> None:
    got = condense([], [e("01", "BackOff", "pull", 3, "05"), e("01", "Queued")])
    assert [x.reason for x in got] == ["Queued", "BackOff"]  # a run's life first, then by name
    # the same event seen again with a higher count: one entry, the larger count
    again = condense(got, [e("01", "BackOff", "pull", 5, "09")])
    backoff = next(x for x in again if x.reason == "BackOff")
    assert backoff.count == 5 and backoff.last == "2026-12-01T12:00:09Z"
    # consecutive identical entries at different times fold into one with a count
    folded = condense(
        [], [e("01", "FailedScheduling", "no node"), e("02", "FailedScheduling", "no node")]
    )
    assert len(folded) == 1 and folded[0].count == 2 and folded[0].last == "2026-12-01T12:00:02Z"


def test_a_long_timeline_keeps_its_start_and_end() -> None:
    many = [e(f"{i:02d}", f"R{i}") for i in range(50)]
    got = condense([], many, limit=12)
    assert len(got) == 12
    assert [x.reason for x in got[:5]] == ["R0", "R1", "R2", "R3", "R4"]
    assert got[5].reason == FOLDED and got[5].count == 50 - 11
    assert got[-1].reason == "R49"
    # folding again keeps counting what was folded before
    more = condense(got, [e("59", "Last")], limit=12)
    fold = next(x for x in more if x.reason == FOLDED)
    assert fold.count == 50 - 11 + 1 and more[-1].reason == "Last"


def test_order_within_a_second_is_the_runs_life_whatever_order_it_was_seen_in() -> None:
    want = ["Queued", "KueueAdmitted", "Running"]
    got = condense([e("01", "Queued")], [e("01", "KueueAdmitted"), e("01", "Running")])
    assert [x.reason for x in got] == want
    swapped = condense([e("01", "Running")], [e("01", "Queued"), e("01", "KueueAdmitted")])
    assert [x.reason for x in swapped] == want


def test_a_repeat_is_counted_once_however_often_it_is_observed() -> None:
    """The storm a reviewer saw: the same observations folded again on every pass made the
    count grow ("x2994") and the status change, so the controller wrote it again and again."""
    seen = [
        e("01", "Pending", "waiting for quota"),
        e("03", "Pending", "waiting for quota"),
        e("05", "KueueAdmitted"),
        e("06", "Running"),
    ]
    first = condense([], seen)
    assert [(x.reason, x.count) for x in first] == [
        ("Pending", 2),
        ("KueueAdmitted", 1),
        ("Running", 1),
    ]
    again = first
    for _ in range(50):
        again = condense(again, seen)
    assert again == first


from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

_entries = st.lists(
    st.builds(
        e,
        at=st.sampled_from(["01", "02", "03", "07"]),
        reason=st.sampled_from(["Pending", "Running", "BackOff", "KueueAdmitted", "Scheduled"]),
        message=st.sampled_from(["", "a", "b"]),
        count=st.integers(1, 4),
        last=st.sampled_from([None, "08", "09"]),
    ),
    max_size=40,
)


@settings(max_examples=500, deadline=None)
@given(old=_entries, new=_entries, limit=st.integers(8, 30))
def test_condensing_again_with_the_same_observations_changes_nothing(
    old: list[TimelineEntry], new: list[TimelineEntry], limit: int
) -> None:
    once = condense(old, new, limit)
    assert condense(once, new, limit) == once
    assert len(once) <= max(limit, len(old) + len(new))


def indexes(taurun_obj: dict[str, Any], workload: dict[str, Any] | None = None) -> dict[str, Any]:
    """kopf's indexes as the controller's handlers get them, for the run kq-abc12: its TauRun,
    Job, Kueue Workload and one running pod."""
    key = ("research", "kq-abc12")
    return {
        "taurun_idx": {key: [taurun_obj]},
        "job_idx": {key: [workload or job()]},
        "rayjob_idx": {},
        "kueue_idx": {key: [kueue()]},
        "kueue_uid_idx": {},
        "pod_idx": {key: [pod()]},
        "event_idx": {},
    }


def test_a_running_run_is_recorded_with_its_signals_and_timeline() -> None:
    objs = REC.RunObjects(taurun=taurun(), workload=job(), kueue=kueue(), pods=[pod()])
    st = REC.compute_status(objs, {"a100x1-0": []}, NOW)
    assert st.phase == Phase.Running and st.nodes == ["a100x1-0"]
    sig = {s.name: s.state for s in st.signals}
    assert sig["Admitted"] == "true" and sig["GPUHealthy"] == "true"
    reasons = [x.reason for x in st.timeline]
    assert reasons == ["KueueQuotaReserved", "KueueAdmitted", "Scheduled", "Running"]
    # the same objects again: nothing to write
    again = REC.compute_status(
        REC.RunObjects(
            taurun=taurun(st.model_dump(mode="json")), workload=job(), kueue=kueue(), pods=[pod()]
        ),
        {"a100x1-0": []},
        NOW,
    )
    assert REC.same(st, again)


def test_a_gpu_fault_on_its_node_shows_and_a_failure_there_is_a_node_failure() -> None:
    objs = REC.RunObjects(taurun=taurun(), workload=job(), kueue=kueue(), pods=[pod()])
    bad = {"a100x1-0": ["GPUXidError=True (XID 79)"]}
    st = REC.compute_status(objs, bad, NOW, {"a100x1-0": "2026-12-01T12:00:20Z"})
    gpu = next(s for s in st.signals if s.name == "GPUHealthy")
    assert gpu.state == "false" and "XID 79" in gpu.reason
    fault = next(x for x in st.timeline if x.reason == "GPUFault")
    assert fault.at == "2026-12-01T12:00:20Z" and "a100x1-0: GPUXidError" in fault.message
    # recomputed later (the run moved on): the fault stays in its timeline, once
    later = REC.compute_status(
        REC.RunObjects(
            taurun=taurun(st.model_dump(mode="json")),
            workload=job(),
            kueue=kueue(),
            pods=[pod(node="a100x1-1")],
        ),
        {},
        NOW,
    )
    assert [x.reason for x in later.timeline].count("GPUFault") == 1
    failed = REC.compute_status(
        REC.RunObjects(
            taurun=taurun(st.model_dump(mode="json")),
            workload=job(failed=True),
            kueue=kueue(),
            pods=[pod(phase="Failed")],
        ),
        bad,
        NOW,
    )
    assert failed.phase == Phase.Failed
    assert failed.terminationReason == TerminationReason.NodeFailure
    assert "faulty GPU node" in (failed.summary or "")
    assert TerminationReason.NodeFailure.retried_by(Resilience().retry_on)  # by default


def test_a_failure_the_recorder_narrows_is_said_in_words_in_its_summary_and_timeline() -> None:
    """Found on real nodes: a Job over its memory limit was recorded OOMKilled, yet `tau run
    status` said only "BackoffLimitExceeded". Each narrowed reason leads the summary."""
    oom = pod(phase="Failed")
    oom["spec"]["containers"] = [{"name": "main", "resources": {"limits": {"memory": "256Mi"}}}]
    oom["status"]["containerStatuses"] = [
        {"name": "main", "state": {"terminated": {"reason": "OOMKilled", "exitCode": 137}}}
    ]
    evicted = pod(phase="Failed")
    evicted["status"]["conditions"].append(
        {"type": "DisruptionTarget", "status": "True", "reason": "TerminationByKubelet"}
    )
    cases = [
        (
            oom,
            TerminationReason.OOMKilled,
            "out of memory: container main of pod kq-abc12-p went over its memory limit 256Mi",
        ),
        (evicted, TerminationReason.Evicted, "evicted from its node"),
        (pod(phase="Failed"), TerminationReason.Failed, "BackoffLimitExceeded"),
    ]
    for p, reason, words in cases:
        st = REC.compute_status(
            REC.RunObjects(taurun=taurun(), workload=job(failed=True), kueue=kueue(), pods=[p]),
            {},
            NOW,
        )
        assert st.phase == Phase.Failed and st.terminationReason == reason
        assert (st.summary or "").startswith(words) or words in (st.summary or ""), st.summary
        assert "BackoffLimitExceeded" in (st.summary or "")  # the cluster's own words kept
        assert any(x.reason == "Failed" and words in x.message for x in st.timeline)
        if reason == TerminationReason.Failed:
            assert not (st.summary or "").startswith(("out of memory", "evicted"))


def test_an_ended_run_keeps_its_record_when_its_objects_go() -> None:
    done = REC.compute_status(
        REC.RunObjects(
            taurun=taurun(), workload=job(done=True), kueue=kueue(), pods=[pod(phase="Succeeded")]
        ),
        {},
        NOW,
    )
    assert done.phase == Phase.Succeeded and done.completionTime
    gone = REC.compute_status(REC.RunObjects(taurun=taurun(done.model_dump(mode="json"))), {}, NOW)
    assert gone == done
    # half gone (the Job deleted, a pod still terminating): still what it ended with
    half = REC.compute_status(
        REC.RunObjects(taurun=taurun(done.model_dump(mode="json")), pods=[pod(phase="Running")]),
        {},
        NOW,
    )
    assert half == done


def test_status_falls_back_to_the_record_once_pods_and_events_are_gone() -> None:
    recorded = TauRunStatus(
        phase=Phase.Failed,
        terminationReason=TerminationReason.NodeFailure,
        summary="failed on a faulty GPU node",
        observedAt="2026-12-01T12:00:20Z",
        startTime="2026-12-01T12:00:05Z",
        completionTime="2026-12-01T12:00:20Z",
        timeline=[e("03", "KueueAdmitted")],
    )
    rec = RunRecord(
        run_id="kq-abc12",
        name="kq",
        workspace="research",
        profile="a100x1",
        workload_kind="job",
        handle=KubeHandle(namespace="research"),
        submitter="alice",
        code_folder=".",
        code_revision="r",
        code_digest="d",
        config_hash="h",
        image="i",
        entrypoint="e",
        created_at="2026-12-01T12:00:00Z",
        gpus_per_worker=1,
    )
    lists: dict[Any, Any] = {("TauRun", "research"): [taurun(recorded.model_dump(mode="json"))]}
    facts = namespace_facts("research", [rec], lists, {}, True)
    st = compute(
        Observations(
            record=rec, history=[], now=NOW.timestamp(), owner_alive=None, cluster=facts["kq-abc12"]
        )
    )
    assert st.phase == Phase.Failed and st.termination_reason == TerminationReason.NodeFailure
    assert "faulty GPU node" in st.summary and "recorded by the controller" in st.summary
    assert st.timeline and st.timeline[0].reason == "KueueAdmitted"
    assert (st.evidence or "").startswith("TauRun status (the controller's record")
    # without a record, the same emptiness is not explained away
    bare = namespace_facts("research", [rec], {("TauRun", "research"): [taurun()]}, {}, True)
    st2 = compute(
        Observations(
            record=rec, history=[], now=NOW.timestamp(), owner_alive=None, cluster=bare["kq-abc12"]
        )
    )
    assert st2.phase != Phase.Failed and not st2.timeline


def test_a_job_retried_by_kubernetes_counts_each_attempt_with_its_reason() -> None:
    """A node lost mid-run: Kubernetes retries the Job's pod elsewhere. Each retry is an
    attempt, in the status and in the timeline (once, however often it is recomputed)."""
    first = REC.compute_status(
        REC.RunObjects(taurun=taurun(), workload=job(), kueue=kueue(), pods=[pod()]),
        {"a100x1-0": []},
        NOW,
    )
    assert first.attempt == 0
    retried = job()
    retried["status"]["failed"] = 1  # one pod failed; the Job made another
    evicted = pod(node="a100x1-1")
    evicted["status"]["conditions"].append(
        {
            "type": "DisruptionTarget",
            "status": "True",
            "reason": "DeletionByTaintManager",
            "message": "node lost",
            "lastTransitionTime": "2026-12-01T12:00:30Z",
        }
    )
    objs = REC.RunObjects(
        taurun=taurun(first.model_dump(mode="json")),
        workload=retried,
        kueue=kueue(),
        pods=[evicted],
    )
    second = REC.compute_status(objs, {"a100x1-1": []}, NOW)
    assert second.attempt == 1
    retry = [x for x in second.timeline if x.reason == "Retrying"]
    assert len(retry) == 1 and retry[0].message.startswith("attempt 1 after ")
    objs.taurun = taurun(second.model_dump(mode="json"))
    third = REC.compute_status(objs, {"a100x1-1": []}, NOW)
    assert REC.same(second, third)


def test_a_burst_of_events_before_the_index_catches_up_writes_the_status_once() -> None:
    """The controller's own status write comes back through the TauRun watch later than the
    pod and Job events that follow it: each of those computed from the status before the write
    and wrote it again (5 writes in 60 ms). Now one write; the next visible change writes."""
    import asyncio
    from datetime import timedelta

    import pytest

    pytest.importorskip("kopf")
    from taugrid.controller.config import ControllerConfig
    from taugrid.controller.operator import Controller
    from taugrid.kube.fake import FakeKube

    fake = FakeKube({"TauRun": [taurun()]})
    stale = fake.get("TauRun", "kq-abc12", "research")
    assert stale is not None
    clock = iter(NOW + timedelta(seconds=s) for s in range(100))
    ctl = Controller(ControllerConfig(), fake, clock=lambda: next(clock))  # type: ignore[arg-type]
    key = ("research", "kq-abc12")

    def index(workload: dict[str, Any], taurun_obj: dict[str, Any]) -> dict[str, Any]:
        return indexes(taurun_obj, workload)

    def writes() -> int:
        return sum(c[0] == "apply_status" for c in fake.calls)

    for _ in range(5):  # the index still has the TauRun from before the first write
        asyncio.run(ctl.record_now(key, index(job(), stale)))
    assert writes() == 1
    assert fake.get("TauRun", "kq-abc12", "research")["status"]["phase"] == "Running"  # type: ignore[index]
    asyncio.run(ctl.record_now(key, index(job(done=True), stale)))  # a change a user sees
    assert writes() == 2
    assert fake.get("TauRun", "kq-abc12", "research")["status"]["phase"] == "Succeeded"  # type: ignore[index]
    # once the index has caught up, it is what the recorder reads (no second copy kept)
    fresh = fake.get("TauRun", "kq-abc12", "research")
    asyncio.run(ctl.record_now(key, index(job(done=True), fresh)))  # type: ignore[arg-type]
    assert writes() == 2 and key not in ctl._written
    # a TauRun made anew under the same name (another uid, no status yet) is written to, and
    # not mistaken for the old one the last write returned
    asyncio.run(ctl.record_now(key, index(job(done=True), stale)))
    assert writes() == 3 and key in ctl._written
    remade = {
        **taurun(),
        "metadata": {**taurun()["metadata"], "uid": "other", "resourceVersion": "1"},
    }
    asyncio.run(ctl.record_now(key, index(job(done=True), remade)))
    assert writes() == 4


def test_a_job_that_failed_without_a_retry_is_attempt_0() -> None:
    """A Job whose one pod failed and which then failed (no retries left) was tried once: not
    "attempt 1" with a "Retrying" entry for a retry that never happened."""
    failed = job(failed=True)
    failed["status"]["failed"] = 1
    st = REC.compute_status(
        REC.RunObjects(taurun=taurun(), workload=failed, kueue=kueue(), pods=[pod(phase="Failed")]),
        {"a100x1-0": []},
        NOW,
    )
    assert st.phase == Phase.Failed and st.attempt == 0
    assert not [x for x in st.timeline if x.reason == "Retrying"]
    retried = job(failed=True)
    retried["status"]["failed"] = 3  # two retries, then the Job gave up
    st = REC.compute_status(
        REC.RunObjects(
            taurun=taurun(), workload=retried, kueue=kueue(), pods=[pod(phase="Failed")]
        ),
        {"a100x1-0": []},
        NOW,
    )
    assert st.attempt == 2


def test_the_changes_of_a_while_are_recorded_in_one_write(monkeypatch: Any) -> None:
    """A run's steps come in bursts (queued, quota reserved, admitted): each change used to be
    a status write (11 a run at scale). Now the changes within RECORD_AFTER_S are one write,
    of the run as it is at the end of that while."""
    import asyncio

    import pytest

    pytest.importorskip("kopf")
    from taugrid.controller import operator as OP
    from taugrid.controller.config import ControllerConfig
    from taugrid.kube.fake import FakeKube

    monkeypatch.setattr(OP, "RECORD_AFTER_S", 0.01)
    fake = FakeKube({"TauRun": [taurun()]})
    tr = fake.get("TauRun", "kq-abc12", "research")
    ctl = OP.Controller(ControllerConfig(), fake, clock=lambda: NOW)  # type: ignore[arg-type]
    key = ("research", "kq-abc12")
    live = indexes(tr)  # type: ignore[arg-type]

    async def burst() -> None:
        for _ in range(5):
            await ctl.record(key, live)
        assert len(ctl._due) == 1
        live["job_idx"] = {key: [job(done=True)]}  # the last change of the while
        await asyncio.gather(*list(ctl._due.values()))

    asyncio.run(burst())
    assert sum(c[0] == "apply_status" for c in fake.calls) == 1
    assert fake.get("TauRun", "kq-abc12", "research")["status"]["phase"] == "Succeeded"  # type: ignore[index]
    assert not ctl._due


def test_a_gpu_fault_on_a_runs_node_is_recorded_at_once_not_a_second_later() -> None:
    """The controller quarantines a faulty node and its runs' pods move off it within a second:
    a recording delayed like other changes (RECORD_AFTER_S) found them elsewhere and the run's
    timeline never said its node had failed (two e2e tests caught it)."""
    import asyncio

    import pytest

    pytest.importorskip("kopf")
    from taugrid.controller import operator as OP
    from taugrid.controller.config import ControllerConfig
    from taugrid.kube.fake import FakeKube

    fake = FakeKube({"TauRun": [taurun()]})
    tr = fake.get("TauRun", "kq-abc12", "research")
    ctl = OP.Controller(ControllerConfig(), fake, clock=lambda: NOW)  # type: ignore[arg-type]
    key = ("research", "kq-abc12")
    kw = {**indexes(tr), "node_runs_idx": {"a100x1-0": [key]}}  # type: ignore[arg-type]
    faulty = {
        "metadata": {"name": "a100x1-0", "labels": {}},
        "spec": {},
        "status": {
            "allocatable": {"nvidia.com/gpu": "1"},
            "conditions": [
                {"type": "Ready", "status": "True"},
                {"type": "GPUXidError", "status": "True", "reason": "XID79"},
            ],
        },
    }

    async def fault() -> None:
        await ctl.node_changed("a100x1-0", faulty, kw)
        assert not ctl._due  # nothing left for later: it is written already

    asyncio.run(fault())
    st = fake.get("TauRun", "kq-abc12", "research")["status"]  # type: ignore[index]
    assert any(e["reason"] == "GPUFault" and "a100x1-0" in e["message"] for e in st["timeline"])


def test_a_pod_about_to_go_is_recorded_at_once() -> None:
    """An evicted or failed pod says why the run failed (DisruptionTarget, its exit) and is
    deleted moments later: its change is recorded at once, other changes a second later."""
    import pytest

    pytest.importorskip("kopf")
    from taugrid.controller.operator import _fleeting

    assert not _fleeting(pod())
    evicted = pod()
    evicted["status"]["conditions"].append({"type": "DisruptionTarget", "status": "True"})
    assert _fleeting(evicted)
    assert _fleeting(pod(phase="Failed"))
    deleting = pod()
    deleting["metadata"]["deletionTimestamp"] = "2026-12-01T12:00:40Z"
    assert _fleeting(deleting)


def test_a_run_just_submitted_is_first_recorded_once_kueue_has_its_workload(
    monkeypatch: Any,
) -> None:
    """A burst of submissions wrote each run twice ("no Kueue Workload yet", then "queued") while
    Kueue caught up. A run with no status yet waits for its Workload (up to
    FIRST_RECORD_WITHIN_S after it was created): one write; with no Workload by then, the
    truth without it."""
    import asyncio
    from datetime import timedelta

    import pytest

    pytest.importorskip("kopf")
    from taugrid.controller import operator as OP
    from taugrid.controller.config import ControllerConfig
    from taugrid.kube.fake import FakeKube

    monkeypatch.setattr(OP, "RECORD_AFTER_S", 0.001)
    key = ("research", "kq-abc12")
    now = [NOW.replace(second=1)]  # a second after the TauRun was created

    def setup() -> tuple[FakeKube, Any, dict[str, Any]]:
        fake = FakeKube({"TauRun": [taurun()]})
        tr = fake.get("TauRun", "kq-abc12", "research")
        ctl = OP.Controller(ControllerConfig(), fake, clock=lambda: now[0])  # type: ignore[arg-type]
        live = {**indexes(tr), "kueue_idx": {}, "job_idx": {}, "pod_idx": {}}  # type: ignore[arg-type]
        return fake, ctl, live

    def written(fake: FakeKube) -> tuple[int, Any]:
        tr = fake.get("TauRun", "kq-abc12", "research") or {}
        return sum(c[0] == "apply_status" for c in fake.calls), (tr.get("status") or {})

    fake, ctl, live = setup()

    async def workload_comes() -> None:
        await ctl.record(key, live)
        for _ in range(20):  # many of its waits go by: nothing written
            await asyncio.sleep(0.002)
        assert written(fake)[0] == 0 and key in ctl._due
        live["kueue_idx"] = {key: [{**kueue(), "status": {}}]}  # Kueue made it: not admitted yet
        live["job_idx"] = {key: [{**job(), "spec": {"suspend": True}, "status": {}}]}
        await asyncio.gather(*list(ctl._due.values()))

    asyncio.run(workload_comes())
    n, status = written(fake)
    assert (n, status["phase"]) == (1, "Queued")

    fake, ctl, live = setup()

    async def no_kueue() -> None:
        await ctl.record(key, live)
        await asyncio.sleep(0.01)
        assert written(fake)[0] == 0
        now[0] = NOW + timedelta(seconds=OP.FIRST_RECORD_WITHIN_S)  # no Workload all that while
        await asyncio.gather(*list(ctl._due.values()))

    asyncio.run(no_kueue())
    n, status = written(fake)
    assert (n, status["phase"]) == (1, "Pending")
    assert "no Kueue Workload" in status["summary"]


def test_what_the_controller_keeps_of_a_workload_says_what_the_whole_one_says() -> None:
    """The index keeps a Workload without its pod templates (most of its bytes): a run's status
    from the kept Workload is the status from the whole one."""
    import pytest

    pytest.importorskip("kopf")
    from taugrid.controller.kopfkit import slim

    whole = {**kueue(), "kind": "Workload", "apiVersion": "kueue.x-k8s.io/v1beta2"}
    whole["spec"] = {
        **whole["spec"],
        "priorityClassRef": {"name": "high"},
        "podSets": [
            {
                "name": "main",
                "count": 1,
                "template": {"spec": {"containers": [{"name": "c" * 5000}]}},
            }
        ],
    }
    kept = slim(whole)
    assert "podSets" not in kept["spec"] and kept["spec"]["queueName"] == "gpu"
    assert kept["spec"]["priorityClassRef"] == {"name": "high"}
    for k in (whole, kept):
        st = REC.compute_status(
            REC.RunObjects(taurun=taurun(), workload=job(), kueue=k, pods=[pod()]),
            {"a100x1-0": []},
            NOW,
        )
        if k is whole:
            want = st
    assert REC.same(st, want) and st.model_dump() == want.model_dump()


def test_what_the_controller_keeps_of_an_oomkilled_pod_names_its_memory_limit() -> None:
    """Found on real nodes: the kept pod had no containers, so OOM's words lost the limit."""
    import pytest

    pytest.importorskip("kopf")
    from taugrid.controller.kopfkit import slim

    whole = {**pod(phase="Failed"), "kind": "Pod", "apiVersion": "v1"}
    whole["spec"]["containers"] = [
        {
            "name": "main",
            "image": "x" * 5000,
            "env": [{"name": "A", "value": "b"}],
            "resources": {"limits": {"memory": "256Mi", "cpu": "1"}},
        },
        {"name": "sidecar", "resources": {}},
    ]
    whole["status"]["containerStatuses"] = [
        {"name": "main", "state": {"terminated": {"reason": "OOMKilled", "exitCode": 137}}}
    ]
    kept = slim(whole)
    assert "x" * 5000 not in json.dumps(kept)  # the spec is still not kept whole
    said = [
        REC.compute_status(
            REC.RunObjects(taurun=taurun(), workload=job(failed=True), kueue=kueue(), pods=[p]),
            {},
            NOW,
        ).summary
        for p in (whole, kept)
    ]
    assert said[0] == said[1] and "memory limit 256Mi" in (said[0] or ""), said


def test_a_run_waits_for_its_turn_once_however_often_it_changes_meanwhile() -> None:
    """Status writes go one at a time; a run whose write waits for its turn is written as it is
    when the turn comes, so its further changes add no turns (at 10,000 runs the queue held a
    turn per change, each spending a paced moment). A write cancelled while it waits leaves the
    run free to queue again."""
    import asyncio

    import pytest

    pytest.importorskip("kopf")
    from taugrid.controller import operator as OP
    from taugrid.controller.config import ControllerConfig
    from taugrid.controller.turns import Turns
    from taugrid.kube.fake import FakeKube

    fake = FakeKube({"TauRun": [taurun()]})
    stale = fake.get("TauRun", "kq-abc12", "research")
    assert stale is not None
    ctl = OP.Controller(ControllerConfig(), fake, clock=lambda: NOW)  # type: ignore[arg-type]

    async def no_sleep(_: float) -> None:
        return None

    ctl.turns = Turns(20.0, sleep=no_sleep)
    key = ("research", "kq-abc12")

    async def main() -> tuple[int, int, bool]:
        await ctl.turns.wait()  # another run's write has the turn
        changes = [
            asyncio.create_task(ctl.record_now(key, indexes(stale, job()))) for _ in range(5)
        ]
        await asyncio.sleep(0)
        queued = len(ctl.turns._waiting)
        changes[0].cancel()  # the one waiting: cancelled (a shutdown)
        await asyncio.sleep(0)
        free = key not in ctl._queued
        again = asyncio.create_task(ctl.record_now(key, indexes(stale, job())))
        await asyncio.sleep(0)
        requeued = len([w for w in ctl.turns._waiting if not w[2].done()])
        ctl.turns.done()
        await asyncio.wait_for(asyncio.gather(*changes, again, return_exceptions=True), 5)
        return queued, requeued, free

    queued, requeued, free = asyncio.run(main())
    assert queued == 1 and free and requeued == 1
    assert sum(c[0] == "apply_status" for c in fake.calls) == 1


def test_a_dispatched_runs_workers_are_kept_in_order_and_a_lost_one_is_said() -> None:
    """A MultiKueue manager's run: each worker cluster it was dispatched to is recorded in order
    (the last runs it); Kueue taking it back from a lost worker and the move are in the timeline;
    `tau run status` says both."""
    import copy
    from dataclasses import replace

    from taugrid.cli.output import print_status

    def on(worker: str | None, lost: bool = False) -> dict[str, Any]:
        kw = kueue()
        if worker:
            kw["status"]["clusterName"] = worker
        if lost:
            kw["status"]["conditions"].append(
                {
                    "type": "Evicted",
                    "status": "True",
                    "reason": "AdmissionCheck",
                    "lastTransitionTime": "2026-12-01T12:00:20Z",
                    "message": 'Evicted due to AdmissionCheck in Retry state: "taugrid-multikueue" '
                    '(Admitting remote lost, Previously: "Ready")',
                }
            )
        return kw

    ready = job()
    ready["status"]["ready"] = 1
    first = REC.compute_status(REC.RunObjects(taurun(), ready, on("worker-1")), {}, NOW)
    assert first.clusters == ["worker-1"]
    again = REC.compute_status(
        REC.RunObjects(taurun(first.model_dump(mode="json")), ready, on("worker-1")), {}, NOW
    )
    assert again.clusters == ["worker-1"]  # once per dispatch, not per pass
    lost = REC.compute_status(
        REC.RunObjects(taurun(again.model_dump(mode="json")), ready, on(None, lost=True)), {}, NOW
    )
    said = [t for t in lost.timeline if t.reason == "WorkerLost"]
    assert len(said) == 1 and "worker-1 stopped answering" in said[0].message
    moved = REC.compute_status(
        REC.RunObjects(taurun(lost.model_dump(mode="json")), copy.deepcopy(ready), on("worker-2")),
        {},
        NOW,
    )
    assert moved.clusters == ["worker-1", "worker-2"] and moved.cluster == "worker-2"
    assert any(
        t.reason == "Redispatched" and "worker-2 (was on worker-1)" in t.message
        for t in moved.timeline
    )
    assert [t.reason for t in moved.timeline].count("WorkerLost") == 1
    # the status a researcher reads
    rec = REC.record_of(taurun(moved.model_dump(mode="json")))
    facts = namespace_facts(
        "research",
        [rec],
        {("TauRun", "research"): [taurun(moved.model_dump(mode="json"))]},
        {},
        True,
    )[rec.run_id]
    facts = replace(facts, current=True)
    st = compute(
        Observations(record=rec, history=[], now=NOW.timestamp(), owner_alive=None, cluster=facts)
    )
    assert st.clusters == ["worker-1", "worker-2"]
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        print_status(st)
    assert "worker cluster: worker-2 (before: worker-1, lost or given back)" in out.getvalue()
