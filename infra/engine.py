"""The Pulumi engine, driven through the Automation API with inline programs.

An inline program needs no Python language host (none is served here, and platform engineers
elsewhere may use their normal `pulumi up`: the program is the same `infra.program.build`). The
engine is found on PATH, or where `make pulumi` builds it. Everything is offline: no automatic
plugin downloads (the Kubernetes provider must be on PATH next to the CLI).

One state with `pulumi`: the backend is the one `pulumi` would use (PULUMI_BACKEND_URL, the
project file's `backend.url`, the CLI's login; none: refused, but for the sandbox), and a
project's stack runs in the project's folder, so its stack file (config, `encryptionsalt`,
`secretsprovider`) is the one `pulumi` reads, with the passphrase from the same variables.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from taugrid.api.errors import EXIT_PLATFORM, TauError, missing_extra
from taugrid.api.home import tau_home

if TYPE_CHECKING:
    from pulumi.automation import Stack

CACHE_ENV = "TAUGRID_PULUMI_CACHE"
BIN_ENV = "TAU_PULUMI_BIN"  # a folder with `pulumi` and its plugins, before anything else
PROJECT = "taugrid"
# Pulumi's own change-summary keys, always present in what tau prints (0 when none)
SUMMARY_KEYS = ("create", "update", "replace", "delete", "same")
NOT_FOUND = "no Pulumi CLI found (looked in $TAU_PULUMI_BIN, the `make pulumi` cache and PATH)"
Say = Callable[[str], None]


def cache_dir() -> Path:
    return Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "taugrid" / "pulumi")


def find_bin() -> Path:
    """The folder of the `pulumi` CLI to use (TauError, exit 4, when there is none)."""
    candidates = [os.environ.get(BIN_ENV), str(cache_dir() / "current" / "bin")]
    for c in candidates:
        if c and (Path(c) / "pulumi").is_file() and os.access(Path(c) / "pulumi", os.X_OK):
            return Path(c)
    on_path = shutil.which("pulumi")
    if on_path:
        return Path(on_path).resolve().parent
    raise TauError(
        NOT_FOUND,
        exit_code=EXIT_PLATFORM,
        hint="install Pulumi (https://www.pulumi.com/docs/install/), or build it from Go modules "
        "with `make pulumi` (about 30 minutes cold on 2 cores)",
    )


LOCAL_STACKS = ("sandbox",)  # stacks of this machine only: tau's own local backend if no other
PASSPHRASE_VARS = ("PULUMI_CONFIG_PASSPHRASE", "PULUMI_CONFIG_PASSPHRASE_FILE")
NO_BACKEND_HINT = (
    "log in as `pulumi` does, to the team's backend (`pulumi login azblob://<container>`, "
    "`s3://<bucket>`, `https://api.pulumi.com`) or to a folder (`pulumi login file://~/pulumi-"
    "state`), or set PULUMI_BACKEND_URL"
)


@dataclass(frozen=True)
class Backend:
    """Where a stack's state is kept, and why there: the same choice `pulumi` makes."""

    url: str
    source: str  # "PULUMI_BACKEND_URL", "<project file>", "pulumi login", or tau's own
    local: bool = False  # tau's own file backend under TAU_HOME (the sandbox, nothing else)

    def line(self) -> str:
        return f"backend {self.url} ({self.source})"

    @property
    def service(self) -> bool:
        """Pulumi Cloud (or a self-hosted service): it keeps secrets itself by default."""
        return self.url.startswith(("https://", "http://"))


def pulumi_home() -> Path:
    """The Pulumi CLI's own home (credentials of `pulumi login`, plugins): shared, not tau's."""
    return Path(os.environ.get("PULUMI_HOME") or Path.home() / ".pulumi")


def local_backend_url() -> str:
    return (tau_home() / "pulumi" / "state").as_uri()


