"""A registration records exactly the bytes of one moment or refuses; symbolic links are
followed inside the registered tree and refused by name when they leave it; nothing is left out
without a word; a damaged stored file is restored from its intact source; `gc` removes what no
version names and what a killed registration left; `pull` never overwrites local edits without
--force and refuses a file as its destination."""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path

import pytest
from datakit import WHO, tree

from taugrid.api.errors import TauError
from taugrid.data import pack
from taugrid.data.filestore import FileStore
from taugrid.data.store import Store

BIG = 2 << 20  # a blob of its own (smaller files are packed)


# pulls note what they wrote under tau's home: a home of the test's own
pytestmark = pytest.mark.usefixtures("own_tau_home")


@pytest.fixture
def fstore(tmp_path: Path) -> FileStore:
    return FileStore(tmp_path / "registry", tmp_path / "cache")


# --- symbolic links ------------------------------------------------------------------------------
def test_a_link_inside_the_tree_is_followed_and_recorded(fstore: FileStore, tmp_path: Path) -> None:
    src = tree(tmp_path / "m", {"blobs/abc": b"weights", "big/real.bin": b"b" * BIG})
    (src / "snapshots" / "r1").mkdir(parents=True)
    (src / "snapshots" / "r1" / "model.bin").symlink_to("../../blobs/abc")
    (src / "snapshots" / "r1" / "big.bin").symlink_to("../../big/real.bin")
    (src / "latest").symlink_to("snapshots/r1")  # a folder link inside the tree
    got = fstore.register("model", "m", src, WHO).record
    paths = {f.path for f in got.files}
    assert {"snapshots/r1/model.bin", "latest/model.bin", "latest/big.bin"} <= paths
    assert got.links["snapshots/r1/model.bin"] == "../../blobs/abc"
    assert got.links["latest"] == "snapshots/r1"
    fstore.pull(got, tmp_path / "out")
    assert (tmp_path / "out" / "latest" / "model.bin").read_bytes() == b"weights"
    assert not (tmp_path / "out" / "latest").is_symlink()  # content, not a link
    assert fstore.verify(got) == []


def test_a_hugging_face_snapshot_whose_links_leave_it_is_refused_by_name(
    fstore: FileStore, tmp_path: Path
) -> None:
    repo = tree(tmp_path / "models--org--m", {"blobs/0a1b": b"w" * 10})
    snap = repo / "snapshots" / "r1"
    snap.mkdir(parents=True)
    (snap / "model.safetensors").symlink_to("../../blobs/0a1b")
    with pytest.raises(TauError) as e:
        fstore.register("model", "m", snap, WHO)
    assert (
        e.value.exit_code == 2
        and "model.safetensors: a symbolic link to ../../blobs/0a1b" in e.value.message
    )
    assert (
        "outside the folder registered" in e.value.message and fstore.versions("model", "m") == []
    )
    got = fstore.register("model", "m", repo, WHO).record  # the folder that holds both
    assert "snapshots/r1/model.safetensors" in {f.path for f in got.files}


@pytest.mark.parametrize("make", ["dangling", "loop", "loop-two"])
def test_a_broken_or_looping_link_is_refused_by_name(
    fstore: FileStore, tmp_path: Path, make: str
) -> None:
    src = tree(tmp_path / "src", {"a/f.txt": b"x", "b/g.txt": b"y"})
    if make == "dangling":
        (src / "a" / "gone").symlink_to("nothing-here")
        words = "a/gone: a symbolic link to nothing-here, which does not exist"
    elif make == "loop":
        (src / "a" / "up").symlink_to("..")
        words = "a/up: a symbolic link to a folder that holds it"
    else:
        (src / "a" / "to-b").symlink_to("../b")
        (src / "b" / "to-a").symlink_to("../a")
        words = "a symbolic link to a folder that holds it"
    with pytest.raises(TauError) as e:
        fstore.register("dataset", "d", src, WHO)
    assert e.value.exit_code == 2 and words in e.value.message, e.value.message


