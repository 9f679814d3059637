"""`tau run pull` and a cluster run's metrics, read from its record on the workspace volume
(through the file server, here as a function behind the fake API server): every file checked
against the sealed manifest, a cut-off pull resumed, bad and missing files named, local edits
kept, nothing written outside the destination."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import tau_evidence
import tau_files

from taugrid.api import constants as C
from taugrid.api import naming
from taugrid.api.errors import TauError
from taugrid.api.evidence import KubeHandle, RunRecord
from taugrid.api.observations import VolumeFile
from taugrid.client import runs as client_runs
from taugrid.kube.client import Reply
from taugrid.kube.fake import FakeKube
from taugrid.runs import pull as P
from taugrid.runs.backends import base
from taugrid.runs.backends.kube.backend import KubeBackend
from taugrid.runs.backends.kube.volume import VolumeRecord
from taugrid.runs.evidence import RunDir

NS = "research"
BIG = bytes(range(256)) * 4096  # 1 MiB: more than one chunk of the server's


# pulls note what they wrote under tau's home: a home of the test's own
pytestmark = pytest.mark.usefixtures("own_tau_home")


def record(run_id: str = "r1") -> RunRecord:
    return RunRecord(
        run_id=run_id,
        name="r",
        workspace="research",
        profile="cpu",
        workload_kind="job",
        handle=KubeHandle(namespace=NS),
        submitter="a",
        code_folder="/x",
        code_revision="u",
        code_digest="d",
        config_hash="h",
        image="i",
        entrypoint="t.py",
        created_at="2026-12-01T00:00:00+00:00",
        target="kube",
    )


@pytest.fixture
def volume(tmp_path: Path) -> Path:
    root = tmp_path / "volume"
    run = root / "runs" / "r1"
    (run / "logs").mkdir(parents=True)
    (run / "logs" / "driver.log").write_text("hello\n")
    (run / "metrics.jsonl").write_text(
        "".join(json.dumps({"step": i, "ts": i, "loss": 1 / i}) + "\n" for i in (1, 2))
    )
    ck = run / "checkpoints" / "step-00000002"
    ck.mkdir(parents=True)
    (ck / "model.bin").write_bytes(BIG + b"!" * 100)
    (run / "checkpoints" / "index.json").write_text(
        json.dumps({"complete": [{"step": 2, "path": ck.name, "ts": 1}]})
    )
    (run / "outputs").mkdir()
    (run / "outputs" / "result.txt").write_text("42\n")
    (run / "run.json").write_text("{}\n")
    return root


def seal(volume: Path) -> None:
    tau_evidence.seal(volume / "runs" / "r1", "r1")


def fake_serving(volume: Path) -> FakeKube:
    fake = FakeKube()

    def answer(path: str, headers: dict[str, str]) -> Reply:
        r = tau_files.respond(volume, "/" + path, headers)
        return Reply(r.status, r.headers, r.body)

    fake.services[(NS, naming.FILES_SERVICE)] = answer
    return fake


def source(volume: Path) -> VolumeRecord:
    return VolumeRecord(fake_serving(volume), record())


def test_a_sealed_record_pulls_whole_and_verified(volume: Path, tmp_path: Path) -> None:
    seal(volume)
    dest = tmp_path / "here"
    seen: list[int] = []
    got = P.pull(source(volume), record(), dest, progress=lambda n, _p: seen.append(n))
    assert got.ok and got.sealed and got.fetched == got.files == 7
    assert got.verified == 6 and got.unverified == []  # the manifest is the check, not checked
    assert sum(seen) == got.bytes
    assert tau_evidence.verify(dest)[1] == []  # what arrived is the record, as sealed
    again = P.pull(source(volume), record(), dest)
    assert (again.fetched, again.kept, again.verified) == (0, 7, 6)


def test_only_the_kinds_asked_for(volume: Path, tmp_path: Path) -> None:
    seal(volume)
    got = P.pull(source(volume), record(), tmp_path / "o", {"outputs", "metrics"})
    files = sorted(
        p.relative_to(tmp_path / "o").as_posix() for p in (tmp_path / "o").rglob("*") if p.is_file()
    )
    assert files == ["MANIFEST.sha256", "metrics.jsonl", "outputs/result.txt"] and got.ok
    with pytest.raises(TauError, match=r"unknown kind.*weights"):
        P.pull(source(volume), record(), tmp_path / "x", {"weights"})


class Cut:
    """A source whose reads break after `after` bytes (a connection cut mid-file), the first
    `times` times it is opened."""

    def __init__(self, inner: VolumeRecord, after: int, times: int = 1_000) -> None:
        self.inner, self.after, self.times, self.where = inner, after, times, inner.where
        self.offsets: list[int] = []

    def tree(self) -> list[VolumeFile]:
        return self.inner.tree()

    def text(self, rel: str) -> str:
        return self.inner.text(rel)

    @contextmanager
    def open(self, rel: str, offset: int = 0) -> Iterator[tuple[int, Iterator[bytes]]]:
        if not rel.endswith("model.bin"):  # the one file larger than a cut
            with self.inner.open(rel, offset) as got:
                yield got
            return
        self.offsets.append(offset)
        cut = len(self.offsets) <= self.times
        with self.inner.open(rel, offset) as (size, chunks):

            def broken() -> Iterator[bytes]:
                sent = 0
                for chunk in chunks:
                    if cut and sent + len(chunk) > self.after:
                        yield chunk[: self.after - sent]
                        raise TauError("the connection to the service tau-files broke")
                    sent += len(chunk)
                    yield chunk

            yield size, broken()


def test_a_connection_that_breaks_is_read_on_from_what_arrived(
    volume: Path, tmp_path: Path
) -> None:
    seal(volume)
    src = Cut(source(volume), 300_000, times=2)
    got = P.pull(src, record(), tmp_path / "here", {"checkpoints"})
    assert got.ok and src.offsets == [0, 300_000, 600_000]
    assert (tmp_path / "here/checkpoints/step-00000002/model.bin").read_bytes() == BIG + b"!" * 100


def test_a_cut_off_pull_resumes_where_it_stopped(volume: Path, tmp_path: Path) -> None:
    """Every read breaks: the pull fails after its attempts, keeping what arrived; run again,
    it reads on from there (as after kill -9)."""
    seal(volume)
    dest = tmp_path / "here"
    with pytest.raises(TauError, match="broke"):
        P.pull(Cut(source(volume), 300_000), record(), dest, {"checkpoints"})
    part = dest / "checkpoints" / "step-00000002" / ("model.bin" + P.PART)
    assert part.stat().st_size == 300_000 * P.ATTEMPTS  # what arrived is kept
    src = Cut(source(volume), 10**9)
    got = P.pull(src, record(), dest, {"checkpoints"})
    assert got.ok and got.resumed == 1 and 300_000 * P.ATTEMPTS in src.offsets and not part.exists()
    assert (dest / "checkpoints/step-00000002/model.bin").read_bytes() == BIG + b"!" * 100


def test_a_file_server_being_replaced_is_waited_for_a_status_is_not(
    volume: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seal(volume)
    fake = fake_serving(volume)
    serve = fake.services[(NS, naming.FILES_SERVICE)]
    down = {"left": 2}

    def flaky(path: str, headers: dict[str, str]) -> Reply:
        if down["left"]:
            down["left"] -= 1
            doc = {
                "kind": "Status",
                "code": 503,
                "message": 'no endpoints available for service "tau-files"',
            }
            return Reply(503, {}, iter((json.dumps(doc).encode(),)))
        return serve(path, headers)

    fake.services[(NS, naming.FILES_SERVICE)] = flaky
    monkeypatch.setattr(
        "taugrid.kube.files.time.sleep", lambda _s: None
    )  # the waits, not their length
    got = P.pull(VolumeRecord(fake, record()), record(), tmp_path / "here")
    assert got.ok and down["left"] == 0
    down["left"] = 1
    from taugrid.kube.files import Unreachable, VolumeFiles

    with pytest.raises(Unreachable, match="not ready"):
        VolumeFiles(fake, NS, "research").progress("runs/r1", "checkpoints", "outputs")


def test_a_file_that_is_not_what_the_manifest_says_is_named_and_not_kept(
    volume: Path, tmp_path: Path
) -> None:
    seal(volume)
    (volume / "runs/r1/outputs/result.txt").write_text(
        "43\n"
    )  # changed on the volume after the seal
    (volume / "runs/r1/logs/driver.log").unlink()
    got = P.pull(source(volume), record(), tmp_path / "here")
    assert not got.ok
    assert got.bad == ["outputs/result.txt (its bytes are not what MANIFEST.sha256 says)"]
    assert got.missing == ["logs/driver.log"]
    assert not (tmp_path / "here/outputs/result.txt").exists()
    assert (tmp_path / "here/metrics.jsonl").is_file()  # the good ones are kept


def test_a_running_run_pulls_what_it_has_unverified(volume: Path, tmp_path: Path) -> None:
    got = P.pull(source(volume), record(), tmp_path / "here")
    assert got.ok and not got.sealed and got.verified == 0
    assert "metrics.jsonl" in got.unverified and len(got.unverified) == got.files == 6


def test_local_edits_are_kept_unless_forced(volume: Path, tmp_path: Path) -> None:
    seal(volume)
    dest = tmp_path / "here"
    P.pull(source(volume), record(), dest)
    (dest / "outputs/result.txt").write_text("my notes\n")
    got = P.pull(source(volume), record(), dest)
    assert (
        got.edited == ["outputs/result.txt"]
        and (dest / "outputs/result.txt").read_text() == "my notes\n"
    )
    forced = P.pull(source(volume), record(), dest, force=True)
    assert forced.edited == [] and (dest / "outputs/result.txt").read_text() == "42\n"


def test_a_destination_that_is_a_file_is_refused(volume: Path, tmp_path: Path) -> None:
    (tmp_path / "taken").write_text("x")
    with pytest.raises(TauError, match="is a file"):
        P.pull(source(volume), record(), tmp_path / "taken")


def test_a_listing_that_points_outside_the_destination_writes_nothing_there(tmp_path: Path) -> None:
    class Evil(P.FolderSource):
        def tree(self) -> list[VolumeFile]:
            return [
                VolumeFile(path="../escaped", size=1, mtime=0),
                VolumeFile(path="/etc/x", size=1, mtime=0),
            ]

    got = P.pull(Evil(tmp_path), record(), tmp_path / "dest")
    assert len(got.bad) == 2 and not (tmp_path / "escaped").exists()


def test_a_run_that_never_wrote_a_record_says_so(volume: Path, tmp_path: Path) -> None:
    src = VolumeRecord(fake_serving(volume), record("r2"))
    with pytest.raises(
        P.RecordMissing, match="r2 has no record on the volume of workspace research"
    ):
        P.pull(src, record("r2"), tmp_path / "d")


# --- through the Python API --------------------------------------------------------------------
@pytest.fixture
def adopted(volume: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """A cluster run's local record under TAU_HOME, and its cluster answering from `volume`."""
    monkeypatch.setenv("TAU_HOME", str(tmp_path / "home"))
    rd = RunDir(tmp_path / "home" / "data" / "runs" / "r1")
    rd.path.mkdir(parents=True)
    rd.create(record())
    fake = fake_serving(volume)
    monkeypatch.setattr(
        base, "for_record", lambda rec, context=None, say=None: KubeBackend(kube=fake)
    )
    return fake


