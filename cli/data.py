"""`tau data dataset|model ...` and `tau data lineage`: versions named by content, aliases moved
by compare-and-swap, lineage from runs (taugrid.client.data; no registry server)."""

from __future__ import annotations

import dataclasses
from typing import Annotated, Any

import typer

from taugrid.cli.options import ContextOpt, JsonOpt, ReportFormat
from taugrid.cli.output import dump_json, human_size, out, progress_bar, say

app = typer.Typer(
    no_args_is_help=True, help="Datasets and models: versions by content, aliases, lineage."
)

RegistryOpt = Annotated[
    str | None,
    typer.Option(
        "--registry",
        help="The store: file://DIR (default $TAU_REGISTRY, else $TAU_HOME/data/registry)",
        envvar="TAU_REGISTRY",
    ),
]
RefArg = Annotated[str, typer.Argument(help="NAME, NAME@ALIAS or NAME@sha256:VERSION")]
NameArg = Annotated[str, typer.Argument(help="The dataset's or model's name")]
AliasArg = Annotated[str, typer.Argument(help="The alias, e.g. prod, latest")]
PurposeOpt = Annotated[
    str | None, typer.Option("--purpose", help="What it is for, e.g. pretrain, eval")
]
DescOpt = Annotated[str | None, typer.Option("--description", help="A line about it")]
TagOpt = Annotated[list[str] | None, typer.Option("--tag", help="KEY=VALUE (repeat)")]
ExpectOpt = Annotated[
    str | None, typer.Option("--expect", help="Move only if the alias is this version now")
]


def _record_lines(rec: Any, aliases: list[str]) -> str:
    lines = [
        f"{rec.kind} {rec.name}@{rec.short}  ({rec.version})",
        f"  {len(rec.files)} file(s), {human_size(rec.size)}; created {rec.created.at} by "
        f"{rec.created.by} on {rec.created.host}",
    ]
    if aliases:
        lines.append(f"  aliases: {', '.join(aliases)}")
    for k in ("purpose", "description"):
        if getattr(rec, k):
            lines.append(f"  {k}: {getattr(rec, k)}")
    if rec.tags:
        lines.append("  tags: " + ", ".join(f"{k}={v}" for k, v in rec.tags.items()))
    lin = rec.lineage
    if lin.run:
        metrics = ", ".join(f"{k}={v:g}" for k, v in lin.metrics.items())
        lines.append(
            f"  from run {lin.run}, checkpoint {lin.checkpoint}"
            + (f" ({metrics})" if metrics else "")
        )
    for i in lin.inputs:
        lines.append(f"  input: {i.name}@{i.version[:19]}")
    return "\n".join(lines)


def _register_dataset(
    name: NameArg,
    path: Annotated[str, typer.Argument(help="A file or folder")],
    purpose: PurposeOpt = None,
    description: DescOpt = None,
    tag: TagOpt = None,
    registry: RegistryOpt = None,
    output: JsonOpt = ReportFormat.text,
) -> None:
    """Register a file or folder as a version (the same content again: the same version)."""
    _register(
        "dataset", name, path, None, "latest", purpose, description, tag, registry, output, None
    )


def _register_model(
    name: NameArg,
    path: Annotated[str | None, typer.Argument(help="A file or folder (or --from-run)")] = None,
    from_run: Annotated[
        str | None, typer.Option("--from-run", help="A run whose checkpoint it is")
    ] = None,
    checkpoint: Annotated[
        str,
        typer.Option("--checkpoint", help="latest, best (by the run's primary metric) or a path"),
    ] = "latest",
    purpose: PurposeOpt = None,
    description: DescOpt = None,
    tag: TagOpt = None,
    registry: RegistryOpt = None,
    output: JsonOpt = ReportFormat.text,
    context: ContextOpt = None,
) -> None:
    """Register a model: a run's checkpoint (with its lineage) or a file or folder. A
    cluster run's goes into its workspace's registry (--registry picks another)."""
    from taugrid.api.errors import EXIT_USAGE, TauError

    if (path is None) == (from_run is None):
        raise TauError("give a PATH or --from-run RUN (one of them)", exit_code=EXIT_USAGE)
    _register(
        "model",
        name,
        path,
        from_run,
        checkpoint,
        purpose,
        description,
        tag,
        registry,
        output,
        context,
    )


