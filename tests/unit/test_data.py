"""Datasets and models (`tau data`) on the file store: versions named by content, files stored
once, alias moves as a true compare-and-swap (threads and processes), nothing partial after a
kill -9, the stat cache, verify, and bad input refused with exit 2."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import multiprocessing
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import run_tau
from datakit import WHO, run_with_checkpoints, tree

from taugrid.api.data import (
    FileEntry,
    VersionRecord,
    check_path,
    check_paths,
    manifest_digest,
    parse_ref,
    parse_tags,
)
from taugrid.api.errors import TauError
from taugrid.data.filestore import FileStore
from taugrid.data.store import Conflict, Store, open_store
from taugrid.host.ports import free_port

# pulls note what they wrote under tau's home: a home of the test's own
pytestmark = pytest.mark.usefixtures("own_tau_home")


@pytest.fixture
def fstore(tmp_path: Path) -> FileStore:
    return FileStore(tmp_path / "registry", tmp_path / "cache" / "stat")


def blob_count(store: Store) -> int:
    """Copies of file bytes in the store: blobs of their own, and pieces of packs (a file store
    packs small files: every piece an index lists counts, so a second copy would show)."""
    if isinstance(store, FileStore):
        loose = [p for p in (store.root / "blobs").rglob("*") if p.is_file()]
        pieces = sum(len(p.read_bytes().splitlines()) for p in (store.root / "packs").glob("*.idx"))
        return len(loose) + pieces
    return len([b for b in store.container.list_blobs(name_starts_with=store._key("blobs/"))])  # type: ignore[attr-defined]


def overwrite_blob(store: Store, sha: str, data: bytes | None) -> None:
    """Change (or, with None, delete) a file's bytes behind the store's back (as another
    process would: a file store reads its pack indexes afresh)."""
    if isinstance(store, FileStore):
        p = store.blob(sha)
        if p.is_file():
            if data is None:
                p.unlink()
            else:
                p.chmod(0o644)
                p.write_bytes(data)
            return
        pack, off, size = store._packed()[sha]
        if data is None:  # its line leaves the index
            idx = store.root / "packs" / f"{pack}.idx"
            idx.chmod(0o644)
            idx.write_bytes(
                b"".join(
                    ln
                    for ln in idx.read_bytes().splitlines(True)
                    if not ln.startswith(sha.encode())
                )
            )
        else:  # the same length, other bytes (a piece's place is fixed)
            path = store.root / "packs" / f"{pack}.pack"
            path.chmod(0o644)
            with path.open("r+b") as f:
                f.seek(off)
                f.write((data * size)[:size] if data else b"")
        store._pieces = None
        return
    client = store.container.get_blob_client(store._blob_key(sha))  # type: ignore[attr-defined]
    if data is None:
        client.delete_blob()
    else:
        client.upload_blob(data, overwrite=True)


# --- the model ----------------------------------------------------------------------------------
def test_the_version_is_the_digest_of_the_sorted_file_list() -> None:
    a = FileEntry(path="a.txt", size=1, sha256="0" * 64)
    b = FileEntry(path="b/c.txt", size=2, sha256="1" * 64)
    assert manifest_digest([a, b]) == manifest_digest([b, a])
    assert manifest_digest([a, b]) != manifest_digest([a, dataclasses.replace(b, size=3)])
    assert manifest_digest([a]).startswith("sha256:") and len(manifest_digest([a])) == 71


def test_the_walk_finds_files_in_the_order_of_their_paths(tmp_path: Path) -> None:
    """Folder names sort as if followed by '/': a folder `a` comes after a file `a-b` and
    before `a0`, as their paths do; chunks of any size give the same order."""
    from taugrid.data import files

    rels = ["a/x", "a-b", "a.txt", "a0", "ab/c", "a b", "a/y/z", "a/y-1", "B", "é/1", "z"]
    src = tree(tmp_path / "src", {r: r.encode() for r in rels})
    for size in (1, 3, 1024):
        chunks = list(files.name_chunks(src, size))
        assert all(0 < len(c) <= size for c in chunks)
        assert [r for c in chunks for r, _ in c] == sorted(rels)


@pytest.mark.parametrize(
    "path", ["/etc/passwd", "../up", "a/../b", "a//b", "./a", "a\x00b", "a\nb", "", "a\\b"]
)
def test_a_bad_path_among_many_is_named(path: str) -> None:
    """A file list is checked in one match; the bad path in it is still the one named."""
    good = [f"d{i}/.f{i}" for i in range(500)]
    check_paths(good)
    with pytest.raises(TauError) as e:
        check_paths([*good[:250], path, *good[250:]])
    assert repr(path) in e.value.message


@pytest.mark.parametrize(
    "path", ["/etc/passwd", "../up", "a/../b", "a//b", "./a", "a\x00b", "a\nb", "", "a\\b"]
)
def test_bad_paths_are_refused(path: str) -> None:
    """In a version record read from a store (a path of the walk is checked by check_path)."""
    record = {
        "kind": "dataset",
        "name": "x",
        "version": "sha256:" + "0" * 64,
        "size": 0,
        "created": {"by": "a", "at": "t", "host": "h"},
    }
    ok = {"path": "a/.cache/..b", "size": 0, "sha256": "0" * 64}
    VersionRecord.model_validate({**record, "files": [ok]})
    with pytest.raises(ValueError, match="path"):
        VersionRecord.model_validate({**record, "files": [ok, {**ok, "path": path}]})
    with pytest.raises(TauError):
        check_path(path)
    for bad in ({**ok, "size": -1}, {**ok, "sha256": "0" * 63}, {**ok, "extra": 1}):
        with pytest.raises(ValueError):
            VersionRecord.model_validate({**record, "files": [bad]})


@pytest.mark.parametrize(
    "ref",
    ["", "UPPER", "a b", "../x", "x@", "x@../y", "x@sha256:zz", "x@sha256:12", "-x", "x" * 64],
)
def test_bad_references_exit_2(ref: str) -> None:
    with pytest.raises(TauError) as e:
        parse_ref(ref)
    assert e.value.exit_code == 2


def test_references_and_tags() -> None:
    assert parse_ref("fineweb").at is None
    assert parse_ref("fineweb@prod").at == "prod" and not parse_ref("fineweb@prod").is_version
    assert parse_ref("fineweb@sha256:1a2b3c").is_version
    assert parse_tags(["split=train", "lang=en=us"]) == {"split": "train", "lang": "en=us"}
    with pytest.raises(TauError):
        parse_tags(["nokey"])


# --- the file store -----------------------------------------------------------------------------
def test_same_content_same_version_and_files_stored_once(store: Store, tmp_path: Path) -> None:
    src = tree(
        tmp_path / "d", {"a.txt": b"hello", "sub/b.bin": os.urandom(50_000), "c.txt": b"hello"}
    )
    first = store.register("dataset", "toy", src, WHO)
    assert first.created and first.record.digest_ok() and len(first.record.files) == 3
    again = store.register("dataset", "toy", src, WHO)
    assert not again.created and again.record.version == first.record.version
    assert again.hashed_bytes == 0  # the stat cache knew every file
    (src / "c.txt").write_bytes(b"changed")
    second = store.register("dataset", "toy", src, WHO)
    assert second.created and second.record.version != first.record.version
    assert second.hashed_bytes == len(b"changed")  # only the changed file was read
    assert blob_count(store) == 3  # hello (twice in v1), b.bin, changed: each stored once
    assert [r.version for r in store.versions("dataset", "toy")] == [
        first.record.version,
        second.record.version,
    ]


def test_resolve_by_alias_short_version_and_name(store: Store, tmp_path: Path) -> None:
    v1 = store.register("dataset", "toy", tree(tmp_path / "1", {"a": b"1"}), WHO).record
    v2 = store.register("dataset", "toy", tree(tmp_path / "2", {"a": b"2"}), WHO).record
    assert store.resolve("dataset", parse_ref("toy")).version == v2.version  # newest
    store.set_alias("dataset", "toy", "prod", v1.version, "a", "t")
    assert store.resolve("dataset", parse_ref("toy@prod")).version == v1.version
    assert store.resolve("dataset", parse_ref(f"toy@{v2.short}")).version == v2.version
    with pytest.raises(TauError) as e:
        store.resolve("dataset", parse_ref("toy@staging"))
    assert e.value.exit_code == 2 and "aliases: prod" in (e.value.hint or "")
    with pytest.raises(TauError) as e:
        store.resolve("dataset", parse_ref("nothing"))
    assert "no dataset 'nothing'" in str(e.value)


def test_an_alias_moves_only_from_what_the_caller_expects(store: Store, tmp_path: Path) -> None:
    v1 = store.register("model", "m", tree(tmp_path / "1", {"w": b"1"}), WHO).record.version
    v2 = store.register("model", "m", tree(tmp_path / "2", {"w": b"2"}), WHO).record.version
    store.set_alias("model", "m", "prod", v1, "a", "t1", expect_absent=True)
    with pytest.raises(Conflict) as e:
        store.set_alias("model", "m", "prod", v2, "b", "t2", expect_absent=True)
    assert e.value.exit_code == 1 and e.value.current == v1
    with pytest.raises(Conflict):
        store.set_alias("model", "m", "prod", v2, "b", "t2", expect=v2)
    store.set_alias("model", "m", "prod", v2, "b", "t3", expect=v1)
    store.set_alias("model", "m", "prod", None, "c", "t4", expect=v2)
    moves = store.history("model", "m", "prod")
    assert [(m.from_version, m.to, m.by) for m in moves] == [
        (None, v1, "a"),
        (v1, v2, "b"),
        (v2, None, "c"),
    ]
    with pytest.raises(TauError) as e2:
        store.set_alias("model", "m", "prod", "sha256:" + "f" * 64, "x", "t")
    assert e2.value.exit_code == 2  # no such version


def test_remove_is_refused_while_an_alias_holds_the_version(store: Store, tmp_path: Path) -> None:
    src = tree(tmp_path / "1", {"shared": b"s", "own": b"1"})
    v1 = store.register("dataset", "d", src, WHO).record
    (src / "own").write_bytes(b"2")
    v2 = store.register("dataset", "d", src, WHO).record
    store.set_alias("dataset", "d", "prod", v1.version, "a", "t")
    with pytest.raises(TauError) as e:
        store.remove("dataset", "d", v1.version)
    assert "held by alias prod" in str(e.value)
    store.remove("dataset", "d", v2.version)
    assert [r.version for r in store.versions("dataset", "d")] == [v1.version]
    assert store.verify(v1) == []  # its shared file stayed


def test_a_listing_reads_heads_not_records(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each version keeps a head (size, file count, who and when) beside its record, which may
    list 100,000 files: the summary a listing shows reads the head; without one (a registry
    written before heads) it reads the record, and registering that content again writes the
    head; removing the version removes its head."""
    src = tree(tmp_path / "1", {f"f{i}": str(i).encode() for i in range(5)})
    v1 = store.register("dataset", "d", src, WHO).record
    (src / "f0").write_bytes(b"new")
    v2 = store.register("dataset", "d", src, WHO).record
    real = store._get_record
    monkeypatch.setattr(store, "_get_record", lambda *a: pytest.fail("a record was read"))
    count, head = store.summary("dataset", "d") or pytest.fail("no summary")
    assert (count, head.version, head.files, head.size) == (2, v2.version, 5, v2.size)
    assert head.created == v2.created
    monkeypatch.setattr(store, "_get_record", real)
    store._drop_record("dataset", "d", v2.version)  # the head goes with the record
    store._put_record("dataset", "d", v2.version, v2.model_dump_json().encode())  # no head
    assert store._get_head("dataset", "d", v2.version) is None
    assert (store.summary("dataset", "d") or pytest.fail())[1].files == 5  # from the record
    assert not store.register("dataset", "d", src, WHO).created  # the same content again
    assert store._get_head("dataset", "d", v2.version) is not None
    store.remove("dataset", "d", v2.version)
    assert store._get_head("dataset", "d", v2.version) is None
    assert (store.summary("dataset", "d") or pytest.fail())[1].version == v1.version


