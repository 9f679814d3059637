"""A workspace volume read from outside: the file server (runlib/tau_files.py) as a function and
over HTTP, the client's words for each way a read fails (kube/files.py), a cluster run's
progress in its status, and the platform objects that serve it."""

from __future__ import annotations

import http.client
import json
import os
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import tau_evidence
import tau_files
from k8s_schemas import k8s_errors
from kubekit import platform

from taugrid.api import constants as C
from taugrid.api import naming
from taugrid.api.errors import TauError
from taugrid.api.evidence import KubeHandle, RunRecord
from taugrid.api.kubetime import k8s_time
from taugrid.components import manifests as M
from taugrid.kube.client import Forbidden, Reply
from taugrid.kube.fake import FakeKube
from taugrid.kube.files import NotOnVolume, VolumeFiles
from taugrid.runs import status
from taugrid.runs.backends.kube.backend import KubeBackend
from taugrid.runs.evidence import RunDir

NS = "research"


def body(reply: tau_files.Reply) -> bytes:
    return b"".join(reply.body)


@pytest.fixture
def volume(tmp_path: Path) -> Path:
    """A workspace volume with one run that logged 3 steps and saved 2 checkpoints."""
    root = tmp_path / "data"
    run = root / "runs" / "r1"
    (run / "logs").mkdir(parents=True)
    (run / "logs" / "driver.log").write_text("step 1\nstep 2\nstep 3\n")
    rows = [{"step": i, "ts": 1.0 * i, "loss": 1.0 / i} for i in (1, 2, 3)]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    for step in (1, 3):
        d = run / "checkpoints" / f"step-{step:08d}"
        d.mkdir(parents=True)
        (d / "model.bin").write_bytes(bytes(range(256)) * step)
    index = {"complete": [{"step": s, "path": f"step-{s:08d}", "ts": 1.0} for s in (1, 3)]}
    (run / "checkpoints" / "index.json").write_text(json.dumps(index))
    (run / "outputs").mkdir()
    (run / "outputs" / "result.txt").write_text("42\n")
    (run / ".lock").write_text("")  # a dotfile: transient, never listed
    (tmp_path / "secret").write_text("outside the volume")
    return root


# --- the server, as a function -------------------------------------------------------------------
def test_progress_says_what_the_record_says(volume: Path) -> None:
    r = tau_files.respond(volume, "/progress/runs/r1?checkpoints=checkpoints&outputs=outputs")
    assert r.status == 200
    doc = json.loads(body(r))
    assert (doc["metric_rows"], doc["last_step"], doc["latest_metrics"]) == (3, 3, {"loss": 1 / 3})
    assert (doc["checkpoints"], doc["newest_checkpoint"], doc["newest_checkpoint_step"]) == (
        2,
        "step-00000003",
        3,
    )
    assert (doc["outputs"], doc["sealed"]) == (1, False)
    assert doc["last_metric_ts"] == pytest.approx(
        (volume / "runs/r1/metrics.jsonl").stat().st_mtime
    )
    tau_evidence.seal(volume / "runs" / "r1")
    assert json.loads(body(tau_files.respond(volume, "/progress/runs/r1")))["sealed"] is True


def test_a_torn_last_metric_line_is_not_a_row(volume: Path) -> None:
    with (volume / "runs/r1/metrics.jsonl").open("a") as f:
        f.write('{"step": 4, "lo')
    doc = json.loads(body(tau_files.respond(volume, "/progress/runs/r1")))
    assert (doc["metric_rows"], doc["last_step"]) == (3, 3)


def test_the_tree_lists_every_file_but_dotfiles(volume: Path) -> None:
    doc = json.loads(body(tau_files.respond(volume, "/tree/runs/r1")))
    paths = {f["path"]: f["size"] for f in doc["files"]}
    assert ".lock" not in paths and "outputs/result.txt" in paths
    assert paths["checkpoints/step-00000003/model.bin"] == 768
    assert doc["truncated"] is False