# --- what can be registered ------------------------------------------------------------------
def test_sockets_pipes_and_empty_paths_are_refused(
    fstore: FileStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from taugrid.client import data

    src = tree(tmp_path / "src", {"f.txt": b"x"})
    os.mkfifo(src / "pipe")
    with pytest.raises(TauError, match=r"src/pipe is a named pipe: nothing of it can be stored"):
        fstore.register("dataset", "d", src, WHO)
    os.unlink(src / "pipe")
    sock = socket.socket(socket.AF_UNIX)
    short = Path(f"/tmp/tau-sock-{os.getpid()}")
    try:
        sock.bind(str(short))
        with pytest.raises(TauError, match="is a socket: register a file or a folder"):
            fstore.register("dataset", "d", short, WHO)
    finally:
        sock.close()
        short.unlink(missing_ok=True)
    with pytest.raises(TauError, match="is a character device"):
        fstore.register("dataset", "d", Path("/dev/null"), WHO)
    monkeypatch.setenv("TAU_HOME", str(tmp_path / "home"))
    monkeypatch.chdir(src)
    for empty in ("", "  "):
        with pytest.raises(TauError, match="no path given") as e:
            data.register("dataset", "d", empty)
        assert e.value.exit_code == 2
    assert fstore.versions("dataset", "d") == []


# --- one moment --------------------------------------------------------------------------------
def test_a_large_file_written_while_it_is_read_is_refused(
    fstore: FileStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    src = tree(tmp_path / "src", {"big.bin": b"a" * BIG, "small.txt": b"s"})
    real = FileStore._store_file

    def writer_meanwhile(self: FileStore, path: Path, progress: object) -> str:
        sha = real(self, path, progress)  # type: ignore[arg-type]
        with path.open("r+b") as f:  # someone writes the file while tau reads it
            f.write(b"B" * 1024)
        return sha

    monkeypatch.setattr(FileStore, "_store_file", writer_meanwhile)
    with pytest.raises(TauError) as e:
        fstore.register("dataset", "d", src, WHO)
    assert e.value.exit_code == 2 and "big.bin: changed while it was read" in e.value.message
    assert "one moment" in (e.value.hint or "") and fstore.versions("dataset", "d") == []


def test_a_small_file_written_while_it_is_read_is_refused(
    fstore: FileStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    src = tree(tmp_path / "src", {"a.txt": b"first", "b.txt": b"other"})
    real_read = os.read

    def read(fd: int, n: int) -> bytes:
        data = real_read(fd, n)
        if os.readlink(f"/proc/self/fd/{fd}").endswith("a.txt"):
            target = src / "a.txt"  # rewritten in place, same size, a second later by the clock
            target.write_bytes(b"FIRST")
            st = target.stat()
            os.utime(target, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
        return data

    monkeypatch.setattr(pack.os, "read", read)
    with pytest.raises(TauError, match=r"a\.txt: changed while it was read") as e:
        fstore.register("dataset", "d", src, WHO)
    assert e.value.exit_code == 2 and fstore.versions("dataset", "d") == []


# --- repair, gc ----------------------------------------------------------------------------------
def test_a_damaged_stored_file_is_restored_from_its_intact_source(
    fstore: FileStore, tmp_path: Path
) -> None:
    src = tree(tmp_path / "src", {"big.bin": b"a" * BIG, "small.txt": b"small bytes"})
    rec = fstore.register("dataset", "d", src, WHO).record
    blob = fstore.blob(next(f.sha256 for f in rec.files if f.path == "big.bin"))
    blob.chmod(0o644)
    blob.write_bytes(b"z" * BIG)  # damaged where it is stored
    packed = next(fstore.root.glob("packs/*.pack"))
    packed.write_bytes(packed.read_bytes().replace(b"small bytes", b"SMALL BYTES"))
    assert len(fstore.verify(rec)) == 2
    wrong = tree(tmp_path / "edited", {"big.bin": b"a" * BIG, "small.txt": b"edited!!!!!"})
    with pytest.raises(TauError, match=r"1 damaged file\(s\) cannot be restored .*small\.txt") as e:
        fstore.repair(rec, wrong)
    assert "(1 restored)" in e.value.message
    assert fstore.repair(rec, src) == ["small.txt"]  # big.bin was restored by the first try
    assert fstore.verify(rec) == [] and fstore.repair(rec, src) == []
    fstore.pull(rec, tmp_path / "out")
    assert (tmp_path / "out" / "small.txt").read_bytes() == b"small bytes"


def test_gc_removes_what_no_version_names_and_what_a_killed_registration_left(
    fstore: FileStore, tmp_path: Path
) -> None:
    keep = fstore.register("dataset", "keep", tree(tmp_path / "k", {"k.bin": b"k" * BIG}), WHO)
    gone = fstore.register(
        "dataset", "gone", tree(tmp_path / "g", {"g.bin": b"g" * BIG, "g.txt": b"small"}), WHO
    )
    fstore.remove("dataset", "gone", gone.record.version)
    half = fstore.root / "tmp" / "12345-1-1"  # a killed registration's half-written copy
    half.write_bytes(b"half")
    assert fstore.gc().bytes == 0  # everything is younger than the grace period
    old = time.time() - 7200
    for p in fstore.root.rglob("*"):
        if p.is_file():
            os.utime(p, (old, old))
    dry = fstore.gc(dry_run=True)
    assert (dry.blobs, dry.packs, dry.tmp_files, dry.dry_run) == (1, 1, 1, True)
    assert half.exists()  # a dry run removes nothing
    done = fstore.gc()
    assert (done.blobs, done.packs, done.tmp_files) == (1, 1, 1) and done.bytes >= BIG
    assert not half.exists() and fstore.verify(keep.record) == []
    assert not fstore.blob(gone.record.files[0].sha256).exists()
    assert fstore.gc(grace_s=0).bytes == 0  # nothing more


# --- a registration that died ---------------------------------------------------------------------
KILLED_MIDWAY = """
import sys, time
from pathlib import Path
from datakit import WHO
from taugrid.data import filestore

real = filestore.FileStore._store_file

def stalls(self, path, progress):
    def told(n):
        progress(n)
        if n >= (1 << 20):
            print("writing", flush=True)
            time.sleep(300)
    return real(self, path, told)

filestore.FileStore._store_file = stalls
store = filestore.FileStore(Path(sys.argv[1]), Path(sys.argv[2]))
store.register("dataset", "big", Path(sys.argv[3]), WHO)
"""


def test_a_registration_killed_midway_leaves_nothing_after_the_next_one(
    fstore: FileStore, tmp_path: Path
) -> None:
    """SIGKILL mid-file: its half-written file goes with the next registration, not a day (or
    `tau data gc` an hour) later."""
    import signal
    import subprocess
    import sys

    big = tmp_path / "big.bin"
    big.write_bytes(os.urandom(4 << 20))
    proc = subprocess.Popen(
        [sys.executable, "-c", KILLED_MIDWAY, str(fstore.root), str(tmp_path / "c2"), str(big)],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])},
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "writing"
    left = [p for p in (fstore.root / "tmp").iterdir() if p.stat().st_size >= 1 << 20]
    assert left, "the killed registration wrote nothing to reclaim"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    fstore.register("dataset", "small", tree(tmp_path / "s", {"a.txt": b"A"}), WHO)
    assert sorted(p.name for p in (fstore.root / "tmp").iterdir()) == []


def test_a_live_registration_s_files_are_left_alone(fstore: FileStore, tmp_path: Path) -> None:
    import fcntl

    tmp = fstore.root / "tmp"
    live, dead = pack.new_prefix(), pack.new_prefix()
    for prefix in (live, dead):
        (tmp / f"{prefix}.lock").write_text("")
        (tmp / f"{prefix}-L1-1").write_bytes(b"half")
    with (tmp / f"{live}.lock").open("r") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # as the live registration holds it
        fstore.register("dataset", "small", tree(tmp_path / "s", {"a.txt": b"A"}), WHO)
        assert sorted(p.name for p in tmp.iterdir()) == [f"{live}-L1-1", f"{live}.lock"]


# --- pull ----------------------------------------------------------------------------------------
def test_pull_keeps_local_edits_unless_forced_and_refuses_a_file(
    fstore: FileStore, tmp_path: Path
) -> None:
    rec = fstore.register(
        "dataset", "d", tree(tmp_path / "s", {"a.txt": b"A", "sub/b.txt": b"B"}), WHO
    ).record
    dest = tmp_path / "work"
    fstore.pull(rec, dest)
    (dest / "a.txt").write_bytes(b"my edit")
    with pytest.raises(
        TauError, match=r"other bytes .* in 1 file\(s\): a\.txt; nothing was written"
    ) as e:
        fstore.pull(rec, dest)
    assert e.value.exit_code == 2 and "--force" in (e.value.hint or "")
    assert (dest / "a.txt").read_bytes() == b"my edit"
    got = fstore.pull(rec, dest, force=True)
    assert (dest / "a.txt").read_bytes() == b"A" and (got.written, got.unchanged) == (1, 1)
    afile = tmp_path / "plain.txt"
    afile.write_text("x")
    with pytest.raises(TauError, match="is a file: pull into a folder"):
        fstore.pull(rec, afile)
    clash = tmp_path / "clash"
    clash.mkdir()
    (clash / "sub").write_text("a file where the version has a folder")
    with pytest.raises(TauError, match="is a file where the version has a folder"):
        fstore.pull(rec, clash)
    assert afile.read_text() == "x"


def test_a_pull_of_another_version_updates_what_the_last_pull_wrote(
    fstore: FileStore, tmp_path: Path
) -> None:
    """v1 pulled, then v2 into the same folder: v1's files are the pull's own, not edits."""
    v1 = fstore.register(
        "dataset", "d", tree(tmp_path / "s1", {"a.txt": b"A1", "b.txt": b"B"}), WHO
    )
    v2 = fstore.register(
        "dataset", "d", tree(tmp_path / "s2", {"a.txt": b"A2", "b.txt": b"B"}), WHO
    )
    dest = tmp_path / "work"
    fstore.pull(v1.record, dest)
    got = fstore.pull(v2.record, dest)
    assert (dest / "a.txt").read_bytes() == b"A2" and (got.written, got.unchanged) == (1, 1)
    (dest / "a.txt").write_bytes(b"mine")  # now a person's edit: kept, refused
    with pytest.raises(TauError, match=r"in 1 file\(s\): a\.txt"):
        fstore.pull(v1.record, dest)
    assert (dest / "a.txt").read_bytes() == b"mine"


# --- registry addresses: one grammar ---------------------------------------------------------
@pytest.mark.parametrize(
    ("url", "words"),
    [
        ("az:/x", "not file:///ABSOLUTE/FOLDER or az://"),
        ("file:rel", "not file:///ABSOLUTE/FOLDER or az://"),
        ("file:/abs", "not file:///ABSOLUTE/FOLDER or az://"),
        ("file://rel/dir", "a file:// registry names no host ('rel')"),
        ("file://", "names no folder"),
        ("relative/dir", "not file:///ABSOLUTE/FOLDER"),
        ("/abs/dir", "a folder is named as a URL: file:///abs/dir"),
        ("s3://bucket/x", "not file:///ABSOLUTE/FOLDER"),
        ("az://UPPER/container", "storage account 'UPPER'"),
        ("az://acct", "expected az://ACCOUNT/CONTAINER"),
        ("az://acct/c", "container 'c'"),
        ("az://acct/cont/a/../b", "must not contain empty, '.' or '..' parts"),
        ("file:///a\x00b", "control characters"),
    ],
)
def test_every_registry_address_but_the_two_forms_is_refused(url: str, words: str) -> None:
    from taugrid.api.data import parse_registry, registry_problem

    with pytest.raises(TauError) as e:
        parse_registry(url)
    assert e.value.exit_code == 2 and words in e.value.message, e.value.message
    assert registry_problem(url) is not None
    with pytest.raises(TauError):
        from taugrid.data.store import open_store

        open_store(url)


def test_the_two_forms_parse_to_one_spelling() -> None:
    from taugrid.api.data import parse_registry

    f = parse_registry("file:///data//registry/")
    assert (f.scheme, f.path, f.url) == ("file", "/data/registry", "file:///data/registry")
    a = parse_registry("az://acct1/models/team/a/")
    assert (a.account, a.container, a.prefix, a.url) == (
        "acct1",
        "models",
        "team/a/",
        "az://acct1/models/team/a",
    )


def test_a_missing_file_registry_is_an_error_unless_made(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from taugrid.client import data
    from taugrid.data.store import open_store

    missing = (tmp_path / "typo").as_uri()
    with pytest.raises(TauError, match="does not exist") as e:
        open_store(missing)
    assert "mkdir -p" in (e.value.hint or "") and not (tmp_path / "typo").exists()
    monkeypatch.setenv("TAU_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("TAU_REGISTRY", missing)
    with pytest.raises(TauError, match="does not exist"):
        data.list_("dataset")
    assert not (tmp_path / "typo").exists()
    (tmp_path / "afile").write_text("x")
    with pytest.raises(TauError, match="is not a folder"):
        open_store((tmp_path / "afile").as_uri())
    monkeypatch.delenv("TAU_REGISTRY")
    src = tree(tmp_path / "src", {"a": b"a"})
    data.register("dataset", "d", src)  # this machine's own registry is made on first use
    data.copy("dataset", "d", (tmp_path / "team").as_uri())  # a copy makes its destination
    assert open_store((tmp_path / "team").as_uri()).versions("dataset", "d")


def test_the_account_in_the_address_must_be_the_credentials(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from taugrid.data.azure import credential_account
    from taugrid.data.store import open_store

    conn = (
        "DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;AccountKey=k;"
        "BlobEndpoint=http://127.0.0.1:1/devstoreaccount1;"
    )
    assert credential_account(conn) == "devstoreaccount1"
    assert (
        credential_account(
            "BlobEndpoint=https://acme.blob.core.windows.net/;SharedAccessSignature=x"
        )
        == "acme"
    )
    assert credential_account("SharedAccessSignature=x") is None
    monkeypatch.setenv("AZURE_STORAGE_CONNECTION_STRING", conn)
    with pytest.raises(TauError) as e:
        open_store("az://otheraccount/models")
    assert (
        e.value.exit_code == 2
        and "is for storage account 'devstoreaccount1', not 'otheraccount'" in e.value.message
    )


# --- validate checks what run checks -----------------------------------------------------------
@pytest.mark.parametrize(
    ("extra", "words"),
    [
        ("data: {inputs: [{ref: nothing@prod}]}\n", "no dataset 'nothing'"),
        ("runtime: {python: ./no-venv/bin/python}\n", "no such interpreter"),
    ],
)
def test_validate_refuses_what_run_refuses(tmp_path: Path, extra: str, words: str) -> None:
    from conftest import run_tau

    folder = tmp_path / "p"
    folder.mkdir()
    (folder / "t.py").write_text("print(1)\n")
    (folder / "tau.yaml").write_text(
        f"schema_version: 1\nname: v\nrun: {{entrypoint: t.py}}\n{extra}"
    )
    home = tmp_path / "home"
    checked = run_tau(home, "run", "validate", str(folder))
    ran = run_tau(home, "run", str(folder), "--target", "local")
    assert checked.returncode == ran.returncode == 2, (checked.stderr, ran.stderr)
    assert words in checked.stderr and words in ran.stderr
    as_json = run_tau(home, "run", "validate", str(folder), "-o", "json")
    assert as_json.returncode == 2 and '"valid": false' in as_json.stdout


def test_validate_names_the_exact_versions_a_run_would_read(tmp_path: Path) -> None:
    import json

    from conftest import run_tau

    home = tmp_path / "home"
    src = tree(tmp_path / "d", {"a.txt": b"a"})
    reg = run_tau(home, "data", "dataset", "register", "corpus", str(src), "-o", "json")
    version = json.loads(reg.stdout)["version"]
    folder = tmp_path / "p"
    folder.mkdir()
    (folder / "t.py").write_text("print(1)\n")
    (folder / "tau.yaml").write_text(
        "schema_version: 1\nname: v\nrun: {entrypoint: t.py}\ndata: {inputs: [{ref: corpus}]}\n"
    )
    got = run_tau(home, "run", "validate", str(folder), "-o", "json")
    assert got.returncode == 0, got.stderr
    assert json.loads(got.stdout)["inputs"][0]["version"] == version
    assert (
        f"input: dataset corpus@{version[:19]}"
        in run_tau(home, "run", "validate", str(folder)).stdout
    )


# --- follow, then verify: the seal is there --------------------------------------------------
def test_a_reader_that_saw_the_end_waits_for_the_seal_not_a_clock(tmp_path: Path) -> None:
    """The supervisor records a run's end and seals it under one lock; `settled` (what
    `client.follow` and `wait` call once they see the end) returns after the seal."""
    import threading

    from portalkit import make_run

    from taugrid.api.vocabulary import Phase

    rd = make_run(tmp_path, "sealing-aaaaa", phase=Phase.Running)
    written, asked = threading.Event(), threading.Event()

    def supervisor() -> None:
        with rd._locked():
            rec = rd.read_record().model_copy(update={"phase": Phase.Succeeded})
            rd.write_record(rec)  # the end is visible ...
            written.set()
            asked.wait(30)
            rd.seal()  # ... and sealed before the lock goes

    t = threading.Thread(target=supervisor)
    t.start()
    assert written.wait(30) and rd.read_record().phase is Phase.Succeeded
    asked.set()
    assert rd.settled() is True and rd.verify()[1] == []
    t.join(30)


def test_repair_restores_a_damaged_file_on_every_store(store: Store, tmp_path: Path) -> None:
    """The file store and Azure Blob Storage (Azurite): verify names the damaged file, repair
    from the intact source restores it, verify passes."""
    src = tree(tmp_path / "src", {"w.bin": b"w" * BIG, "x.txt": b"x"})
    rec = store.register("dataset", "r", src, WHO).record
    sha = next(f.sha256 for f in rec.files if f.path == "w.bin")
    damaged = tmp_path / "damaged"
    damaged.write_bytes(b"z" * BIG)
    if isinstance(store, FileStore):
        store.blob(sha).unlink()  # lost where it is stored
    else:  # the blob's bytes replaced in the container behind the store's back
        client = store.container.get_blob_client(store._blob_key(sha))  # type: ignore[attr-defined]
        client.upload_blob(damaged.read_bytes(), overwrite=True)
    assert any(p.startswith("w.bin") for p in store.verify(rec))
    assert store.repair(rec, src) == ["w.bin"]
    assert store.verify(rec) == []


# --- gc on Azure Blob Storage: writers and gc exclude each other across machines ----------------
@pytest.fixture
def astore(azurite: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Store:
    from azuritekit import connection_string, new_container

    from taugrid.data.store import open_store

    monkeypatch.setenv("AZURE_STORAGE_CONNECTION_STRING", connection_string(azurite))
    return open_store(new_container(azurite), tmp_path / "cache")


def _blob_names(s: Store, under: str) -> list[str]:
    c = s.container  # type: ignore[attr-defined]
    return [b.name for b in c.list_blobs(name_starts_with=s._key(under))]  # type: ignore[attr-defined]


def test_azure_gc_removes_unnamed_blobs_only_past_the_grace(astore: Store, tmp_path: Path) -> None:
    keep = astore.register("dataset", "keep", tree(tmp_path / "k", {"k.bin": b"k" * 1000}), WHO)
    gone = astore.register(
        "dataset", "gone", tree(tmp_path / "g", {"g.bin": b"g" * 3000, "g.txt": b"small"}), WHO
    )
    astore.remove("dataset", "gone", gone.record.version)
    assert astore.gc().blobs == 0  # younger than the hour's grace
    dry = astore.gc(dry_run=True, grace_s=0)
    assert (dry.blobs, dry.bytes, dry.dry_run) == (2, 3005, True)
    assert len(_blob_names(astore, "blobs/")) == 3  # a dry run removes nothing
    done = astore.gc(grace_s=0)
    assert (done.blobs, done.bytes) == (2, 3005)
    assert len(_blob_names(astore, "blobs/")) == 1 and astore.verify(keep.record) == []
    assert _blob_names(astore, "locks/") == []  # gc leaves no marker behind
    assert astore.gc(grace_s=0).blobs == 0


def test_azure_gc_refuses_while_a_writer_writes_and_a_writer_waits_for_gc(
    astore: Store, tmp_path: Path
) -> None:
    import threading

    from taugrid.data.azure import AzureStore, _Marker

    assert isinstance(astore, AzureStore)
    src = tree(tmp_path / "s", {"a.bin": b"a" * 100})
    with astore._writing():  # a registration in flight on another machine
        with pytest.raises(TauError, match=r"1 registration\(s\) or copies are writing") as e:
            astore.gc(grace_s=0)
        assert e.value.exit_code == 1 and "pid" in e.value.message
    held = _Marker(astore, astore._key("locks/gc"))  # a gc in flight on another machine
    held.create()
    done = threading.Event()
    result: list[object] = []

    def register() -> None:
        result.append(astore.register("dataset", "d", src, WHO))
        done.set()

    t = threading.Thread(target=register, daemon=True)
    t.start()
    assert not done.wait(3.0)  # bounded look: it waits for as long as gc holds the store
    assert result == [] and astore.names("dataset") == []
    held.remove()
    assert done.wait(120.0) and astore.names("dataset") == ["d"]
    t.join()
    assert _blob_names(astore, "locks/") == []


def test_azure_markers_of_dead_holders_are_ignored(
    astore: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from taugrid.data import azure
    from taugrid.data.azure import _Marker

    _Marker(astore, astore._key("locks/gc")).create()  # type: ignore[arg-type]  # both died
    _Marker(astore, astore._key("locks/writer-dead")).create()  # type: ignore[arg-type]
    with pytest.raises(TauError, match="another gc is running"):
        astore.gc(grace_s=0)
    monkeypatch.setattr(azure, "LOCK_STALE_S", 0.0)  # as if they were not refreshed for long
    astore.register("dataset", "d", tree(tmp_path / "s", {"a.bin": b"a"}), WHO)
    assert astore.gc(grace_s=0).blobs == 0
    assert _blob_names(astore, "locks/") == []  # gc removed the dead writer's marker
