"""The kube backend's submission order on the shared fake cluster: the record exists before
anything is sent; an interruption (a kill -9) between the two leaves a record that status,
attach and cancel understand; a run is found from another machine by its TauRun; resumed runs
keep their parent."""

from __future__ import annotations

import copy
import shutil
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from conftest import EXAMPLES
from fakekit import prepared, tau_cluster

from taugrid.api.errors import TauError
from taugrid.api.evidence import KubeHandle
from taugrid.api.vocabulary import Phase
from taugrid.kube.fake import FakeKube
from taugrid.runs import load
from taugrid.runs import status as engine
from taugrid.runs.backends.base import SubmitOptions
from taugrid.runs.backends.kube.backend import SUBMITTING, KubeBackend, adopt_remote
from taugrid.runs.codebundle import HELPER_MODULES
from taugrid.runs.evidence import RunDir
from taugrid.runs.prepare import RunRequest
from taugrid.runs.render import is_shared


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("TAU_HOME", str(tmp_path / "home-a"))
    return tmp_path


@pytest.fixture
def fake() -> FakeKube:
    return FakeKube({"TauCluster": [tau_cluster()]})


def status_of(backend: KubeBackend, rd: RunDir) -> Any:
    return engine.compute(backend.observe([rd])[0])


def test_the_record_is_written_before_anything_is_sent(home: Path, fake: FakeKube) -> None:
    seen: list[bool] = []

    class Watching(FakeKube):
        def recorded(self) -> None:
            seen.append(
                any(
                    (Path(p) / "run.json").is_file()
                    for p in (home / "home-a").rglob("*")
                    if p.is_dir()
                )
            )

        def apply(self, obj: dict[str, Any], manager: str = "tau") -> dict[str, Any]:
            self.recorded()
            return super().apply(obj, manager)

        def create(self, obj: dict[str, Any], manager: str = "tau") -> dict[str, Any] | None:
            self.recorded()
            return super().create(obj, manager)

    cluster = Watching({"TauCluster": [tau_cluster()]})
    backend = KubeBackend(kube=cluster)
    rd = backend.submit(prepared(backend, home), SubmitOptions(), lambda _m: None)
    assert len(seen) == 4 and all(seen)  # every write (TauRun, helpers, code, Job) after the record
    rec = rd.read_record()
    assert isinstance(rec.handle, KubeHandle) and rec.handle.sent
    assert not (rd.path / "config" / "manifests" / SUBMITTING).exists()
    kinds = {k for (k, _ns, _n) in cluster.objects}
    assert {"TauRun", "ConfigMap", "Job"} <= kinds


def test_killed_after_the_record_before_the_cluster(home: Path, fake: FakeKube) -> None:
    """kill -9 right after the record: nothing in the cluster; status says so; attach sends
    it; cancel drops it."""
    backend = KubeBackend(kube=fake)
    p = prepared(backend, home)
    rd = backend.record(p, SubmitOptions(), lambda _m: None)  # ... and the process dies here
    st = status_of(backend, rd)
    assert st.phase == Phase.Pending and "interrupted before the cluster received it" in st.summary
    assert f"tau run attach {rd.run_id}" in st.summary
    said: list[str] = []
    assert KubeBackend(kube=fake).attach(rd, said.append)
    assert fake.get("TauRun", rd.run_id, "research") is not None
    assert rd.read_record().handle.sent and "sent" in said[0]  # type: ignore[union-attr]
    assert status_of(backend, rd).phase == Phase.Pending  # submitted: waiting for Kueue
    assert KubeBackend(kube=fake).cancel(rd) == Phase.Cancelled
    assert fake.get("TauRun", rd.run_id, "research") is None


def test_an_interrupted_submission_kept_by_an_older_tau_is_sent_all_the_same(
    home: Path, fake: FakeKube
) -> None:
    """The objects kept until the cluster has them are JSON lines now (the YAML emitter cost a
    submission ~3 ms); a run an older tau recorded (YAML, under the old name) is still sent by
    attach, and both are the same objects."""
    from taugrid.api.yamlio import dump_all, load_all

    backend = KubeBackend(kube=fake)
    rd = backend.record(prepared(backend, home), SubmitOptions(), lambda _m: None)
    kept = rd.path / "config" / "manifests" / SUBMITTING
    objects = load_all(kept.read_text())
    assert [o["kind"] for o in objects] == ["TauRun", "ConfigMap", "ConfigMap", "Job"]
    kept.unlink()
    (kept.parent / "submitting.yaml").write_text(dump_all(objects))  # as an older tau wrote it
    assert KubeBackend(kube=fake).attach(rd, lambda _m: None)
    assert fake.get("Job", rd.run_id, "research") is not None
    assert not (kept.parent / "submitting.yaml").exists()


