"""Datasets and models (`tau data`): register, list, show, verify, pull, copy, aliases, lineage.

The store is `registry` (a URL: `file://DIR` or a folder), else `TAU_REGISTRY`, else
`$TAU_HOME/data/registry`. Every call returns api models (`taugrid.api.data`) or rows, and raises
TauErrors with the CLI's exit codes: 2 bad input, 1 a lost alias race or a failed verify, 4 a
store that cannot be used.
"""

from __future__ import annotations

import builtins
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from taugrid.api.data import (
    AliasMove,
    Created,
    DataInput,
    Kind,
    Lineage,
    VersionRecord,
    parse_ref,
    short,
)
from taugrid.api.errors import EXIT_PLATFORM, EXIT_RUN_FAILED, EXIT_USAGE, TauError
from taugrid.data.store import Collected, Copied, Progress, Registered, Store, default_store
from taugrid.data.store import registry_url as registry_url


def _created(run: str | None = None) -> Created:
    import socket

    from taugrid.api.kubetime import k8s_time
    from taugrid.runs.provenance import submitter

    return Created(by=submitter(), at=k8s_time(), host=socket.gethostname(), run=run)


def register(
    kind: Kind,
    name: str,
    path: str | Path,
    *,
    purpose: str | None = None,
    description: str | None = None,
    tags: dict[str, str] | None = None,
    registry: str | None = None,
    progress: Progress | None = None,
) -> Registered:
    """A file or folder as a new version of `name` (the same content again: the same version,
    nothing re-read that the stat cache knows). An empty path is refused (it is not the
    current folder), and so is anything but a file or a folder."""
    if not str(path).strip():
        raise TauError(
            "no path given: name the file or folder to register (an empty path is "
            "not the current folder)",
            exit_code=EXIT_USAGE,
            hint=f"tau data {kind} register {name} PATH (. for the current folder)",
        )
    return default_store(registry).register(
        kind,
        name,
        Path(path),
        _created(),
        purpose=purpose,
        description=description,
        tags=tags,
        progress=progress,
    )


def register_model_from_run(
    name: str,
    run: str,
    *,
    checkpoint: str = "latest",
    purpose: str | None = None,
    description: str | None = None,
    tags: dict[str, str] | None = None,
    registry: str | None = None,
    progress: Progress | None = None,
    context: str | None = None,
    say: Callable[[str], None] | None = None,
    into_workspace: bool = True,
) -> Registered:
    """A run's checkpoint as a model version, with its lineage (the run, its input versions,
    config hash, code revision and the metrics at that checkpoint). `checkpoint`: latest, best
    (by the run's primary metric and its direction) or a checkpoint's folder name.

    A cluster run's checkpoint is where the run left it, on its workspace volume; it goes into
    the workspace's registry (`registry` overrides; `into_workspace=False`: this machine's). Where
    that registry is the volume's own
    folder and this machine reaches it, the files are registered where they are; else they are
    read through the workspace's file server, checked against the run's sealed manifest, and the
    command says how much came through this machine."""
    from taugrid.client.runs import find

    rd = find(run, context=context)
    rec = rd.read_record()

    def into(store: Store, what: Path | InAccount, lineage: Lineage) -> Registered:
        meta: dict[str, Any] = {
            "purpose": purpose,
            "description": description,
            "tags": tags,
            "lineage": lineage,
            "progress": progress,
        }
        if isinstance(what, InAccount):
            from taugrid.data.azure import AzureStore

            assert isinstance(store, AzureStore)
            return store.register_copies(
                "model", name, what.source, what.files, _created(rec.run_id), **meta
            )
        return store.register("model", name, what, _created(rec.run_id), **meta)

    tell = say or (lambda _m: None)
    if rec.target == "local":
        path, chosen, step, rows = _local_checkpoint(rd, rec, checkpoint)
        local = default_store(registry)
        if not path.resolve().is_relative_to(rd.path.resolve()):
            return into(local, path, _lineage(rec, chosen, rows, step))  # a folder named by path
        rel = path.resolve().relative_to(rd.path.resolve()).as_posix()
        sealed = _sealed_files(run, rel, context, tell)
        return _as_sealed(local, into(local, path, _lineage(rec, chosen, rows, step)), sealed, rel)
    store = default_store(registry) if registry or not into_workspace else None
    return _from_cluster_run(rec, run, checkpoint, store, context, tell, into)