def choose_backend(project_dir: Path | None = None, stack: str | None = None) -> Backend:
    """The backend `pulumi` would use for this project: PULUMI_BACKEND_URL, else the project
    file's `backend.url`, else the CLI's current login. With none, the sandbox's stack (this
    machine's own) uses tau's local backend; any other stack is refused rather than given a
    private state that `pulumi` and the rest of the team would not see."""
    env = os.environ.get("PULUMI_BACKEND_URL")
    if env:
        return Backend(env, "PULUMI_BACKEND_URL")
    if project_dir is not None:
        from taugrid.infra.stackfile import project_backend

        found = project_backend(project_dir)
        if found:
            return Backend(found[1], f"backend.url in {found[0]}")
    current = _logged_in()
    if current:
        return Backend(current, f"pulumi login, {pulumi_home() / 'credentials.json'}")
    if stack in LOCAL_STACKS:
        return Backend(
            local_backend_url(), "tau's local backend for the sandbox: no pulumi login", local=True
        )
    raise TauError(
        "no Pulumi backend: `pulumi` is not logged in and PULUMI_BACKEND_URL is not set. tau "
        "keeps a stack where `pulumi` keeps it, so that both (and everyone on the team) see one "
        "state; it does not make a private one",
        exit_code=EXIT_PLATFORM,
        hint=NO_BACKEND_HINT,
    )


def _logged_in() -> str | None:
    path = pulumi_home() / "credentials.json"
    try:
        current = json.loads(path.read_text()).get("current")
    except (OSError, ValueError, AttributeError):
        return None
    return current if isinstance(current, str) and current else None


def backend_url() -> str:
    """The backend of tau's own stacks (a run's stack, CI clusters): the one `pulumi` uses."""
    return choose_backend().url


def policy_launcher(pack_dir: str) -> str:
    """An executable that starts the Python policy pack in `pack_dir`. The engine launches an
    executable policy pack directly (it needs no Python language host, which is not served
    here): it runs the pack's `__main__.py` with this interpreter, which serves the analyzer and
    prints its port. Its folder also holds the pack's PulumiPolicy.yaml (name, version)."""
    import hashlib

    src = Path(pack_dir).resolve()
    meta = src / "PulumiPolicy.yaml"
    key = hashlib.sha256(f"{src}:{sys.executable}".encode()).hexdigest()[:12]
    folder = tau_home() / "pulumi" / "packs" / f"{src.name}-{key}"
    script = folder / src.name
    text = (
        "#!/bin/sh\n"
        "# a Python CrossGuard policy pack, started by the Pulumi engine as an executable pack\n"
        f'cd "{src}" && exec "{sys.executable}" -u __main__.py\n'
    )
    folder.mkdir(parents=True, exist_ok=True)
    if meta.is_file():
        (folder / meta.name).write_bytes(meta.read_bytes())
    if not script.is_file() or script.read_text() != text:
        tmp = script.with_suffix(".tmp")
        tmp.write_text(text)
        tmp.chmod(0o755)
        tmp.replace(script)
    return str(script)


def engine_env(
    bin_dir: Path, backend: Backend | None = None, secrets: Secrets | None = None
) -> dict[str, str]:
    """The environment of every engine process: offline, found plugins, the chosen backend,
    and a passphrase only where tau may choose it (see `Secrets`). PULUMI_HOME stays the
    CLI's own (its login and credentials)."""
    backend = backend or choose_backend()
    if backend.local:
        Path(backend.url.removeprefix("file://")).mkdir(parents=True, exist_ok=True)
    elif backend.url.startswith("file://"):
        folder = Path(backend.url.removeprefix("file://").split("?", 1)[0]).expanduser()
        if not folder.is_dir():
            raise TauError(
                f"the backend folder {folder} does not exist ({backend.line()})",
                exit_code=EXIT_PLATFORM,
                hint=f"create it (mkdir -p {folder}), as `pulumi login` needs too",
            )
    env = {
        "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
        "PULUMI_BACKEND_URL": backend.url,
        "PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION": "true",
        "PULUMI_SKIP_UPDATE_CHECK": "true",
        "PULUMI_AUTOMATION_API_SKIP_VERSION_CHECK": "true",
    }
    if not any(v in os.environ for v in PASSPHRASE_VARS):
        secrets = secrets or Secrets(None, None, None)
        if secrets.needs_passphrase(backend):
            if not (backend.local or secrets.tau_own):
                raise TauError(
                    secrets.missing(backend), exit_code=EXIT_PLATFORM, hint=PASSPHRASE_HINT
                )
            env["PULUMI_CONFIG_PASSPHRASE"] = ""  # tau's own stacks hold no secrets
    return env


