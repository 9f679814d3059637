"""The controller's use of kopf at scale: a restart among thousands of objects reaches its first
handler (kopf's readiness barrier without a worker bound, waking its waiters once), kopf builds
no diff base the controller has no use for, and status writes are paced."""

from __future__ import annotations

import asyncio
import inspect
from typing import Any

import pytest

kopf = pytest.importorskip("kopf")

from kopf._cogs.aiokits import aiotoggles  # noqa: E402

from taugrid.api import constants as C  # noqa: E402
from taugrid.controller import kopfkit as KK  # noqa: E402
from taugrid.controller import operator as OP  # noqa: E402
from taugrid.controller.config import ControllerConfig  # noqa: E402
from taugrid.controller.turns import Turns  # noqa: E402
from taugrid.kube.fake import FakeKube  # noqa: E402


def _barrier_wakeups(toggle_set_type: type[Any], objects: int) -> tuple[int, int]:
    """kopf's start: each object's worker makes a "not indexed" toggle, indexes, drops it and
    waits for the whole set. How many of them got through, and how often a waiter re-checked."""
    checks = 0

    async def main() -> int:
        nonlocal checks
        indexed = toggle_set_type(all)
        toggles = [await indexed.make_toggle(name=str(i)) for i in range(objects)]
        original_is_on = indexed.is_on

        def counted() -> bool:
            nonlocal checks
            checks += 1
            return bool(original_is_on())

        indexed.is_on = counted

        async def worker(t: Any) -> None:
            await indexed.drop_toggle(t)
            await indexed.wait_for(True)

        tasks = []
        for t in toggles:  # objects come from the watch one after another
            tasks.append(asyncio.create_task(worker(t)))
            await asyncio.sleep(0)
            await asyncio.sleep(0)
        await asyncio.wait_for(asyncio.gather(*tasks), 60)
        return sum(t.done() for t in tasks)

    return asyncio.run(main()), checks


def test_the_readiness_barrier_wakes_each_waiter_once_not_once_per_object() -> None:
    """kopf's own set woke every waiter at every drop: the square of the objects (a restarted
    controller among 1,000 runs' ~5,000 objects took minutes before its first handler)."""
    n = 300
    done, checks = _barrier_wakeups(KK.QuietToggleSet, n)
    assert done == n
    assert checks <= 5 * n  # a few checks per worker, however many objects
    _, kopf_checks = _barrier_wakeups(aiotoggles.ToggleSet, n)
    assert kopf_checks > 20 * n  # what it replaces (if kopf fixes this, the patch can go)


def test_the_quiet_set_keeps_kopfs_semantics() -> None:
    async def main() -> None:
        any_set = KK.QuietToggleSet(any)
        assert not any_set.is_on()
        t = await any_set.make_toggle(False, name="peering missing")
        waiter = asyncio.create_task(any_set.wait_for(True))
        await asyncio.sleep(0)
        assert not waiter.done()
        await t.turn_to(True)  # a member's own change wakes the waiters (kopf's Toggle)
        await asyncio.wait_for(waiter, 5)
        assert any_set.is_on()
        await any_set.drop_toggles([t])
        assert not any_set.is_on() and len(any_set) == 0

    asyncio.run(main())


def test_kopf_makes_its_toggle_sets_where_the_patch_reaches(monkeypatch: Any) -> None:
    from kopf._core.reactor import orchestration, running

    monkeypatch.setattr(aiotoggles, "ToggleSet", aiotoggles.ToggleSet)  # restored afterwards
    KK.install_quiet_toggles()
    assert aiotoggles.ToggleSet is KK.QuietToggleSet
    # kopf looks the class up on the module when the operator starts, so the patch applies
    assert "aiotoggles.ToggleSet(all)" in inspect.getsource(orchestration)
    assert "aiotoggles.ToggleSet(any)" in inspect.getsource(running)


def test_the_controller_settings_no_worker_bound_and_no_diff_base() -> None:
    ctl = OP.Controller(ControllerConfig(), FakeKube())  # type: ignore[arg-type]
    settings = kopf.OperatorSettings()
    ctl.configure(settings)
    # a bound on kopf's per-object workers deadlocks a restart with more objects than workers
    assert settings.queueing.worker_limit is None
    assert not KK.reacts_to_changes(ctl.registry)
    assert isinstance(settings.persistence.diffbase_storage, KK.NoDiffBase)
    assert settings.persistence.diffbase_storage.build(body={"spec": {"big": 1}}) == {}


def test_a_registry_with_a_change_handler_keeps_kopfs_diff_base() -> None:
    reg = kopf.OperatorRegistry()

    @kopf.on.update("v1", "configmaps", registry=reg)
    def changed(**_: Any) -> None: ...

    assert KK.reacts_to_changes(reg)


