"""The Pulumi engine, driven through the Automation API with inline programs.

An inline program needs no Python language host (none is served here, and platform engineers
elsewhere may use their normal `pulumi up`: the program is the same `infra.program.build`). The
engine is found on PATH, or where `make pulumi` builds it. Everything is offline: no automatic
plugin downloads (the Kubernetes provider must be on PATH next to the CLI), a passphrase secrets
provider, and a `file://` backend under TAU_HOME unless PULUMI_BACKEND_URL names another
(`azblob://...`, `s3://...`, Pulumi Cloud).
"""

from __future__ import annotations

import json
import os
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


def backend_url() -> str:
    return os.environ.get("PULUMI_BACKEND_URL") or (tau_home() / "pulumi" / "state").as_uri()


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


def engine_env(bin_dir: Path) -> dict[str, str]:
    """The environment of every engine process: offline, found plugins, a local backend."""
    url = backend_url()
    if url.startswith("file://"):
        Path(url.removeprefix("file://")).mkdir(parents=True, exist_ok=True)
    env = {
        "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
        "PULUMI_HOME": os.environ.get("PULUMI_HOME") or str(tau_home() / "pulumi" / "home"),
        "PULUMI_BACKEND_URL": url,
        "PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION": "true",
        "PULUMI_SKIP_UPDATE_CHECK": "true",
        "PULUMI_AUTOMATION_API_SKIP_VERSION_CHECK": "true",
    }
    if "PULUMI_CONFIG_PASSPHRASE" not in os.environ and "PULUMI_CONFIG_PASSPHRASE_FILE" not in (
        os.environ
    ):
        if not url.startswith("file://"):
            raise TauError(
                f"the backend {url} needs a secrets passphrase: set PULUMI_CONFIG_PASSPHRASE "
                "(or PULUMI_CONFIG_PASSPHRASE_FILE)",
                exit_code=EXIT_PLATFORM,
            )
        env["PULUMI_CONFIG_PASSPHRASE"] = ""  # a local backend under TAU_HOME: no shared secrets
    return env


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

    def changed(self) -> bool:
        return any(v for k, v in self.summary.items() if k not in ("same", "refresh"))

    def doc(self) -> dict[str, Any]:
        return {"stack": self.stack, "operation": self.operation, "changes": self.summary,
                "steps": self.steps, "seconds": round(self.seconds, 2),
                **({"outputs": self.outputs} if self.outputs else {})}  # fmt: skip