def _sealed_files(
    run: str, rel: str, context: str | None, tell: Callable[[str], None]
) -> dict[str, str] | None:
    """{file under `rel`: sha256} of the run's checkpoint folder `rel`, every file hashed where
    the run keeps it and checked against its sealed manifest first (raises naming a file that
    was changed, added or removed since the run sealed it); None while the run still runs (its
    record is not sealed: nothing to check against, which is said)."""
    from taugrid.client import runs
    from taugrid.runs.pull import NotSealed

    try:
        checked = runs.check_in_place(run, rel, context=context)
    except NotSealed:
        tell(
            f"note: the run's record is not sealed yet (it still runs): {rel} is registered as it "
            "is now, with nothing to check it against"
        )
        return None
    return {path: sha for path, _size, sha in checked.files}


def _as_sealed(
    store: Store, registered: Registered, sealed: dict[str, str] | None, rel: str
) -> Registered:
    """`registered` when its files are the ones the run sealed; else the version is taken
    back (if this registration made it) and the files named: they changed while it was read."""
    if sealed is None:
        return registered
    got = {f.path: f.sha256 for f in registered.record.files}
    if got == sealed:
        return registered
    if registered.created:
        store.remove(registered.record.kind, registered.record.name, registered.record.version)
    named = sorted({p for p in got.keys() | sealed.keys() if got.get(p) != sealed.get(p)}, key=str)
    raise TauError(
        f"{rel} changed while it was registered: not what the run's sealed manifest says: "
        + ", ".join(named[:10])
        + (f" and {len(named) - 10} more" if len(named) > 10 else ""),
        exit_code=EXIT_RUN_FAILED,
    )


def _from_cluster_run(
    rec: Any,
    run: str,
    checkpoint: str,
    store: Store | None,
    context: str | None,
    tell: Callable[[str], None],
    into: Callable[[Store, Path | InAccount, Lineage], Registered],
) -> Registered:
    """A cluster run's checkpoint, chosen from its artifacts and metrics, registered in
    `store` (None: the workspace's registry) where the run left it when this machine reaches
    the volume's folder, else read through the workspace's file server and checked."""
    from taugrid.client import runs

    made = runs.artifacts(run, context=context)
    if made.note:
        raise TauError(
            f"the checkpoints of {rec.run_id} cannot be read: {made.note}", exit_code=EXIT_PLATFORM
        )
    own = [r for r in runs.metrics(run, context=context) if r.get("run_id") == rec.run_id]
    chosen, step = _checkpoint(rec, made.checkpoints, own, checkpoint)
    if store is None:  # the workspace's own, declared by its platform: made on first use
        from taugrid.data.store import open_store

        store = open_store(_workspace_registry(rec, context), create=True)
    lineage = _lineage(rec, chosen, own, step)
    rel = f"{rec.checkpoint_subdir.strip('/')}/{chosen}"
    in_place = _on_the_volume(store.url, rec.run_id, rel)
    if in_place is not None:
        sealed = _sealed_files(run, rel, context, tell)
        tell(
            f"registering {rel} of {rec.run_id} where the run left it ({in_place}"
            + (", checked against the run's manifest)" if sealed is not None else ")")
        )
        return _as_sealed(store, into(store, in_place, lineage), sealed, rel)
    copies = _in_the_account(store, rec, rel, run, context)
    if copies is not None:
        registered = into(store, copies, lineage)
        tell(
            f"copied {rel} of {rec.run_id} inside storage account {copies.account} "
            f"({copies.bytes} bytes; none through this machine: each file hashed on the volume "
            "by the workspace's file server and checked against the run's manifest)"
        )
        return registered
    return _through_this_machine(
        rec, run, rel, context, tell, lambda folder: into(store, folder, lineage)
    )