PASSPHRASE_HINT = (
    "export PULUMI_CONFIG_PASSPHRASE (or PULUMI_CONFIG_PASSPHRASE_FILE) with the passphrase "
    "the stack was created with, as for `pulumi`"
)


@dataclass(frozen=True)
class Secrets:
    """How a stack's secrets are kept, from its stack file (`secretsprovider`,
    `encryptionsalt`): what `pulumi` reads too. `tau_own`: a stack only tau makes (a run's,
    a CI cluster's) in tau's work folder, which holds no secrets."""

    stack: str | None
    file: Path | None
    provider: str | None
    salt: bool = False
    tau_own: bool = False

    @classmethod
    def of(cls, stack: str, stack_file: Path | None) -> Secrets:
        from taugrid.infra.stackfile import secrets_settings

        provider, salt = secrets_settings(stack_file) if stack_file else (None, False)
        return cls(stack, stack_file, provider, salt)

    def needs_passphrase(self, backend: Backend) -> bool:
        if self.provider:
            return self.provider.startswith("passphrase")
        return self.salt or not backend.service

    def create_with(self, backend: Backend) -> str | None:
        """The secrets provider a new stack is created with (None: the service's own)."""
        return self.provider or (None if backend.service else "passphrase")

    def missing(self, backend: Backend) -> str:
        where = f" (encryptionsalt in {self.file})" if self.salt and self.file else ""
        return (
            f"stack {self.stack} keeps its secrets with a passphrase{where}, and neither "
            f"PULUMI_CONFIG_PASSPHRASE nor PULUMI_CONFIG_PASSPHRASE_FILE is set ("
            f"{backend.line()})"
        )


@contextmanager
def _environ(values: Mapping[str, str]) -> Iterator[None]:
    """The inline program runs in this process: it sees the same environment as the engine."""
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@dataclass
class Outcome:
    """What one preview/up/destroy did: the engine's summary and each resource that changed."""

    stack: str
    operation: str
    summary: dict[str, int]
    steps: list[dict[str, Any]] = field(default_factory=list)
    seconds: float = 0.0
    outputs: dict[str, Any] = field(default_factory=dict)
    backend: str | None = None

    def changed(self) -> bool:
        return any(v for k, v in self.summary.items() if k not in ("same", "refresh"))

    def doc(self) -> dict[str, Any]:
        return {
            "stack": self.stack,
            "operation": self.operation,
            "backend": self.backend,
            "changes": self.summary,
            "steps": self.steps,
            "seconds": round(self.seconds, 2),
            **({"outputs": self.outputs} if self.outputs else {}),
        }


