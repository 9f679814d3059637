"""The reader job that prints a file of a run's record from its workspace volume: what it asks the
cluster for, and what tau says for each way it can go (a fake client plays the cluster)."""

from __future__ import annotations

import io
from collections.abc import Iterator
from typing import Any

import pytest
from k8s_schemas import k8s_errors
from test_kube_observe import record

from taugrid.api import constants as C
from taugrid.api import naming
from taugrid.api.errors import TauError
from taugrid.kube import reader
from taugrid.kube.fake import FakeKube

PATH = "/data/runs/r-1/logs/driver.log"


def test_the_reader_job_is_valid_and_reads_only() -> None:
    job = reader.reader_job(record("r-1"), "research", "gpu", PATH, suffix="abc123")
    assert k8s_errors(job) == []
    spec = job["spec"]
    assert spec["suspend"] is True  # Kueue admits it: no quota is bypassed
    assert job["metadata"]["labels"][C.KUEUE_QUEUE_LABEL] == "gpu"
    pod = spec["template"]["spec"]
    (volume,) = pod["volumes"]
    assert volume["persistentVolumeClaim"] == {
        "claimName": naming.workspace_pvc("research"),
        "readOnly": True,
    }
    (c,) = pod["containers"]
    assert c["volumeMounts"][0]["readOnly"] is True
    assert c["command"][-1] == PATH  # an argument, never spliced into the script
    assert "nvidia.com/gpu" not in c["resources"]["requests"]
    assert spec["activeDeadlineSeconds"] > 0 and spec["ttlSecondsAfterFinished"] > 0
    # the run's pods are found by the run-id label: the reader must not look like one of them
    assert C.LABEL_RUN_ID not in pod.get("metadata", {}).get("labels", {})
    assert C.LABEL_RUN_ID not in spec["template"]["metadata"]["labels"]


def test_the_name_stays_a_dns_label_for_the_longest_run_id() -> None:
    run_id = "a" * naming.RUN_ID_LIMIT
    name = reader.reader_job(record(run_id), "ns", None, PATH)["metadata"]["name"]
    assert len(name) <= 63 and naming.name_problem(name) is None


def test_without_a_queue_the_job_is_not_suspended(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(reader.IMAGE_ENV, "busybox:1.37")
    job = reader.reader_job(record("r-1"), "ns", None, PATH)
    assert job["spec"]["suspend"] is False
    assert C.KUEUE_QUEUE_LABEL not in job["metadata"]["labels"]
    assert job["spec"]["template"]["spec"]["containers"][0]["image"] == "busybox:1.37"


def pod(state: dict[str, Any], phase: str = "Running") -> dict[str, Any]:
    return {
        "metadata": {"name": "reader-pod"},
        "status": {"phase": phase, "containerStatuses": [{"name": "reader", "state": state}]},
    }


class Cluster(FakeKube):
    """The shared fake, scripted: the reader job's pod goes through `pods` (one per LIST); its
    log is `log`."""

    def __init__(self, pods: list[dict[str, Any] | None], log: list[str] | Exception) -> None:
        super().__init__()
        self.pods, self.log = pods, log
        self.applied: list[dict[str, Any]] = []
        self.deleted: list[tuple[str, str]] = []
        self.followed: list[bool] = []

    def apply(self, obj: dict[str, Any], manager: str = "tau") -> dict[str, Any]:
        self.applied.append(obj)
        return super().apply(obj, manager)

    def list(self, kind: str, namespace: str | None = None, labels: Any = None,
             fields: Any = None) -> list[Any]:  # fmt: skip
        assert labels == {"job-name": self.applied[0]["metadata"]["name"]}
        got = self.pods.pop(0) if len(self.pods) > 1 else self.pods[0]
        return [got] if got else []

    def get(self, kind: str, name: str, namespace: str | None = None) -> dict[str, Any] | None:
        return self.pods[-1]

    def log_lines(self, pod: str, namespace: str, container: str | None,
                  follow: bool = False) -> Iterator[str]:  # fmt: skip
        self.followed.append(follow)
        if isinstance(self.log, Exception):
            raise self.log
        yield from self.log

    def delete(self, kind: str, name: str, namespace: str | None) -> bool:
        self.deleted.append((kind, name))
        return super().delete(kind, name, namespace) or True


def read(cluster: Cluster, timeout_s: float = 5.0) -> tuple[str, list[str]]:
    out, said = io.StringIO(), []
    reader.read_file(cluster, record("r-1"), "research", "gpu", PATH, out, said.append,
                     timeout_s=timeout_s)  # fmt: skip
    return out.getvalue(), said


def test_a_finished_reader_prints_the_file_and_is_deleted() -> None:
    done = pod({"terminated": {"exitCode": 0}}, "Succeeded")
    cluster = Cluster([None, pod({"waiting": {"reason": "ContainerCreating"}}, "Pending"), done],
                      ["step 1\n", "step 2"])  # fmt: skip
    text, said = read(cluster)
    assert text == "step 1\nstep 2\n"
    assert cluster.followed == [False]  # it had ended: no follow
    assert cluster.deleted == [("Job", cluster.applied[0]["metadata"]["name"])]
    assert PATH in said[0] and "reader job" in said[0]


def test_a_running_reader_is_followed_to_its_end() -> None:
    cluster = Cluster([pod({"running": {}}), pod({"terminated": {"exitCode": 0}}, "Succeeded")],
                      ["x\n"])  # fmt: skip
    assert read(cluster)[0] == "x\n"
    assert cluster.followed == [True]


def test_a_file_that_is_not_there_is_said_so() -> None:
    cluster = Cluster([pod({"terminated": {"exitCode": reader.MISSING_EXIT}}, "Failed")], [])
    with pytest.raises(TauError, match="is not on the workspace volume of research") as e:
        read(cluster)
    assert e.value.exit_code == 4
    assert cluster.deleted


@pytest.mark.parametrize(
    ("pods", "log", "expected"),
    [
        ([pod({"waiting": {"reason": "ImagePullBackOff"}}, "Pending")], [], "cannot start \\(ImagePullBackOff\\)"),
        ([None], [], "did not start within .*Kueue did not admit it \\(queue gpu\\)"),
        ([{"metadata": {"name": "p"}, "status": {"phase": "Pending", "conditions": [
            {"type": "PodScheduled", "status": "False", "message": "0/3 nodes are available"}]}}],
         [], "not scheduled: 0/3 nodes are available"),
        ([pod({"terminated": {"exitCode": 0}}, "Succeeded")], TauError("connection refused"),
         "does not serve its log \\(connection refused\\)"),
    ],
)  # fmt: skip
def test_each_way_it_cannot_read_is_said_and_the_job_is_deleted(
    pods: list[Any], log: Any, expected: str
) -> None:
    cluster = Cluster(pods, log)
    with pytest.raises(TauError, match=expected) as e:
        read(cluster, timeout_s=0.3)
    assert e.value.exit_code == 4
    assert cluster.deleted == [("Job", cluster.applied[0]["metadata"]["name"])]