def _register(
    kind: Any,
    name: str,
    path: str | None,
    from_run: str | None,
    checkpoint: str,
    purpose: str | None,
    description: str | None,
    tag: list[str] | None,
    registry: str | None,
    output: ReportFormat,
    context: str | None,
) -> None:
    """Both kinds' registration (a model's may come from a run's checkpoint), with a bar."""
    from taugrid.api.data import parse_tags
    from taugrid.client import data

    tags = parse_tags(tag or [])
    with progress_bar(f"registering {name}", output is ReportFormat.text) as bar:
        about = {
            "purpose": purpose,
            "description": description,
            "tags": tags,
            "registry": registry,
            "progress": bar,
        }
        if from_run:
            got = data.register_model_from_run(
                name, from_run, checkpoint=checkpoint, context=context, say=say, **about
            )
        else:
            assert path is not None
            got = data.register(kind, name, path, **about)
    _registered(got, output)


def _list(
    ctx: typer.Context, registry: RegistryOpt = None, output: JsonOpt = ReportFormat.text
) -> None:
    """Every one: versions, the newest, its size, aliases."""
    kind = _kind(ctx)
    from taugrid.client import data

    rows = data.list_(kind, registry=registry)
    if output is ReportFormat.json:
        out(dump_json(rows))
        return
    if not rows:
        out(f"no {kind}s in {data.registry_url(registry)}")
        return
    from taugrid.cli.output import columns

    lines = [
        (
            r["name"],
            str(r["versions"]),
            r["newest"],
            str(r["files"]),
            human_size(r["size"]),
            ", ".join(f"{a}={v[7:]}" for a, v in r["aliases"].items()) or "-",
        )
        for r in rows
    ]
    out(columns(("NAME", "VERSIONS", "NEWEST", "FILES", "SIZE", "ALIASES"), lines))


def _show(
    ctx: typer.Context,
    ref: RefArg,
    registry: RegistryOpt = None,
    output: JsonOpt = ReportFormat.text,
) -> None:
    """One version: files, size, who made it, aliases, lineage (NAME alone: its newest)."""
    kind = _kind(ctx)
    from taugrid.client import data

    rec = data.show(kind, ref, registry=registry)
    aliases = data.aliases_of(kind, rec, registry=registry)
    if output is ReportFormat.json:
        out(dump_json({**rec.model_dump(mode="json", by_alias=True), "aliases": aliases}))
        return
    out(_record_lines(rec, aliases))
    versions = data.versions(kind, rec.name, registry=registry)
    if len(versions) > 1:
        out("  versions: " + ", ".join(v.short for v in versions[-5:]))


def _verify(
    ctx: typer.Context,
    ref: RefArg,
    registry: RegistryOpt = None,
    output: JsonOpt = ReportFormat.text,
) -> None:
    """Re-hash every file of a version; name each missing or changed one (exit 1)."""
    kind = _kind(ctx)
    from taugrid.client import data

    with progress_bar(f"verifying {ref}", output is ReportFormat.text) as bar:
        rec, problems = data.verify(kind, ref, registry=registry, progress=bar)
    if output is ReportFormat.json:
        out(
            dump_json(
                {
                    "name": rec.name,
                    "version": rec.version,
                    "ok": not problems,
                    "problems": problems,
                    "repair": _repair_command(rec) if problems else None,
                }
            )
        )
    else:
        for p in problems:
            out(f"  {p}")
        out(
            f"{rec.name}@{rec.short}: "
            + (
                f"{len(problems)} problem(s)"
                if problems
                else f"ok ({len(rec.files)} file(s), {human_size(rec.size)})"
            )
        )
        if problems:
            say(f"fix: {_repair_command(rec)} (the intact file or folder it was registered from)")
    if problems:
        raise typer.Exit(1)


def _repair_command(rec: Any) -> str:
    return f"tau data {rec.kind} repair {rec.name}@{rec.short} --from PATH"


