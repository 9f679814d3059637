"""The pulumi backend: a run's objects as an ephemeral Pulumi stack (`run-<run-id>`).

Everything but the submission is the kube backend's: the run is prepared against the cluster's
own profiles, observed with one LIST per kind, its logs and phases followed the same way. The
stack is tagged with the run id and an expiry, and is destroyed when the run ends (attached),
when it is cancelled, or by `tau run gc` (finished or expired stacks); the evidence stays in
the local record and on the workspace volume.
"""

from __future__ import annotations

import contextlib
import os
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, TextIO

from taugrid.api.errors import TauError
from taugrid.api.evidence import KubeHandle, PulumiHandle, RunRecord, TerminalStateError
from taugrid.api.vocabulary import TERMINAL, Phase
from taugrid.runs.backends.base import Backend, Say, SubmitOptions
from taugrid.runs.backends.kube.backend import KubeBackend
from taugrid.runs.evidence import RunDir

if TYPE_CHECKING:
    from taugrid.infra.engine import Engine
    from taugrid.runs.prepare import PreparedRun

STACK_PREFIX = "run-"
TTL_ENV = "TAU_RUN_STACK_TTL_HOURS"  # when `tau run gc` may destroy a run's stack anyway
DEFAULT_TTL_H = 24.0
TAG_RUN, TAG_EXPIRES = "tau-run-id", "tau-expires"


def _engine(stack: str, program: Any = None, backend: str | None = None) -> Engine:
    """A run's stack: tau's own (no secrets in it), in the backend `pulumi` uses, or the one
    the run recorded when it was made."""
    from taugrid.infra.engine import Engine

    return Engine(stack, program or (lambda: None), backend=backend, tau_own=True)


class PulumiBackend(KubeBackend):
    name = "pulumi"
    shared_helpers = False  # a stack's destroy would delete what other runs mount

    def handle(self, prepared: PreparedRun, sent: bool) -> KubeHandle | PulumiHandle:
        from taugrid.infra.engine import backend_url

        ttl = float(os.environ.get(TTL_ENV) or DEFAULT_TTL_H)
        expires = (datetime.now(UTC) + timedelta(hours=ttl)).isoformat(timespec="seconds")
        return PulumiHandle(
            stack=STACK_PREFIX + prepared.run_id,
            backend_url=backend_url(),
            expires_at=expires,
            namespace=prepared.resolved.namespace,
            context=self.kube.context,
            queue=prepared.resolved.queue,
            sent=sent,
        )

    def send(self, run: RunDir, prepared: PreparedRun | None = None) -> None:
        """`pulumi up` of the run's stack (tagged with the run id and its expiry)."""
        from taugrid.api.yamlio import load_all
        from taugrid.runs.backends.pulumi.program import run_program

        handle = run.read_record().handle
        assert isinstance(handle, PulumiHandle)
        if prepared is not None:
            taurun, objects = (
                prepared.taurun(),
                prepared.objects(shared_helpers=self.shared_helpers),
            )
        else:
            from taugrid.runs.backends.kube.backend import submitting

            taurun, *objects = load_all(submitting(run.path).read_text())
        context, taurun = self.kube.context, self.stamped(taurun)
        eng = _engine(
            handle.stack, lambda: run_program(taurun, objects, context), handle.backend_url
        )
        eng.set_tags({TAG_RUN: run.run_id, TAG_EXPIRES: handle.expires_at or ""})
        self._sent_owner = True  # a stack may hold part of the run from here on
        eng.up()
        uid = None
        with contextlib.suppress(TauError):  # the record names the TauRun the stack made
            made = self.kube.get("TauRun", taurun["metadata"]["name"], handle.namespace)
            uid = ((made or {}).get("metadata") or {}).get("uid")
        run.update_handle(sent=True, uid=uid)

    def start(self, run: RunDir, prepared: PreparedRun, options: SubmitOptions, say: Say) -> None:
        from taugrid.runs.prepare import publish_inputs

        stack = STACK_PREFIX + prepared.run_id
        publish_inputs(prepared, say)
        say(f"stack {stack}: creating the run's objects with the Pulumi engine ...")
        self.send(run, prepared)
        say(
            f"submitted {prepared.run_id} as stack {stack} (namespace "
            f"{prepared.resolved.namespace}, queue {prepared.resolved.queue}); the stack is "
            "destroyed when the run ends"
        )

    def follow(self, run: RunDir, out: TextIO, err: TextIO, *, transitions: bool = True) -> Phase:
        phase = super().follow(run, out, err, transitions=transitions)
        if phase in TERMINAL:
            self.destroy_stack(run.read_record(), err)
        return phase

    def ended_on_its_own(self, run: RunDir) -> Phase | None:
        """A run that ended before the cancel: its stack goes all the same (as when followed)."""
        phase = super().ended_on_its_own(run)
        if phase is not None:
            self.destroy_stack(run.read_record(), None)
        return phase

    def stop(self, run: RunDir) -> str:
        """Destroy the run's stack (its TauRun goes, and with it the workload and the quota)."""
        self.destroy_stack(run.read_record(), None)
        return "cancelled by the user: its stack was destroyed; workload and quota released"

    def destroy_stack(self, rec: RunRecord, err: TextIO | None) -> bool:
        """Destroy and remove the run's stack if it is still there; whether it was."""
        handle = rec.handle
        if not isinstance(handle, PulumiHandle):
            return False
        eng = _engine(handle.stack, backend=handle.backend_url)
        if handle.stack not in eng.list_stacks():
            return False
        eng.destroy()
        eng.remove()
        if err is not None:
            err.write(f"stack {handle.stack} destroyed; the evidence stays in the local record\n")
            err.flush()
        return True


def gc(runs: list[RunDir], say: Say) -> list[str]:
    """Destroy the stacks of runs that ended, and every expired run stack; the stacks removed."""
    from taugrid.runs.status import effective_phase

    gone: list[str] = []
    by_context: dict[str | None, list[tuple[RunDir, PulumiHandle]]] = {}
    for run in runs:
        handle = run.read_record().handle
        if isinstance(handle, PulumiHandle):
            by_context.setdefault(handle.context, []).append((run, handle))
    for context, group in by_context.items():
        backend = PulumiBackend(context)
        with contextlib.suppress(TauError):
            for (run, handle), obs in zip(
                group, backend.observe([r for r, _ in group]), strict=True
            ):
                phase = effective_phase(obs)[0]
                if phase not in TERMINAL:
                    continue
                with contextlib.suppress(TerminalStateError):
                    run.transition(phase, "ended in the cluster")
                if backend.destroy_stack(run.read_record(), None):
                    say(f"destroyed {handle.stack} (the run ended)")
                    gone.append(handle.stack)
    probe = _engine("run-probe")
    now = datetime.now(UTC)
    for stack in probe.list_stacks():
        if not stack.startswith(STACK_PREFIX) or stack in gone:
            continue
        eng = _engine(stack)
        expires = eng.tags().get(TAG_EXPIRES)
        if expires and datetime.fromisoformat(expires) <= now:
            say(f"destroying {stack} (expired {expires})")
            eng.destroy()
            eng.remove()
            gone.append(stack)
    return gone


if TYPE_CHECKING:  # mypy proves the class has the whole interface (the registry finds it by name)

    def _is_a_backend(b: PulumiBackend) -> Backend:
        return b
