"""A service's status, as a pure function of its record and what the target reports.

The phase and a one-sentence summary say what the service does or why it waits, in the same
words on every target: Deploying, Ready, Updating, ScaledToZero, Waiting, Unhealthy, Failed,
Deleted.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from taugrid.api import serve as S


@dataclass(frozen=True)
class Observed:
    """What the target says of one service now (Ray Serve locally; the RayService, its Kueue
    workload and pods on a cluster)."""

    head_up: bool
    exists: bool
    status: str = "ABSENT"  # Ray Serve's: DEPLOYING, RUNNING, DEPLOY_FAILED, UNHEALTHY, ...
    message: str = ""
    revision: int | None = None  # the revision Ray Serve is deploying or runs
    deployment_status: str = ""
    wanted: int = 0
    running: int = 0
    starting: int = 0
    started_at: list[float] = field(default_factory=list)  # of the running replicas
    port: int | None = None
    ours: bool = True  # deployed by tau (False: an application of that name tau did not make)
    admitted: bool | None = None  # Kueue admitted it (a cluster; None: not asked)
    waiting: str = ""  # why Kueue has not admitted it, in TauGrid's words
    simulated: bool = False  # the cluster's nodes run no containers (the sandbox's KWOK)
    upgrading: bool = False  # a new RayService starts beside the serving one (a cluster)
    new_running: int | None = None  # its replicas running (None: count by start times)
    canary: Observed | None = None  # a canary revision's application, when one runs
    split: str = ""  # the status of a canary's traffic split ("" when there is none)


def _epoch(iso: str | None) -> float | None:
    if not iso:
        return None
    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


def revision_rows(rec: S.ServiceRecord) -> list[dict[str, Any]]:
    rows = []
    for r in rec.revisions:
        c = rec.canary
        if c is not None and r.number == c.revision and not c.promoting:
            state = "canary"
        elif r.number == rec.serving:
            state = "serving"
        else:
            state = "previous" if r.number == rec.previous else ""
        rows.append(
            {
                "revision": r.number,
                "model": r.model.short if r.model else None,
                "config_hash": r.config_hash,
                "created_at": r.created_at,
                "created_by": r.created_by,
                "reason": r.reason,
                "state": state,
            }
        )
    return rows


def compute(
    rec: S.ServiceRecord,
    obs: Observed,
    answered: bool | None = None,
    events: list[S.Event] | None = None,
    probe_status: int | None = None,
) -> S.ServiceStatus:
    """`answered`: whether a readiness request was answered (None: not asked)."""
    cur = rec.current
    model = cur.model.short if cur.model else None
    new_since = _epoch(rec.rollout_started_at)
    new_ready = None
    if obs.new_running is not None:
        new_ready = obs.new_running
    elif new_since is not None and not rec.rollout_done:
        new_ready = sum(1 for t in obs.started_at if t >= new_since)
    replicas = S.Replicas(
        ready=obs.running, wanted=obs.wanted, starting=obs.starting, new_ready=new_ready
    )
    rollout = _rollout(rec, obs, new_ready)
    if rec.canary is not None:  # the canary's replicas are the new ones
        replicas = replicas.model_copy(update={"new_ready": rollout["new_ready"] if rollout else 0})
    phase, summary, healthy = _phase(rec, obs, answered, probe_status, replicas)
    return S.ServiceStatus(
        name=rec.name,
        target=rec.target,
        phase=phase,
        summary=summary,
        revision=rec.serving,
        model=model,
        endpoint=rec.endpoint,
        replicas=replicas,
        scale=rec.scale.describe(),
        healthy=healthy,
        serving=answered,
        admitted=obs.admitted,
        rollout=rollout,
        revisions=revision_rows(rec),
        events=events or [],
    )


SIMULATED = (
    "; the sandbox's nodes are simulated: no container runs there, so no request is ever answered"
)


def _rollout(rec: S.ServiceRecord, obs: Observed, new_ready: int | None) -> dict[str, Any] | None:
    """A change under way: a canary (its share of requests) or a rollout of the serving
    revision over the previous one (the share its ready replicas take)."""
    c = rec.canary
    if c is not None:
        co = obs.canary
        stable = rec.previous if c.promoting and rec.previous is not None else rec.serving
        share = 100 if c.promoting else (c.percent if c.routed else 0)
        running = co.running if co is not None else 0
        return {
            "from": stable,
            "to": c.revision,
            "strategy": "canary",
            "step": c.percent,
            "new_ready": running,
            "wanted": co.wanted if co is not None else 0,
            "traffic": {str(c.revision): share, str(stable): 100 - share},
        }
    if rec.previous is not None and not rec.rollout_done:
        share = 0 if not obs.running else round(100 * (new_ready or 0) / obs.running)
        return {
            "from": rec.previous,
            "to": rec.serving,
            "strategy": rec.strategy,
            "new_ready": new_ready or 0,
            "wanted": obs.wanted,
            "traffic": {str(rec.serving): share, str(rec.previous): 100 - share},
        }
    return None


def _phase(
    rec: S.ServiceRecord,
    obs: Observed,
    answered: bool | None,
    probe_status: int | None,
    replicas: S.Replicas,
) -> tuple[S.Phase, str, bool]:
    n, name = rec.serving, rec.name
    missing = _missing(rec, obs)
    if missing is not None:
        return missing
    ready = f"{replicas.ready}/{replicas.wanted} replicas ready"
    if obs.status == "DEPLOY_FAILED":
        first = [cause(obs.message)]
        undo = (
            f"; `tau serve rollback {name}` returns to revision {rec.previous}"
            if rec.previous
            else ""
        )
        return "Failed", f"revision {n} failed to deploy: {first[0][:300]}{undo}", False
    if obs.status == "UNHEALTHY":
        return "Unhealthy", f"revision {n} is unhealthy ({ready}): {obs.message[:200]}", False
    if rec.canary is not None:
        return _canary_phase(rec, obs, answered, probe_status, ready)
    if obs.status in ("DEPLOYING", "NOT_STARTED") or obs.revision != n:
        return _starting(rec, obs, replicas, ready)
    if obs.status == "DELETING":
        return "Deleted", "being removed", False
    if obs.wanted == 0 and obs.running == 0:
        return _idle(rec)
    where = f" on {rec.endpoint}" if rec.endpoint else ""
    note = SIMULATED if obs.simulated else ""
    if answered is False:
        code = f"HTTP {probe_status}" if probe_status else "no answer"
        return (
            "Unhealthy",
            f"revision {n} runs ({ready}) but its readiness request got {code}{where}",
            False,
        )
    return "Ready", f"serving revision {n}{where}: {ready}{note}", True


def _missing(rec: S.ServiceRecord, obs: Observed) -> tuple[S.Phase, str, bool] | None:
    """The phases of a service that does not serve because something is not there: deleted,
    its head down, its revision gone from the target, or not admitted by Kueue."""
    n, name = rec.serving, rec.name
    back = f"`tau serve rollout {name}` puts revision {n} back"
    if rec.deleted_at:
        return "Deleted", f"deleted at {rec.deleted_at}", False
    if not obs.head_up:
        return "Unhealthy", f"the local Ray head is not running: {back}", False
    if not obs.exists:
        if rec.target == "kube":
            return "Unhealthy", f"the RayService of {name} is gone from the cluster: {back}", False
        return (
            "Unhealthy",
            f"revision {n} is not on the local Ray head (was it restarted?): {back}",
            False,
        )
    if obs.admitted is False:
        why = obs.waiting or "it waits in its queue"
        return "Waiting", f"Kueue has not admitted revision {n}: {why}", False
    return None


def _starting(
    rec: S.ServiceRecord, obs: Observed, replicas: S.Replicas, ready: str
) -> tuple[S.Phase, str, bool]:
    """A revision on its way: its config being taken, a rollout over the previous one, or a
    first deploy starting its replicas."""
    n = rec.serving
    rolling = rec.previous is not None and not rec.rollout_done
    if obs.wanted == 0 and obs.running == 0 and obs.starting == 0:  # (not counted yet)
        return (
            "Updating" if rolling else "Deploying",
            f"Ray Serve is taking revision {n}'s config",
            False,
        )
    if rolling:
        new = replicas.new_ready or 0
        return (
            "Updating",
            f"rolling out revision {n} ({rec.strategy}) over revision "
            f"{rec.previous}: {new} new replica(s) ready, {ready}",
            True,
        )
    why = f" ({obs.message.strip().splitlines()[0][:300]})" if obs.message.strip() else ""
    return "Deploying", f"starting revision {n}: {ready}{why}", obs.running > 0


def _idle(rec: S.ServiceRecord) -> tuple[S.Phase, str, bool]:
    """No replica wanted nor running: scaled to zero on a cluster or while idle, else none."""
    n, name = rec.serving, rec.name
    if rec.target == "kube":
        return (
            "ScaledToZero",
            f"scaled to zero: no RayService holds GPUs (they are back in "
            f"the queue); `tau serve scale {name} --replicas N` starts revision {n} again",
            True,
        )
    if rec.scale.autoscaling is not None:
        return (
            "ScaledToZero",
            f"revision {n} is scaled to zero while idle: the next request "
            "starts a replica (it waits, it is not dropped)",
            True,
        )
    return "Ready", f"revision {n} has 0 replicas (tau serve scale {name} --replicas N)", True


def _canary_phase(
    rec: S.ServiceRecord, obs: Observed, answered: bool | None, probe_status: int | None, ready: str
) -> tuple[S.Phase, str, bool]:
    c = rec.canary
    assert c is not None
    name, co = rec.name, obs.canary
    stable = rec.previous if c.promoting and rec.previous is not None else rec.serving
    end = f"`tau serve rollback {name}` ends the canary"
    if c.promoting:
        return (
            "Updating",
            f"promoting revision {c.revision}: it takes all requests while the "
            f"service's own replicas move to it ({ready}); `tau serve promote {name}` "
            "finishes it if this was cut short",
            True,
        )
    if co is None or not co.exists:
        if c.routed:
            return (
                "Unhealthy",
                f"canary revision {c.revision} is gone from the target while it "
                f"should take {c.percent}% of requests: {end}",
                False,
            )
        return "Updating", f"canary revision {c.revision} is being deployed", True
    cready = f"{co.running}/{co.wanted} replicas ready"
    held = _canary_held(rec, co, stable, end)
    if held is not None:
        return held
    if not c.routed or co.status != "RUNNING" or (obs.split and obs.split != "RUNNING"):
        return (
            "Updating",
            f"starting canary revision {c.revision} ({cready}); revision "
            f"{stable} takes all requests until it is ready",
            True,
        )
    if answered is False:
        code = f"HTTP {probe_status}" if probe_status else "no answer"
        return (
            "Unhealthy",
            f"canary of revision {c.revision}: the readiness request got {code}",
            False,
        )
    note = SIMULATED if obs.simulated else ""
    return (
        "Canary",
        f"canary: revision {c.revision} takes {c.percent}% of requests ({cready}), "
        f"revision {stable} {100 - c.percent}% ({ready}); `tau serve promote {name}` gives "
        f"revision {c.revision} all, {end}{note}",
        True,
    )


def _canary_held(
    rec: S.ServiceRecord, co: Observed, stable: int, end: str
) -> tuple[S.Phase, str, bool] | None:
    """A canary that failed to deploy, or waits for Kueue (the stable revision serves)."""
    c = rec.canary
    assert c is not None
    if co.status == "DEPLOY_FAILED":
        first = [cause(co.message)]
        return (
            "Unhealthy",
            f"canary revision {c.revision} failed to deploy: {first[0][:300]}; {end}",
            False,
        )
    if co.admitted is False:
        why = co.waiting or "it waits in its queue"
        return (
            "Waiting",
            f"Kueue has not admitted canary revision {c.revision}: {why}; "
            f"revision {stable} takes all requests",
            True,
        )
    return None


_EXCEPTION = re.compile(r"^\s*(?:[A-Za-z_][\w.]*\.)?[A-Z]\w*(?:Error|Exception|Exit|Interrupt)\b.*")


def cause(message: str) -> str:
    """The replica's own error in a message of Ray Serve: the last exception line of its
    traceback (e.g. "FileNotFoundError: [Errno 2] ... 'missing.json'"), else its last line."""
    lines = [ln.strip() for ln in message.strip().splitlines() if ln.strip()]
    found = [ln for ln in lines if _EXCEPTION.match(ln)]
    if found:
        return found[-1]
    return lines[-1] if lines else "(no message)"
