"""A cluster run's record on its workspace volume, as a `RecordSource` (runs/pull.py): read
through the workspace's file server (kube/files.py), after the run's pods are gone too."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from taugrid.api import constants as C
from taugrid.api.errors import EXIT_PLATFORM
from taugrid.api.evidence import KubeHandle, PulumiHandle, RunRecord
from taugrid.api.observations import VolumeFile
from taugrid.kube.client import KubeAPI
from taugrid.kube.files import NotOnVolume, VolumeFiles
from taugrid.runs.pull import RecordMissing

PATIENCE_S = 60.0  # a file server being replaced (evicted, rolled) has this long to answer again


class VolumeRecord:
    """`rec`'s record: /data/runs/<run-id>/ on the volume of its workspace."""

    def __init__(self, kube: KubeAPI, rec: RunRecord, patience_s: float = PATIENCE_S) -> None:
        h = rec.handle
        assert isinstance(h, (KubeHandle, PulumiHandle))
        self.files = VolumeFiles(kube, h.namespace, rec.workspace, patience_s)
        self.prefix = C.run_volume_path(rec.run_id)
        self.run_id = rec.run_id
        self.where = f"the volume of workspace {rec.workspace}"

    def tree(self) -> list[VolumeFile]:
        try:
            return self.files.tree(self.prefix)
        except NotOnVolume:
            raise RecordMissing(
                f"{self.run_id} has no record on {self.where} (/data/{self.prefix}): its pods "
                "never started, or the folder was removed",
                exit_code=EXIT_PLATFORM,
            ) from None

    @contextmanager
    def open(self, rel: str, offset: int = 0) -> Iterator[tuple[int, Iterator[bytes]]]:
        try:
            with self.files.open(f"{self.prefix}/{rel}", offset) as got:
                yield got
        except NotOnVolume:
            raise RecordMissing(
                f"{rel} is not in the record of {self.run_id} on {self.where}",
                exit_code=EXIT_PLATFORM,
            ) from None

    def text(self, rel: str) -> str:
        with self.open(rel) as (_size, chunks):
            return b"".join(chunks).decode("utf-8", "replace")

    def digest(self, rel: str, size: int = 0) -> tuple[str, int]:
        try:
            return self.files.digest(f"{self.prefix}/{rel}", size)
        except NotOnVolume:
            raise RecordMissing(
                f"{rel} is not in the record of {self.run_id} on {self.where}",
                exit_code=EXIT_PLATFORM,
            ) from None