def _race(url: str, version: str, expect: str, barrier: object, results: object, i: int) -> None:
    s = open_store(url)
    barrier.wait()  # type: ignore[attr-defined]
    try:
        s.set_alias("dataset", "d", "prod", version, f"racer-{i}", "t", expect=expect)
        results.put(("won", i))  # type: ignore[attr-defined]
    except Conflict as e:
        results.put(("lost", e.current))  # type: ignore[attr-defined]


@pytest.mark.parametrize("how", ["threads", "processes"])
def test_100_racers_one_winner_per_round_and_every_move_in_the_history(
    store: Store, tmp_path: Path, how: str
) -> None:
    versions = [
        store.register(
            "dataset", "d", tree(tmp_path / str(i), {"f": str(i).encode()}), WHO
        ).record.version
        for i in range(4)
    ]
    store.set_alias("dataset", "d", "prod", versions[0], "setup", "t")
    ctx = multiprocessing.get_context("fork")
    for rnd in range(3):
        expect, target = versions[rnd], versions[rnd + 1]
        if how == "threads":
            import queue

            barrier: object = threading.Barrier(100)
            results: object = queue.Queue()
            workers = [
                threading.Thread(
                    target=_race, args=(store.url, target, expect, barrier, results, i)
                )
                for i in range(100)
            ]
        else:
            barrier, results = ctx.Barrier(100), ctx.Queue()
            workers = [
                ctx.Process(target=_race, args=(store.url, target, expect, barrier, results, i))  # type: ignore[misc]
                for i in range(100)
            ]
        for w in workers:
            w.start()
        got = [results.get(timeout=60) for _ in range(100)]  # type: ignore[attr-defined]
        for w in workers:
            w.join(timeout=60)
        won = [g for g in got if g[0] == "won"]
        assert len(won) == 1, f"round {rnd}: {len(won)} winners"
        assert all(g[1] == target for g in got if g[0] == "lost")  # each loser is told the current
    moves = store.history("dataset", "d", "prod")
    assert [m.to for m in moves] == versions  # setup + one move per round, nothing else
    assert store.aliases("dataset", "d") == {"prod": versions[3]}