class Engine:
    """One stack of project `taugrid` (or another), its program inline."""

    def __init__(
        self,
        stack: str,
        program: Callable[[], None],
        project: str = PROJECT,
        env: Mapping[str, str] | None = None,
        *,
        project_dir: Path | None = None,
        stack_file: Path | None = None,
        backend: str | None = None,
        tau_own: bool = False,
        preflight: Callable[[Engine], None] | None = None,
    ) -> None:
        """`project_dir`: the Pulumi project the stack belongs to (its Pulumi.yaml, and
        `stack_file` in its stackConfigDir): the engine works there, as `pulumi` does, so both
        read and write the same stack file (its `encryptionsalt`, its config). None: a stack
        only tau makes (a run's, a CI cluster's), kept in tau's own work folder. `backend`: a
        backend recorded earlier (a run's stack is destroyed where it was made)."""
        try:
            import pulumi  # noqa: F401
            from pulumi import automation  # noqa: F401
        except ImportError as e:
            raise missing_extra("platform", f"Pulumi ({e.name})") from None
        self.stack_name, self.program, self.project = stack, program, project
        self.backend = (
            Backend(backend, "recorded with the run")
            if backend
            else choose_backend(project_dir, stack)
        )
        # tau's local backend is this machine's alone (the sandbox without a login): its stack
        # stays in tau's work folder, and nothing (no encryptionsalt) is written into the project
        self.project_dir = None if self.backend.local else project_dir
        self.secrets = dataclasses.replace(Secrets.of(stack, stack_file), tau_own=tau_own)
        self.bin = find_bin()
        self.env = {**engine_env(self.bin, self.backend, self.secrets), **(env or {})}
        self._stack: Stack | None = None
        self.preflight = preflight  # checked before a preview or up touches the stack

    def where(self) -> str:
        """Said first by every command: which backend, and which project folder."""
        folder = str(self.project_dir) if self.project_dir else "tau's work folder"
        return f"stack {self.stack_name}: {self.backend.line()}; project {folder}"

    def _options(self) -> dict[str, Any]:
        """What both a LocalWorkspace and LocalWorkspaceOptions take: the project's folder
        (its own Pulumi.yaml and stack files, as `pulumi` reads them), else tau's work folder
        with project settings of its own; offline."""
        from pulumi import automation as auto

        common: dict[str, Any] = {
            "env_vars": self.env,
            "pulumi_command": auto.PulumiCommand(
                root=str(self.bin.parent), skip_version_check=True
            ),
        }
        if self.project_dir is not None:
            return {"work_dir": str(self.project_dir), **common}
        work = tau_home() / "pulumi" / "work" / self.project
        work.mkdir(parents=True, exist_ok=True)
        return {
            "work_dir": str(work),
            **common,
            "project_settings": auto.ProjectSettings(
                name=self.project,
                runtime="python",
                backend=auto.ProjectBackend(url=self.backend.url),
            ),
        }

    def stack(self) -> Stack:
        """The stack, created on first use (select or create)."""
        if self._stack is None:
            from pulumi import automation as auto

            with _environ(self.env), _engine_errors(self):
                self._stack = auto.create_or_select_stack(
                    stack_name=self.stack_name,
                    project_name=self.project,
                    program=self.program,
                    opts=auto.LocalWorkspaceOptions(
                        secrets_provider=self.secrets.create_with(self.backend), **self._options()
                    ),
                )
        return self._stack

    def list_stacks(self) -> list[str]:
        """The names of this project's stacks in the backend (nothing is created)."""
        from pulumi import automation as auto

        with _environ(self.env), _engine_errors(self):
            return [s.name for s in auto.LocalWorkspace(**self._options()).list_stacks()]

    def set_tags(self, tags: Mapping[str, str]) -> None:
        """Stack tags (kept by the backend, so `ci reap` elsewhere sees them)."""
        st = self.stack()
        with _environ(self.env), _engine_errors(self):
            for k, v in tags.items():
                st.workspace.set_tag(self.stack_name, k, v)

    def tags(self) -> dict[str, str]:
        st = self.stack()
        with _environ(self.env), _engine_errors(self):
            return dict(st.workspace.list_tags(self.stack_name))

    # --- operations ------------------------------------------------------------------------------
    def preview(
        self, say: Say | None = None, policy_packs: list[str] | None = None, refresh: bool = False
    ) -> Outcome:
        """What `up` would change; with `refresh`, against the cluster as it is now (objects
        changed or deleted out of band), not as the state last recorded it."""
        return self._run("preview", say, policy_packs, refresh)

    def up(
        self, say: Say | None = None, policy_packs: list[str] | None = None, refresh: bool = False
    ) -> Outcome:
        return self._run("up", say, policy_packs, refresh)

    def refresh(self, say: Say | None = None) -> Outcome:
        """Read every resource of the stack from the cluster into its state: the drift (each
        object that differs or is gone) is what it reports."""
        return self._run("refresh", say, None)

    def destroy(self, say: Say | None = None) -> Outcome:
        return self._run("destroy", say, None)

    def remove(self) -> None:
        st = self.stack()
        with _environ(self.env), _engine_errors(self):
            st.workspace.remove_stack(self.stack_name)
        self._stack = None

    def _run(
        self, op: str, say: Say | None, policy_packs: list[str] | None, refresh: bool = False
    ) -> Outcome:
        if self.preflight is not None and op in ("preview", "up"):
            self.preflight(self)
        st = self.stack()
        steps: list[dict[str, Any]] = []
        log: list[str] = []
        t0 = time.monotonic()
        if say is not None:
            say(
                f"{op} of stack {self.stack_name}"
                f"{' (reading the cluster first)' if refresh else ''} ..."
            )

        started: dict[str, float] = {}
        errors: list[str] = []

        def on_event(ev: Any) -> None:
            _step(ev, steps, say, op, started, errors)

        kwargs: dict[str, Any] = {"on_event": on_event, "on_output": log.append, "color": "never"}
        if policy_packs:
            kwargs["policy_packs"] = [policy_launcher(p) for p in policy_packs]
        if refresh:
            kwargs["refresh"] = True
        with _environ(self.env), _engine_errors(self, log, steps, errors):
            if op == "preview":
                res: Any = st.preview(diff=False, **kwargs)
                summary = dict(res.change_summary)
                outputs: dict[str, Any] = {}
            elif op == "up":
                res = st.up(**kwargs)
                summary = dict(res.summary.resource_changes or {})
                outputs = {k: (None if v.secret else v.value) for k, v in res.outputs.items()}
            elif op == "refresh":
                res = st.refresh(**kwargs)
                summary = dict(res.summary.resource_changes or {})
                outputs = {}
            else:
                kwargs.pop("policy_packs", None)
                res = st.destroy(**kwargs)
                summary = dict(res.summary.resource_changes or {})
                outputs = {}
        summary = {str(k): int(v) for k, v in summary.items()}
        if op != "refresh":
            summary.pop("refresh", None)  # resources read from the cluster, not changes
        summary.pop("read", None)  # a live object the program reads (a worker's token): no change
        for k in SUMMARY_KEYS:
            summary.setdefault(k, 0)
        return Outcome(
            self.stack_name, op, summary, steps, time.monotonic() - t0, outputs, self.backend.url
        )


