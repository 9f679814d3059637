"""Services on a cluster: a RayService in the workspace, owned by a TauService
(`taugrid.serve.kube`), admitted by Kueue.

What differs from the local target, and why:
- every change (a revision, a new size) is a new generation: its own RayService beside the
  serving one until it serves, then the stable Service moves to it and the old one is deleted
  (taugrid.serve.kube); so a change is checked against the queue's room first and refused with
  the numbers when it does not fit; any `tau serve` command that looks moves it forward
  (`advance`; the controller applies the same rule on its own);
- replicas are fixed sizes (Kueue admits those): autoscaling bounds deploy their maximum, and
  scale to zero (`--replicas 0`) deletes the RayService: the GPUs go back to the queue;
- requests go through the API server's service proxy with the user's own credentials: no
  port-forward, nothing opened on this machine.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from taugrid.api import constants as C
from taugrid.api import serve as S
from taugrid.api.errors import EXIT_NOT_ADMITTED, EXIT_PLATFORM, EXIT_USAGE, TauError
from taugrid.serve.backends.base import (
    Answer,
    NewService,
    Placement,
    Request,
    Say,
    ServiceTemplate,
    Started,
    no_canary,
    now,
    who,
)
from taugrid.serve.backends.generations import (
    canary_takes_all,
    code_bundle,
    kube_serve,
    made_registry,
    new_generation,
    plan_generation,
    publish_model,
    scale_to_zero,
    send_generation,
)

if TYPE_CHECKING:
    from taugrid.serve.kube import KubeServe
    from taugrid.serve.records import ServiceDir
    from taugrid.serve.status import Observed


def model_registry(
    m: Any, spec: S.ServiceSpec, *, context: str | None, workspace: str | None, profile: str | None
) -> str | None:
    """The registry a new cluster service's model is registered into: its workspace's (made
    on first use, as a run's inputs'), or None when the workspace declares none."""
    from taugrid.serve.kuberender import replicas_of

    r = kube_serve(context).resolve(m, spec, replicas_of(S.scale_of(spec)), workspace, profile)
    return made_registry(r.workspace.registry)


def record_registry(rec: S.ServiceRecord) -> str | None:
    """The registry a cluster service's next revision's model is registered into."""
    return made_registry(kube_serve(rec.context).discovery.workspace(rec.workspace).registry)


def ingress_of(code_dir: Path, spec: S.ServiceSpec, say: Say) -> str | None:
    """The application's ingress deployment, found by importing it here as Ray Serve will
    (its requests are bounded there on the cluster); None, said, when it cannot be imported
    here (Ray Serve missing on this machine): the cluster then uses Ray Serve's defaults."""
    from taugrid.serve.local import check_app

    try:
        return check_app(code_dir, spec, {}).ingress
    except TauError as e:
        say(
            f"note: {spec.import_path} could not be imported here ({e.message}): its requests "
            "are not bounded by max_ongoing_requests/max_queued_requests on the cluster"
        )
        return None


def endpoint(name: str, namespace: str, route: str) -> str:
    """Where the service answers inside the cluster (its stable Service)."""
    from taugrid.serve.kuberender import SERVE_PORT, object_name

    return f"http://{object_name(name)}.{namespace}.svc:{SERVE_PORT}{route}"