def _pull(
    ctx: typer.Context,
    ref: RefArg,
    dest: Annotated[str, typer.Argument(help="Folder to copy the files into")],
    registry: RegistryOpt = None,
    force: Annotated[
        bool,
        typer.Option("--force", help="Replace files there that have other bytes (local edits)"),
    ] = False,
) -> None:
    """Copy a version's files into a folder (checked as they are copied). Files there with
    the version's bytes are kept; local edits are refused, nothing written, unless --force."""
    kind = _kind(ctx)
    from taugrid.client import data

    with progress_bar(f"pulling {ref}", True) as bar:
        rec = data.pull(kind, ref, dest, registry=registry, progress=bar, force=force)
    say(f"{rec.name}@{rec.short}: {len(rec.files)} file(s), {human_size(rec.size)} in {dest}")


def _repair(
    ctx: typer.Context,
    ref: RefArg,
    source: Annotated[
        str,
        typer.Option("--from", help="The intact file or folder the version was registered from"),
    ],
    registry: RegistryOpt = None,
    output: JsonOpt = ReportFormat.text,
) -> None:
    """Restore a version's damaged or missing stored files from the intact source (each
    checked against the recorded sha256 first); exit 1 when a damaged file cannot be."""
    kind = _kind(ctx)
    from taugrid.client import data

    with progress_bar(f"repairing {ref}", output is ReportFormat.text) as bar:
        rec, restored = data.repair(kind, ref, source, registry=registry, progress=bar)
    if output is ReportFormat.json:
        out(dump_json({"name": rec.name, "version": rec.version, "restored": restored}))
        return
    for path in restored:
        out(f"  restored {path}")
    out(
        f"{rec.name}@{rec.short}: "
        + (f"{len(restored)} file(s) restored" if restored else "whole; nothing to restore")
    )


def _copy(
    ctx: typer.Context,
    ref: RefArg,
    to: Annotated[
        str,
        typer.Option(
            "--to",
            help="The store to copy it into: "
            "az://ACCOUNT/CONTAINER[/PREFIX] or file://DIR (a "
            "workspace's registry)",
        ),
    ],
    registry: RegistryOpt = None,
    output: JsonOpt = ReportFormat.text,
) -> None:
    """Copy a version into another store (only the files it lacks; checked on the way; the
    record last, so a copy cut short is never visible there). Aliases are not copied."""
    kind = _kind(ctx)
    from taugrid.client import data

    with progress_bar(f"copying {ref}", output is ReportFormat.text) as bar:
        got = data.copy(kind, ref, to, registry=registry, progress=bar)
    rec = got.record
    if output is ReportFormat.json:
        out(
            dump_json(
                {
                    "kind": kind,
                    "name": rec.name,
                    "version": rec.version,
                    "to": to,
                    "copied": got.files > 0,
                    "bytes_sent": got.sent,
                }
            )
        )
    elif got.files == 0:
        say(f"{rec.name}@{rec.short} is in {to} already; nothing copied")
    else:
        say(
            f"{rec.name}@{rec.short}: {got.files} file(s), {human_size(rec.size)} in {to} "
            f"({human_size(got.sent)} sent; files it had already were not)"
        )


def _ref(
    ctx: typer.Context,
    ref: RefArg,
    registry: RegistryOpt = None,
    output: Annotated[str, typer.Option("-o", "--output", help="env or json")] = "json",
) -> None:
    """The exact version a reference names now (for scripts: -o env or json)."""
    kind = _kind(ctx)
    from taugrid.api.errors import EXIT_USAGE, TauError
    from taugrid.client import data

    rec = data.show(kind, ref, registry=registry)
    doc = {
        "kind": kind,
        "name": rec.name,
        "version": rec.version,
        "registry": data.registry_url(registry),
    }
    if output == "env":
        key = rec.name.upper().replace("-", "_").replace(".", "_")
        out(f"TAU_{kind.upper()}_{key}={rec.name}@{rec.version}")
    elif output == "json":
        out(dump_json(doc))
    else:
        raise TauError(f"-o {output}: use env or json", exit_code=EXIT_USAGE)