def test_status_writes_are_paced_in_the_order_they_come() -> None:
    slept: list[float] = []
    clock = [100.0]

    async def sleep(s: float) -> None:
        slept.append(round(s, 6))

    turns = Turns(20.0, clock=lambda: clock[0], sleep=sleep)

    async def main() -> None:
        for _ in range(5):  # five at the same instant: each waits one gap more
            async with turns.take():
                await turns.pace()
        async with turns.take():  # a turn with nothing to write spends no moment
            pass
        clock[0] = 200.0  # long after: no wait
        async with turns.take():
            await turns.pace()

    asyncio.run(main())
    assert slept == [0.05, 0.1, 0.15, 0.2]


def _turn_order(urgent: list[bool], cancel: set[int] = frozenset()) -> list[int]:  # type: ignore[assignment]
    """Writes queued (in this order) behind one in progress; the order they got their turn."""
    got: list[int] = []

    async def no_sleep(_: float) -> None:
        return None

    turns = Turns(1000.0, sleep=no_sleep)

    async def write(i: int, u: bool) -> None:
        async with turns.take(urgent=u):
            got.append(i)

    async def main() -> None:
        release = asyncio.Event()

        async def first() -> None:
            async with turns.take():
                await release.wait()

        holder = asyncio.create_task(first())
        await asyncio.sleep(0)
        tasks = [asyncio.create_task(write(i, u)) for i, u in enumerate(urgent)]
        await asyncio.sleep(0)  # all queued
        for i in cancel:
            tasks[i].cancel()
        release.set()
        await holder
        await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 5)
        async with turns.take():  # nothing holds a turn left over
            got.append(-1)

    asyncio.run(main())
    return got


def test_an_urgent_write_goes_before_the_waiting_ones_and_each_kind_keeps_its_order() -> None:
    """What is gone a second later (a pod about to go, a GPU fault) does not wait behind a
    restart's backlog; it spends the same budget (the writes stay one at a time, paced)."""
    assert _turn_order([False, False, True, False, True]) == [2, 4, 0, 1, 3, -1]
    assert _turn_order([False, False, False]) == [0, 1, 2, -1]


def test_a_write_cancelled_while_it_waits_gives_its_turn_away() -> None:
    assert _turn_order([False, True, False], cancel={1}) == [0, 2, -1]
    assert _turn_order([False, False], cancel={0, 1}) == [-1]


def test_a_write_handed_its_turn_as_it_is_cancelled_passes_it_on() -> None:
    """The turn handed to a waiter whose task is cancelled before it runs goes to the next (a
    turn lost there would stop every status write for good)."""

    async def no_sleep(_: float) -> None:
        return None

    turns = Turns(1000.0, sleep=no_sleep)
    got: list[str] = []

    async def write(name: str) -> None:
        async with turns.take():
            got.append(name)

    async def main() -> None:
        async with turns.take():
            a = asyncio.create_task(write("a"))
            b = asyncio.create_task(write("b"))
            await asyncio.sleep(0)
        a.cancel()  # the turn is a's already (handed on release): cancelled before it runs
        await asyncio.wait_for(asyncio.gather(a, b, return_exceptions=True), 5)

    asyncio.run(main())
    assert got == ["b"]


def test_the_write_pace_is_the_configs() -> None:
    from pydantic import ValidationError

    ctl = OP.Controller(ControllerConfig(status_writes_per_s=5), FakeKube())  # type: ignore[arg-type]
    assert ctl.turns.gap == pytest.approx(0.2)
    assert OP.Controller(ControllerConfig(), FakeKube()).turns.gap == pytest.approx(0.05)  # type: ignore[arg-type]
    with pytest.raises(ValidationError):
        ControllerConfig(status_writes_per_s=0)


def _drain(watch: Any, resource: Any) -> list[Any]:
    async def main() -> list[Any]:
        return [e async for e in KK.slimmed_watch(watch)(resource=resource, settings=None)]

    return asyncio.run(main())