# what a step can be without changing anything: reads of other stacks and live objects
NO_CHANGE = ("same", "refresh", "read")
# the engine's wrappers of a program's error; the last is gRPC's, when the program raised while
# the engine called it back (seen under load in CI: the error said a second time behind it)
UNHANDLED = ("an unhandled error occurred:", "error:", "Exception calling application:")
UNKNOWN_STACK = re.compile(r'unknown stack "([^"]+)"')
# what the engine adds after the error itself
GENERIC = {
    *(f"{op} failed" for op in ("preview", "update", "refresh", "destroy")),
    "resource monitor has terminated, shutting down",
}


def _step(
    ev: Any,
    steps: list[dict[str, Any]],
    say: Say | None,
    op: str,
    started: dict[str, float],
    errors: list[str],
) -> None:
    """One resource's outcome (and what it changes) from the engine's event stream; each
    distinct error the engine or the program reports, once (`errors`)."""
    pre = getattr(ev, "resource_pre_event", None)
    done = getattr(ev, "res_outputs_event", None)
    diag = getattr(ev, "diagnostic_event", None)
    policy = getattr(ev, "policy_event", None)
    if pre is not None:
        meta = pre.metadata
        started[meta.urn] = time.monotonic()
        if op == "preview" and str(meta.op.value) not in NO_CHANGE:
            step = _meta(meta)
            steps.append(step)
            if say:
                say(f"  {meta.op.value:<8} {meta.type} {meta.urn.rsplit('::', 1)[-1]}")
                for c in step.get("changes") or []:
                    say(f"      {c['field']}: {_value(c['old'])} => {_value(c['new'])}")
    elif done is not None and op == "refresh":  # drift: what the cluster has differs, or is gone
        drift = _drift(done.metadata)
        if drift is not None:
            steps.append(drift)
            if say:
                say(f"  drift: {drift['drift']:<8} {drift['type']} {drift['name']}")
                for c in drift.get("changes") or []:
                    say(f"      {c['field']}: {_value(c['old'])} => {_value(c['new'])}")
    elif done is not None and op != "preview":  # a preview reports each resource twice
        meta = done.metadata
        if str(meta.op.value) not in NO_CHANGE:
            took = time.monotonic() - started.get(meta.urn, time.monotonic())
            steps.append({**_meta(meta), "seconds": round(took, 2)})
            if say:
                say(
                    f"  {meta.op.value:<8} {meta.type} {meta.urn.rsplit('::', 1)[-1]} ({took:.1f}s)"
                )
    elif diag is not None and diag.severity == "error":
        error = program_error(diag.message)
        if error and error not in errors:
            errors.append(error)
            if say:
                say(f"  error: {error}")
    elif policy is not None:
        _policy(policy, steps, say)