def test_a_file_whole_and_from_an_offset(volume: Path) -> None:
    path = "/file/runs/r1/checkpoints/step-00000003/model.bin"
    whole = tau_files.respond(volume, path)
    assert whole.status == 200 and body(whole) == bytes(range(256)) * 3
    part = tau_files.respond(volume, path, {"Range": "bytes=700-"})
    assert part.status == 206 and part.headers["Content-Range"] == "bytes 700-767/768"
    assert body(part) == (bytes(range(256)) * 3)[700:]
    middle = tau_files.respond(volume, path, {"Range": "bytes=10-19"})
    assert body(middle) == bytes(range(10, 20))


def test_an_offset_at_the_end_and_a_bad_range(volume: Path) -> None:
    path = "/file/runs/r1/outputs/result.txt"
    done = tau_files.respond(volume, path, {"Range": "bytes=3-"})
    assert done.status == 416 and done.headers["Content-Range"] == "bytes */3"
    for bad in ("bytes=0-1,4-5", "lines=1-", "bytes=-5"):
        assert tau_files.respond(volume, path, {"Range": bad}).status == 416, bad


@pytest.mark.parametrize(
    "target",
    [
        "/file/../secret",
        "/file/runs/../../secret",
        "/tree/..",
        "/file/runs/%2e%2e/%2e%2e/secret",
        "/sha256/../secret",
        "/progress/runs/r1?checkpoints=../../..&outputs=outputs",
    ],
)
def test_nothing_outside_the_volume_is_served(volume: Path, target: str) -> None:
    r = tau_files.respond(volume, target)
    assert r.status == 400 and b"outside the volume" not in body(r)


def test_a_link_that_leaves_the_volume_is_refused_one_inside_is_followed(volume: Path) -> None:
    run = volume / "runs" / "r1"
    os.symlink(volume.parent / "secret", run / "outputs" / "escape")
    os.symlink(run / "outputs" / "result.txt", run / "outputs" / "same")
    assert tau_files.respond(volume, "/file/runs/r1/outputs/escape").status == 400
    assert body(tau_files.respond(volume, "/file/runs/r1/outputs/same")) == b"42\n"


def test_missing_paths_and_unknown_endpoints_say_so(volume: Path) -> None:
    for target, status_code in [
        ("/file/runs/r2/x", 404),
        ("/tree/runs/r2", 404),
        ("/progress/runs/r1/metrics.jsonl", 404),
        ("/upload/x", 404),
        ("/file/runs/r1", 404),
        ("/sha256/runs/r1", 404),  # a folder has no digest
        ("/sha256/runs/r2/x", 404),
    ]:
        r = tau_files.respond(volume, target)
        assert r.status == status_code and "error" in json.loads(body(r)), target


def test_a_file_is_hashed_where_it_is(volume: Path) -> None:
    """`/sha256/<path>`: the digest of the bytes on the volume (what a copy made inside the
    storage account is checked with), without sending them."""
    import hashlib

    ck = volume / "runs/r1/checkpoints/step-00000003/model.bin"
    r = tau_files.respond(volume, "/sha256/runs/r1/checkpoints/step-00000003/model.bin")
    doc = json.loads(body(r))
    assert r.status == 200
    assert doc == {"sha256": hashlib.sha256(ck.read_bytes()).hexdigest(), "size": 768}
    ck.write_bytes(b"other")
    changed = json.loads(body(tau_files.respond(volume, "/sha256/" + str(ck.relative_to(volume)))))
    assert changed["sha256"] != doc["sha256"] and changed["size"] == 5


# --- the server, over HTTP -----------------------------------------------------------------------
@pytest.fixture
def served(volume: Path) -> Iterator[int]:
    handler = type("H", (tau_files.Handler,), {"root": volume})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    t = threading.Thread(target=server.serve_forever, daemon=True)
    t.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