def _through_this_machine(
    rec: Any,
    run: str,
    rel: str,
    context: str | None,
    tell: Callable[[str], None],
    into: Callable[[Path], Registered],
) -> Registered:
    """The checkpoint `rel` of a cluster run read through the workspace's file server into a
    scratch folder here, each file checked against the run's manifest, then registered."""
    import tempfile

    from taugrid.client import runs
    from taugrid.runs.paths import tau_home

    scratch = tau_home() / "tmp"
    scratch.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=scratch, prefix=f"{rec.run_id}-") as tmp:
        got = runs.pull(run, to=tmp, kinds=["checkpoints"], context=context)
        if not got.ok:
            raise TauError(
                f"the checkpoint of {rec.run_id} is not what its record says: "
                f"{', '.join(got.bad + got.missing)}",
                exit_code=EXIT_RUN_FAILED,
            )
        tell(
            f"read {rel} of {rec.run_id} through the workspace's file server ({got.bytes} bytes "
            f"through this machine, checked against the run's manifest)"
        )
        try:
            return into(Path(tmp) / rel)
        finally:  # the scratch folder goes: so does what the pull noted of it
            from taugrid.host.folders import ledger

            ledger(tau_home(), Path(tmp)).unlink(missing_ok=True)


def _local_checkpoint(
    rd: Any, rec: Any, checkpoint: str
) -> tuple[Path, str, int | None, list[dict[str, Any]]]:
    """A local run's checkpoint: (its folder, its name, its step, the run's metric rows).
    latest/best are chosen among complete checkpoints; a named folder may be any of the run's
    (or an absolute path), complete or not."""
    ckpts, rows = rd.complete_checkpoints(rec.checkpoint_subdir), rd.metric_rows()
    folder = rd.checkpoint_dir(rec.checkpoint_subdir)
    if checkpoint in ("latest", "best"):
        chosen, step = _checkpoint(rec, ckpts, rows, checkpoint)
        return folder / chosen, chosen, step, rows
    path = Path(checkpoint) if Path(checkpoint).is_absolute() else folder / checkpoint
    if not path.exists():
        raise TauError(
            f"checkpoint {checkpoint}: not found in run {rd.run_id}",
            exit_code=EXIT_USAGE,
            hint=f"complete ones: {', '.join(c['path'] for c in ckpts) or 'none'}",
        )
    step = next((c.get("step") for c in ckpts if c["path"] == path.name), None)
    return path, path.name, step, rows


def _workspace_registry(rec: Any, context: str | None) -> str:
    from taugrid.runs.backends.kube.backend import KubeBackend

    ws = KubeBackend(context).workspace(rec.workspace)
    if not ws.registry:
        raise TauError(
            f"workspace {rec.workspace} declares no data registry to register the model in",
            exit_code=EXIT_USAGE,
            hint="--registry URL (e.g. file:///shared/registry)",
        )
    return ws.registry


@dataclass(frozen=True)
class InAccount:
    """A run's checkpoint already in the registry's storage account (the workspace volume is
    the registry's container), checked where it is: registered by copies inside the account."""

    account: str
    source: str  # its key prefix in the container
    files: list[tuple[str, int, str]]  # (path under source, size, sha256)
    bytes: int


def _in_the_account(
    store: Store, rec: Any, rel: str, run: str, context: str | None
) -> InAccount | None:
    """The checkpoint `rel` of the run, when the registry is an az:// registry that is its
    workspace volume's `registry` folder and the run's record is beside it, sealed: each file
    hashed by the volume's file server and checked against the manifest (raises naming a file
    that is not what the manifest says). None when the registry is elsewhere, or the run's record
    is not sealed yet."""
    from taugrid.data.azure import AzureStore

    if not isinstance(store, AzureStore):
        return None
    from taugrid.api import constants as C
    from taugrid.client import runs

    source = store.beside(f"{C.run_volume_path(rec.run_id)}/{rel}")
    if source is None:
        return None
    from taugrid.runs.pull import NotSealed

    try:
        checked = runs.check_in_place(run, rel, context=context)
    except NotSealed:
        return None  # the run still runs: its checkpoint comes through, as a pull would take it
    return InAccount(store.account, source, checked.files, checked.bytes)


