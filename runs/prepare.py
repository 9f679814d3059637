"""Preparing a run: everything a backend needs to submit it, checked, as one typed object.

`prepare` validates the request against the target's profiles (resolve), fixes the run's
identity (run id, submitter, code revision), and snapshots its code. A backend never reads
tau.yaml itself: it receives a `PreparedRun`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from taugrid.api import naming
from taugrid.api.errors import TauError
from taugrid.api.manifest import Manifest, WorkloadKind
from taugrid.api.vocabulary import ResolvedInput
from taugrid.runs import provenance
from taugrid.runs.codebundle import CodeBundle, collect
from taugrid.runs.load import LoadedManifest
from taugrid.runs.render import RunMeta, render, render_taurun
from taugrid.runs.resolve import Resolved, resolve

if TYPE_CHECKING:
    from taugrid.api.evidence import Handle, RunRecord
    from taugrid.api.profiles import ProfileSnapshot, WorkspaceRef


@dataclass(frozen=True)
class RunRequest:
    """What a person asked for: a tau.yaml, and the choices the command line overrides."""

    loaded: LoadedManifest
    workspace: str | None = None
    profile: str | None = None
    run_id: str | None = None
    resume_from: str | None = None  # a checkpoint path
    parent: str | None = None  # the run id this one resumes
    inputs: tuple[ResolvedInput, ...] | None = None  # pinned (a resumed run reads its parent's)


@dataclass(frozen=True)
class PreparedRun:
    request: RunRequest
    resolved: Resolved
    meta: RunMeta
    bundle: CodeBundle
    warnings: list[str] = field(default_factory=list)

    @property
    def run_id(self) -> str:
        return self.meta.run_id

    @property
    def loaded(self) -> LoadedManifest:
        return self.request.loaded

    @property
    def manifest(self) -> Manifest:
        return self.request.loaded.manifest

    @property
    def kind(self) -> WorkloadKind:
        return self.resolved.kind

    @property
    def parent(self) -> str | None:
        return self.request.parent

    def objects(self, shared_helpers: bool = False) -> list[dict[str, Any]]:
        """The Kubernetes objects a cluster receives for this run (code ConfigMaps first;
        `shared_helpers`: TauGrid's helpers in the namespace's shared ConfigMap, see render)."""
        return render(self.resolved, self.meta, self.bundle, shared_helpers)

    def taurun(self) -> dict[str, Any]:
        """The TauRun that records the run in the cluster and owns its objects."""
        return render_taurun(self.resolved, self.meta, self.request.parent)

    def new_record(
        self,
        handle: Handle,
        *,
        created_at: str,
        image: str | None = None,
        gpus_available: int | None = None,
        warnings: list[str] | None = None,
    ) -> RunRecord:
        """The run's record as every backend first writes it (one builder for all targets:
        identity, code, size, lineage); a backend passes only what differs where it runs."""
        from taugrid.api.evidence import Lineage, RunRecord  # (not on validate/render's path)

        m, r = self.manifest, self.resolved
        parent = self.request.parent
        return RunRecord(
            run_id=self.run_id,
            name=m.name,
            workspace=r.workspace.name,
            profile=r.profile.name,
            experiment=m.experiment.name or m.research.experiment,
            workload_kind=self.kind,
            handle=handle,
            submitter=self.meta.submitter,
            code_folder=str(self.loaded.folder.resolve()),
            code_revision=self.meta.code_revision,
            code_digest=self.bundle.digest,
            config_hash=m.config_hash(),
            image=image if image is not None else r.image,
            entrypoint=m.entrypoint_path or "",
            created_at=created_at,
            max_retries=m.resilience.max_retries,
            workers=r.workers,
            gpus_per_worker=r.gpus,
            gpus_available=r.gpus if gpus_available is None else gpus_available,
            stall_after_seconds=m.metrics.stall_after_seconds,
            primary_metric=m.metrics.primary,
            metric_direction=m.metrics.direction,
            checkpoint_subdir=m.checkpoint_subdir,
            output_subdir=m.output_subdir,
            warnings=list(self.warnings) if warnings is None else warnings,
            resumed_from=Lineage(run_id=parent, checkpoint=self.meta.resume_from)
            if parent
            else None,
            inputs=list(self.meta.inputs),
        )


def resolve_inputs(m: Manifest, workspace_registry: str | None = None) -> tuple[ResolvedInput, ...]:
    """tau.yaml's data inputs as exact versions, from the researcher's registry (TAU_REGISTRY,
    else the local one), else from the workspace's registry: what the run reads even if an
    alias moves later."""
    if not m.data.inputs:
        return ()
    from taugrid.api.data import parse_ref
    from taugrid.data.store import default_store, open_store

    store = default_store()
    out = []
    for inp in m.data.inputs:
        ref = parse_ref(inp.ref)
        try:
            rec = store.resolve(inp.kind, ref)
        except TauError:
            if not workspace_registry or workspace_registry == store.url:
                raise
            rec = open_store(workspace_registry).resolve(inp.kind, ref)
        out.append(
            ResolvedInput(
                kind=inp.kind,
                name=rec.name,
                version=rec.version,
                path=inp.path or rec.name,
                ref=inp.ref,
            )
        )
    return tuple(out)


def publish_inputs(prepared: PreparedRun, say: Callable[[str], None]) -> None:
    """Put each input version into the workspace's registry (where the run reads it at
    /data/registry) when it is not there yet: only the files it lacks, the record last. A
    workspace that declares no registry reads what its volume holds (the run checks it)."""
    publish(prepared.resolved.workspace, prepared.meta.inputs, say)


def publish(
    workspace: WorkspaceRef, inputs: Sequence[ResolvedInput], say: Callable[[str], None]
) -> None:
    """The versions a workload reads (a run's inputs, a service's model), copied into its
    workspace's registry before anything is sent; on a MultiKueue manager also into the same
    workspace's registry on each worker (the one that runs it reads its own)."""
    targets = workspace.registries()
    if not targets or not inputs:
        return
    from taugrid.data.store import default_store, open_store

    source = default_store()
    for target in targets:
        dest = open_store(target, create=True)  # a copy makes its place
        if source.url == dest.url:
            continue
        workers = [w for w, r in (workspace.workerRegistries or {}).items() if r == target]
        where = (
            f"registry on worker {', '.join(workers)}"
            if workers and target != workspace.registry
            else "registry"
        )
        for inp in inputs:
            if dest.has_version(inp.kind, inp.name, inp.version):
                continue
            rec = source.read(inp.kind, inp.name, inp.version)
            say(
                f"copying {inp.kind} {inp.name}@{rec.short} ({len(rec.files)} file(s), "
                f"{rec.size} bytes) to workspace {workspace.name}'s {where} {target} ..."
            )
            source.copy_to(rec, dest)


