"""Kueue's admission messages, said once in TauGrid's words, with the numbers."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from taugrid.api.kueuewords import evicted, explain, without_noise

NEVER = (
    "couldn't assign flavors to pod set head: flavor a100x1 doesn't match node affinity; "
    "couldn't assign flavors to pod set main: insufficient quota for cpu in flavor cpu, "
    "request > maximum capacity (14 > 12)"
)
SHORT = (
    "couldn't assign flavors to pod set workers: insufficient unused quota for nvidia.com/gpu "
    "in flavor a100x1, 1 more needed; couldn't assign flavors to pod set workers: insufficient "
    "unused quota for nvidia.com/gpu in flavor a100x1, 1 more needed; flavor cpu doesn't match "
    "node affinity"
)


def test_a_request_above_the_queues_ceiling_can_never_start() -> None:
    w = explain(NEVER, "cpu")
    assert w is not None and w.never
    assert w.text.startswith(
        "needs 14 CPU; queue cpu may use at most 12 in flavor cpu: it can never start here"
    )
    assert "tau quota request" in w.text and "node affinity" not in w.text


def test_what_is_short_now_is_said_once() -> None:
    w = explain(SHORT, "gpu")
    assert w is not None and not w.never
    assert w.text == "waiting for quota in queue gpu: 1 more GPU needed in flavor a100x1"


def test_unknown_messages_are_kept_as_kueue_wrote_them_without_the_noise() -> None:
    assert explain("the workload is inadmissible for some new reason", "gpu") is None
    assert without_noise("flavor a doesn't match node affinity; something new") == "something new"
    assert without_noise("x; x") == "x"


@given(st.text(max_size=300))
def test_any_message_is_read_without_error(message: str) -> None:
    w = explain(message, None)
    assert w is None or w.text
    assert isinstance(without_noise(message), str)


@pytest.mark.parametrize("queue", [None, "gpu"])
def test_the_queue_is_named_when_known(queue: str | None) -> None:
    w = explain(SHORT, queue)
    assert w is not None and (("queue gpu" in w.text) if queue else ("the queue" in w.text))


@pytest.mark.parametrize(
    ("reason", "message", "words"),
    [
        (
            "Preempted",
            "Preempted to accommodate a workload (run high-x1, workspace research, priority high) "
            "due to prioritization in the ClusterQueue; preemptor path: "
            "/sandbox/tau-grants-gpu/gpu; "
            "preemptee path: /sandbox/tau-grants-gpu/gpu",
            "preempted by run high-x1 (workspace research, priority high), for prioritization in "
            "the ClusterQueue",
        ),
        (
            "Preempted",
            "Preempted to accommodate a workload (a workload you cannot see: another workspace's) "
            "due to reclamation within the cohort",
            "preempted by a workload you cannot see: another workspace's, for reclamation within "
            "the cohort",
        ),
        (
            "PodsReadyTimeout",
            "Exceeded the PodsReady timeout default/x; preemptor path: /a",
            "evicted by Kueue (PodsReadyTimeout): Exceeded the PodsReady timeout default/x",
        ),
        ("InactiveWorkload", "", "evicted by Kueue (InactiveWorkload)"),
    ],
)
def test_evictions_in_words(reason: str, message: str, words: str) -> None:
    assert evicted(reason, message) == words