def _policy(policy: Any, steps: list[dict[str, Any]], say: Say | None) -> None:
    """A policy's finding: the engine's message is the policy's description, then the
    violation."""
    said = [ln.strip() for ln in policy.message.splitlines() if ln.strip()]
    steps.append(
        {
            "policy": policy.policy_name,
            "pack": policy.policy_pack_name,
            "enforcement": policy.enforcement_level,
            "message": said[-1] if said else "",
            "urn": policy.resource_urn,
        }
    )
    if say:
        say(
            f"  policy {policy.enforcement_level}: {policy.policy_name}: {said[-1] if said else ''}"
        )


def _meta(meta: Any) -> dict[str, Any]:
    """A step: what it does to which resource and, for an update, each changed input field
    with its old and new value (the engine's own `diffs` are often empty)."""
    out: dict[str, Any] = {
        "op": str(meta.op.value),
        "type": meta.type,
        "urn": meta.urn,
        "name": meta.urn.rsplit("::", 1)[-1],
        "diffs": list(meta.diffs or []),
    }
    if out["op"] in ("update", "replace", "create-replacement"):
        changes = changed_fields(
            getattr(getattr(meta, "old", None), "inputs", None),
            getattr(getattr(meta, "new", None), "inputs", None),
        )
        out["changes"] = changes
        out["diffs"] = out["diffs"] or sorted(
            {c["field"].split(".")[0].split("[")[0] for c in changes}
        )
    return out


def _drift(meta: Any) -> dict[str, Any] | None:
    """A refreshed resource that is gone from the cluster or whose inputs differ there (None:
    as the state has it)."""
    base = {
        "op": "refresh",
        "type": meta.type,
        "urn": meta.urn,
        "name": meta.urn.rsplit("::", 1)[-1],
    }
    if str(meta.op.value) == "delete" or getattr(meta, "new", None) is None:
        return {**base, "drift": "gone"}
    changes = changed_fields(
        getattr(getattr(meta, "old", None), "inputs", None), getattr(meta.new, "inputs", None)
    )
    if changes or str(meta.op.value) == "update":
        return {**base, "drift": "changed", "changes": changes}
    return None