def _rm(
    ctx: typer.Context,
    ref: RefArg,
    yes: Annotated[bool, typer.Option("--yes", help="Really remove it")] = False,
    registry: RegistryOpt = None,
) -> None:
    """Remove a version (NAME@VERSION): refused while an alias points at it; files shared
    with other versions stay."""
    kind = _kind(ctx)
    from taugrid.api.errors import EXIT_USAGE, TauError
    from taugrid.client import data

    if not yes:
        raise TauError(f"removing {ref} cannot be undone", exit_code=EXIT_USAGE, hint="add --yes")
    rec = data.remove(kind, ref, registry=registry)
    say(f"removed {rec.name}@{rec.short}")


def _alias_set(
    ctx: typer.Context,
    name: NameArg,
    alias: AliasArg,
    version: Annotated[str, typer.Argument(help="sha256:VERSION (short is fine) or another alias")],
    expect: ExpectOpt = None,
    expect_absent: Annotated[
        bool, typer.Option("--expect-absent", help="Only if the alias does not exist yet")
    ] = False,
    registry: RegistryOpt = None,
    output: JsonOpt = ReportFormat.text,
) -> None:
    """Point an alias at a version: with --expect/--expect-absent, only if nobody moved it
    meanwhile (exit 1 names what it is now)."""
    kind = _kind(ctx)
    from taugrid.client import data

    move = data.set_alias(
        kind,
        name,
        alias,
        version,
        expect=expect,
        expect_absent=expect_absent,
        registry=registry,
    )
    _moved(name, move, output)


def _alias_rm(
    ctx: typer.Context,
    name: NameArg,
    alias: AliasArg,
    expect: ExpectOpt = None,
    registry: RegistryOpt = None,
    output: JsonOpt = ReportFormat.text,
) -> None:
    """Remove an alias (kept in its history)."""
    kind = _kind(ctx)
    from taugrid.client import data

    _moved(name, data.remove_alias(kind, name, alias, expect=expect, registry=registry), output)


def _alias_get(
    ctx: typer.Context,
    name: NameArg,
    alias: AliasArg,
    registry: RegistryOpt = None,
    output: JsonOpt = ReportFormat.text,
) -> None:
    """The version an alias points at now."""
    kind = _kind(ctx)
    from taugrid.client import data

    rec = data.get_alias(kind, name, alias, registry=registry)
    out(
        dump_json({"alias": alias, "version": rec.version})
        if output is ReportFormat.json
        else f"{name}@{alias} = {rec.short}"
    )


def _alias_history(
    ctx: typer.Context,
    name: NameArg,
    alias: Annotated[str | None, typer.Argument(help="One alias (default: all)")] = None,
    registry: RegistryOpt = None,
    output: JsonOpt = ReportFormat.text,
) -> None:
    """Every move of the aliases (who, when, from, to), oldest first."""
    kind = _kind(ctx)
    from taugrid.client import data

    moves = data.history(kind, name, alias, registry=registry)
    if output is ReportFormat.json:
        out(dump_json([m.model_dump(mode="json", by_alias=True) for m in moves]))
        return
    for m in moves:
        was = m.from_version[:19] if m.from_version else "(none)"
        now = m.to[:19] if m.to else "(removed)"
        out(f"{m.at}  {m.alias}: {was} -> {now}  by {m.by}")
    if not moves:
        out(f"no alias moves for {name}")


def _kind(ctx: typer.Context) -> Any:
    """The kind a verb acts on: the group it was called through (`tau data dataset ...` or
    `tau data model ...`; the alias verbs one level further down)."""
    c: Any = ctx
    while c is not None and c.info_name not in ("dataset", "model"):
        c = c.parent
    return "model" if c is None else c.info_name


def _verbs(kind: Any) -> typer.Typer:
    """The same verbs for datasets and models (each a function of this module; the kind is
    the group a verb is called through)."""
    sub = typer.Typer(
        no_args_is_help=True,
        help=f"{kind.capitalize()}s: register, list, show, verify, pull, copy, ref, alias, rm.",
    )
    alias_app = typer.Typer(
        no_args_is_help=True, help=f"Aliases of a {kind} (compare-and-swap moves)."
    )
    sub.add_typer(alias_app, name="alias")
    sub.command("register")(_register_dataset if kind == "dataset" else _register_model)
    sub.command("list")(_list)
    sub.command("show")(_show)
    sub.command("verify")(_verify)
    sub.command("pull")(_pull)
    sub.command("repair")(_repair)
    sub.command("copy")(_copy)
    sub.command("ref")(_ref)
    sub.command("rm")(_rm)
    alias_app.command("set")(_alias_set)
    alias_app.command("rm")(_alias_rm)
    alias_app.command("get")(_alias_get)
    alias_app.command("history")(_alias_history)
    return sub


