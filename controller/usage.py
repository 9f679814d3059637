"""The usage ledger's writer: one row per run (api/usage.py) kept in TauUsage objects in the
run's workspace namespace, so `tau usage` reads what runs used after their TauRuns are gone and
across controller restarts.

Each record pass of a run notes its row (pure: `usage.advance` of the row as last kept); a row
that changed waits in `pending` and the `usage` worker writes the pending rows, one merge patch
per ledger object. At startup the ledger is read back whole, so a restarted controller goes on
from the rows it kept (a preempted admission stays in the record).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime
from typing import Any

from taugrid.api import constants as C
from taugrid.api.crds import TauRunStatus
from taugrid.api.usage import LEDGER_LABEL, UsageRow, advance, ledger_name
from taugrid.api.vocabulary import TERMINAL
from taugrid.controller.config import FIELD_MANAGER
from taugrid.kube.client import Kube

log = logging.getLogger("taugrid.controller.usage")
RunKey = tuple[str, str]


def fresh_row(taurun: dict[str, Any]) -> UsageRow:
    """A run's first row: who, what and when, from its TauRun."""
    spec = taurun.get("spec") or {}
    meta = taurun.get("metadata") or {}
    manifest = spec.get("manifest") or {}
    experiment = (manifest.get("experiment") or {}).get("name") or (
        manifest.get("research") or {}
    ).get("experiment")
    return UsageRow(
        run=str(spec.get("runId") or meta.get("name")),
        name=str(spec.get("runName") or ""),
        workspace=str(spec.get("workspace") or meta.get("namespace")),
        user=(meta.get("annotations") or {}).get(C.ANN_CLUSTER_USER) or spec.get("submitter"),
        profile=spec.get("profile"),
        experiment=experiment,
        created=str(meta.get("creationTimestamp")),
    )


class UsageLedger:
    def __init__(self, kube: Kube, wake: Callable[[], None]) -> None:
        self.kube, self._wake = kube, wake
        self.rows: dict[RunKey, UsageRow] = {}
        self.pending: dict[RunKey, UsageRow] = {}
        self._objects: set[tuple[str, str]] = set()  # (namespace, name) of ledger objects
        self.loaded = False

    def load(self) -> None:
        """The whole ledger, as the controller kept it before (at startup)."""
        for obj in self.kube.list("TauUsage"):
            ns = obj["metadata"]["namespace"]
            self._objects.add((ns, obj["metadata"]["name"]))
            for run, raw in ((obj.get("spec") or {}).get("runs") or {}).items():
                try:
                    self.rows[(ns, run)] = UsageRow.model_validate(raw)
                except ValueError as e:  # a row of a newer controller: left as it is
                    log.warning("usage row %s/%s unreadable: %s", ns, run, e)
        self.loaded = True
        log.info("usage ledger: %d rows in %d objects", len(self.rows), len(self._objects))

    def note(
        self,
        key: RunKey,
        taurun: dict[str, Any],
        workload: dict[str, Any] | None,
        status: TauRunStatus,
        now: datetime,
    ) -> None:
        """The run as one record pass sees it: its row advanced; kept to write if it changed."""
        if not self.loaded:
            return
        old = self.rows.get(key) or fresh_row(taurun)
        use = status.gpuUse
        ended = status.completionTime if status.phase in TERMINAL else None
        new = advance(
            old,
            workload,
            str(status.phase.value) if status.phase else None,
            ended,
            use.smActive if use else None,
            use.since if use else None,
            now,
        )
        if self.rows.get(key) != new:
            self.rows[key] = new
            self.pending[key] = new
            self._wake()

    async def flush(self, io: Callable[..., Any]) -> float | None:
        """Write every pending row: one merge patch (or create) per ledger object."""
        batch, self.pending = self.pending, {}
        by_object: dict[tuple[str, str], dict[str, Any]] = {}
        for (ns, run), row in batch.items():
            name = ledger_name(row.run, row.created)
            by_object.setdefault((ns, name), {})[run] = row.model_dump(
                mode="json", exclude_none=True
            )
        for (ns, name), runs in by_object.items():
            try:
                await io(self._write, ns, name, runs)
            except Exception as e:  # kept pending: the next pass tries again
                log.warning("usage ledger %s/%s: %s", ns, name, e)
                for run in runs:
                    self.pending.setdefault((ns, run), self.rows[(ns, run)])
                return 5.0
        return None

    def _write(self, ns: str, name: str, runs: dict[str, Any]) -> None:
        if (ns, name) not in self._objects:
            month = name.split("-", 1)[1][:7]
            obj = {
                "apiVersion": C.API_VERSION,
                "kind": "TauUsage",
                "metadata": {"name": name, "namespace": ns, "labels": {LEDGER_LABEL: month}},
                "spec": {"month": month, "runs": runs},
            }
            created = self.kube.create(obj, FIELD_MANAGER)
            self._objects.add((ns, name))
            if created is not None:
                return
        self.kube.merge_patch("TauUsage", name, ns, {"spec": {"runs": runs}}, FIELD_MANAGER)