def _http(
    port: int, method: str, path: str, headers: dict[str, str] | None = None
) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request(method, path, headers=headers or {})
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def test_over_http_it_reads_and_never_writes(served: int, volume: Path) -> None:
    assert _http(served, "GET", "/file/runs/r1/outputs/result.txt") == (200, b"42\n")
    assert _http(served, "GET", "/file/runs/r1/outputs/result.txt", {"Range": "bytes=1-"}) == (
        206,
        b"2\n",
    )
    assert _http(served, "HEAD", "/file/runs/r1/outputs/result.txt") == (200, b"")
    for method in ("PUT", "POST", "DELETE"):
        assert _http(served, method, "/file/runs/r1/outputs/result.txt")[0] == 405
    assert (volume / "runs/r1/outputs/result.txt").read_text() == "42\n"


# --- the client's words --------------------------------------------------------------------------
def _status_reply(code: int, message: str) -> Reply:
    doc = {"kind": "Status", "status": "Failure", "code": code, "message": message}
    return Reply(code, {"Content-Type": "application/json"}, iter((json.dumps(doc).encode(),)))


def serving(fake: FakeKube, root: Path) -> None:
    def answer(path: str, headers: dict[str, str]) -> Reply:
        r = tau_files.respond(root, "/" + path, headers)
        return Reply(r.status, r.headers, r.body)

    fake.services[(NS, naming.FILES_SERVICE)] = answer


def test_each_way_a_read_fails_is_said(volume: Path) -> None:
    fake = FakeKube()
    files = VolumeFiles(fake, NS, "research")
    with pytest.raises(TauError, match="has no file server") as e:
        files.tree("runs/r1")
    assert "tau platform up" in (e.value.hint or "")
    fake.services[(NS, naming.FILES_SERVICE)] = lambda p, h: _status_reply(
        503, 'no endpoints available for service "tau-files"'
    )
    with pytest.raises(TauError, match="is not ready"):
        files.tree("runs/r1")
    fake.services[(NS, naming.FILES_SERVICE)] = lambda p, h: _status_reply(
        502, "error trying to reach service: dial tcp 10.244.1.7:8080: connect: connection refused"
    )
    with pytest.raises(TauError, match="does not answer: HTTP 502: error trying to reach"):
        files.tree("runs/r1")
    fake.services[(NS, naming.FILES_SERVICE)] = lambda p, h: Reply(200, {}, iter((b"<html>",)))
    with pytest.raises(TauError, match="not JSON"):
        files.progress("runs/r1", "checkpoints", "outputs")
    serving(fake, volume)
    with pytest.raises(NotOnVolume, match="runs/r9 is not on the volume of workspace research"):
        files.tree("runs/r9")
    with pytest.raises(NotOnVolume, match="runs/r9/x is not on the volume"):
        files.digest("runs/r9/x")
    assert files.digest("runs/r1/outputs/result.txt")[1] == 3
    fake.services[(NS, naming.FILES_SERVICE)] = lambda p, h: Reply(
        404,
        {},
        iter((json.dumps({"error": "no such endpoint: /sha256 (progress, tree)"}).encode(),)),
    )
    with pytest.raises(TauError, match="older than this tau") as e:  # a platform not updated
        files.digest("runs/r1/outputs/result.txt")
    assert "tau platform up" in (e.value.hint or "")
    fake.forbid.add(("get", "Service", NS))
    with pytest.raises(Forbidden):
        files.tree("runs/r1")


def test_a_read_resumes_from_an_offset(volume: Path) -> None:
    fake = FakeKube()
    serving(fake, volume)
    files = VolumeFiles(fake, NS, "research")
    data = (volume / "runs/r1/checkpoints/step-00000003/model.bin").read_bytes()
    with files.open("runs/r1/checkpoints/step-00000003/model.bin", 500) as (size, chunks):
        assert size == 768 and b"".join(chunks) == data[500:]
    with files.open("runs/r1/checkpoints/step-00000003/model.bin", 768) as (size, chunks):
        assert size == 768 and b"".join(chunks) == b""


# --- a cluster run's progress in its status -------------------------------------------------------
def record(run_id: str) -> RunRecord:
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
        stall_after_seconds=600,
    )


