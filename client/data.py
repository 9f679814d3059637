"""Datasets and models (`tau data`): register, list, show, verify, pull, copy, aliases, lineage.

The store is `registry` (a URL: `file://DIR` or a folder), else `TAU_REGISTRY`, else
`$TAU_HOME/data/registry`. Every call returns api models (`taugrid.api.data`) or rows, and raises
TauErrors with the CLI's exit codes: 2 bad input, 1 a lost alias race or a failed verify, 4 a
store that cannot be used.
"""

from __future__ import annotations

import builtins
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
from taugrid.api.errors import EXIT_USAGE, TauError
from taugrid.data.store import Collected, Copied, Progress, Registered, default_store
from taugrid.data.store import registry_url as registry_url


def _created(run: str | None = None) -> Created:
    import socket

    from taugrid.api.kubetime import k8s_time
    from taugrid.runs.provenance import submitter

    return Created(by=submitter(), at=k8s_time(), host=socket.gethostname(), run=run)


def register(kind: Kind, name: str, path: str | Path, *, purpose: str | None = None,
             description: str | None = None, tags: dict[str, str] | None = None,
             registry: str | None = None, progress: Progress | None = None) -> Registered:  # fmt: skip
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
    return default_store(registry).register(kind, name, Path(path), _created(), purpose=purpose,
                                    description=description, tags=tags, progress=progress)  # fmt: skip


def register_model_from_run(name: str, run: str, *, checkpoint: str = "latest",
                            purpose: str | None = None, description: str | None = None,
                            tags: dict[str, str] | None = None, registry: str | None = None,
                            progress: Progress | None = None) -> Registered:  # fmt: skip
    """A run's checkpoint as a model version, with its lineage (the run, its config hash, code
    revision and the metrics at that checkpoint). `checkpoint`: latest, best (by the run's
    primary metric and its direction) or a path."""
    from taugrid.client.runs import find

    rd = find(run)
    rec = rd.read_record()
    path, step = _checkpoint(rd, checkpoint)
    metrics = _metrics_at(rd, step)
    inputs = [DataInput(name=i.name, version=i.version) for i in rec.inputs if i.kind == "dataset"]
    lineage = Lineage(run=rec.run_id, inputs=inputs, config_hash=rec.config_hash,
                      code_revision=rec.code_revision, checkpoint=path.name, metrics=metrics)  # fmt: skip
    return default_store(registry).register("model", name, path, _created(rec.run_id), purpose=purpose,
                                    description=description, tags=tags, lineage=lineage,
                                    progress=progress)  # fmt: skip


def _checkpoint(rd: Any, which: str) -> tuple[Path, int | None]:
    ckpts = rd.complete_checkpoints()
    if which not in ("latest", "best"):
        p = Path(which)
        p = p if p.is_absolute() else rd.checkpoint_dir() / which
        if not p.exists():
            raise TauError(f"checkpoint {which}: not found in run {rd.run_id}", exit_code=EXIT_USAGE,
                           hint=f"complete ones: {', '.join(c['path'] for c in ckpts) or 'none'}")  # fmt: skip
        step = next((c.get("step") for c in ckpts if c["path"] == p.name), None)
        return p, step
    if not ckpts:
        raise TauError(f"run {rd.run_id} has no complete checkpoint", exit_code=EXIT_USAGE,
                       hint="register a folder instead: tau data model register NAME PATH")  # fmt: skip
    if which == "latest":
        c = ckpts[-1]
        return rd.checkpoint_dir() / c["path"], c.get("step")
    metric, lower = _primary(rd)
    rows = {r["step"]: r for r in rd.metric_rows() if isinstance(r.get(metric), int | float)}
    scored = [(rows[c["step"]][metric], c) for c in ckpts if c.get("step") in rows]
    if not scored:
        raise TauError(f"run {rd.run_id}: no checkpoint has a value of {metric!r}",
                       exit_code=EXIT_USAGE, hint="--checkpoint latest, or a path")  # fmt: skip
    best = (min if lower else max)(scored, key=lambda x: x[0])[1]
    return rd.checkpoint_dir() / best["path"], best.get("step")