def changed_fields(old: Any, new: Any) -> list[dict[str, Any]]:
    """The input fields that differ between two states, by path (list items by name)."""
    from taugrid.infra.plan import _field, flatten

    fo, fn = flatten(dict(old or {})), flatten(dict(new or {}))
    return [
        {"field": _field(p), "old": fo.get(p), "new": fn.get(p)}
        for p in sorted(set(fo) | set(fn))
        if fo.get(p) != fn.get(p) and not any(part.startswith("__") for part in p)
    ]


def _value(v: Any) -> str:
    return "(absent)" if v is None else json.dumps(v) if isinstance(v, str) else str(v)


def program_error(message: str) -> str:
    """One error as the engine reports it, without the wrappers it repeats it in (the same
    program error comes as itself and as "an unhandled error occurred: ...")."""
    text = message.strip()
    for wrapper in UNHANDLED:
        if text.startswith(wrapper):
            text = text[len(wrapper) :].strip()
    return "" if text.lower().rstrip(".") in GENERIC else text


@contextmanager
def _engine_errors(
    engine: Engine,
    log: list[str] | None = None,
    steps: list[dict[str, Any]] | None = None,
    errors: list[str] | None = None,
) -> Iterator[None]:
    """The engine's failures as TauError (exit 4) with its own words, never a traceback."""
    from pulumi.automation import errors as auto_errors  # the platform extra: checked in Engine

    try:
        yield
    except auto_errors.CommandError as e:
        mandatory = [st for st in steps or [] if st.get("enforcement") == "mandatory"]
        if mandatory:
            lines = [
                f"{st['policy']}: {st['message']} ({st['urn'].rsplit('::', 1)[-1]})"
                if st.get("urn")
                else f"{st['policy']}: {st['message']}"
                for st in mandatory
            ]
            raise TauError(
                f"stack {engine.stack_name}: {len(lines)} mandatory policy violation(s), nothing "
                "was changed:\n  " + "\n  ".join(dict.fromkeys(lines)),
                exit_code=EXIT_PLATFORM,
                hint="fix the stack config, or (for a test) skip the checks with --no-policies",
            ) from None
        text = str(e)
        if "incorrect passphrase" in text or "passphrase must be set" in text:
            where = (
                f" (its encryptionsalt is in {engine.secrets.file})" if engine.secrets.salt else ""
            )
            raise TauError(
                f"stack {engine.stack_name}: "
                + (
                    "the passphrase is not the one the stack was created with" + where
                    if "incorrect" in text
                    else engine.secrets.missing(engine.backend)
                ),
                exit_code=EXIT_PLATFORM,
                hint=PASSPHRASE_HINT,
            ) from None
        if errors:  # what the engine and the program said, each once and whole
            unknown = [m.group(1) for e in errors if (m := UNKNOWN_STACK.search(e))]
            raise TauError(
                f"stack {engine.stack_name}: " + "\n".join(errors),
                exit_code=EXIT_PLATFORM,
                hint=(
                    f"{' and '.join(dict.fromkeys(unknown))} not in {engine.backend.url}: a "
                    "stack reference (multiCluster.workers) reads a stack of the same backend; "
                    "pulumi up that stack first, or fix the reference"
                    if unknown
                    else None
                ),
            ) from None
        raise TauError(_command_message(engine, text, log), exit_code=EXIT_PLATFORM) from None
    except FileNotFoundError as e:
        raise TauError(f"{NOT_FOUND}: {e}", exit_code=EXIT_PLATFORM) from None


def _command_message(engine: Engine, text: str, log: list[str] | None) -> str:
    lines = [ln.strip() for ln in text.splitlines()]
    errors = [ln for ln in lines if ln.startswith("error:") or "error:" in ln]
    policy = [ln for ln in (log or []) if "mandatory" in ln.lower()]
    picked = list(dict.fromkeys([*policy, *errors]))[:8] or [ln for ln in lines if ln][-5:]
    return f"pulumi ({engine.stack_name}): " + "\n  ".join(picked)