def test_kill_9_during_register_leaves_no_partial_version_and_reuses_finished_files(
    store: Store, tmp_path: Path
) -> None:
    src = tree(tmp_path / "big", {f"f{i:02d}.bin": os.urandom(2 << 20) for i in range(12)})
    code = (
        "import sys, time; from pathlib import Path; from taugrid.data.store import open_store;"
        "from taugrid.api.data import Created;"
        "s = open_store(sys.argv[1], Path(sys.argv[2]));"
        "s.register('dataset', 'big', Path(sys.argv[3]), Created(by='a', at='t', host='h'),"
        " progress=lambda d, t: (print(d, flush=True), time.sleep(0.02)))"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code, store.url, str(store.stat_cache), str(src)],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    while int(proc.stdout.readline() or 0) < (6 << 20):  # some files done, not all
        pass
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert store.versions("dataset", "big") == []  # nothing half-written is listed
    assert 0 < blob_count(store) < 12
    done = store.register("dataset", "big", src, WHO)
    assert done.created and store.verify(done.record) == []
    assert done.hashed_bytes < 24 << 20  # the finished files were not read again


def test_verify_names_each_missing_or_changed_file(store: Store, tmp_path: Path) -> None:
    rec = store.register(
        "dataset", "v", tree(tmp_path / "v", {"a": b"aaa", "b": b"bbb"}), WHO
    ).record
    a, b = (f.sha256 for f in rec.files)
    overwrite_blob(store, a, b"tampered")
    overwrite_blob(store, b, None)
    problems = store.verify(rec)
    assert any(p.startswith("a: changed") for p in problems) and "b: missing" in problems
    with pytest.raises(TauError) as e:
        store.pull(rec, tmp_path / "out")
    assert e.value.exit_code == 1


def test_pull_copies_the_exact_files(store: Store, tmp_path: Path) -> None:
    files = {"x/y/z.txt": b"deep", "top": os.urandom(3000)}
    rec = store.register("dataset", "p", tree(tmp_path / "p", files), WHO).record
    store.pull(rec, tmp_path / "out")
    assert {
        str(p.relative_to(tmp_path / "out")): p.read_bytes()
        for p in (tmp_path / "out").rglob("*")
        if p.is_file()
    } == files