def _on_the_volume(store_url: str, run_id: str, rel: str) -> Path | None:
    """The checkpoint's folder as this machine reaches it, when the registry is the workspace
    volume's own `registry` folder (file://) and the run's record is beside it."""
    if not store_url.startswith("file://"):
        return None
    from taugrid.api import constants as C

    root = Path(store_url.removeprefix("file://"))
    if root.name != C.REGISTRY_SUBDIR:
        return None
    folder = root.parent / C.RUNS_SUBDIR / run_id / rel
    return folder if folder.is_dir() else None


def _lineage(rec: Any, checkpoint: str, rows: list[dict[str, Any]], step: int | None) -> Lineage:
    inputs = [DataInput(name=i.name, version=i.version) for i in rec.inputs if i.kind == "dataset"]
    return Lineage(
        run=rec.run_id,
        inputs=inputs,
        config_hash=rec.config_hash,
        code_revision=rec.code_revision,
        checkpoint=checkpoint,
        metrics=_metrics_at(rows, step),
    )


def _checkpoint(
    rec: Any, ckpts: list[dict[str, Any]], rows: list[dict[str, Any]], which: str
) -> tuple[str, int | None]:
    """(the checkpoint's folder name, its step): latest, best by the primary metric, or named."""
    if which not in ("latest", "best"):
        found = next((c for c in ckpts if c["path"] == which), None)
        if found is None:
            raise TauError(
                f"checkpoint {which}: not a complete checkpoint of run {rec.run_id}",
                exit_code=EXIT_USAGE,
                hint=f"complete ones: {', '.join(c['path'] for c in ckpts) or 'none'}",
            )
        return which, found.get("step")
    if not ckpts:
        raise TauError(
            f"run {rec.run_id} has no complete checkpoint",
            exit_code=EXIT_USAGE,
            hint="register a folder instead: tau data model register NAME PATH",
        )
    if which == "latest":
        return ckpts[-1]["path"], ckpts[-1].get("step")
    metric, lower = _primary(rec)
    by_step = {r["step"]: r for r in rows if isinstance(r.get(metric), int | float)}
    scored = [(by_step[c["step"]][metric], c) for c in ckpts if c.get("step") in by_step]
    if not scored:
        raise TauError(
            f"run {rec.run_id}: no checkpoint has a value of {metric!r}",
            exit_code=EXIT_USAGE,
            hint="--checkpoint latest, or a path",
        )
    best = (min if lower else max)(scored, key=lambda x: x[0])[1]
    return best["path"], best.get("step")


def _primary(rec: Any) -> tuple[str, bool]:
    """The run's primary metric and whether lower is better, from its record."""
    metric, direction = rec.primary_metric, rec.metric_direction
    if not metric:
        raise TauError(
            f"run {rec.run_id} names no primary metric: 'best' is undefined",
            exit_code=EXIT_USAGE,
            hint="--checkpoint latest, or set metrics.primary in tau.yaml",
        )
    lower = direction != "higher" and not (direction is None and "acc" in metric)
    return metric, lower


def _metrics_at(rows: list[dict[str, Any]], step: int | None) -> dict[str, float]:
    if step is None:
        return {}
    for r in rows:
        if r.get("step") == step:
            return {
                k: float(v)
                for k, v in r.items()
                if isinstance(v, int | float) and k not in ("step", "ts")
            }
    return {}


def versions(kind: Kind, name: str, *, registry: str | None = None) -> builtins.list[VersionRecord]:
    return default_store(registry).versions(kind, name)


