"""GPU use per run (#41): exporters found per node, read at once (one that does not answer, one
that answers garbage, a GPU no run's pod holds), each node's reading kept on it only when it
changes, each run's use kept with `since` while its rounded values hold, "allocated but idle"
after the window (Progressing, the timeline), the idle policy (warn, requeue and activate
again), the validation check that reads the node's reading, and the sandbox's simulated exporter
read back by the same parser."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from runkit import job, kueue, pod, taurun

from taugrid.api import gpuhealth as G
from taugrid.api import gpuuse as U
from taugrid.api.vocabulary import Phase
from taugrid.controller import dcgm as D
from taugrid.controller import gpuuse as GU
from taugrid.controller import recorder as REC
from taugrid.controller.config import ControllerConfig, Exporters
from taugrid.controller.gpuwatch import GpuWatch
from taugrid.kube.fake import FakeKube
from taugrid.sandbox import dcgmsim as SIM

T0 = datetime(2026, 12, 1, 12, 0, 0, tzinfo=UTC)
KEY = ("research", "kq-abc12")


def gpu_node(name: str, gpus: int = 2, annotations: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {G.GFD_PRODUCT: "NVIDIA-A100-SXM4-80GB", G.GFD_COUNT: str(gpus)},
            "annotations": annotations or {},
        },
        "status": {"capacity": {"nvidia.com/gpu": str(gpus)}},
    }


def run_pod(name: str, node: str, gpus: int = 1, phase: str = "Running") -> dict[str, Any]:
    return {
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "research",
            "creationTimestamp": f"2026-12-01T11:00:0{name[-1]}Z",
            "labels": {"tau.azure.com/run-id": "kq-abc12"},
        },
        "spec": {
            "nodeName": node,
            "containers": [{"name": "main", "resources": {"limits": {"nvidia.com/gpu": gpus}}}],
        },
        "status": {"phase": phase},
    }


def sim_text(node: dict[str, Any], pods: list[dict[str, Any]]) -> str:
    return SIM.exposition(node, pods)


# --- where exporters are, and what one answer says ------------------------------------------------
def test_exporters_are_found_per_node_from_the_services_endpoints() -> None:
    ex = Exporters()
    slices = [
        {
            "ports": [{"name": "gpu-metrics", "port": 9400}],
            "endpoints": [
                {"addresses": ["10.0.0.5"], "nodeName": "g-0", "conditions": {"ready": True}},
                {"addresses": ["10.0.0.6"], "nodeName": "g-1", "conditions": {"ready": False}},
                {"addresses": ["fd00::7"], "nodeName": "g-2"},
                {"addresses": ["10.0.0.8"], "nodeName": "cpu-0"},  # not a GPU node asked for
                {"addresses": [], "nodeName": "g-3"},
            ],
        }
    ]
    got = GU.targets(ex, ["g-0", "g-1", "g-2", "g-3"], slices)
    assert got == {"g-0": "http://10.0.0.5:9400/metrics", "g-2": "http://[fd00::7]:9400/metrics"}
    # a URL per node (the sandbox's loopback exporters): every GPU node, no Service read
    per_node = Exporters(url="http://127.0.0.1:5/nodes/{node}/metrics")
    assert GU.targets(per_node, ["a", "b"]) == {
        "a": "http://127.0.0.1:5/nodes/a/metrics",
        "b": "http://127.0.0.1:5/nodes/b/metrics",
    }


def test_a_url_without_its_node_is_refused() -> None:
    with pytest.raises(ValueError, match="url"):
        Exporters(url="http://127.0.0.1:5/metrics")


def test_gpu_nodes_are_those_with_gpus_or_a_gpu_class() -> None:
    nodes = {
        "g": gpu_node("g"),
        "cpu": {"metadata": {"name": "cpu"}, "status": {"capacity": {"cpu": "8"}}},
        "zero": {"metadata": {"name": "zero"}, "status": {"capacity": {"nvidia.com/gpu": "0"}}},
        "classed": {"metadata": {"name": "classed", "labels": {"tau.azure.com/gpu-class": "a"}}},
    }
    assert GU.gpu_nodes(nodes) == ["classed", "g"]


@pytest.mark.parametrize(
    ("got", "said"),
    [
        (ConnectionRefusedError("refused"), "did not answer (refused)"),
        ("<html>502</html>", "not usable: not DCGM exporter's text format"),
        ('DCGM_FI_PROF_SM_ACTIVE{gpu="0"} nan-ish', "not usable"),
    ],
)
def test_an_exporter_that_fails_is_a_reading_that_says_why(got: Any, said: str) -> None:
    r = GU.read("g-0", got)
    assert r.gpus == () and r.error is not None and said in r.error


def test_the_nodes_reading_is_kept_on_it_only_when_it_changes() -> None:
    node = gpu_node("g-0")
    text = sim_text(node, [run_pod("p1", "g-0")])
    reading = GU.read("g-0", text)
    patch = GU.annotation_patch(node, reading, T0)
    assert patch is not None
    kept = json.loads(patch["metadata"]["annotations"][U.DCGM_ANNOTATION])
    assert kept == {"gpus": 2, "at": "2026-12-01T12:00:00Z"}
    node["metadata"]["annotations"].update(patch["metadata"]["annotations"])
    # read again later, the same: nothing to write
    assert GU.annotation_patch(node, GU.read("g-0", text), T0 + timedelta(minutes=5)) is None
    # an XID, then an exporter gone: each a change
    xid = dict(
        node, metadata={**node["metadata"], "annotations": {SIM.SIM_ANNOTATION: '{"xid": 79}'}}
    )
    p2 = GU.annotation_patch(node, GU.read("g-0", sim_text(xid, [])), T0)
    assert p2 is not None and json.loads(p2["metadata"]["annotations"][U.DCGM_ANNOTATION])[
        "xid"
    ] == [79]
    p3 = GU.annotation_patch(node, GU.read("g-0", OSError("timed out")), T0)
    assert p3 is not None and "did not answer" in p3["metadata"]["annotations"][U.DCGM_ANNOTATION]


# --- a run's use across passes ------------------------------------------------------------------
def tracker() -> GU.UseTracker:
    return GU.UseTracker(threshold=0.05, window_s=600)


def test_a_runs_use_is_kept_with_since_while_its_rounded_values_hold() -> None:
    node = gpu_node("g-0", gpus=2)
    pods = {KEY: [run_pod("p1", "g-0", gpus=2)]}
    t = tracker()
    first = t.update([GU.read("g-0", sim_text(node, pods[KEY]))], pods, T0)
    u = first[KEY]
    assert (u.gpus, u.nodes, u.since, u.idleSince, u.unread) == (
        2,
        ["g-0"],
        "2026-12-01T12:00:00Z",
        None,
        None,
    )
    # the sim's GPUs: 0.60 and 0.65 SM active, 40 GiB each, 310.5 W each
    assert u.smActive == 0.6 and u.fbUsedMiB == 81920 and u.powerW == 620
    # the next pass reads the same: nothing changed, nothing to write; `since` stays
    assert (
        t.update([GU.read("g-0", sim_text(node, pods[KEY]))], pods, T0 + timedelta(seconds=15))
        == {}
    )
    assert t.now_of[KEY].since == "2026-12-01T12:00:00Z"


def test_noise_under_the_rounding_costs_no_write_and_a_real_change_does() -> None:
    pods = {KEY: [run_pod("p1", "g-0", gpus=1)]}

    def reading(sm: float, power: float) -> GU.Reading:
        g = D.Gpu(
            "g-0", "0", namespace="research", pod="p1", values={D.SM_ACTIVE: sm, D.POWER: power}
        )
        return GU.Reading("g-0", gpus=(g,))

    t = tracker()
    assert KEY in t.update([reading(0.61, 301)], pods, T0)
    assert t.update([reading(0.62, 304)], pods, T0 + timedelta(seconds=15)) == {}
    moved = t.update([reading(0.80, 304)], pods, T0 + timedelta(seconds=30))
    assert moved[KEY].smActive == 0.8 and moved[KEY].since == "2026-12-01T12:00:30Z"


def test_quiet_gpus_for_the_window_make_the_run_idle_and_busy_again_clears_it() -> None:
    node = gpu_node("g-0", gpus=1)
    idle_node = dict(
        node, metadata={**node["metadata"], "annotations": {SIM.SIM_ANNOTATION: '{"idle": true}'}}
    )
    pods = {KEY: [run_pod("p1", "g-0")]}
    t = tracker()
    quiet = [GU.read("g-0", sim_text(idle_node, pods[KEY]))]
    assert t.update(quiet, pods, T0)[KEY].idleSince is None  # quiet, not yet for the window
    assert t.update(quiet, pods, T0 + timedelta(seconds=599)) == {}
    idle = t.update(quiet, pods, T0 + timedelta(seconds=600))[KEY]
    assert idle.idleSince == "2026-12-01T12:00:00Z" and idle.smActive == 0.0
    busy = t.update([GU.read("g-0", sim_text(node, pods[KEY]))], pods, T0 + timedelta(seconds=615))
    assert busy[KEY].idleSince is None


def test_a_run_on_a_node_whose_exporter_failed_says_so_and_a_stray_gpu_is_no_runs() -> None:
    pods = {KEY: [run_pod("p1", "g-0"), run_pod("p2", "g-1")]}
    node1 = gpu_node("g-1", gpus=2)
    # g-1's other GPU is held by a pod that is no run's: it is not counted as this run's
    other = run_pod("x9", "g-1")
    other["metadata"]["labels"] = {}
    text = sim_text(node1, [pods[KEY][1], other])
    got = tracker().update(
        [GU.read("g-0", TimeoutError("timed out")), GU.read("g-1", text)], pods, T0
    )[KEY]
    assert got.gpus == 1 and got.nodes == ["g-1"]
    assert got.unread is not None and got.unread.startswith("g-0: its exporter did not answer")


def test_a_run_that_stops_running_is_forgotten_and_one_holding_no_gpu_is_not_reported() -> None:
    pods = {KEY: [run_pod("p1", "g-0")]}
    node = gpu_node("g-0", gpus=1)
    t = tracker()
    assert KEY in t.update([GU.read("g-0", sim_text(node, pods[KEY]))], pods, T0)
    done = {KEY: [run_pod("p1", "g-0", phase="Succeeded")]}
    assert t.update([GU.read("g-0", sim_text(node, []))], done, T0) == {} and t.now_of == {}
    cpu_only = {KEY: [run_pod("p1", "g-0", gpus=0)]}
    assert t.update([GU.read("g-0", sim_text(node, []))], cpu_only, T0) == {}


# --- what a run's status says -----------------------------------------------------------------
def _running_objs(status: dict[str, Any] | None = None) -> REC.RunObjects:
    return REC.RunObjects(taurun=taurun(status), workload=job(), kueue=kueue(), pods=[pod()])


def use(idle: str | None = None, sm: float = 0.6) -> U.GpuUseStatus:
    return U.GpuUseStatus(
        gpus=8,
        smActive=sm,
        fbUsedMiB=72704,
        powerW=2480,
        nodes=["a100x1-0"],
        since="2026-12-01T12:00:10Z",
        idleSince=idle,
    )


def test_a_running_runs_status_carries_its_gpu_use_and_says_when_it_is_idle() -> None:
    now = datetime(2026, 12, 1, 12, 0, 30, tzinfo=UTC)
    st = REC.compute_status(_running_objs(), {}, now, gpu_use=use())
    assert st.phase == Phase.Running and st.gpuUse == use()
    prog = next(s for s in st.signals if s.name == "Progressing")
    assert "allocated but idle" not in prog.reason
    idle = REC.compute_status(
        _running_objs(st.model_dump(mode="json")), {}, now, gpu_use=use("2026-12-01T11:30:00Z", 0.0)
    )
    prog = next(s for s in idle.signals if s.name == "Progressing")
    assert prog.state == "false" and prog.reason.startswith(
        "allocated but idle: its 8 GPU(s) at 0%"
    )
    assert prog.evidence == U.DCGM_EVIDENCE
    said = [e for e in idle.timeline if e.reason == "GPUsIdle"]
    assert len(said) == 1 and said[0].at == "2026-12-01T11:30:00Z"
    # still idle at the next pass: no second timeline entry
    again = REC.compute_status(
        _running_objs(idle.model_dump(mode="json")),
        {},
        now,
        gpu_use=use("2026-12-01T11:30:00Z", 0.0),
    )
    assert [e.reason for e in again.timeline].count("GPUsIdle") == 1 and REC.same(idle, again)


def test_a_run_not_running_keeps_no_gpu_use() -> None:
    pending = REC.RunObjects(taurun=taurun(), workload=None, kueue=kueue(), pods=[])
    assert REC.compute_status(pending, {}, T0, gpu_use=use()).gpuUse is None


def test_gpu_use_reads_as_one_line_and_a_list_column() -> None:
    assert U.describe(use()) == "8 GPUs, SM 60% active, 71 GiB used, 2.5 kW"
    assert U.short(use()) == "8×60%" and U.short(use("2026-12-01T11:30:00Z")) == "8×idle"
    unread = U.GpuUseStatus(gpus=0, since="2026-12-01T12:00:10Z", unread="g-0: down")
    assert U.short(unread) == "unread" and "(g-0: down)" in U.describe(unread)
    assert U.short(None) == ""


# --- the idle policy --------------------------------------------------------------------------
def workload(**over: Any) -> dict[str, Any]:
    wl = {
        "metadata": {"name": "job-kq-abc12-x", "namespace": "research", "annotations": {}},
        "spec": {"active": True},
        "status": {"admission": {"clusterQueue": "gpu"}},
    }
    wl.update(over)
    return wl


def test_requeue_deactivates_once_and_activates_again_after_the_eviction() -> None:
    patch = GU.requeue_patch(workload(), T0)
    assert patch == {
        "metadata": {"annotations": {GU.IDLE_REQUEUED: "2026-12-01T12:00:00Z"}},
        "spec": {"active": False},
    }
    marked = workload(
        metadata={"name": "w", "namespace": "research", "annotations": {GU.IDLE_REQUEUED: "t"}},
        spec={"active": False},
    )
    assert GU.requeue_patch(marked, T0) is None  # once
    assert GU.requeue_patch(workload(spec={"active": False}), T0) is None  # someone else's
    assert GU.reactivate_patch(marked) is None  # still admitted: not evicted yet
    evicted = dict(marked, status={"conditions": [{"type": "Evicted", "status": "True"}]})
    assert GU.reactivate_patch(evicted) == {
        "metadata": {"annotations": {GU.IDLE_REQUEUED: None}},
        "spec": {"active": True},
    }
    assert GU.reactivate_patch(workload(status={})) is None  # not one the controller evicted


class Host:
    """The controller as the worker sees it: a fake cluster, its nodes, a clock."""

    def __init__(self, cfg: ControllerConfig, kube: FakeKube, kw: dict[str, Any]) -> None:
        self.cfg, self.kube, self.kw = cfg, kube, kw
        self.nodes = {n["metadata"]["name"]: n for n in kube.list("Node")}
        self.now = T0
        self.recorded: list[tuple[str, str]] = []

    def clock(self) -> datetime:
        return self.now

    async def _io(self, fn: Callable[..., Any], *args: Any) -> Any:
        return fn(*args)

    def run_indexes(self) -> dict[str, Any]:
        return self.kw

    async def record_soon(self, key: tuple[str, str]) -> None:
        self.recorded.append(key)


@pytest.fixture
def exporter() -> Iterator[tuple[str, dict[str, Any]]]:
    """A loopback server answering as each node's exporter; `answers[node]` says how (text,
    "hang" for no answer, "close" for a dropped connection)."""
    answers: dict[str, Any] = {}
    hold = threading.Event()

    class H(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            node = self.path.split("/")[2]
            how = answers.get(node, "close")
            if how == "close":
                self.connection.close()
                return
            if how == "hang":
                hold.wait(10)
                return
            body = how.encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a: Any) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), H)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/nodes/{{node}}/metrics", answers
    hold.set()
    server.shutdown()
    server.server_close()


def _world(url: str, action: str) -> tuple[Host, FakeKube]:
    pods = [run_pod("p1", "g-0", gpus=2)]
    kube = FakeKube(
        {
            "Node": [gpu_node("g-0"), gpu_node("g-1"), gpu_node("g-2")],
            "Workload": [workload()],
            "TauRun": [taurun()],
        }
    )
    tr = kube.get("TauRun", "kq-abc12", "research")
    kw = {
        "pod_idx": {KEY: pods},
        "taurun_idx": {KEY: [tr]},
        "kueue_idx": {KEY: [kube.get("Workload", "job-kq-abc12-x", "research")]},
        "kueue_uid_idx": {},
    }
    cfg = ControllerConfig.model_validate(
        {
            "gpuUse": {"idleAfterSeconds": 60, "idleAction": action},
            "exporters": {"url": url, "timeout_s": 0.5},
        }
    )
    return Host(cfg, kube, kw), kube


def test_one_pass_reads_every_node_at_once_whatever_each_answers(exporter: Any) -> None:
    url, answers = exporter
    host, kube = _world(url, "none")
    answers["g-0"] = sim_text(host.nodes["g-0"], host.kw["pod_idx"][KEY])
    answers["g-1"] = "hang"
    answers["g-2"] = "<html>no</html>"
    watch = GpuWatch(host)  # type: ignore[arg-type]

    async def go() -> float | None:
        try:
            return await watch()
        finally:
            await watch.close()

    assert asyncio.run(go()) == 15.0
    assert host.recorded == [KEY] and watch.use_of(KEY) is not None
    kept = {
        n: json.loads(kube.get("Node", n)["metadata"]["annotations"][U.DCGM_ANNOTATION])
        for n in ("g-0", "g-1", "g-2")
    }
    assert kept["g-0"]["gpus"] == 2
    assert "did not answer" in kept["g-1"]["error"] and "not usable" in kept["g-2"]["error"]


@pytest.mark.parametrize("action", ["none", "warn", "requeue"])
def test_the_idle_policy_warns_or_requeues_as_the_stack_says(exporter: Any, action: str) -> None:
    url, answers = exporter
    host, kube = _world(url, action)
    knobbed = gpu_node("g-0", annotations={SIM.SIM_ANNOTATION: '{"idle": true}'})
    answers["g-0"] = sim_text(knobbed, host.kw["pod_idx"][KEY])
    watch = GpuWatch(host)  # type: ignore[arg-type]

    async def passes() -> None:
        try:
            for s in (0, 30, 60, 75):  # idle from the first pass; the window is 60 s
                host.now = T0 + timedelta(seconds=s)
                await watch()
        finally:
            await watch.close()

    asyncio.run(passes())
    assert watch.use_of(KEY) is not None and watch.use_of(KEY).idleSince == "2026-12-01T12:00:00Z"  # type: ignore[union-attr]
    events = {e["reason"] for e in kube.list("Event", "research")}
    wl = kube.get("Workload", "job-kq-abc12-x", "research")
    if action == "none":
        assert events == set() and wl["spec"]["active"] is True
    elif action == "warn":
        assert events == {"GPUsIdle"} and wl["spec"]["active"] is True
    else:
        assert events == {"GPUsIdle", "RequeuedIdle"} and wl["spec"]["active"] is False
        # Kueue evicts it: the next pass activates it again, and it queues once more
        evicted = dict(wl, status={"conditions": [{"type": "Evicted", "status": "True"}]})
        host.kw["kueue_uid_idx"] = {"uid": [evicted]}
        asyncio.run(_one(watch))
        again = kube.get("Workload", "job-kq-abc12-x", "research")
        assert (
            again["spec"]["active"] is True
            and GU.IDLE_REQUEUED not in again["metadata"]["annotations"]
        )


async def _one(watch: GpuWatch) -> None:
    try:
        await watch()
    finally:
        await watch.close()


# --- validation reads the node's reading -----------------------------------------------------
def _dcgm_finding(annotation: dict[str, Any] | None) -> G.Finding:
    node = gpu_node("g-0", gpus=8)
    if annotation is not None:
        node["metadata"]["annotations"][U.DCGM_ANNOTATION] = json.dumps(annotation)
    pool = G.PoolDeclaration(name="g", vmSize="Standard_ND96asr_v4", gpusPerNode=8)
    v = G.check_node(node, pool, T0.timestamp())
    return next(f for f in v.findings if f.check == "dcgm")


def test_validation_fails_a_node_dcgm_sees_short_faulty_or_cannot_read() -> None:
    assert _dcgm_finding(None).state == "skipped"
    assert _dcgm_finding({"gpus": 8, "at": "t"}).state == "ok"
    short = _dcgm_finding({"gpus": 7, "at": "t"})
    assert short.state == "failed" and "7 of the 8" in short.message
    xid = _dcgm_finding({"gpus": 8, "xid": [79], "at": "t"})
    assert xid.state == "failed" and "XID 79" in xid.message
    down = _dcgm_finding({"error": "its exporter did not answer (timeout)", "at": "t"})
    assert down.state == "failed" and down.fix
    assert _dcgm_finding({"gpus": 8}).state == "ok"


# --- the sandbox's exporter -------------------------------------------------------------------
def test_the_simulated_exporter_is_read_by_the_same_parser_with_the_pods_that_hold_gpus() -> None:
    node = gpu_node("g-0", gpus=4)
    pods = [run_pod("p1", "g-0", gpus=2), run_pod("p2", "g-0", gpus=1)]
    gpus = D.parse(SIM.exposition(node, pods), "g-0")
    assert [g.pod for g in gpus] == ["p1", "p1", "p2", None]
    assert gpus[0].model == "NVIDIA A100-SXM4-80GB" and all(g.busy is not None for g in gpus)
    assert gpus[3].busy == 0.0 and gpus[0].busy and gpus[0].busy > 0.5


def test_the_simulated_exporters_knobs_turn_the_node_and_are_refused_where_they_cannot() -> None:
    from taugrid.api.errors import TauError

    kube = FakeKube(
        {"Node": [gpu_node("g-0", gpus=8), {"metadata": {"name": "cpu-0"}, "status": {}}]}
    )
    kube.put("Namespace", {"metadata": {"name": "default"}})
    got = SIM.set_knobs(kube, "g-0", {"missing": 1, "xid": 79}, "2026-12-01T12:00:00Z")
    assert got == {"missing": 1, "xid": 79}
    node = kube.get("Node", "g-0")
    assert node["status"]["capacity"]["nvidia.com/gpu"] == "7"
    assert any(
        c["type"] == "GPUXidError" and c["status"] == "True" for c in node["status"]["conditions"]
    )
    assert [e["reason"] for e in kube.list("Event", "default")] == [G.XID_EVENT_REASON]
    assert len(D.parse(SIM.exposition(node, []), "g-0")) == 7
    cleared = SIM.set_knobs(kube, "g-0", {"missing": 0, "xid": 0}, "2026-12-01T12:01:00Z")
    assert cleared == {} and kube.get("Node", "g-0")["status"]["capacity"]["nvidia.com/gpu"] == "8"
    with pytest.raises(TauError, match="at most 7"):
        SIM.set_knobs(kube, "g-0", {"missing": 8}, "t")
    with pytest.raises(TauError, match="not a simulated GPU node"):
        SIM.set_knobs(kube, "cpu-0", {"idle": True}, "t")
    with pytest.raises(TauError, match="no node"):
        SIM.set_knobs(kube, "nope", {"idle": True}, "t")


# --- its history, a restart, the end ----------------------------------------------------------
def _one_gpu(sm: float) -> GU.Reading:
    g = D.Gpu("g-0", "0", namespace="research", pod="p1", values={D.SM_ACTIVE: sm})
    return GU.Reading("g-0", gpus=(g,))


def test_each_change_joins_the_history_which_keeps_the_last_ones() -> None:
    pods = {KEY: [run_pod("p1", "g-0")]}
    t = tracker()
    for i in range(U.HISTORY_KEEP + 5):
        t.update([_one_gpu(0.1 + 0.8 * (i % 2))], pods, T0 + timedelta(seconds=15 * i))
    h = t.now_of[KEY].history
    assert len(h) == U.HISTORY_KEEP and h[-1].at == t.now_of[KEY].since
    assert [p.smActive for p in h[-2:]] == [0.9, 0.1] and h[0].at < h[-1].at


def test_a_restarted_controller_starts_from_the_recorded_use_and_writes_nothing_that_holds() -> (
    None
):
    pods = {KEY: [run_pod("p1", "g-0")]}
    before = tracker()
    recorded = before.update([_one_gpu(0.7)], pods, T0)[KEY]
    after = tracker()  # a new process: nothing in memory
    later = T0 + timedelta(minutes=5)
    assert after.update([_one_gpu(0.7)], pods, later, {KEY: recorded}) == {}
    moved = after.update([_one_gpu(0.2)], pods, later, {KEY: recorded})[KEY]
    assert [p.smActive for p in moved.history] == [0.7, 0.2]  # the history goes on


def test_an_ended_run_keeps_its_last_gpu_use_and_history() -> None:
    now = datetime(2026, 12, 1, 12, 0, 30, tzinfo=UTC)
    running = REC.compute_status(_running_objs(), {}, now, gpu_use=use().sampled())
    done = REC.RunObjects(
        taurun=taurun(running.model_dump(mode="json")),
        workload=job(done=True),
        kueue=kueue(),
        pods=[pod(phase="Succeeded")],
    )
    st = REC.compute_status(done, {}, now, gpu_use=None)
    assert st.phase == Phase.Succeeded and st.gpuUse == running.gpuUse
    assert st.gpuUse is not None and len(st.gpuUse.history) == 1


# --- where a researcher sees it ---------------------------------------------------------------
def _status(phase: Phase, gpu: U.GpuUseStatus | None) -> Any:
    from taugrid.api.vocabulary import RunStatus

    return RunStatus(
        run_id="kq-abc12",
        name="kq",
        phase=phase,
        target="kube",
        workload_kind="job",
        attempt=1,
        created_at="2026-12-01T12:00:00Z",
        finished_at=None,
        signals=[],
        summary="running",
        gpu_use=gpu,
    )


def test_run_status_shows_a_running_runs_gpus_and_not_an_ended_ones(capsys: Any) -> None:
    from taugrid.cli.output import print_status

    print_status(_status(Phase.Running, use()))
    assert (
        "GPUs: 8 GPUs, SM 60% active, 71 GiB used, 2.5 kW (DCGM, since 12:00:10)"
        in capsys.readouterr().out
    )
    print_status(_status(Phase.Succeeded, use()))
    assert "GPUs:" not in capsys.readouterr().out


def test_run_list_has_a_gpu_column_only_when_a_running_run_has_its_gpus_read(
    capsys: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from taugrid.cli.app import main
    from taugrid.client import runs

    rows = [_status(Phase.Running, use("2026-12-01T11:30:00Z")), _status(Phase.Succeeded, use())]
    rows[1] = rows[1].model_copy(update={"run_id": "kq-def34"})
    monkeypatch.setattr(runs, "cluster_runs", lambda **_: rows)
    assert main(["run", "list", "--cluster"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "GPU" in lines[0].split()
    assert "8×idle" in lines[1] and "8×" not in lines[2]
    monkeypatch.setattr(runs, "cluster_runs", lambda **_: [_status(Phase.Running, None)])
    assert main(["run", "list", "--cluster"]) == 0
    assert "GPU" not in capsys.readouterr().out.splitlines()[0].split()
    assert main(["run", "list", "--cluster", "-o", "json"]) == 0
    assert json.loads(capsys.readouterr().out)[0]["gpu_use"] is None


def test_gpu_history_is_plotted_as_steps_held_until_the_next_change() -> None:
    from taugrid.portal.charts import gpu_series

    h = [
        U.GpuSample(at="2026-12-01T12:00:00Z", smActive=0.6, fbUsedMiB=2048, powerW=300),
        U.GpuSample(at="2026-12-01T12:10:00Z", smActive=0.0, fbUsedMiB=2048, powerW=60),
    ]
    until = datetime(2026, 12, 1, 12, 30, tzinfo=UTC).timestamp()
    got = gpu_series(h, until)
    assert next(iter(got)) == "GPU SM active (%)"
    assert got["GPU SM active (%)"] == [(0.0, 60.0), (10.0, 60.0), (10.0, 0.0), (30.0, 0.0)]
    assert got["GPU memory used (GiB)"][0] == (0.0, 2.0)
    assert gpu_series([]) == {}
    unknown = [U.GpuSample(at="2026-12-01T12:00:00Z", smActive=None)]
    assert "GPU SM active (%)" not in gpu_series(unknown)


def test_the_portals_run_page_plots_gpu_use_beside_the_metrics(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("starlette", reason="the portal extra is not installed")
    from portalkit import make_run
    from starlette.testclient import TestClient

    from taugrid.portal import app as A

    monkeypatch.setenv("TAU_HOME", str(tmp_path))
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "no-kubeconfig"))
    make_run(tmp_path, "train-aaaaa", metrics=10)
    real = A._status
    gpu = use().model_copy(
        update={"history": [U.GpuSample(at="2026-12-01T12:00:10Z", smActive=0.6, powerW=2480)]}
    )
    monkeypatch.setattr(A, "_status", lambda *a: real(*a).model_copy(update={"gpu_use": gpu}))
    web = TestClient(A.create_app(A.Settings(poll_s=0.01)), base_url="http://127.0.0.1")
    text = web.get("/runs/train-aaaaa").text
    assert "GPU use" in text and "8 GPUs, SM 60% active" in text
    assert "(the last reading while it ran)" in text  # the made run has ended
    assert 'aria-label="GPU SM active (%), by minute (DCGM)"' in text


def test_a_runs_gpu_use_comes_through_the_thin_listing_of_run_list() -> None:
    from taugrid.api.crds import TauRunStatus, read_status

    st = {
        "phase": "Running",
        "gpuUse": use("2026-12-01T11:30:00Z").sampled().model_dump(mode="json"),
    }
    kube = FakeKube({"TauRun": [taurun(st)]})
    (thin,) = kube.list_columns("TauRun", "research")
    got, why = read_status(TauRunStatus, thin["status"])
    assert why is None and got is not None and got.gpuUse is not None
    assert U.short(got.gpuUse) == "8×idle" and got.gpuUse.history == []  # only its columns


def test_a_node_deleted_during_a_pass_costs_its_reading_not_the_pass(exporter: Any) -> None:
    url, answers = exporter
    host, kube = _world(url, "none")
    for n in ("g-0", "g-1", "g-2"):
        answers[n] = sim_text(host.nodes[n], host.kw["pod_idx"][KEY] if n == "g-0" else [])
    kube.delete("Node", "g-1", None)  # gone from the cluster, still in the controller's view
    watch = GpuWatch(host)  # type: ignore[arg-type]
    asyncio.run(_one(watch))
    assert host.recorded == [KEY]  # the run's use is still recorded
    kept = kube.get("Node", "g-2")["metadata"]["annotations"][U.DCGM_ANNOTATION]
    assert json.loads(kept)["gpus"] == 2 and kube.get("Node", "g-1") is None