def test_a_runs_objects_are_slimmed_as_they_come_off_the_watch() -> None:
    """kopf holds every object of every kind until all are indexed: the whole objects of 1,000
    runs (pod specs, Workloads' pod templates, managed fields) were most of a restarted
    controller's 280 MB. They are slimmed as they come; kopf's own events pass as they are."""
    from kopf._cogs.clients import watching
    from kopf._cogs.structs.references import Resource

    pod = {
        "kind": "Pod",
        "apiVersion": "v1",
        "metadata": {
            "name": "p",
            "uid": "u1",
            "resourceVersion": "7",
            "labels": {"a": "b"},
            "managedFields": [{"manager": "x" * 1000}],
        },
        "spec": {"nodeName": "n1", "containers": [{"name": "c", "env": [{"name": "E"}] * 50}]},
        "status": {"phase": "Running"},
    }
    error = {"type": "ERROR", "object": {"kind": "Status", "code": 410, "message": "too old"}}
    closed: list[bool] = []

    async def watch(**_: Any) -> Any:
        try:
            yield {"type": None, "object": pod}  # from the LIST
            yield watching.Bookmark.LISTED
            yield {"type": "MODIFIED", "object": pod}
            yield {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "9"}}}
            yield error
        finally:
            closed.append(True)

    got = _drain(watch, Resource("", "v1", "pods"))
    listed, bookmark, modified, k8s_bookmark, err = got
    for e in (listed, modified):
        obj = e["object"]
        assert obj["spec"] == {"nodeName": "n1"} and "managedFields" not in obj["metadata"]
        assert obj["metadata"]["uid"] == "u1" and obj["metadata"]["resourceVersion"] == "7"
        assert obj["status"] == {"phase": "Running"}
    assert bookmark is watching.Bookmark.LISTED
    assert k8s_bookmark == {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "9"}}}
    assert err is error and closed == [True]
    # another kind (a node, the platform's objects) is not touched
    (same, *_) = _drain(watch, Resource("", "v1", "nodes"))
    assert same["object"] is pod


def test_what_the_controller_keeps_shares_its_keys_across_objects() -> None:
    """Each watch event is its own JSON document: two objects decoded apart have their own
    copies of every key. What the controller keeps of them shares one string per key (at
    10,000 runs, ~30% of its memory), and is otherwise equal to what it was."""
    import json

    text = json.dumps(
        {
            "kind": "Job",
            "apiVersion": "batch/v1",
            "metadata": {
                "name": "j",
                "labels": {"tau.azure.com/run-id": "r1"},
                "ownerReferences": [{"kind": "TauRun", "name": "r1"}],
            },
            "spec": {"suspend": False},
            "status": {"conditions": [{"type": "Complete", "status": "True"}]},
        }
    )
    a, b = json.loads(text), json.loads(text)
    la, lb = (next(iter(o["metadata"]["labels"])) for o in (a, b))
    assert la == lb and la is not lb  # what the JSON decoder gives
    sa, sb = KK.slim(a), KK.slim(b)
    assert sa == sb and sa["metadata"]["labels"] == a["metadata"]["labels"]
    for path in (("metadata", "labels"), ("status", "conditions", 0), ("metadata",)):
        x, y = sa, sb
        for step in path:
            x, y = x[step], y[step]
        assert all(kx is ky for kx, ky in zip(x, y, strict=True)), path


def test_kopf_starts_its_watches_where_the_patch_reaches(monkeypatch: Any) -> None:
    from kopf._cogs.clients import watching
    from kopf._core.reactor import queueing

    monkeypatch.setattr(watching, "infinite_watch", watching.infinite_watch)  # restored after
    KK.install_slimmed_watches()
    first = watching.infinite_watch
    KK.install_slimmed_watches()  # once only
    assert watching.infinite_watch is first and first.tau_slimmed  # type: ignore[attr-defined]
    assert "watching.infinite_watch(" in inspect.getsource(queueing)


def test_a_slimmed_pod_keeps_its_node_and_its_containers_memory_and_gpu_limits() -> None:
    # the recorder names the memory limit an OOM went over; GPU use joins DCGM's GPUs to the
    # runs whose pods ask for GPUs: both read these from the controller's slimmed pods
    pod = {
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "n", "managedFields": [{"manager": "x"}]},
        "spec": {
            "nodeName": "g-0",
            "containers": [
                {
                    "name": "w",
                    "image": "i",
                    "env": [{"name": "A", "value": "1"}],
                    "resources": {"limits": {"memory": "8Gi", "cpu": "4", C.GPU_RESOURCE: 2}},
                },
                {"name": "sidecar", "resources": {"limits": {"cpu": "1"}}},
            ],
        },
        "status": {"phase": "Running"},
    }
    got = KK.slim(pod)
    assert got["spec"] == {
        "nodeName": "g-0",
        "containers": [
            {"name": "w", "resources": {"limits": {"memory": "8Gi", C.GPU_RESOURCE: 2}}}
        ],
    }
    assert "managedFields" not in got["metadata"]


def test_a_slimmed_job_keeps_who_runs_it() -> None:
    """A MultiKueue manager's Job is run elsewhere (spec.managedBy): the controller needs that
    to release a run whose worker was lost; the pod template goes."""
    from taugrid.controller.kopfkit import slim

    job = {
        "kind": "Job",
        "metadata": {"name": "j"},
        "spec": {"suspend": False, "managedBy": "kueue.x-k8s.io/multikueue", "template": {"x": 1}},
        "status": {"active": 1},
    }
    assert slim(job)["spec"] == {"suspend": False, "managedBy": "kueue.x-k8s.io/multikueue"}
    assert slim({**job, "spec": {"suspend": True}})["spec"] == {"suspend": True}