def test_killed_between_the_owner_and_its_objects(home: Path, fake: FakeKube) -> None:
    """kill -9 after the TauRun reached the cluster but before its workload: cancel removes
    what is there; the record ends Cancelled and sealed."""
    backend = KubeBackend(kube=fake)
    p = prepared(backend, home)
    rd = backend.record(p, SubmitOptions(), lambda _m: None)
    fake.apply(p.taurun())  # the first apply went through, then the process died
    assert not rd.read_record().handle.sent  # type: ignore[union-attr]
    st = status_of(backend, rd)
    assert st.phase == Phase.Pending  # the cluster has its owner: no false "gone"
    assert KubeBackend(kube=fake).cancel(rd) == Phase.Cancelled
    assert fake.list("TauRun", "research") == [] and rd.sealed
    assert not (rd.path / "config" / "manifests" / SUBMITTING).exists()


def test_a_refused_submission_leaves_no_record(home: Path, fake: FakeKube) -> None:
    fake.forbid.add(("*", "TauRun", "research"))
    backend = KubeBackend(kube=fake)
    p = prepared(backend, home)
    with pytest.raises(TauError) as e:
        backend.submit(p, SubmitOptions(), lambda _m: None)
    assert "forbidden" in e.value.message and e.value.exit_code == 4
    assert not RunDir(home / "home-a" / "data" / "runs" / p.run_id).path.exists()


def test_a_partly_sent_submission_keeps_its_record_and_says_how_to_finish(
    home: Path, fake: FakeKube
) -> None:
    fake.forbid.add(("create", "Job", "research"))
    backend = KubeBackend(kube=fake)
    p = prepared(backend, home)
    with pytest.raises(TauError) as e:
        backend.submit(p, SubmitOptions(), lambda _m: None)
    assert e.value.hint and f"tau run attach {p.run_id}" in e.value.hint
    fake.forbid.clear()
    rd = next((home / "home-a").rglob(p.run_id))
    assert KubeBackend(kube=fake).attach(RunDir(rd), lambda _m: None)
    assert fake.get("Job", p.run_id, "research") is not None