def _registered(got: Any, output: ReportFormat) -> None:
    rec = got.record
    if output is ReportFormat.json:
        out(dump_json({**rec.model_dump(mode="json", by_alias=True), "new": got.created}))
        return
    if got.created:
        say(
            f"registered {rec.kind} {rec.name}@{rec.short}: {len(rec.files)} file(s), "
            f"{human_size(rec.size)}"
            f" (hashed {human_size(got.hashed_bytes)})"
        )
    else:
        say(
            f"{rec.kind} {rec.name}@{rec.short} is already registered with this content: nothing "
            f"changed (its stored bytes were not read again: `tau data {rec.kind} verify "
            f"{rec.name}@{rec.short}` checks them, `{_repair_command(rec)}` with this "
            "file or folder restores any damage)"
        )
    out(f"{rec.name}@{rec.version}")


def _moved(name: str, move: Any, output: ReportFormat) -> None:
    if output is ReportFormat.json:
        out(dump_json(move.model_dump(mode="json", by_alias=True)))
        return
    was = move.from_version[:19] if move.from_version else "(none)"
    now = move.to[:19] if move.to else "(removed)"
    out(f"{name}@{move.alias}: {was} -> {now}")


app.add_typer(_verbs("dataset"), name="dataset")
app.add_typer(_verbs("model"), name="model")


@app.command("gc")
def gc(
    registry: RegistryOpt = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Say what would go; remove nothing")
    ] = False,
    output: JsonOpt = ReportFormat.text,
) -> None:
    """Remove what no version names (blobs; packs none of whose files a version names) and
    what killed registrations left; nothing written in the last hour, never while a
    registration or a copy writes to the store (file:// and az://)."""
    from taugrid.client import data

    got = data.gc(registry=registry, dry_run=dry_run)
    if output is ReportFormat.json:
        out(dump_json(dataclasses.asdict(got)))
        return
    verb = "would remove" if dry_run else "removed"
    out(
        f"{verb} {got.blobs} blob(s), {got.packs} pack(s), {got.tmp_files} leftover file(s): "
        f"{human_size(got.bytes)}"
        + (
            f"; {human_size(got.kept_packs_dead_bytes)} unnamed inside packs still in use"
            if got.kept_packs_dead_bytes
            else ""
        )
    )


@app.command("lineage")
def lineage(
    ref: Annotated[str, typer.Argument(help="model:NAME@REF or dataset:NAME@REF (default model)")],
    registry: RegistryOpt = None,
    output: JsonOpt = ReportFormat.text,
) -> None:
    """A model's run, that run's inputs and the services here that serve it; a dataset
    version's models."""
    from taugrid.client import data

    kind, sep, rest = ref.partition(":")
    if not sep or kind not in ("model", "dataset"):
        kind, rest = "model", ref
    doc = data.lineage(kind, rest, registry=registry)  # type: ignore[arg-type]
    if output is ReportFormat.json:
        out(dump_json(doc))
        return
    out(f"{kind} {doc['name']}@{doc['version'][:19]}")
    if kind == "model":
        out(
            f"  made by run {doc['run'] or '(not a run: registered from a folder)'}"
            + (f", checkpoint {doc['checkpoint']}" if doc.get("checkpoint") else "")
        )
        for i in doc["inputs"]:
            out(f"  input: {i['name']}@{i['version'][:19]}")
        for svc in doc.get("services") or []:
            now = "serving now" if svc["serving"] else "not serving now"
            revs = ", ".join(str(n) for n in svc["revisions"])
            out(f"  served by {svc['name']} ({svc['target']}), revision {revs}: {now}")
    else:
        for m in doc["models"] or []:
            out(f"  model {m['name']}@{m['version']} (run {m['run']})")
        if not doc["models"]:
            out("  no model names it as an input yet")