def running_cluster(phase: str = "Running") -> dict[str, list[dict[str, Any]]]:
    fresh = k8s_time(datetime.now(UTC))
    sig = [
        {"name": n, "state": "unknown", "reason": "the controller's"}
        for n in (
            "Admitted",
            "Scheduled",
            "GPUHealthy",
            "Progressing",
            "Completed",
            "ArtifactSaved",
        )
    ]
    taurun = {
        "metadata": {"name": "r1", "namespace": NS},
        "status": {
            "phase": phase,
            "summary": "running",
            "startTime": fresh,
            "signals": sig,
            "observedAt": fresh,
        },
    }
    cluster = {"metadata": {"name": C.CLUSTER_OBJECT}, "status": {"controllerHeartbeat": fresh}}
    return {"TauRun": [taurun], "TauCluster": [cluster]}


def observe(tmp_path: Path, fake: FakeKube) -> status.RunStatus:
    rd = RunDir(tmp_path / "home" / "r1")
    rd.path.mkdir(parents=True)
    rd.create(record("r1"))
    return status.compute(KubeBackend(kube=fake).observe([rd])[0])


def signal(st: status.RunStatus, name: str) -> Any:
    return next(s for s in st.signals if s.name == name)


def test_a_running_cluster_run_shows_its_step_and_checkpoint(tmp_path: Path, volume: Path) -> None:
    fake = FakeKube(running_cluster())
    serving(fake, volume)
    st = observe(tmp_path, fake)
    prog, saved = signal(st, "Progressing"), signal(st, "ArtifactSaved")
    assert prog.state == "true" and "step 3" in prog.reason and "loss=0.3333" in prog.reason
    assert saved.state == "true" and "newest step-00000003 (step 3)" in saved.reason
    assert st.last_step == 3 and st.latest_metrics == {"loss": 1 / 3}
    assert signal(st, "Admitted").reason == "the controller's"  # the rest stays the controller's


def test_progress_is_judged_on_the_volume_s_clock(tmp_path: Path, volume: Path) -> None:
    """A file server whose clock is an hour ahead: the last metric, written 'now' there, is
    fresh here; one written 20 minutes before its now is stalled (limit 10 minutes)."""
    fake = FakeKube(running_cluster())

    def ahead(path: str, headers: dict[str, str]) -> Reply:
        doc = json.loads(body(tau_files.respond(volume, "/" + path)))
        doc["now"] = doc["last_metric_ts"] + age
        return Reply(200, {}, iter((json.dumps(doc).encode(),)))

    fake.services[(NS, naming.FILES_SERVICE)] = ahead
    for age, state in ((5.0, "true"), (1200.0, "false")):
        os.utime(volume / "runs/r1/metrics.jsonl", (3600e6, 3600e6))
        os.utime(volume / "runs/r1/logs/driver.log", (3600e6, 3600e6))
        st = observe(tmp_path / str(age), fake)
        assert signal(st, "Progressing").state == state, age
    assert "stalled: no metric or log line for 20m" in signal(st, "Progressing").reason


def test_a_volume_that_cannot_be_read_leaves_progress_unknown_and_says_why(tmp_path: Path) -> None:
    st = observe(tmp_path, FakeKube(running_cluster()))
    prog = signal(st, "Progressing")
    assert st.phase == "Running" and prog.state == "unknown"
    assert "has no file server" in prog.reason and "tau platform up" in prog.reason
    assert signal(st, "ArtifactSaved").state == "unknown"


def test_a_listing_reads_no_volume(tmp_path: Path) -> None:
    fake = FakeKube(running_cluster())
    dirs = []
    for i in range(9):
        rd = RunDir(tmp_path / f"r{i}")
        rd.path.mkdir()
        rd.create(record(f"r{i}"))
        dirs.append(rd)
    KubeBackend(kube=fake).observe(dirs)
    assert not [c for c in fake.calls if c[1] == "Service"]