def test_a_drawn_run_id_is_created_without_looking_first(
    home: Path, fake: FakeKube, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An id drawn for this submission cannot exist yet: no GET of it (one round trip fewer at
    every submission), and it is created, never applied, so a clash of drawn ids is refused
    rather than merged into another run."""
    backend = KubeBackend(kube=fake)
    p = prepared(backend, home)
    backend.submit(p, SubmitOptions(), lambda _m: None)
    taurun_calls = [c[0] for c in fake.calls if c[1] == "TauRun"]
    assert taurun_calls == ["create"]
    other = fake.get("TauRun", p.run_id, "research")
    assert other is not None
    record = (home / "home-a" / "data" / "runs" / p.run_id / "run.json").read_bytes()
    again = prepared(backend, home)
    clash = replace(again, meta=replace(again.meta, run_id=p.run_id))  # the same id drawn twice
    with pytest.raises(TauError, match="exists on this machine already"):
        backend.submit(clash, SubmitOptions(), lambda _m: None)  # here: its record is kept
    assert (home / "home-a" / "data" / "runs" / p.run_id / "run.json").read_bytes() == record
    monkeypatch.setenv("TAU_HOME", str(home / "home-b"))  # on another machine: the cluster's 409
    with pytest.raises(TauError, match="two drawn ids clashed") as e:
        KubeBackend(kube=fake).submit(clash, SubmitOptions(), lambda _m: None)
    assert "submit again" in (e.value.hint or "")
    assert fake.get("TauRun", p.run_id, "research") == other  # the first run is untouched
    assert not (home / "home-b" / "data" / "runs" / p.run_id).exists()


def test_a_fresh_runs_objects_are_created_and_one_found_there_is_applied_over(
    home: Path, fake: FakeKube
) -> None:
    """A run created just now has no objects yet: they are POSTed (cheaper for the API server
    than a server-side apply). One of its names found there all the same is applied over, as a
    resent submission's objects are."""
    backend = KubeBackend(kube=fake)
    p = prepared(backend, home)
    code = next(
        o for o in p.objects(shared_helpers=True) if o["kind"] == "ConfigMap" and not is_shared(o)
    )
    fake.put("ConfigMap", {**copy.deepcopy(code), "data": {"stale": "yes"}})
    fake.calls.clear()
    backend.submit(p, SubmitOptions(), lambda _m: None)
    writes = sorted((c[0], c[1]) for c in fake.calls if c[0] in ("create", "apply"))
    assert writes == [
        ("apply", "ConfigMap"),
        ("create", "ConfigMap"),
        ("create", "ConfigMap"),
        ("create", "Job"),
        ("create", "TauRun"),
    ]  # (helpers: created)
    got = fake.get("ConfigMap", code["metadata"]["name"], "research")
    assert got is not None and got["data"] == {**code.get("data", {}), "stale": "yes"}
    assert got["metadata"]["ownerReferences"][0]["kind"] == "TauRun"


def test_the_helpers_are_one_configmap_per_namespace_that_no_run_owns(
    home: Path, fake: FakeKube
) -> None:
    """Every run of the same TauGrid mounts the same helpers: the kube backend sends them once
    per namespace (one create per process; another process finds them there and leaves them
    as they are), owned by no run, so deleting a run (its TauRun) leaves the others' code whole.
    A run's own ConfigMap holds the folder's files only."""
    backend = KubeBackend(kube=fake)
    first = backend.submit(prepared(backend, home), SubmitOptions(), lambda _m: None)
    backend.submit(prepared(backend, home), SubmitOptions(), lambda _m: None)
    other = KubeBackend(kube=fake)  # another process: it does not know what the first sent
    other.submit(prepared(other, home), SubmitOptions(), lambda _m: None)
    cms = fake.list("ConfigMap", "research")
    shared = [c for c in cms if is_shared(c)]
    assert len(shared) == 1 and len(cms) == 4  # the helpers, and one per run
    assert "ownerReferences" not in shared[0]["metadata"]
    assert sorted(shared[0]["data"]) == sorted(f"{m}.py" for m in HELPER_MODULES)
    helper_creates = [c for c in fake.calls if c[:2] == ("create", "ConfigMap")]
    assert len(helper_creates) == 3 + 2  # 3 runs' own, the helpers once per process
    assert not [c for c in fake.calls if c[:2] == ("apply", "ConfigMap")]
    for run_cm in (c for c in cms if not is_shared(c)):
        assert run_cm["metadata"]["ownerReferences"][0]["kind"] == "TauRun"
        assert not set(run_cm["data"].values()) & set(shared[0]["data"].values())
    job = fake.get("Job", first.run_id, "research")
    assert job is not None
    code = next(v for v in job["spec"]["template"]["spec"]["volumes"] if v["name"] == "code")
    assert [s["configMap"]["name"] for s in code["projected"]["sources"]] == [
        shared[0]["metadata"]["name"],
        f"{first.run_id}-code",
    ]
    # the record keeps the objects, the ConfigMaps by name and count, not in full
    submitted = (first.path / "config" / "manifests" / "submitted.yaml").read_text()
    assert shared[0]["metadata"]["name"] in submitted and "def " not in submitted


def test_a_pulumi_runs_stack_carries_its_own_helpers(home: Path, fake: FakeKube) -> None:
    """A run's stack deletes what it holds when it is destroyed: a pulumi run's objects keep
    the helpers in the run's own ConfigMap, never the namespace's shared one."""
    from taugrid.runs.backends.pulumi.backend import PulumiBackend

    backend = PulumiBackend(kube=fake)
    p = prepared(backend, home)
    objects = p.objects(shared_helpers=backend.shared_helpers)
    assert not any(is_shared(o) for o in objects)
    code = next(o for o in objects if o["kind"] == "ConfigMap")
    assert len(code["data"]) >= len(HELPER_MODULES)


def test_submitting_the_same_run_again_changes_nothing(home: Path, fake: FakeKube) -> None:
    backend = KubeBackend(kube=fake)
    p = prepared(backend, home, run_id="same-run-1")
    first = backend.submit(p, SubmitOptions(), lambda _m: None)
    applies = sum(1 for c in fake.calls if c[0] == "apply")
    said: list[str] = []
    again = backend.submit(p, SubmitOptions(), said.append)
    assert again.path == first.path and "already submitted" in said[0]
    assert sum(1 for c in fake.calls if c[0] == "apply") == applies


def test_a_run_is_found_from_another_machine(
    home: Path, fake: FakeKube, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two TAU_HOMEs, one researcher: the second finds the run by id and by name, lists it,
    and can cancel it."""
    backend = KubeBackend(kube=fake)
    p = prepared(backend, home)
    backend.submit(p, SubmitOptions(), lambda _m: None)
    monkeypatch.setenv("TAU_HOME", str(home / "home-b"))
    other = KubeBackend(kube=fake)
    assert adopt_remote("no-such-run", None, other) is None
    rd = adopt_remote(p.run_id, None, other)
    assert rd is not None and rd.path.is_relative_to(home / "home-b")
    rec = rd.read_record()
    assert (rec.run_id, rec.name, rec.workspace, rec.workload_kind) == (
        p.run_id,
        "batch-score",
        "research",
        "job",
    )
    assert rec.config_hash == p.manifest.config_hash() and rec.image == "python:3.12-slim"
    by_name = adopt_remote("batch-score", None, KubeBackend(kube=fake))
    assert by_name is not None and by_name.run_id == p.run_id
    listed = KubeBackend(kube=fake).workspace_runs("research")
    assert [s.run_id for s in listed] == [p.run_id]
    assert KubeBackend(kube=fake).cancel(rd) == Phase.Cancelled
    assert fake.get("TauRun", p.run_id, "research") is None


def test_a_resumed_run_keeps_its_parent_on_a_cluster(home: Path, fake: FakeKube) -> None:
    backend = KubeBackend(kube=fake)
    p = prepared(backend, home, resume_from="/data/runs/x/checkpoints/@newest", parent="parent-1")
    rd = backend.submit(p, SubmitOptions(), lambda _m: None)
    lineage = rd.read_record().resumed_from
    assert lineage is not None and lineage.run_id == "parent-1"
    assert lineage.checkpoint == "/data/runs/x/checkpoints/@newest"


def test_an_ended_cluster_run_is_sealed_once_and_its_status_needs_no_cluster(
    home: Path, fake: FakeKube, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A detached run that succeeded: the next status seals the local record (exit code 0,
    reason Completed), `verify` passes, and status then works with the cluster gone."""
    from taugrid.client import runs

    backend = KubeBackend(kube=fake)
    rd = backend.submit(prepared(backend, home), SubmitOptions(), lambda _m: None)
    job = fake.objects[("Job", "research", rd.run_id)]
    job["status"] = {"succeeded": 1, "conditions": [{"type": "Complete", "status": "True"}]}
    import taugrid.runs.backends.base as base

    monkeypatch.setattr(base, "get", lambda target, **kw: KubeBackend(kube=fake))
    (st,) = runs._statuses([rd])
    assert st.phase == Phase.Succeeded
    rec = rd.read_record()
    assert rec.phase == Phase.Succeeded and rec.exit_code == 0
    assert rec.termination_reason == "Completed" and rd.sealed
    assert rd.verify()[1] == []
    fake.forbid.add(("*", "*", None))  # the cluster is gone: nothing may be asked of it
    (again,) = runs._statuses([rd])
    assert again.phase == Phase.Succeeded and again.exit_code == 0
    history = [h.phase for h in rd.read_history()]
    assert history.count(Phase.Succeeded) == 1  # sealed once


def test_a_kubelet_that_serves_no_log_is_said_in_words() -> None:
    from taugrid.runs.backends.kube.reads import _log_note

    raw = (
        "get logs of pods in namespace research: 500 Internal Server Error: Get "
        '"https://127.0.0.1:10250/containerLogs/research/p/c": dial tcp: connection refused'
    )
    said = _log_note(raw)
    assert "containerLogs" not in said and "does not serve this pod's log" in said
    assert _log_note("something else") == "something else"


def test_a_log_the_node_no_longer_has_is_read_from_the_volume_not_printed_as_output(
    home: Path, fake: FakeKube, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A kubelet whose container (or log file) is gone answers 200 with its own sentence as the
    log's body. That is not the program's output: tau reads the copy on the workspace volume."""
    import io

    from taugrid.api import constants as C
    from taugrid.runs.backends.kube.reads import KubeReads

    backend = KubeBackend(kube=fake)
    rd = backend.submit(prepared(backend, home), SubmitOptions(), lambda _m: None)
    fake.objects[("Job", "research", rd.run_id)]["status"] = {
        "succeeded": 1,
        "conditions": [{"type": "Complete", "status": "True"}],
    }
    labels = {C.LABEL_RUN_ID: rd.run_id}
    fake.put(
        "Pod",
        {
            "metadata": {"name": "p0", "namespace": "research", "labels": labels},
            "spec": {"containers": [{"name": "main"}]},
        },
    )
    read: list[str] = []

    def volume(self: KubeReads, kube: Any, rec: Any, path: str, out: Any) -> int:
        read.append(path)
        out.write("step 1 loss 0.5\n")
        return 1

    monkeypatch.setattr(KubeReads, "_read_volume", volume)
    for gone in (
        "unable to retrieve container logs for containerd://fdcdcbc6e263b0d5e9",
        'failed to try resolving symlinks in path "/var/log/pods/research_p0_1/main/0.log": '
        "lstat /var/log/pods/research_p0_1/main/0.log: no such file or directory\n",
    ):
        fake.logs["p0"] = [gone]
        out = io.StringIO()
        backend.logs(rd, out)
        assert out.getvalue() == "step 1 loss 0.5\n" and read[-1].endswith("logs/driver.log")
    # the same words inside a program's output are its output
    read.clear()
    fake.logs["p0"] = ["hello\n", "unable to retrieve container logs for containerd://ab\n"]
    out = io.StringIO()
    backend.logs(rd, out)
    assert out.getvalue().startswith("hello\n") and "unable to retrieve" in out.getvalue()
    assert read == []


def test_a_run_dispatched_to_a_worker_cluster_is_read_there(
    home: Path, fake: FakeKube, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """MultiKueue runs a manager's run on a worker: its pods and its volume are the worker's.
    `tau run logs` finds the worker from the manager's Workload and reads the worker's pod; a
    kubeconfig without a context of the worker's name is told how to reach it."""
    import io

    from taugrid.api import constants as C

    backend = KubeBackend(kube=fake)
    rd = backend.submit(prepared(backend, home), SubmitOptions(), lambda _m: None)
    owner = [{"kind": "Job", "name": rd.run_id, "uid": "u1", "apiVersion": "batch/v1"}]
    fake.put(
        "Workload",
        {
            "metadata": {
                "name": f"job-{rd.run_id}",
                "namespace": "research",
                "ownerReferences": owner,
            },
            "status": {"clusterName": "worker-1"},
        },
    )
    worker = FakeKube({})
    labels = {C.LABEL_RUN_ID: rd.run_id}
    pod = {"name": "p0", "namespace": "research", "labels": labels}
    worker.put("Pod", {"metadata": pod, "spec": {"containers": [{"name": "main"}]}})
    worker.logs["p0"] = ["epoch 1 on the worker\n"]
    assert backend.worker_of(rd.read_record()) == "worker-1"
    backend._workers = {"worker-1": worker}
    out = io.StringIO()
    backend.logs(rd, out)
    assert out.getvalue() == "epoch 1 on the worker\n"
    # the record (pull) is the worker's volume too
    assert backend.record_source(rd).files.kube is worker
    # an ended run's Workload gone (or no longer naming it): the worker the controller recorded
    fake.delete("Workload", f"job-{rd.run_id}", "research")
    taurun = fake.get("TauRun", rd.run_id, "research")
    assert taurun is not None and backend.worker_of(rd.read_record()) is None
    taurun["status"] = {"phase": "Succeeded", "clusters": ["worker-1"], "cluster": "worker-1"}
    fake.put("TauRun", taurun)
    assert backend.worker_of(rd.read_record()) == "worker-1"
    assert backend.record_source(rd).files.kube is worker
    # no context for the worker: said, with the fix
    backend._workers = None
    cfg = tmp_path / "kubeconfig"
    cfg.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: m\n"
        "clusters: [{name: m, cluster: {server: 'https://127.0.0.1:1'}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
        "contexts: [{name: m, context: {cluster: m, user: u}}]\n"
    )
    monkeypatch.setenv("KUBECONFIG", str(cfg))
    with pytest.raises(TauError) as e:
        backend.logs(rd, io.StringIO())
    assert "worker cluster worker-1" in e.value.message and "context named worker-1" in (
        e.value.hint or ""
    )


def test_the_experiment_is_in_the_record_the_taurun_and_the_status(
    home: Path, fake: FakeKube, monkeypatch: pytest.MonkeyPatch
) -> None:
    """tau.yaml's experiment name is a label a team filters by (the portal, lists): it is in the
    run's record, in the record a teammate's machine makes from the TauRun, and in the status."""
    import shutil

    from conftest import EXAMPLES

    project = home / "exp"
    shutil.copytree(EXAMPLES / "batch-job", project)
    with (project / "tau.yaml").open("a") as f:
        f.write("experiment: {name: lr-sweep}\n")
    backend = KubeBackend(kube=fake)
    p = backend.prepare(RunRequest(load.load_manifest(str(project)), workspace="research"))
    rd = backend.submit(p, SubmitOptions(), lambda _m: None)
    assert rd.read_record().experiment == "lr-sweep"
    monkeypatch.setenv("TAU_HOME", str(home / "home-b"))
    other = adopt_remote(p.run_id, None, KubeBackend(kube=fake))
    assert other is not None and other.read_record().experiment == "lr-sweep"
    (st,) = KubeBackend(kube=fake).workspace_runs("research")
    assert (st.experiment, st.workspace) == ("lr-sweep", "research")


class WholeObjects(FakeKube):
    """A cluster whose listing sends whole objects (as a LIST, or a server with an older CRD)."""

    def list_columns(self, kind_name: str, namespace: str) -> list[dict[str, Any]]:
        return self.list(kind_name, namespace)


@pytest.mark.parametrize(
    "experiment", ["experiment: {name: lr-sweep}", "research: {experiment: lr-sweep}"]
)
@pytest.mark.parametrize("phase", ["Succeeded", "Failed", "Running", None])
def test_a_listing_from_the_printer_columns_says_what_one_from_whole_objects_says(
    home: Path, phase: str | None, experiment: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`run list --cluster` reads each TauRun's printer columns only (a Table request): every
    field a listing shows must be among them, for ended, running and not yet observed runs."""
    from taugrid.api.crds import TauRunStatus, row_columns

    cluster = WholeObjects({"TauCluster": [tau_cluster()]})
    backend = KubeBackend(kube=cluster)
    project = home / "exp"
    shutil.copytree(EXAMPLES / "batch-job", project)
    with (project / "tau.yaml").open("a") as f:
        f.write(experiment + "\n")
    p = backend.prepare(RunRequest(load.load_manifest(str(project)), workspace="research"))
    backend.submit(p, SubmitOptions(), lambda _m: None)
    if phase is not None:
        ended = phase != "Running"
        status = TauRunStatus.model_validate(
            {
                "phase": phase,
                "attempt": 2,
                "summary": f"{phase.lower()}: the words",
                "startTime": "2026-01-01T00:00:05Z",
                "observedAt": "2026-01-01T00:01:00Z",
                "completionTime": "2026-01-01T00:00:50Z" if ended else None,
                "terminationReason": "OOMKilled" if phase == "Failed" else None,
                "signals": [{"name": "Admitted", "state": "true", "reason": "admitted"}],
                "timeline": [{"at": "2026-01-01T00:00:01Z", "reason": "Admitted", "message": "ok"}],
            }
        )
        taurun = cluster.get("TauRun", p.run_id, "research")
        assert taurun is not None
        cluster.apply_status(
            {**taurun, "status": status.model_dump(mode="json", exclude_none=True)},
            manager="taugrid-controller",
        )
    monkeypatch.setenv("TAU_HOME", str(home / "elsewhere"))  # a teammate's machine
    (whole,) = backend.workspace_runs("research")
    thin_cluster = FakeKube({})
    thin_cluster.objects = cluster.objects
    (thin,) = KubeBackend(kube=thin_cluster).workspace_runs("research")
    (listed,) = thin_cluster.list_columns("TauRun", "research")
    assert set(listed["spec"]["manifest"]) == {experiment.split(":")[0]}  # not the whole tau.yaml
    assert "signals" not in listed.get("status", {}) and "managedFields" not in listed["metadata"]
    shown = {"signals", "timeline", "duration_s"}  # a listing shows neither; duration runs on
    assert thin.model_dump(exclude=shown) == whole.model_dump(exclude=shown)
    assert thin.experiment == "lr-sweep" and (phase is None or thin.attempt == 2)
    assert set(row_columns("TauRun").values()) >= {".status.phase", ".spec.runId"}