def list_(kind: Kind, *, registry: str | None = None) -> builtins.list[dict[str, Any]]:
    """One row per name: versions, the newest, its size, and the aliases."""
    s = default_store(registry)
    rows = []
    for name in s.names(kind):
        got = s.summary(kind, name)
        if got is None:
            continue
        count, newest = got
        aliases = s.aliases(kind, name)
        rows.append(
            {
                "name": name,
                "versions": count,
                "newest": short(newest.version),
                "size": newest.size,
                "files": newest.files,
                "created": newest.created.at,
                "aliases": {a: short(v) for a, v in sorted(aliases.items())},
            }
        )
    return rows


def show(kind: Kind, ref: str, *, registry: str | None = None) -> VersionRecord:
    return default_store(registry).resolve(kind, parse_ref(ref))


def aliases(kind: Kind, name: str, *, registry: str | None = None) -> dict[str, str]:
    """Every alias of `name` and the version it points at now."""
    return default_store(registry).aliases(kind, name)


def aliases_of(
    kind: Kind, record: VersionRecord, *, registry: str | None = None
) -> builtins.list[str]:
    return sorted(
        a
        for a, v in default_store(registry).aliases(kind, record.name).items()
        if v == record.version
    )


def verify(
    kind: Kind, ref: str, *, registry: str | None = None, progress: Progress | None = None
) -> tuple[VersionRecord, builtins.list[str]]:
    s = default_store(registry)
    rec = s.resolve(kind, parse_ref(ref))
    return rec, s.verify(rec, progress)


def pull(
    kind: Kind,
    ref: str,
    dest: str | Path,
    *,
    registry: str | None = None,
    progress: Progress | None = None,
    force: bool = False,
) -> VersionRecord:
    """Copy a version's files into the folder `dest`: files already there with its bytes are
    kept; local edits are refused (nothing written) unless `force`; a `dest` that is a file is
    refused."""
    from taugrid.client.records import check_folder

    check_folder(dest, "the destination")
    s = default_store(registry)
    rec = s.resolve(kind, parse_ref(ref))
    s.pull(rec, Path(dest), progress, force=force)
    return rec


def repair(
    kind: Kind,
    ref: str,
    source: str | Path,
    *,
    registry: str | None = None,
    progress: Progress | None = None,
) -> tuple[VersionRecord, builtins.list[str]]:
    """Restore the damaged or missing stored files of a version from the intact file or
    folder it was registered from (each checked to hold the recorded bytes first); the files
    restored (none: it was whole)."""
    if not str(source).strip():
        raise TauError(
            "no source given: name the file or folder it was registered from", exit_code=EXIT_USAGE
        )
    s = default_store(registry)
    rec = s.resolve(kind, parse_ref(ref))
    return rec, s.repair(rec, Path(source), progress)


def gc(*, registry: str | None = None, dry_run: bool = False, grace_s: float = 3600) -> Collected:
    """Remove what no version names (blobs, packs none of whose files a version names) and what
    killed registrations left behind; nothing written in the last `grace_s` seconds."""
    return default_store(registry).gc(dry_run=dry_run, grace_s=grace_s)


def copy(
    kind: Kind, ref: str, to: str, *, registry: str | None = None, progress: Progress | None = None
) -> Copied:
    """Put the version `ref` names into the store `to` (a workspace's registry, a colleague's):
    only the files it lacks, checked on the way; the record last. Aliases are not copied."""
    from taugrid.api.data import registry_problem
    from taugrid.data.store import open_store

    problem = registry_problem(to)
    if problem:
        raise TauError(
            f"--to {to}: {problem}",
            exit_code=EXIT_USAGE,
            hint="file:///ABSOLUTE/FOLDER or az://ACCOUNT/CONTAINER[/PREFIX]",
        )
    src = default_store(registry)
    rec = src.resolve(kind, parse_ref(ref))
    return src.copy_to(rec, open_store(to, create=True), progress)  # a copy makes its place