def test_nothing_to_register_and_a_missing_source_are_clear(store: Store, tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    for src in (tmp_path / "empty", tmp_path / "nope"):
        with pytest.raises(TauError) as e:
            store.register("dataset", "d", src, WHO)
        assert e.value.exit_code == 2


# --- the CLI ------------------------------------------------------------------------------------
def test_the_cli_registers_aliases_and_refuses_bad_input(tmp_path: Path) -> None:
    def tau(*args: str) -> subprocess.CompletedProcess[str]:
        return run_tau(tmp_path / "home", *args)

    src = tree(tmp_path / "d", {"a.txt": b"1"})
    res = tau("data", "dataset", "register", "toy", str(src), "-o", "json")
    assert res.returncode == 0, res.stderr
    version = json.loads(res.stdout)["version"]
    res = tau("data", "dataset", "alias", "set", "toy", "prod", version[:19], "--expect-absent")
    assert res.returncode == 0, res.stderr
    lost = tau("data", "dataset", "alias", "set", "toy", "prod", version[:19], "--expect-absent")
    assert lost.returncode == 1 and "exists" in lost.stderr
    got = tau("data", "dataset", "ref", "toy@prod", "-o", "env")
    assert got.stdout.strip() == f"TAU_DATASET_TOY=toy@{version}"
    bad = tau("data", "dataset", "show", "toy@../etc")
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    rm = tau("data", "dataset", "rm", f"toy@{version}")
    assert rm.returncode == 2 and "--yes" in rm.stderr
    listed = json.loads(tau("data", "dataset", "list", "-o", "json").stdout)
    assert listed[0]["name"] == "toy" and listed[0]["aliases"] == {"prod": version[:19]}


@pytest.mark.parametrize(("which", "step"), [("latest", 30), ("best", 20), ("step-00000010", 10)])
def test_a_model_from_a_run_keeps_its_lineage(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, which: str, step: int
) -> None:
    from taugrid.client import data

    monkeypatch.setenv("TAU_HOME", str(tmp_path))
    run = run_with_checkpoints(tmp_path, {10: 0.9, 20: 0.2, 30: 0.5})
    rec = data.register_model_from_run("clf", run, checkpoint=which).record
    assert rec.kind == "model" and [f.path for f in rec.files] == ["weights.bin"]
    lin = rec.lineage
    assert (lin.run, lin.config_hash, lin.code_revision) == (run, "cfg1", "rev1")
    assert lin.checkpoint == f"step-{step:08d}" and lin.metrics == {
        "loss": {10: 0.9, 20: 0.2, 30: 0.5}[step]
    }
    assert rec.created.run == run
    assert data.lineage("model", f"clf@{rec.short}")["run"] == run


def test_a_model_s_lineage_names_the_services_that_serve_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """dataset -> run -> model -> service: the services of this machine whose revisions pin the
    version, and whether one serves now; a deleted one is not named."""
    from taugrid.api import serve as S
    from taugrid.client import data
    from taugrid.serve.records import ServiceDir

    monkeypatch.setenv("TAU_HOME", str(tmp_path))
    run = run_with_checkpoints(tmp_path, {10: 0.9})
    model = data.register_model_from_run("clf", run).record
    other = data.register("model", "other", tree(tmp_path / "o", {"w": b"2"})).record

    def service(name: str, pins: list[str], serving: int, deleted: bool = False) -> None:
        revs = [
            S.Revision(
                number=i,
                created_at="2026-12-04T00:00:00Z",
                created_by="a",
                config_hash=f"h{i}",
                code_digest="d",
                spec=S.ServiceSpec(import_path="app:app"),
                source="/p/tau.yaml",
                model=S.ModelPin(ref=v, name="clf", version=v),
            )
            for i, v in enumerate(pins, start=1)
        ]
        sd = ServiceDir(name)
        sd.path.mkdir(parents=True, exist_ok=True)
        sd.write(
            S.ServiceRecord(
                name=name,
                target="local",
                created_at="2026-12-04T00:00:00Z",
                created_by="a",
                route_prefix=f"/{name}",
                revisions=revs,
                serving=serving,
                deleted_at="x" if deleted else None,
            )
        )

    service("iris", [model.version, other.version], serving=2)  # rolled on to another model
    service("clf-live", [model.version], serving=1)
    service("gone", [model.version], serving=1, deleted=True)
    doc = data.lineage("model", f"clf@{model.short}")
    assert doc["run"] == run and sorted(
        (s["name"], s["revisions"], s["serving"]) for s in doc["services"]
    ) == [("clf-live", [1], True), ("iris", [1], False)]


def test_a_run_without_checkpoints_or_a_metric_says_what_to_do(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from taugrid.client import data

    monkeypatch.setenv("TAU_HOME", str(tmp_path))
    run = run_with_checkpoints(tmp_path, {})
    with pytest.raises(TauError) as e:
        data.register_model_from_run("clf", run)
    assert e.value.exit_code == 2 and "no complete checkpoint" in str(e.value)
    with pytest.raises(TauError) as e:
        data.register_model_from_run("clf", run, checkpoint="step-00000099")
    assert "not found" in str(e.value)


# --- tau.yaml inputs and the layout of a run's inputs -----------------------------------------
@pytest.mark.parametrize(
    ("inputs", "where"),
    [
        ("[{ref: '../x'}]", "data.inputs[0].ref"),
        ("[{ref: a, path: /abs}]", "data.inputs[0].path"),
        ("[{ref: a}, {ref: b, path: a}]", "data.inputs[1].path"),
        ("[{ref: a, kind: table}]", "data.inputs.0.kind"),
    ],
)
def test_bad_data_inputs_are_named(inputs: str, where: str, tmp_path: Path) -> None:
    from taugrid.api.errors import ConfigError
    from taugrid.runs import load

    (tmp_path / "t.py").write_text("")
    (tmp_path / "tau.yaml").write_text(
        f"schema_version: 1\nname: x\nrun: {{entrypoint: t.py}}\ndata: {{inputs: {inputs}}}\n"
    )
    with pytest.raises(ConfigError) as e:
        load.load_manifest(str(tmp_path))
    assert where in str(e.value) or where.replace(".0.", "[0].") in str(e.value)


def test_inputs_are_laid_out_read_only_and_checked(fstore: FileStore, tmp_path: Path) -> None:
    store = fstore
    import tau_inputs

    rec = store.register(
        "dataset", "c", tree(tmp_path / "c", {"a/b.txt": b"bytes", "top": b"t"}), WHO
    ).record
    spec = [{"kind": "dataset", "name": "c", "version": rec.version, "path": "corpus"}]
    lines = tau_inputs.materialize(store.root, spec, tmp_path / "in")
    assert lines and (tmp_path / "in" / "corpus" / "a" / "b.txt").read_bytes() == b"bytes"
    assert (tmp_path / "in" / "corpus" / "top").stat().st_mode & 0o222 == 0  # read-only
    overwrite_blob(store, rec.files[0].sha256, b"other")
    with pytest.raises(tau_inputs.InputError, match="changed in the registry"):
        tau_inputs.materialize(store.root, spec, tmp_path / "in2")
    with pytest.raises(tau_inputs.InputError, match="not in the registry"):
        tau_inputs.materialize(
            store.root, [{**spec[0], "version": "sha256:" + "0" * 64}], tmp_path / "in3"
        )


def test_a_cluster_run_carries_the_exact_version_and_reads_the_workspace_registry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import shutil

    from conftest import EXAMPLES, PROFILES

    from taugrid.runs import load
    from taugrid.runs.prepare import RunRequest, prepare

    monkeypatch.setenv("TAU_HOME", str(tmp_path / "home"))
    from taugrid.client import data

    version = data.register("dataset", "corpus", tree(tmp_path / "d", {"x": b"1"})).record.version
    project = tmp_path / "p"
    shutil.copytree(EXAMPLES / "batch-job", project)
    with (project / "tau.yaml").open("a") as f:
        f.write("data: {inputs: [{ref: corpus, path: train}]}\n")
    p = prepare(
        RunRequest(load.load_manifest(str(project)), workspace="research"),
        load.load_snapshot(PROFILES),
    )
    env = {
        e["name"]: e.get("value")
        for o in p.objects()
        if o["kind"] == "Job"
        for e in o["spec"]["template"]["spec"]["containers"][0]["env"]
    }
    assert json.loads(env["TAU_INPUTS"]) == [
        {"kind": "dataset", "name": "corpus", "version": version, "path": "train"}
    ]
    assert env["TAU_REGISTRY_DIR"] == "/data/registry"
    assert env["TAU_INPUT_DIR"].endswith(f"/runs/{p.run_id}/inputs")
    assert "tau_inputs.py" in {rel for rel, _ in p.bundle.files}


# --- copying a version into another store (a workspace's registry) -----------------------------
def test_copy_sends_only_the_missing_files_and_the_record_last(
    store: Store, tmp_path: Path
) -> None:
    """From this machine's file store into `store` (file or Azure), then back out of it into a
    third: only files the destination lacks travel, a second copy sends nothing, and a copy
    whose source has a changed file leaves no version behind."""
    src = FileStore(tmp_path / "mine", tmp_path / "cache" / "mine")
    shared = b"the same bytes in both versions\n" * 100
    v1 = src.register("dataset", "corpus", tree(tmp_path / "a", {"s.txt": shared, "x": b"1"}), WHO)
    store.register("dataset", "other", tree(tmp_path / "b", {"s.txt": shared}), WHO)
    before = blob_count(store)

    got = src.copy_to(v1.record, store)
    assert (got.files, got.sent) == (2, 1)  # s.txt was there already: one byte of x travelled
    assert blob_count(store) == before + 1
    # the same record, but for where the source packed its bytes (the copy's are its own)
    assert v1.record.packs and store.read("dataset", "corpus", v1.record.version) == (
        v1.record.model_copy(update={"packs": []})
    )
    assert store.verify(v1.record) == []
    assert store.aliases("dataset", "corpus") == {}  # aliases stay where they are
    assert src.copy_to(v1.record, store).sent == 0  # there already: nothing sent

    third = FileStore(tmp_path / "third")
    assert store.copy_to(v1.record, third).files == 2  # and out of it again
    third_files = {f.path: (third.blob(f.sha256).read_bytes()) for f in v1.record.files}
    assert third_files == {"s.txt": shared, "x": b"1"}

    v2 = src.register("dataset", "corpus", tree(tmp_path / "c", {"y": b"2", "z": b"3"}), WHO)
    overwrite_blob(src, v2.record.files[1].sha256, b"tampered")
    with pytest.raises(TauError, match="z changed in"):
        src.copy_to(v2.record, store)
    assert not store.has_version("dataset", "corpus", v2.record.version)  # nothing half-visible
    overwrite_blob(src, v2.record.files[1].sha256, None)
    with pytest.raises(TauError, match="z is missing from"):
        src.copy_to(v2.record, store)


def test_the_cli_copies_a_version_and_refuses_a_bad_destination(tmp_path: Path) -> None:
    home = tmp_path / "home"
    assert (
        run_tau(
            home,
            "data",
            "dataset",
            "register",
            "corpus",
            str(tree(tmp_path / "d", {"a.txt": b"a"})),
        ).returncode
        == 0
    )
    dest = (tmp_path / "team").as_uri()
    res = run_tau(home, "data", "dataset", "copy", "corpus", "--to", dest, "-o", "json")
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert (doc["copied"], doc["bytes_sent"]) == (True, 1)
    listed = run_tau(home, "data", "dataset", "list", "--registry", dest, "-o", "json")
    assert [r["name"] for r in json.loads(listed.stdout)] == ["corpus"]
    again = run_tau(home, "data", "dataset", "copy", "corpus", "--to", dest)
    assert again.returncode == 0 and "nothing copied" in again.stderr
    for bad in ("az://UPPER/container", "s3://bucket", "file://relative/dir"):
        res = run_tau(home, "data", "dataset", "copy", "corpus", "--to", bad)
        assert res.returncode == 2 and "Traceback" not in res.stderr, (bad, res.stderr)
    res = run_tau(home, "data", "dataset", "copy", "nope", "--to", dest)
    assert res.returncode == 2 and "nope" in res.stderr


def test_a_cluster_run_copies_its_inputs_into_the_workspace_registry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The workspace declares its registry (published in its TauCluster): an input registered on
    this machine is copied there before the run is sent; one only the workspace's registry
    holds resolves there (a colleague registered it); nothing is copied twice."""
    import shutil

    from conftest import EXAMPLES, PROFILES

    from taugrid.api.profiles import ProfileSnapshot
    from taugrid.runs import load
    from taugrid.runs.prepare import RunRequest, prepare, publish_inputs

    monkeypatch.setenv("TAU_HOME", str(tmp_path / "home"))
    from taugrid.client import data

    team = FileStore(tmp_path / "team")
    mine = data.register("dataset", "corpus", tree(tmp_path / "d", {"x": b"1"})).record
    theirs = team.register("dataset", "shared", tree(tmp_path / "e", {"y": b"2"}), WHO).record
    snap = load.load_snapshot(PROFILES).model_dump(mode="json")
    for ws in snap["workspaces"]:
        ws["registry"] = team.url
    project = tmp_path / "p"
    shutil.copytree(EXAMPLES / "batch-job", project)
    with (project / "tau.yaml").open("a") as f:
        f.write("data: {inputs: [{ref: corpus}, {ref: shared}]}\n")
    p = prepare(
        RunRequest(load.load_manifest(str(project)), workspace="research"),
        ProfileSnapshot.model_validate(snap),
    )
    assert [(i.name, i.version) for i in p.meta.inputs] == [
        ("corpus", mine.version),
        ("shared", theirs.version),
    ]
    said: list[str] = []
    publish_inputs(p, said.append)
    assert team.has_version("dataset", "corpus", mine.version)
    assert len(said) == 1 and "corpus" in said[0] and team.url in said[0]
    publish_inputs(p, said.append)
    assert len(said) == 1  # there already
    # the TauRun names them at their exact versions: a teammate's record of the run has them
    from taugrid.kube.facts import record_from_taurun
    from taugrid.runs.render import render_taurun

    taurun = render_taurun(p.resolved, p.meta)
    taurun["metadata"]["creationTimestamp"] = "2026-12-04T00:00:00Z"
    assert [(i.name, i.version) for i in record_from_taurun(taurun, None).inputs] == [
        ("corpus", mine.version),
        ("shared", theirs.version),
    ]


# --- az:// failures: exit 4 with what to do, no traceback ----------------------------------------
@pytest.mark.parametrize("case", ["wrong key", "no container", "down", "bad url"])
def test_an_unusable_azure_store_says_what_to_do(
    case: str, azurite: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from azuritekit import ACCOUNT, connection_string, new_container

    url = new_container(azurite)
    port, key = azurite, None
    if case == "wrong key":
        key = "d3Jvbmcga2V5IHdyb25nIGtleSB3cm9uZyBrZXkgd3Jvbmcga2V5IHdyb25nIGtleSB3cm9uZw=="
    elif case == "no container":
        url = f"az://{ACCOUNT}/nosuchcontainer"
    elif case == "down":
        port = free_port()
    else:
        url = "az://onlyaccount"
    monkeypatch.setenv(
        "AZURE_STORAGE_CONNECTION_STRING", connection_string(port, *([key] if key else []))
    )
    with pytest.raises(TauError) as e:
        open_store(url).names("dataset")
    words = {
        "wrong key": "refused the credentials",
        "no container": "does not exist",
        "down": "cannot reach",
        "bad url": "expected az://ACCOUNT/CONTAINER",
    }[case]
    assert words in str(e.value)
    assert e.value.exit_code == (2 if case == "bad url" else 4)
    res = run_tau(
        tmp_path / "home",
        "data",
        "dataset",
        "list",
        "--registry",
        url,
        env={"AZURE_STORAGE_CONNECTION_STRING": connection_string(port, *([key] if key else []))},
    )
    assert (
        res.returncode == e.value.exit_code
        and "Traceback" not in res.stderr
        and words in res.stderr
    )


# --- small files packed, read on every core (data/pack.py) ---------------------------------------
def many_small(root: Path, n: int, *, dup_every: int = 0) -> dict[str, bytes]:
    """n small files in folders of 300 (some identical when dup_every), and one large one."""
    files = {}
    for i in range(n):
        same = dup_every and i % dup_every == 0
        files[f"part-{i // 300:02d}/f{i:05d}.txt"] = (
            b"same bytes" if same else os.urandom(40 + i % 90)
        )
    files["big/weights.bin"] = os.urandom((1 << 20) + 5)  # a blob of its own
    tree(root, files)
    return files


def expected_version(files: dict[str, bytes]) -> str:
    """The version id computed here, without the store: sha256 over sorted path, size, sha256."""
    import hashlib

    lines = "".join(
        f"{p}\t{len(d)}\t{hashlib.sha256(d).hexdigest()}\n" for p, d in sorted(files.items())
    )
    return "sha256:" + hashlib.sha256(lines.encode()).hexdigest()


def test_thousands_of_small_files_are_packed_read_in_parallel_and_read_back_exactly(
    fstore: FileStore, tmp_path: Path
) -> None:
    from taugrid.data import pack

    files = many_small(tmp_path / "src", 3 * pack.PARALLEL_FROM // 2, dup_every=50)
    got = fstore.register("dataset", "many", tmp_path / "src", WHO)
    assert got.record.version == expected_version(files) and len(got.record.files) == len(files)
    distinct = len({bytes(d) for d in files.values()})
    assert distinct <= blob_count(fstore) <= distinct + 1  # "same bytes" may meet two workers once
    assert got.record.packs and all(
        (fstore.root / "packs" / f"{p}.idx").is_file() for p in got.record.packs
    )
    assert list((fstore.root / "tmp").iterdir()) == []  # nothing half-written left behind
    assert fstore.blob(got.record.files[-1].sha256).is_file() is False  # small: packed
    assert fstore.verify(got.record) == []
    fstore.pull(got.record, tmp_path / "pulled")
    assert {
        str(p.relative_to(tmp_path / "pulled")): p.read_bytes()
        for p in (tmp_path / "pulled").rglob("*")
        if p.is_file()
    } == files
    import tau_inputs

    spec = [{"kind": "dataset", "name": "many", "version": got.record.version, "path": "m"}]
    tau_inputs.materialize(fstore.root, spec, tmp_path / "in")
    laid = {
        str(p.relative_to(tmp_path / "in" / "m")): p
        for p in (tmp_path / "in").rglob("*")
        if p.is_file()
    }
    assert {k: p.read_bytes() for k, p in laid.items()} == files
    assert all(p.stat().st_mode & 0o222 == 0 for p in laid.values())  # read-only
    # again, in a new process's store: nothing read; one file changed: only it read
    again = FileStore(fstore.root, fstore.stat_cache).register(
        "dataset", "many", tmp_path / "src", WHO
    )
    assert not again.created and again.hashed_bytes == 0
    (tmp_path / "src" / "part-01" / "f00301.txt").write_bytes(b"new bytes")
    files["part-01/f00301.txt"] = b"new bytes"
    third = FileStore(fstore.root, fstore.stat_cache).register(
        "dataset", "many", tmp_path / "src", WHO
    )
    assert third.created and third.hashed_bytes == len(b"new bytes")
    assert third.record.version == expected_version(files)
    assert FileStore(fstore.root).verify(third.record) == []


def test_a_reader_finds_packed_bytes_the_record_does_not_point_at(
    fstore: FileStore, tmp_path: Path
) -> None:
    """A record whose pack hint is missing (written by another store, or copied in) is still laid
    out: the reader looks through every pack's index; a piece truly missing is named."""
    import tau_inputs

    rec = fstore.register(
        "dataset", "h", tree(tmp_path / "h", {"a": b"A", "b/c": b"C"}), WHO
    ).record
    path = tau_inputs.record_path(fstore.root, "dataset", "h", rec.version)
    raw = json.loads(path.read_text())
    raw["packs"] = []
    path.chmod(0o644)
    path.write_text(json.dumps(raw))
    spec = [{"kind": "dataset", "name": "h", "version": rec.version, "path": "h"}]
    tau_inputs.materialize(fstore.root, spec, tmp_path / "in")
    assert (tmp_path / "in" / "h" / "b" / "c").read_bytes() == b"C"
    overwrite_blob(fstore, rec.files[0].sha256, None)
    with pytest.raises(tau_inputs.InputError, match="a is missing from the registry"):
        tau_inputs.materialize(fstore.root, spec, tmp_path / "in2")


def test_an_unreadable_file_is_named_and_nothing_is_registered(
    fstore: FileStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file gone between the listing and its reading (here: listed, never there), with enough
    files that the workers read them: exit 2 naming it, no version, no half-written pack."""
    from taugrid.data import files, filestore, pack

    src = tmp_path / "src"
    many_small(src, pack.PARALLEL_FROM)
    real = files.list_names(src)

    def with_ghost(
        source: Path, size: int = 1024, links: dict[str, str] | None = None
    ) -> Iterator[list[tuple[str, str]]]:
        names = sorted([*real, ("part-00/ghost.txt", str(src / "part-00" / "ghost.txt"))])
        for k in range(0, len(names), size):
            yield names[k : k + size]

    monkeypatch.setattr(filestore, "name_chunks", with_ghost)
    with pytest.raises(TauError, match=r"ghost\.txt: No such file") as e:
        fstore.register("dataset", "g", src, WHO)
    assert e.value.exit_code == 2
    assert fstore.versions("dataset", "g") == []
    assert list((fstore.root / "tmp").iterdir()) == []


def test_two_registrations_of_one_tree_at_once_both_succeed(
    fstore: FileStore, tmp_path: Path
) -> None:
    from taugrid.data import pack

    files = many_small(tmp_path / "src", pack.PARALLEL_FROM + 100)
    code = (
        "import sys; from pathlib import Path; from taugrid.data.filestore import FileStore;"
        "from taugrid.api.data import Created;"
        "r = FileStore(Path(sys.argv[1]), Path(sys.argv[2]))"
        ".register('dataset', 'same', Path(sys.argv[3]),"
        " Created(by='a', at='t', host='h')); print(r.record.version)"
    )
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-c",
                code,
                str(fstore.root),
                str(tmp_path / f"c{k}"),
                str(tmp_path / "src"),
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        for k in range(2)
    ]
    outs = [p.communicate()[0].strip() for p in procs]
    assert [p.returncode for p in procs] == [0, 0]
    assert outs == [expected_version(files)] * 2
    assert (
        FileStore(fstore.root).verify(FileStore(fstore.root).read("dataset", "same", outs[0])) == []
    )


def test_kill_9_while_packing_keeps_the_packs_already_closed(
    fstore: FileStore, tmp_path: Path
) -> None:
    """Packs close (and are published) as they fill; a registration killed after some did reads
    only the rest when run again, and leaves no version behind."""
    from taugrid.data import pack

    files = many_small(tmp_path / "src", 4 * pack.PARALLEL_FROM)
    code = (
        "import sys, time; from pathlib import Path; from taugrid.data import filestore, pack;"
        "from taugrid.api.data import Created; pack.PACK_ROLL = 1 << 16;"
        "s = filestore.FileStore(Path(sys.argv[1]), Path(sys.argv[2]));"
        "s.register('dataset', 'k', Path(sys.argv[3]), Created(by='a', at='t', host='h'),"
        " progress=lambda d, t: (print(d, flush=True), time.sleep(0.2)))"
    )
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            code,
            str(fstore.root),
            str(fstore.stat_cache),
            str(tmp_path / "src"),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    total = sum(len(d) for d in files.values())
    while int(proc.stdout.readline() or total) < total // 2:  # about half done
        pass
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert fstore.versions("dataset", "k") == []
    assert list((fstore.root / "packs").glob("*.idx"))  # some packs were published
    left = list((fstore.root / "tmp").iterdir())  # the killed workers' open packs
    for p in left:  # ...a day old: the next registration removes them
        os.utime(p, (p.stat().st_atime - 90_000, p.stat().st_mtime - 90_000))
    done = FileStore(fstore.root, fstore.stat_cache).register("dataset", "k", tmp_path / "src", WHO)
    assert done.record.version == expected_version(files)
    assert done.hashed_bytes < total * 3 // 4  # the published packs' files were not read again
    assert FileStore(fstore.root).verify(done.record) == []
    assert left and not any(p.exists() for p in left)


def test_a_registry_that_cannot_be_written_says_so_and_leaves_no_version(
    fstore: FileStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A full disk while packs are published: exit 4 naming the registry, no version listed;
    an unreadable source file (its name in the error) is exit 2."""
    from taugrid.data import filestore, pack

    src = tree(tmp_path / "src", {"a": b"A", "b": b"B"})

    def full(root: Path, name: str, pieces: list[tuple[str, int, int]]) -> None:
        raise OSError(28, "No space left on device", str(root / "packs" / f"{name}.pack"))

    monkeypatch.setattr(pack, "publish", full)
    with pytest.raises(TauError, match="cannot write \\(No space left on device\\)") as e:
        fstore.register("dataset", "full", src, WHO)
    assert e.value.exit_code == 4 and fstore.versions("dataset", "full") == []
    monkeypatch.undo()

    def unreadable(
        source: Path, size: int = 1024, links: dict[str, str] | None = None
    ) -> Iterator[list[tuple[str, str]]]:
        raise PermissionError(13, "Permission denied", str(source / "a"))  # root reads any file

    monkeypatch.setattr(filestore, "name_chunks", unreadable)
    with pytest.raises(TauError, match=r"cannot register .*a: Permission denied") as e:
        fstore.register("dataset", "full", src, WHO)
    assert e.value.exit_code == 2


def test_workers_finish_while_another_thread_holds_stderr(tmp_path: Path) -> None:
    """A progress bar's thread may hold stderr's lock at the moment the workers are forked (here,
    made so: at fork time a thread is blocked writing to a full pipe, holding the lock); a worker
    that flushed the stderr it inherited when it exits would wait forever, and so would the
    registration."""
    from taugrid.data import pack

    many_small(tmp_path / "src", pack.PARALLEL_FROM + 10)
    script = tmp_path / "fork_while_locked.py"
    script.write_text(FORK_WHILE_LOCKED)
    out = tmp_path / "out.txt"
    with out.open("w") as f:
        proc = subprocess.Popen(
            [sys.executable, str(script), str(tmp_path / "reg"), str(tmp_path / "src")],
            stdout=f,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            proc.wait(timeout=240)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)  # a hung worker too
    text = out.read_text()
    assert proc.returncode == 0 and text.startswith("sha256:"), text[-2000:]


FORK_WHILE_LOCKED = """
import faulthandler, fcntl, io, os, sys, termios, threading
from pathlib import Path
from typing import Any
faulthandler.dump_traceback_later(120, exit=True)  # a hang says where, and ends
from taugrid.data.filestore import FileStore
from taugrid.api.data import Created
r, w = os.pipe()
size = fcntl.fcntl(w, 1032)  # F_GETPIPE_SZ
real = sys.stdout
sys.stderr = io.TextIOWrapper(io.BufferedWriter(io.FileIO(w, "w"), 1 << 16), write_through=True)
go, drain = threading.Event(), threading.Event()
def writer():
    while True:
        go.wait(); go.clear()
        sys.stderr.write("x" * (4 * size))  # blocks on the full pipe, holding stderr's lock
def reader():
    while True:
        drain.wait()
        os.read(r, 1 << 20)
threading.Thread(target=writer, daemon=True).start()
threading.Thread(target=reader, daemon=True).start()
def before():  # each fork happens while the writer holds stderr's lock
    drain.clear()
    go.set()
    buf = bytearray(4)
    while int.from_bytes(buf, sys.byteorder) < size:
        fcntl.ioctl(r, termios.FIONREAD, buf)
os.register_at_fork(before=before, after_in_parent=drain.set)
v = FileStore(Path(sys.argv[1])).register("dataset", "d", Path(sys.argv[2]), Created(by="a", at="t", host="h"))
real.write(v.record.version + "\\n"); real.flush()
os._exit(0)
"""  # noqa: E501 (data: its lines are what they are)


def test_a_managers_run_inputs_go_to_each_workers_registry_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a MultiKueue manager the TauCluster names the same workspace's registry on each
    worker: a run's inputs are copied to every distinct one (the worker that runs it reads its
    own), once; a worker sharing the manager's registry gets no second copy."""
    from conftest import SMALL_PLATFORM

    from taugrid.api.platform import validate_platform
    from taugrid.api.published import workspace_refs
    from taugrid.api.vocabulary import ResolvedInput
    from taugrid.runs.prepare import publish

    monkeypatch.setenv("TAU_HOME", str(tmp_path / "home"))
    from taugrid.client import data

    mine = data.register("dataset", "corpus", tree(tmp_path / "d", {"x": b"1"})).record
    hub, east = FileStore(tmp_path / "hub"), FileStore(tmp_path / "east")
    cfg = validate_platform(SMALL_PLATFORM)
    regs = {"east": {cfg.workspaces[0].name: east.url}, "west": {"other": tmp_path.as_uri()}}
    (ref, *_) = workspace_refs(cfg, regs)
    assert ref.workerRegistries == {"east": east.url}  # west has no registry for this workspace
    ref = ref.model_copy(
        update={"registry": hub.url, "workerRegistries": {"east": east.url, "west": hub.url}}
    )
    assert ref.registries() == [hub.url, east.url]
    inp = ResolvedInput(name="corpus", version=mine.version, path="corpus", ref="corpus")
    said: list[str] = []
    publish(ref, [inp], said.append)
    assert hub.has_version("dataset", "corpus", mine.version)
    assert east.has_version("dataset", "corpus", mine.version)
    assert len(said) == 2 and "registry on worker east" in said[1] and east.url in said[1]
    assert "worker" not in said[0] and hub.url in said[0]
    publish(ref, [inp], said.append)
    assert len(said) == 2  # each has it already