def _primary(rd: Any) -> tuple[str, bool]:
    """The run's primary metric and whether lower is better, from its record."""
    rec = rd.read_record()
    metric, direction = rec.primary_metric, rec.metric_direction
    if not metric:
        raise TauError(f"run {rd.run_id} names no primary metric: 'best' is undefined",
                       exit_code=EXIT_USAGE, hint="--checkpoint latest, or set metrics.primary in tau.yaml")  # fmt: skip
    lower = direction != "higher" and not (direction is None and "acc" in metric)
    return metric, lower


def _metrics_at(rd: Any, step: int | None) -> dict[str, float]:
    if step is None:
        return {}
    for r in rd.metric_rows():
        if r.get("step") == step:
            return {k: float(v) for k, v in r.items()
                    if isinstance(v, int | float) and k not in ("step", "ts")}  # fmt: skip
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
        rows.append({"name": name, "versions": count, "newest": short(newest.version),
                     "size": newest.size, "files": newest.files, "created": newest.created.at,
                     "aliases": {a: short(v) for a, v in sorted(aliases.items())}})  # fmt: skip
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


def verify(kind: Kind, ref: str, *, registry: str | None = None,
           progress: Progress | None = None) -> tuple[VersionRecord, builtins.list[str]]:  # fmt: skip
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
    if not str(dest).strip():
        raise TauError("no destination given: name a folder", exit_code=EXIT_USAGE)
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


def copy(kind: Kind, ref: str, to: str, *, registry: str | None = None,
         progress: Progress | None = None) -> Copied:  # fmt: skip
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


def set_alias(kind: Kind, name: str, alias: str, ref: str, *, expect: str | None = None,
              expect_absent: bool = False, registry: str | None = None) -> AliasMove:  # fmt: skip
    """Move `alias` to the version `ref` names, only if it is `expect` now (a version or a short
    version) or absent: a true compare-and-swap."""
    from taugrid.api.kubetime import k8s_time
    from taugrid.runs.provenance import submitter

    s = default_store(registry)
    target = s.resolve(kind, parse_ref(f"{name}@{ref}" if "@" not in ref else ref))
    exp = s.resolve(kind, parse_ref(f"{name}@{expect}")).version if expect else None
    return s.set_alias(kind, name, alias, target.version, submitter(), k8s_time(),
                       expect=exp, expect_absent=expect_absent)  # fmt: skip


def remove_alias(kind: Kind, name: str, alias: str, *, expect: str | None = None,
                 registry: str | None = None) -> AliasMove:  # fmt: skip
    from taugrid.api.kubetime import k8s_time
    from taugrid.runs.provenance import submitter

    s = default_store(registry)
    exp = s.resolve(kind, parse_ref(f"{name}@{expect}")).version if expect else None
    return s.set_alias(kind, name, alias, None, submitter(), k8s_time(), expect=exp)


def get_alias(kind: Kind, name: str, alias: str, *, registry: str | None = None) -> VersionRecord:
    return default_store(registry).resolve(kind, parse_ref(f"{name}@{alias}"))


def history(kind: Kind, name: str, alias: str | None = None, *,
            registry: str | None = None) -> builtins.list[AliasMove]:  # fmt: skip
    return default_store(registry).history(kind, name, alias)


def remove(kind: Kind, ref: str, *, registry: str | None = None) -> VersionRecord:
    r = parse_ref(ref)
    if not r.is_version:
        raise TauError(f"{ref}: name the version to remove (NAME@sha256:...)", exit_code=EXIT_USAGE,
                       hint=f"tau data {kind} show {r.name} lists them")  # fmt: skip
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
        out.update(run=rec.lineage.run, inputs=[i.model_dump() for i in rec.lineage.inputs],
                   checkpoint=rec.lineage.checkpoint, metrics=rec.lineage.metrics,
                   config_hash=rec.lineage.config_hash)  # fmt: skip
        return out
    models = []
    for name in s.names("model"):
        for m in s.versions("model", name):
            if any(i.name == rec.name and i.version == rec.version for i in m.lineage.inputs):
                models.append({"name": name, "version": short(m.version), "run": m.lineage.run})
    out["models"] = models
    return out


def models_from_run(run: str, *, registry: str | None = None) -> builtins.list[VersionRecord]:
    """The model versions registered from the run `run` (their lineage names it), oldest first."""
    s = default_store(registry)
    return [m for name in s.names("model") for m in s.versions("model", name)
            if m.lineage.run == run]  # fmt: skip