class KubeServiceBackend(ServiceTemplate):
    name = "kube"
    poll_s = 1.0
    undo_failed_rollout = False  # the serving generation serves until the new one does
    rollback_strategy: str | None = None  # the service's own

    # --- checks -------------------------------------------------------------------------------
    def check(self, spec: S.ServiceSpec, placement: Placement) -> None:
        if placement.port is not None:
            raise TauError(
                "--port is the local Ray Serve proxy's; a cluster service answers on its "
                "stable Service",
                exit_code=EXIT_USAGE,
                hint="omit --port with --target kube",
            )

    def new_registry(self, manifest: Any, spec: S.ServiceSpec, placement: Placement) -> str | None:
        """A new service's workspace registry (made on first use, as a run's inputs'), or None
        when the workspace declares none."""
        from taugrid.serve.kuberender import replicas_of

        r = kube_serve(placement.context).resolve(
            manifest,
            spec,
            replicas_of(S.scale_of(spec)),
            placement.workspace,
            placement.profile,
        )
        return made_registry(r.workspace.registry)

    def registry(self, rec: S.ServiceRecord) -> str | None:
        return made_registry(kube_serve(rec.context).discovery.workspace(rec.workspace).registry)

    def ingress(self, code_dir: Path, spec: S.ServiceSpec, say: Say) -> str | None:
        return ingress_of(code_dir, spec, say)

    # --- deploy -------------------------------------------------------------------------------
    def prepare_first(self, sd: ServiceDir, new: NewService, rev: S.Revision, say: Say) -> Started:
        """Placed (workspace, profile, queue) and checked against the queue; the model version
        published into the workspace's registry."""
        from taugrid.serve.kuberender import render, replicas_of

        p = new.placement
        ks = kube_serve(p.context)
        replicas = replicas_of(S.scale_of(new.spec))
        r = ks.resolve(new.manifest, new.spec, replicas, p.workspace, p.profile)
        objects = render(
            r,
            sd.name,
            new.route,
            rev,
            code_bundle(new.source.parent),
            replicas,
            new.spec.rollout.strategy,
            1,
        )
        never, _, _ = ks.queue_room(r, objects)
        if never is not None:
            raise TauError(
                f"service {sd.name} is not deployed: {never}",
                exit_code=EXIT_NOT_ADMITTED,
                hint=f"tau quota request --workspace {r.workspace.name}, or fewer "
                "replicas or GPUs in service",
            )
        publish_model(r, new.pin, say)
        return Started(
            fields={
                "endpoint": endpoint(sd.name, r.namespace, new.route),
                "context": p.context,
                "workspace": r.workspace.name,
                "namespace": r.namespace,
                "profile": r.profile.name,
                "scale": S.Scale(replicas=replicas),
                "generation": 1,
            },
            where=f" in namespace {r.namespace}, queue {r.queue}",
            plan=(objects, r.queue),
        )

    def send_first(
        self, sd: ServiceDir, rec: S.ServiceRecord, plan: Any, say: Say
    ) -> S.ServiceRecord:
        objects, queue = plan
        kube_serve(rec.context).send(objects, create=True)
        say(
            f"sent revision 1 of {sd.name} to namespace {rec.namespace} (queue {queue}); Kueue "
            "admits it when there is quota"
        )
        return rec

    def reached(self, sd: ServiceDir) -> bool:
        if not sd.exists():
            return False
        rec = sd.read()
        try:
            from taugrid.serve.kuberender import object_name

            found = kube_serve(rec.context).kube.get(
                "TauService", object_name(rec.name), rec.namespace
            )
            return found is not None
        except TauError:
            return True  # unknown: keep the record, so nothing sent is forgotten

    # --- changes ------------------------------------------------------------------------------
    def prepare_change(
        self, sd: ServiceDir, rec: S.ServiceRecord, rev: S.Revision, strategy: str, say: Say
    ) -> Started:
        """A new generation's RayService beside the serving one (checked against the queue's
        room first); scaled to zero, the revision starts with the next scale up."""
        from taugrid.serve.kuberender import replicas_of

        replicas = replicas_of(rec.scale)
        g = plan_generation(sd, rec, rev, replicas, strategy) if replicas else None
        return Started(
            fields={
                "pending_generation": g.number if g else None,
                "rollout_done": g is None,
            },
            where=": a new RayService" if g else "",
            plan=g,
        )

    def send_change(
        self, sd: ServiceDir, rec: S.ServiceRecord, rev: S.Revision, plan: Any, say: Say
    ) -> S.ServiceRecord:
        if plan is not None:
            send_generation(plan, say)
            say(
                f"a RayService of revision {rev.number} starts beside the serving one; the "
                "service moves to it when it serves"
            )
        return rec

    # --- canaries -----------------------------------------------------------------------------
    def check_canary(self, rec: S.ServiceRecord) -> None:
        if rec.pending_generation:
            raise TauError(
                f"revision {rec.serving} of {rec.name} is still starting: a canary "
                "compares with a revision that serves",
                exit_code=EXIT_USAGE,
                hint=f"tau serve status {rec.name} --watch",
            )

    def prepare_canary(
        self, sd: ServiceDir, rec: S.ServiceRecord, rev: S.Revision, percent: int, say: Say
    ) -> Started:
        """Its own RayService: its share of the replicas (at least one) and the split, beside
        the serving one, checked against the queue's room first."""
        from taugrid.serve.kuberender import CanaryPlan, replicas_of

        n = replicas_of(rec.scale)
        if n == 0:
            raise TauError(
                f"service {rec.name} is scaled to zero: a canary needs the serving "
                "revision running beside it",
                exit_code=EXIT_USAGE,
                hint=f"tau serve scale {rec.name} --replicas N first, or a rollout",
            )
        started = now()
        plan = CanaryPlan(
            stable_generation=rec.generation, stable_revision=rec.serving, percent=percent
        )
        replicas = max(1, -(-n * percent // 100))
        g = plan_generation(sd, rec, rev, replicas, "canary", canary=plan, now=started)
        return Started(
            fields={"generation": g.number, "started_at": started},
            where=f": RayService {sd.name}-{g.number}",
            plan=g,
        )

    def send_canary(
        self, sd: ServiceDir, rec: S.ServiceRecord, rev: S.Revision, plan: Any, say: Say
    ) -> None:
        send_generation(plan, say)

    def route_canary(
        self,
        sd: ServiceDir,
        rec: S.ServiceRecord,
        rev: S.Revision,
        plan: Any,
        timeout_s: float,
        say: Say,
    ) -> None:
        assert rec.canary is not None
        say(
            f"canary revision {rev.number}: a RayService of its own starts beside revision "
            f"{rec.serving}'s; it takes {rec.canary.percent}% of the requests once it runs"
        )

    def end_canary(self, sd: ServiceDir, back: int, why: str, say: Say) -> None:
        """The canary removed: the Service back on the serving generation (the canary's
        RayService deleted: Kueue gets its quota back), the TauService without it. `back` other
        than the serving revision is a rollback after it (a new generation)."""
        from taugrid.kube.client import FIELD_MANAGER
        from taugrid.serve.kuberender import object_name

        with sd.lock():
            rec = sd.read()
            ks = kube_serve(rec.context)
            ks.switch(rec, rec.generation)
            ks.kube.merge_patch(
                "TauService",
                object_name(rec.name),
                rec.namespace,
                {"spec": {"canary": None, "generation": rec.generation}},
                FIELD_MANAGER,
            )
            sd.event("canary-ended", why, back, who())
            rec = rec.model_copy(update={"canary": None, "pending_generation": None})
            sd.write(rec)
            say(why)
            if back != rec.serving:
                self.change(
                    sd,
                    rec,
                    rec.revision(back),
                    new=False,
                    kind="rollback",
                    message=f"revision {rec.serving} -> revision {back}",
                    strategy=None,
                    say=say,
                )

    def promote(self, sd: ServiceDir, timeout_s: float, say: Say) -> None:
        with sd.lock():
            rec = sd.read()
            if rec.canary is None:
                raise TauError(f"the canary of {sd.name} ended meanwhile", exit_code=EXIT_USAGE)
            c = rec.canary
            sd.write(self._promote(sd, rec, say))
        say(
            f"promoting revision {c.revision}: a RayService at the service's size starts; the "
            "service moves to it when it serves"
        )

    def _promote(self, sd: ServiceDir, rec: S.ServiceRecord, say: Say) -> S.ServiceRecord:
        """The canary takes every request (its split's share set to 100%, in place), the
        serving generation is deleted (its quota back in the queue), and when the canary ran
        fewer replicas than the service's size, a generation at full size follows (the Service
        moves to it when it serves). So a promote never needs more quota than the canary had.
        The caller writes the returned record (under the service's lock)."""
        from taugrid.kube.client import FIELD_MANAGER
        from taugrid.serve.kuberender import generation_name, object_name, replicas_of

        c = rec.canary
        assert c is not None and c.generation
        ks = kube_serve(rec.context)
        held = canary_takes_all(ks, rec, c)
        full = replicas_of(rec.scale)
        rev = rec.revision(c.revision)
        ks.kube.merge_patch(
            "TauService",
            object_name(rec.name),
            rec.namespace,
            {
                "spec": {
                    "canary": None,
                    "generation": c.generation,
                    "revision": rev.number,
                    "configHash": rev.config_hash,
                    "modelRef": rev.model.ref if rev.model else None,
                    "modelVersion": rev.model.version if rev.model else None,
                    "replicas": held,
                }
            },
            FIELD_MANAGER,
        )
        ks.kube.delete("RayService", generation_name(rec.name, rec.generation), rec.namespace)
        sd.event(
            "promote",
            f"revision {c.revision} takes every request (RayService "
            f"{rec.name}-{c.generation}); revision {rec.serving}'s RayService is deleted",
            c.revision,
            who(),
        )
        done = rec.model_copy(
            update={
                "previous": rec.serving,
                "serving": c.revision,
                "canary": None,
                "generation": c.generation,
                "pending_generation": None,
                "rollout_started_at": now(),
                "rollout_done": True,
                "strategy": "blue-green",
                "scale": S.Scale(replicas=held),
            }
        )
        if held >= full:
            return done
        sd.write(done)  # (what is true now, if the full size cannot follow)
        return self._grow(sd, ks, rec, done, held, full, say)

    def _grow(
        self,
        sd: ServiceDir,
        ks: KubeServe,
        before: S.ServiceRecord,
        done: S.ServiceRecord,
        held: int,
        full: int,
        say: Say,
    ) -> S.ServiceRecord:
        """After a promote of a canary smaller than the service: a generation at full size,
        once the old generation is gone (its quota back); a refusal says the service serves,
        at the canary's size."""
        from taugrid.serve.local import wait_until

        wait_until(lambda: before.generation not in ks.generations(before), 60, 0.5)
        rev = done.revision(done.serving)
        try:
            pending = new_generation(sd, done, rev, full, "blue-green", say)
        except TauError as e:
            raise TauError(
                f"revision {rev.number} serves every request on its canary's {held} "
                f"replica(s); its full size does not follow: {e.message}",
                exit_code=e.exit_code,
                hint=f"tau serve scale {before.name} --replicas "
                f"{full} when there is room" + (f"; {e.hint}" if e.hint else ""),
            ) from None
        return done.model_copy(
            update={
                "pending_generation": pending,
                "rollout_done": False,
                "scale": S.Scale(replicas=full),
            }
        )

    # --- scale --------------------------------------------------------------------------------
    def scale(self, sd: ServiceDir, new: S.Scale, say: Say) -> tuple[S.ServiceRecord, bool]:
        """The serving revision at a new fixed size (Kueue admits fixed sizes: autoscaling
        bounds become their maximum); 0 replicas gives the queue its GPUs back."""
        from taugrid.serve.kuberender import replicas_of

        no_canary(sd.read(), "a scale on a cluster")
        n = replicas_of(new)
        if new.autoscaling is not None:
            say(f"on a cluster Kueue admits fixed sizes: {n} replica(s) (the autoscaling maximum)")
        with sd.lock():
            rec = sd.read()
            if n == 0:
                scale_to_zero(rec)
                pending = None
            else:
                pending = new_generation(sd, rec, rec.current, n, rec.strategy, say)
            was = rec.scale.describe()
            rec = rec.model_copy(
                update={"scale": S.Scale(replicas=n), "pending_generation": pending}
            )
            sd.write(rec)
            sd.event("scale", f"{rec.scale.describe()} (was {was})", rec.serving, who())
        if n and pending is not None:
            say(f"a RayService of {n} replica(s) starts; the service moves to it when it serves")
            return rec, True
        return rec, False

    # --- delete -------------------------------------------------------------------------------
    def remove(self, rec: S.ServiceRecord, timeout_s: float, say: Say) -> str:
        """The TauService deleted; waits until the RayService (and so its pods and the quota
        they held) is gone."""
        from taugrid.serve.local import wait_until

        ks = kube_serve(rec.context)
        ks.remove(rec)
        if not wait_until(lambda: ks.gone(rec), timeout_s, 0.5):
            raise TauError(
                f"the cluster still has {rec.name}'s objects after {timeout_s:.0f}s",
                exit_code=EXIT_PLATFORM,
                hint=f"tau serve status {rec.name}",
            )
        say(f"deleted {rec.name} from namespace {rec.namespace}: its RayService and pods are gone")
        return f"removed from namespace {rec.namespace}"

    # --- looking ------------------------------------------------------------------------------
    def observe(self, recs: Sequence[S.ServiceRecord]) -> list[Observed]:
        return [kube_serve(r.context).observe(r) for r in recs]

    def advance(self, sd: ServiceDir, rec: S.ServiceRecord) -> S.ServiceRecord | None:
        """A pending generation that serves takes over: the stable Service moves to it and
        every other generation is deleted (the controller applies the same rule on its own;
        whichever sees it first). A canary's generation that runs takes the route the same
        way, and the serving generation is kept."""
        if not (rec.pending_generation or (rec.canary and not rec.canary.routed)):
            return None
        with sd.lock():
            rec = sd.read()
            moved = self._advance(sd, rec)
            if moved is not rec:
                sd.write(moved)
            return moved

    def _advance(self, sd: ServiceDir, rec: S.ServiceRecord) -> S.ServiceRecord:
        c = rec.canary
        if c is not None and not c.routed and c.generation:
            ks = kube_serve(rec.context)
            ks.switch_if_ready(rec, c.generation, keep=rec.generation)
            if ks.serving_generation(rec) != c.generation:
                return rec
            sd.event(
                "canary-routed",
                f"revision {c.revision} takes {c.percent}% of the requests "
                f"(RayService {rec.name}-{c.generation} holds the route), revision "
                f"{rec.serving} {100 - c.percent}%",
                c.revision,
            )
            return rec.model_copy(update={"canary": c.model_copy(update={"routed": True})})
        if not rec.pending_generation:
            return rec
        ks = kube_serve(rec.context)
        ks.switch_if_ready(rec, rec.pending_generation)
        if ks.serving_generation(rec) != rec.pending_generation:
            return rec
        sd.event(
            "switched",
            f"revision {rec.serving} serves (RayService {rec.name}-"
            f"{rec.pending_generation}); the previous one is deleted",
            rec.serving,
        )
        return rec.model_copy(
            update={
                "generation": rec.pending_generation,
                "pending_generation": None,
                "rollout_done": True,
            }
        )

    def invoke(self, rec: S.ServiceRecord, request: Request) -> Answer:
        """Through the API server's service proxy to the service's stable Service, with the
        user's own credentials (a member of the workspace may proxy to its Services)."""
        from urllib.parse import urlsplit

        from taugrid.serve.kuberender import object_name

        if not rec.endpoint or not rec.namespace:
            raise TauError(
                f"service {rec.name} has no endpoint yet",
                exit_code=EXIT_PLATFORM,
                hint=f"tau serve status {rec.name}",
            )
        route = urlsplit(rec.endpoint).path.rstrip("/")
        ks = kube_serve(rec.context)
        if ks.observe(rec).simulated:
            raise TauError(
                f"{rec.name} runs on simulated nodes (KWOK): no container runs there, so "
                "nothing would answer",
                exit_code=EXIT_PLATFORM,
                hint="the sandbox's real nodes run it: tau sandbox up --real-nodes 1",
            )
        t0 = time.perf_counter()
        with ks.kube.service_request(
            rec.namespace,
            f"{object_name(rec.name)}:serve",
            (route + request.suffix) or "/",
            request.headers,
            request.verb,
            request.data,
            request.timeout_s,
        ) as r:
            body = r.read()
        if r.status in (502, 503, 504) and b'"kind":"Status"' in body.replace(b" ", b""):
            try:  # the API server's words: it could not reach the service's pods
                said = json.loads(body).get("message") or body.decode(errors="replace")
            except ValueError:
                said = body.decode(errors="replace")
            raise TauError(
                f"{rec.name} does not answer: {said}",
                exit_code=EXIT_PLATFORM,
                hint=f"tau serve status {rec.name}",
            )
        return Answer(r.status, body, time.perf_counter() - t0, rec.endpoint + request.suffix)

    def logs(
        self, rec: S.ServiceRecord, out: TextIO, *, follow: bool, poll_s: float, tail: int | None
    ) -> None:
        """The replica pods' logs (the worker group's containers)."""
        from taugrid.serve.kuberender import GROUP

        ks = kube_serve(rec.context)
        pods = ks.kube.list(
            "Pod", rec.namespace, labels={C.LABEL_SERVICE: rec.name, "ray.io/group": GROUP}
        )
        for p in pods:
            name = p["metadata"]["name"]
            try:
                lines = list(ks.kube.log_lines(name, rec.namespace or "", "ray-worker"))
            except TauError:
                continue
            for ln in lines[-tail:] if tail else lines:
                out.write(f"[{name}] {ln}\n")
        out.flush()


if TYPE_CHECKING:  # the template's steps make a whole backend
    from taugrid.serve.backends.base import ServiceBackend

    _whole: ServiceBackend = KubeServiceBackend()