def set_alias(
    kind: Kind,
    name: str,
    alias: str,
    ref: str,
    *,
    expect: str | None = None,
    expect_absent: bool = False,
    registry: str | None = None,
) -> AliasMove:
    """Move `alias` to the version `ref` names, only if it is `expect` now (a version or a short
    version) or absent: a true compare-and-swap."""
    from taugrid.api.kubetime import k8s_time
    from taugrid.runs.provenance import submitter

    s = default_store(registry)
    target = s.resolve(kind, parse_ref(f"{name}@{ref}" if "@" not in ref else ref))
    exp = s.resolve(kind, parse_ref(f"{name}@{expect}")).version if expect else None
    return s.set_alias(
        kind,
        name,
        alias,
        target.version,
        submitter(),
        k8s_time(),
        expect=exp,
        expect_absent=expect_absent,
    )


def remove_alias(
    kind: Kind, name: str, alias: str, *, expect: str | None = None, registry: str | None = None
) -> AliasMove:
    from taugrid.api.kubetime import k8s_time
    from taugrid.runs.provenance import submitter

    s = default_store(registry)
    exp = s.resolve(kind, parse_ref(f"{name}@{expect}")).version if expect else None
    return s.set_alias(kind, name, alias, None, submitter(), k8s_time(), expect=exp)


def get_alias(kind: Kind, name: str, alias: str, *, registry: str | None = None) -> VersionRecord:
    return default_store(registry).resolve(kind, parse_ref(f"{name}@{alias}"))


def history(
    kind: Kind, name: str, alias: str | None = None, *, registry: str | None = None
) -> builtins.list[AliasMove]:
    return default_store(registry).history(kind, name, alias)


def remove(kind: Kind, ref: str, *, registry: str | None = None) -> VersionRecord:
    r = parse_ref(ref)
    if not r.is_version:
        raise TauError(
            f"{ref}: name the version to remove (NAME@sha256:...)",
            exit_code=EXIT_USAGE,
            hint=f"tau data {kind} show {r.name} lists them",
        )
    s = default_store(registry)
    rec = s.resolve(kind, r)
    s.remove(kind, rec.name, rec.version)
    return rec


def lineage(kind: Kind, ref: str, *, registry: str | None = None) -> dict[str, Any]:
    """A model: the run that made it and that run's inputs. A dataset: the models whose
    lineage names it."""
    s = default_store(registry)
    rec = s.resolve(kind, parse_ref(ref))
    out: dict[str, Any] = {"kind": kind, "name": rec.name, "version": rec.version}
    if kind == "model":
        out.update(
            run=rec.lineage.run,
            inputs=[i.model_dump() for i in rec.lineage.inputs],
            checkpoint=rec.lineage.checkpoint,
            metrics=rec.lineage.metrics,
            config_hash=rec.lineage.config_hash,
            services=_serving(rec.version),
        )
        return out
    models = []
    for name in s.names("model"):
        for m in s.versions("model", name):
            if any(i.name == rec.name and i.version == rec.version for i in m.lineage.inputs):
                models.append({"name": name, "version": short(m.version), "run": m.lineage.run})
    out["models"] = models
    return out


def _serving(version: str) -> builtins.list[dict[str, Any]]:
    """The services of this machine with a revision that pins this model version (dataset ->
    run -> model -> service): their name, target, those revisions, and whether one serves now."""
    from taugrid.serve.records import all_services

    out = []
    for sd in all_services():
        try:
            svc = sd.read()
        except (OSError, ValueError):
            continue
        revs = [
            r.number for r in svc.revisions if r.model is not None and r.model.version == version
        ]
        if revs and svc.deleted_at is None:
            out.append(
                {
                    "name": svc.name,
                    "target": svc.target,
                    "revisions": revs,
                    "serving": svc.serving in revs,
                }
            )
    return out


def models_from_run(run: str, *, registry: str | None = None) -> builtins.list[VersionRecord]:
    """The model versions registered from the run `run` (their lineage names it), oldest first."""
    s = default_store(registry)
    return [
        m for name in s.names("model") for m in s.versions("model", name) if m.lineage.run == run
    ]