def check_run_id(run_id: str) -> str:
    if not naming.is_run_id(run_id):
        raise TauError(
            f"--run-id {run_id!r} must be a DNS-1035 label of at most "
            f"{naming.RUN_ID_LIMIT} characters (lowercase letters, digits, '-'; a letter first)"
        )
    return run_id


def prepare(
    request: RunRequest,
    snapshot: ProfileSnapshot,
    *,
    include_helper: bool = True,
    submitter: str | None = None,
) -> PreparedRun:
    """Resolve, name and snapshot one run against a platform's profiles (no I/O but reading
    the code folder and its git revision)."""
    m = request.loaded.manifest
    resolved = resolve(m, snapshot, workspace=request.workspace, profile=request.profile)
    run_id = check_run_id(request.run_id) if request.run_id else naming.new_run_id(m.run_id_stem)
    meta = RunMeta(
        run_id=run_id,
        submitter=submitter or provenance.submitter(),
        code_revision=provenance.code_revision(request.loaded.folder),
        resume_from=request.resume_from,
        inputs=request.inputs
        if request.inputs is not None
        else resolve_inputs(m, resolved.workspace.registry),
    )
    bundle = collect(request.loaded.folder, include_helper=include_helper)
    return PreparedRun(request=request, resolved=resolved, meta=meta, bundle=bundle)