# --- the platform objects ------------------------------------------------------------------------
def test_each_workspace_gets_a_read_only_file_server() -> None:
    cfg = platform()
    objs = M.workspace_objects(cfg, cfg.workspaces[0])
    mine = {o["kind"]: o for o in objs if o["metadata"]["name"] == naming.FILES_SERVICE}
    assert set(mine) == {"ConfigMap", "Deployment", "Service"}
    for o in mine.values():
        assert k8s_errors(o) == [], o["kind"]
    pod = mine["Deployment"]["spec"]["template"]["spec"]
    assert pod["automountServiceAccountToken"] is False
    data = next(v for v in pod["volumes"] if v["name"] == "data")["persistentVolumeClaim"]
    assert data == {"claimName": naming.workspace_pvc("research"), "readOnly": True}
    assert all(m["readOnly"] for m in pod["containers"][0]["volumeMounts"])
    assert set(mine["ConfigMap"]["data"]) == {f"{m}.py" for m in naming.FILES_MODULES}
    assert mine["ConfigMap"]["data"]["tau_files.py"] == Path(tau_files.__file__).read_text()
    assert pod["containers"][0]["image"].startswith(cfg.components.controller.image + ":")
    role = next(
        o for o in objs if o["kind"] == "Role" and o["metadata"]["name"] == M.RESEARCHER_ROLE
    )
    proxy = [r for r in role["rules"] if any("proxy" in x for x in r["resources"])]
    assert proxy == [
        {"apiGroups": [""], "resources": ["services/proxy"], "verbs": ["get", "create"]}
    ]


def test_the_file_server_can_be_left_out_or_given_an_image() -> None:
    off = platform(workspaceFiles={"enabled": False})
    assert not [
        o
        for o in M.workspace_objects(off, off.workspaces[0])
        if o["metadata"]["name"] == naming.FILES_SERVICE
    ]
    own = platform(workspaceFiles={"image": "registry.example/python:3.12"})
    dep = next(o for o in M.workspace_objects(own, own.workspaces[0]) if o["kind"] == "Deployment")
    assert (
        dep["spec"]["template"]["spec"]["containers"][0]["image"] == "registry.example/python:3.12"
    )
    with pytest.raises(Exception, match="too little for the file server"):
        platform(workspaceFiles={"memory": "16Mi"})


def test_a_status_waits_at_most_two_seconds_for_the_volume(tmp_path: Path, volume: Path) -> None:
    """A file server the API server cannot reach (a network policy, a node gone) would hold a
    status for the proxy's own dial timeout: the status's read asks for 2 s at most."""
    asked: list[float | None] = []

    class Timed(FakeKube):
        def service_request(
            self,
            namespace: str,
            service: str,
            path: str,  # type: ignore[override]
            headers: dict[str, str] | None = None,
            method: str = "GET",
            body: bytes | None = None,
            timeout_s: float | None = None,
        ) -> Any:
            asked.append(timeout_s)
            return super().service_request(
                namespace, service, path, headers, method, body, timeout_s
            )

    fake = Timed(running_cluster())
    serving(fake, volume)
    observe(tmp_path, fake)
    assert asked == [2.0]


def test_the_file_server_ends_on_sigterm(tmp_path: Path) -> None:
    """Found on real nodes: as its container's first process, tau_files ignored SIGTERM, so a
    replaced file server pod lived out its whole grace period (30 s) beside the new one. It
    ends at once, exit 0, on SIGTERM."""
    import signal
    import subprocess
    import sys

    from taugrid.host.ports import free_port

    port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            tau_files.__file__,
            "--root",
            str(tmp_path),
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None and "serving" in proc.stdout.readline()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 0  # (bounded: Python's default would be death by signal)
    finally:
        proc.kill()


def test_progress_names_the_driver_log_s_last_error_line(volume: Path) -> None:
    with (volume / "runs/r1/logs/driver.log").open("a") as f:
        f.write('Traceback (most recent call last):\n  File "t.py", line 3\n')
        f.write("ValueError: the learning rate is negative\nbye\n")
    doc = json.loads(body(tau_files.respond(volume, "/progress/runs/r1")))
    assert doc["last_error"] == "ValueError: the learning rate is negative"