class Engine:
    """One stack of project `taugrid` (or another), its program inline."""

    def __init__(self, stack: str, program: Callable[[], None], project: str = PROJECT,
                 env: Mapping[str, str] | None = None) -> None:  # fmt: skip
        try:
            import pulumi  # noqa: F401
            from pulumi import automation  # noqa: F401
        except ImportError as e:
            raise missing_extra("platform", f"Pulumi ({e.name})") from None
        self.stack_name, self.program, self.project = stack, program, project
        self.bin = find_bin()
        self.env = {**engine_env(self.bin), **(env or {})}
        self._stack: Stack | None = None

    def _options(self) -> dict[str, Any]:
        """What both a LocalWorkspace and LocalWorkspaceOptions take: one project, offline."""
        from pulumi import automation as auto

        work = tau_home() / "pulumi" / "work" / self.project
        work.mkdir(parents=True, exist_ok=True)
        return {
            "work_dir": str(work),
            "pulumi_home": self.env["PULUMI_HOME"],
            "env_vars": self.env,
            "pulumi_command": auto.PulumiCommand(
                root=str(self.bin.parent), skip_version_check=True
            ),
            "project_settings": auto.ProjectSettings(
                name=self.project,
                runtime="python",
                backend=auto.ProjectBackend(url=self.env["PULUMI_BACKEND_URL"]),
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
                        secrets_provider="passphrase", **self._options()
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
    def preview(self, say: Say | None = None, policy_packs: list[str] | None = None,
                refresh: bool = False) -> Outcome:  # fmt: skip
        """What `up` would change; with `refresh`, against the cluster as it is now (objects
        changed or deleted out of band), not as the state last recorded it."""
        return self._run("preview", say, policy_packs, refresh)

    def up(self, say: Say | None = None, policy_packs: list[str] | None = None,
           refresh: bool = False) -> Outcome:  # fmt: skip
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

    def _run(self, op: str, say: Say | None, policy_packs: list[str] | None,
             refresh: bool = False) -> Outcome:  # fmt: skip
        st = self.stack()
        steps: list[dict[str, Any]] = []
        log: list[str] = []
        t0 = time.monotonic()

        started: dict[str, float] = {}

        def on_event(ev: Any) -> None:
            _step(ev, steps, say, op, started)

        kwargs: dict[str, Any] = {"on_event": on_event, "on_output": log.append,
                                  "color": "never"}  # fmt: skip
        if policy_packs:
            kwargs["policy_packs"] = [policy_launcher(p) for p in policy_packs]
        if refresh:
            kwargs["refresh"] = True
        with _environ(self.env), _engine_errors(self, log, steps):
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
        for k in SUMMARY_KEYS:
            summary.setdefault(k, 0)
        return Outcome(self.stack_name, op, summary, steps, time.monotonic() - t0, outputs)


def _step(ev: Any, steps: list[dict[str, Any]], say: Say | None, op: str,
          started: dict[str, float]) -> None:  # fmt: skip
    """One resource's outcome (and what it changes) from the engine's event stream."""
    pre = getattr(ev, "resource_pre_event", None)
    done = getattr(ev, "res_outputs_event", None)
    diag = getattr(ev, "diagnostic_event", None)
    policy = getattr(ev, "policy_event", None)
    if pre is not None:
        meta = pre.metadata
        started[meta.urn] = time.monotonic()
        if op == "preview" and str(meta.op.value) not in ("same", "refresh"):  # reads: no change
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
        if str(meta.op.value) != "same":
            took = time.monotonic() - started.get(meta.urn, time.monotonic())
            steps.append({**_meta(meta), "seconds": round(took, 2)})
            if say:
                say(f"  {meta.op.value:<8} {meta.type} {meta.urn.rsplit('::', 1)[-1]} "
                    f"({took:.1f}s)")  # fmt: skip
    elif diag is not None and diag.severity == "error" and say:
        say(f"  error: {diag.message.strip()}")
    elif policy is not None:
        # the engine's message is the policy's description, then the violation
        said = [ln.strip() for ln in policy.message.splitlines() if ln.strip()]
        steps.append({"policy": policy.policy_name, "pack": policy.policy_pack_name,
                      "enforcement": policy.enforcement_level, "message": said[-1] if said else "",
                      "urn": policy.resource_urn})  # fmt: skip
        if say:
            say(f"  policy {policy.enforcement_level}: {policy.policy_name}: "
                f"{said[-1] if said else ''}")  # fmt: skip


def _meta(meta: Any) -> dict[str, Any]:
    """A step: what it does to which resource and, for an update, each changed input field
    with its old and new value (the engine's own `diffs` are often empty)."""
    out: dict[str, Any] = {"op": str(meta.op.value), "type": meta.type, "urn": meta.urn,
                           "name": meta.urn.rsplit("::", 1)[-1], "diffs": list(meta.diffs or [])}  # fmt: skip
    if out["op"] in ("update", "replace", "create-replacement"):
        changes = changed_fields(getattr(getattr(meta, "old", None), "inputs", None),
                                 getattr(getattr(meta, "new", None), "inputs", None))  # fmt: skip
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
    changes = changed_fields(getattr(getattr(meta, "old", None), "inputs", None),
                             getattr(meta.new, "inputs", None))  # fmt: skip
    if changes or str(meta.op.value) == "update":
        return {**base, "drift": "changed", "changes": changes}
    return None


def changed_fields(old: Any, new: Any) -> list[dict[str, Any]]:
    """The input fields that differ between two states, by path (list items by name)."""
    from taugrid.infra.plan import _field, flatten

    fo, fn = flatten(dict(old or {})), flatten(dict(new or {}))
    return [{"field": _field(p), "old": fo.get(p), "new": fn.get(p)}
            for p in sorted(set(fo) | set(fn))
            if fo.get(p) != fn.get(p) and not any(part.startswith("__") for part in p)]  # fmt: skip


def _value(v: Any) -> str:
    return "(absent)" if v is None else json.dumps(v) if isinstance(v, str) else str(v)


@contextmanager
def _engine_errors(engine: Engine, log: list[str] | None = None,
                   steps: list[dict[str, Any]] | None = None) -> Iterator[None]:  # fmt: skip
    """The engine's failures as TauError (exit 4) with its own words, never a traceback."""
    from pulumi.automation import errors as auto_errors  # the platform extra: checked in Engine

    try:
        yield
    except auto_errors.CommandError as e:
        mandatory = [st for st in steps or [] if st.get("enforcement") == "mandatory"]
        if mandatory:
            lines = [f"{st['policy']}: {st['message']} ({st['urn'].rsplit('::', 1)[-1]})"
                     if st.get("urn") else f"{st['policy']}: {st['message']}"
                     for st in mandatory]  # fmt: skip
            raise TauError(
                f"stack {engine.stack_name}: {len(lines)} mandatory policy violation(s), nothing "
                "was changed:\n  " + "\n  ".join(dict.fromkeys(lines)),
                exit_code=EXIT_PLATFORM,
                hint="fix the stack config, or (for a test) skip the checks with --no-policies",
            ) from None
        raise TauError(_command_message(engine, str(e), log), exit_code=EXIT_PLATFORM) from None
    except FileNotFoundError as e:
        raise TauError(f"{NOT_FOUND}: {e}", exit_code=EXIT_PLATFORM) from None


def _command_message(engine: Engine, text: str, log: list[str] | None) -> str:
    lines = [ln.strip() for ln in text.splitlines()]
    errors = [ln for ln in lines if ln.startswith("error:") or "error:" in ln]
    policy = [ln for ln in (log or []) if "mandatory" in ln.lower()]
    picked = list(dict.fromkeys([*policy, *errors]))[:8] or [ln for ln in lines if ln][-5:]
    return f"pulumi ({engine.stack_name}): " + "\n  ".join(picked)