def test_metrics_of_a_cluster_run_come_from_its_volume(adopted: Any, volume: Path) -> None:
    rows = client_runs.metrics("r1")
    assert [(r["step"], r["run_id"]) for r in rows] == [(1, "r1"), (2, "r1")]
    (volume / "runs/r1/metrics.jsonl").unlink()
    assert client_runs.metrics("r1") == []  # none logged yet: no rows, not an error


def test_pull_through_the_python_api(
    adopted: Any, volume: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seal(volume)
    monkeypatch.chdir(tmp_path)
    got = client_runs.pull("r1", kinds=["outputs"])
    assert got.ok and Path(got.to) == tmp_path / "r1"
    assert (tmp_path / "r1/outputs/result.txt").read_text() == "42\n"


def test_artifacts_of_a_cluster_run_are_read_from_its_volume(adopted: Any, volume: Path) -> None:
    half = volume / "runs/r1/checkpoints/step-00000004"  # written, never indexed: not complete
    half.mkdir()
    (half / "model.bin").write_bytes(b"half")
    made = client_runs.artifacts("r1")
    assert [c["step"] for c in made.checkpoints] == [2] and made.outputs == ["result.txt"]
    assert made.note is None and "on the volume of workspace research" in made.checkpoint_dir


def test_artifacts_say_why_a_volume_could_not_be_read(adopted: Any) -> None:
    adopted.services.clear()  # no file server in this workspace
    made = client_runs.artifacts("r1")
    assert made.checkpoints == [] and made.outputs == []
    assert made.note and "has no file server" in made.note


def test_a_resumed_cluster_run_s_curve_cuts_its_parent_where_the_child_began(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A cluster child records "@newest" (its pod picked the checkpoint): the parent's rows stop
    before the child's first step, so the lineage is one curve, not a doubled stretch."""
    from taugrid.api.evidence import Lineage
    from taugrid.runs.index import lineage_metric_rows

    monkeypatch.setenv("TAU_HOME", str(tmp_path))
    root = tmp_path / "data" / "runs"
    parent, child = RunDir(root / "p1"), RunDir(root / "c1")
    for rd, rec in ((parent, record("p1")), (child, record("c1"))):
        rd.path.mkdir(parents=True)
        rd.create(rec)
    lineage = Lineage(run_id="p1", checkpoint="/data/runs/p1/checkpoints/@newest")
    child.write_record(child.read_record().model_copy(update={"resumed_from": lineage}))
    rows = {"p1": [{"step": i} for i in range(1, 16)], "c1": [{"step": i} for i in range(11, 21)]}
    got = lineage_metric_rows(child, lambda rd: [dict(r) for r in rows[rd.run_id]])
    assert [(r["step"], r["run_id"]) for r in got] == [
        *((i, "p1") for i in range(1, 11)),
        *((i, "c1") for i in range(11, 21)),
    ]


def test_a_model_from_a_cluster_run_is_registered_where_the_run_left_it(
    adopted: Any, volume: Path
) -> None:
    """The workspace's registry is the volume's own folder and reachable here (the sandbox, a
    mounted share): the checkpoint is registered in place, with the run's lineage."""
    from taugrid.client import data

    seal(volume)
    (volume / "registry").mkdir()
    said: list[str] = []
    got = data.register_model_from_run(
        "clf", "r1", registry=(volume / "registry").as_uri(), say=said.append
    )
    rec = got.record
    assert (rec.lineage.run, rec.lineage.checkpoint) == ("r1", "step-00000002")
    assert rec.lineage.metrics == {"loss": 0.5}
    assert [f.path for f in rec.files] == ["model.bin"] and rec.size == len(BIG) + 100
    assert any("where the run left it" in m for m in said)


def test_a_cluster_service_from_a_cluster_run_reads_nothing_through_this_machine(
    adopted: Any, volume: Path, tmp_path: Path
) -> None:
    """`tau serve deploy --from-run RUN --target kube`: the checkpoint is registered in the
    workspace's registry where the run left it, and the service's publish step finds it there
    (nothing copied, this machine's registry untouched); a workspace that declares no registry
    keeps this machine's."""
    from taugrid.api import serve as S
    from taugrid.api.profiles import WorkspaceRef
    from taugrid.client import serve
    from taugrid.serve.backends.generations import made_registry as _made
    from taugrid.serve.backends.generations import publish_model as _publish

    seal(volume)
    ws_registry = (volume / "registry").as_uri()
    spec = S.ServiceSpec.model_validate({"import_path": "m:a", "from_run": "r1"})
    said: list[str] = []
    pin = serve._pin(spec, "svc", registry=lambda: _made(ws_registry), say=said.append)
    assert pin is not None and (pin.from_run, pin.checkpoint) == ("r1", "step-00000002")
    assert any("where the run left it" in m for m in said), said
    assert not any("through this machine" in m for m in said), said
    assert not (tmp_path / "home" / "data" / "registry").exists()  # nothing registered here
    resolved = type(
        "R",
        (),
        {"workspace": WorkspaceRef(name="team", namespace=NS, pvc="data", registry=ws_registry)},
    )()
    copied: list[str] = []
    _publish(resolved, pin, copied.append)
    assert copied == []  # already in the workspace's registry: nothing travels
    here = serve._pin(spec, "svc2", registry=lambda: None, say=said.append)
    assert here is not None and (tmp_path / "home" / "data" / "registry").is_dir()


def test_a_model_from_a_cluster_run_elsewhere_comes_through_checked(
    adopted: Any, volume: Path, tmp_path: Path
) -> None:
    from taugrid.client import data

    seal(volume)
    for reg in ("reg", "reg2", "r3"):
        (tmp_path / reg).mkdir()
    said: list[str] = []
    got = data.register_model_from_run(
        "clf", "r1", registry=(tmp_path / "reg").as_uri(), say=said.append
    )
    assert got.record.size == len(BIG) + 100 and any("through this machine" in m for m in said)
    ledgers = tmp_path / "home" / "cache" / "pulled"
    assert not ledgers.is_dir() or list(ledgers.iterdir()) == []  # the scratch pull's: gone
    (volume / "runs/r1/checkpoints/step-00000002/model.bin").write_bytes(b"tampered")
    with pytest.raises(TauError, match="not what its record says") as e:
        data.register_model_from_run("clf2", "r1", registry=(tmp_path / "reg2").as_uri())
    assert e.value.exit_code == 1
    with pytest.raises(TauError, match="not a complete checkpoint") as e:
        data.register_model_from_run(
            "clf3", "r1", checkpoint="step-00000009", registry=(tmp_path / "r3").as_uri()
        )
    assert e.value.exit_code == 2 and "step-00000002" in (e.value.hint or "")


def test_a_multi_node_job_s_log_is_node_0_s(tmp_path: Path) -> None:
    """Found on real nodes: `tau run logs` of a 2-node torchrun job printed node 1's (empty) log:
    its pods start in the same second, and the newest was taken. Rank 0 prints: node 0's pod."""
    from taugrid.api import constants as C

    def pod(i: int) -> dict[str, Any]:
        labels = {C.LABEL_RUN_ID: "r1", "batch.kubernetes.io/job-completion-index": str(i)}
        return {
            "metadata": {
                "name": f"r1-{i}-x",
                "namespace": NS,
                "labels": labels,
                "creationTimestamp": "2026-12-04T16:16:53Z",
            },
            "spec": {"containers": [{"name": "main"}]},
        }

    fake = FakeKube({"Pod": [pod(0), pod(1)]})
    assert KubeBackend(kube=fake)._driver_pod(record(), fake) == ("r1-0-x", "main")


def test_tau_run_pull_exit_codes(
    adopted: Any, volume: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """0 all verified; 1 a file not as sealed (named); 4 the volume may not be read (another
    workspace's, Forbidden) ; 2 a run that does not exist, with how to find one."""
    from taugrid.cli.app import main

    seal(volume)
    assert main(["run", "pull", "r1", "--to", str(tmp_path / "ok"), "-o", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["ok"] is True
    (volume / "runs/r1/outputs/result.txt").write_text("changed after the seal\n")
    assert main(["run", "pull", "r1", "--to", str(tmp_path / "bad")]) == 1
    assert "not kept: outputs/result.txt" in capsys.readouterr().err
    adopted.forbid.add(("get", "Service", NS))
    assert main(["run", "pull", "r1", "--to", str(tmp_path / "no")]) == 4
    assert "forbidden" in capsys.readouterr().err
    monkeypatch = pytest.MonkeyPatch()
    monkeypatch.setattr("taugrid.runs.backends.kube.backend.adopt_remote", lambda ref, ctx: None)
    try:
        assert main(["run", "pull", "nope-zzzzz", "--to", str(tmp_path / "x")]) == 2
        assert "no run 'nope-zzzzz'" in capsys.readouterr().err
    finally:
        monkeypatch.undo()


def test_a_teammate_s_record_of_a_cluster_run_knows_its_exact_inputs() -> None:
    """The TauRun carries the inputs as resolved at submit, so a model registered from the run
    on another machine names them in its lineage (dataset -> run -> model)."""
    from taugrid.api.vocabulary import ResolvedInput
    from taugrid.kube.facts import record_from_taurun

    corpus = ResolvedInput(
        name="corpus", version="sha256:" + "a" * 64, path="corpus", ref="corpus@prod"
    )
    taurun = {
        "metadata": {"name": "r1", "namespace": NS},
        "spec": {
            "runId": "r1",
            "workspace": "research",
            "profile": "cpu",
            "configHash": "h",
            "inputs": [corpus.model_dump(mode="json")],
        },
    }
    rec = record_from_taurun(taurun, None)
    assert rec.inputs == [corpus]
    # a field a newer tau added is left out; one this tau reads otherwise is named, with the fix
    taurun["spec"]["inputs"] = [{**corpus.model_dump(mode="json"), "mirror": "x"}]
    assert record_from_taurun(taurun, None).inputs == [corpus]
    taurun["spec"]["inputs"] = [corpus.model_dump(mode="json"), {"name": 3}]
    with pytest.raises(TauError) as e:
        record_from_taurun(taurun, None)
    assert "TauRun research/r1: spec.inputs.1.name" in e.value.message
    assert "versions" in (e.value.hint or "")


# --- a model from a cluster run on an az:// registry: copied inside the storage account ---------
def test_a_folder_of_the_record_is_checked_where_it_is(volume: Path) -> None:
    """`check_in_place`: each file under the folder hashed at the source and checked against
    the sealed manifest; an unsealed record, a folder the record lacks, a changed or missing
    file are each refused, naming it."""
    src = P.FolderSource(volume / "runs" / "r1")
    with pytest.raises(TauError, match="not sealed yet") as e:
        P.check_in_place(src, "checkpoints/step-00000002")
    assert e.value.exit_code == 2
    seal(volume)
    got = P.check_in_place(src, "checkpoints/step-00000002")
    assert [(f[0], f[1]) for f in got.files] == [("model.bin", len(BIG) + 100)]
    assert got.bytes == len(BIG) + 100
    with pytest.raises(TauError, match="step-00000009 is not in the sealed record") as e:
        P.check_in_place(src, "checkpoints/step-00000009")
    assert e.value.exit_code == 2
    ck = volume / "runs/r1/checkpoints/step-00000002/model.bin"
    ck.write_bytes(b"changed")
    with pytest.raises(TauError, match=r"step-00000002/model.bin \(changed\)") as e:
        P.check_in_place(src, "checkpoints/step-00000002")
    assert e.value.exit_code == 1
    ck.unlink()
    with pytest.raises(TauError, match=r"step-00000002/model.bin \(missing\)"):
        P.check_in_place(src, "checkpoints/step-00000002")


@pytest.fixture
def az_volume(
    adopted: Any, volume: Path, azurite: int, monkeypatch: pytest.MonkeyPatch
) -> tuple[str, Any]:
    """An az:// registry that is the `registry` folder of the workspace volume (the volume is
    its Blob container, as Blob CSI mounts it): the run's files are the container's blobs."""
    from azure.storage.blob import ContainerClient
    from azuritekit import connection_string, new_container

    seal(volume)
    url = new_container(azurite)
    monkeypatch.setenv("AZURE_STORAGE_CONNECTION_STRING", connection_string(azurite))
    container = ContainerClient.from_connection_string(
        connection_string(azurite), url.split("/")[3]
    )
    for p in sorted(volume.rglob("*")):
        if p.is_file():
            container.upload_blob(p.relative_to(volume).as_posix(), p.read_bytes())
    return url, container


def test_a_model_from_a_cluster_run_on_an_az_registry_moves_nothing_through_this_machine(
    az_volume: tuple[str, Any], volume: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The checkpoint is hashed on the volume by its file server (checked against the manifest)
    and copied blob to blob inside the storage account: no byte of it is read here, and the
    version is the same one a registration of the same files through this machine makes."""
    from azure.storage.blob import BlobClient

    from taugrid.client import data
    from taugrid.data.store import open_store

    url, _container = az_volume
    read_here: list[str] = []
    real_open = VolumeRecord.open

    def watched_open(self: VolumeRecord, rel: str, offset: int = 0) -> Any:
        read_here.append(rel)
        return real_open(self, rel, offset)

    def no_download(*_a: Any, **_k: Any) -> Any:
        raise AssertionError("a blob was read through this machine")

    with monkeypatch.context() as m:
        m.setattr(VolumeRecord, "open", watched_open)
        m.setattr(BlobClient, "download_blob", no_download)
        said: list[str] = []
        got = data.register_model_from_run("clf", "r1", registry=url, say=said.append)
    # the manifest, the checkpoints' index and the metrics (to choose one): not the checkpoint
    assert sorted(set(read_here)) == ["MANIFEST.sha256", "checkpoints/index.json", "metrics.jsonl"]
    assert any("inside storage account devstoreaccount1" in m for m in said), said
    rec = got.record
    assert got.created and (rec.lineage.run, rec.lineage.checkpoint) == ("r1", "step-00000002")
    assert [f.path for f in rec.files] == ["model.bin"] and rec.size == len(BIG) + 100
    store = open_store(url)
    assert store.verify(rec) == []  # the copied bytes are what the record says
    same = open_store((tmp_path / "here").as_uri(), create=True).register(
        "model", "clf", volume / "runs/r1/checkpoints/step-00000002", rec.created
    )
    assert same.record.version == rec.version
    again = data.register_model_from_run("clf", "r1", registry=url)
    assert not again.created and again.record.version == rec.version


def test_an_az_copy_refuses_a_checkpoint_that_is_not_what_the_run_sealed(
    az_volume: tuple[str, Any], volume: Path
) -> None:
    """Changed on the volume after the seal (the file server's digest differs): refused, naming
    the file, exit 1, nothing registered; a blob whose size is not the volume's (the container
    and the file server disagree): refused too."""
    from taugrid.client import data
    from taugrid.data.store import open_store

    url, container = az_volume
    ck = volume / "runs/r1/checkpoints/step-00000002/model.bin"
    good = ck.read_bytes()
    ck.write_bytes(b"changed after the seal")
    with pytest.raises(TauError, match=r"checkpoints/step-00000002/model.bin \(changed\)") as e:
        data.register_model_from_run("clf", "r1", registry=url)
    assert e.value.exit_code == 1
    ck.write_bytes(good)
    container.upload_blob("runs/r1/checkpoints/step-00000002/model.bin", b"short", overwrite=True)
    with pytest.raises(TauError, match=r"model.bin \(5 bytes, not \d+\)") as e:
        data.register_model_from_run("clf", "r1", registry=url)
    assert e.value.exit_code == 1
    assert open_store(url).versions("model", "clf") == []


def test_an_unsealed_run_s_checkpoint_on_an_az_registry_comes_through_this_machine(
    az_volume: tuple[str, Any], volume: Path
) -> None:
    """A run that still runs has no manifest to check a copy against: its complete checkpoint is
    read through the file server, as a pull takes it, and the command says so."""
    from taugrid.client import data

    url, container = az_volume
    (volume / "runs/r1/MANIFEST.sha256").unlink()
    container.delete_blob("runs/r1/MANIFEST.sha256")
    said: list[str] = []
    got = data.register_model_from_run("clf", "r1", registry=url, say=said.append)
    assert got.created and got.record.size == len(BIG) + 100
    assert any("through this machine" in m for m in said), said


def _rundir(tmp_path: Path, run_id: str) -> RunDir:
    rd = RunDir(tmp_path / "home" / run_id)
    rd.path.mkdir(parents=True)
    rd.create(record(run_id))
    return rd


def test_a_cluster_run_resumes_from_the_newest_checkpoint_its_volume_holds(
    volume: Path, tmp_path: Path
) -> None:

    backend = KubeBackend(kube=fake_serving(volume))
    newest = backend.newest_checkpoint(_rundir(tmp_path, "r1"))
    assert newest == f"{C.run_dir('r1')}/checkpoints/step-00000002"
    # a run that saved none: nothing to resume from, said before anything is sent
    assert backend.newest_checkpoint(_rundir(tmp_path, "r2")) is None


def test_where_the_volume_cannot_be_read_the_pod_resolves_the_newest(tmp_path: Path) -> None:

    backend = KubeBackend(kube=FakeKube())  # no file server answers
    backend.resume_patience_s = 0.0
    newest = backend.newest_checkpoint(_rundir(tmp_path, "r1"))
    assert newest == f"{C.run_dir('r1')}/checkpoints/{C.NEWEST_CHECKPOINT}"


def test_verify_of_a_cluster_run_checks_its_record_where_it_lies(
    adopted: Any, volume: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """For the submitter and a teammate alike: this machine's copy is not the record."""
    from taugrid.cli.app import main

    seal(volume)
    v = client_runs.verify("r1")
    assert v.ok and v.where == "the volume of workspace research" and v.files >= 5
    (volume / "runs/r1/outputs/result.txt").write_text("43\n")
    (volume / "runs/r1/outputs/extra.txt").write_text("?")
    v = client_runs.verify("r1")
    assert v.problems == [
        "changed: outputs/result.txt (on the volume of workspace research)",
        "not in the manifest: outputs/extra.txt (on the volume of workspace research)",
    ]
    capsys.readouterr()
    assert main(["run", "verify", "r1"]) == 1
    assert "changed: outputs/result.txt" in capsys.readouterr().err


def test_metrics_of_a_sealed_run_that_were_changed_say_so(
    adopted: Any, volume: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    seal(volume)
    said: list[str] = []
    assert len(client_runs.metrics("r1", say=said.append)) == 2
    assert said == []  # as sealed: nothing to say
    with (volume / "runs/r1/metrics.jsonl").open("a") as f:
        f.write(json.dumps({"step": 3, "ts": 3, "loss": 0.01}) + "\n")
    rows = client_runs.metrics("r1", say=said.append)
    assert len(rows) == 3
    assert len(said) == 1 and "not what its sealed manifest says" in said[0]


def test_what_an_earlier_pull_wrote_is_updated_not_taken_for_an_edit(
    volume: Path, tmp_path: Path
) -> None:
    """A pull while the run ran, then the run went on and ended: the stale files are the
    pull's own (it noted their bytes), so they are updated; a file a person changed is kept."""
    dest = tmp_path / "here"
    first = P.pull(source(volume), record(), dest)
    assert first.ok and not first.sealed
    run = volume / "runs" / "r1"
    with (run / "metrics.jsonl").open("a") as f:
        f.write(json.dumps({"step": 3, "ts": 3, "loss": 0.3}) + "\n")
    (run / "logs" / "driver.log").write_text("hello\nbye\n")
    (run / "outputs" / "result.txt").write_text("43\n")  # same size: a size check would keep it
    seal(volume)
    (dest / "run.json").write_text('{"mine": 1}\n')  # a person's edit
    second = P.pull(source(volume), record(), dest)
    assert second.ok and second.sealed
    assert second.edited == ["run.json"]
    for rel in ("metrics.jsonl", "logs/driver.log", "outputs/result.txt"):
        assert (dest / rel).read_bytes() == (run / rel).read_bytes(), rel
    assert (dest / "run.json").read_text() == '{"mine": 1}\n'
    third = P.pull(source(volume), record(), dest)
    assert third.edited == ["run.json"] and third.fetched == 0
