"""`tau quota` from the user's side (no cluster): bad input is refused before anything is sent,
with what to write instead; rows read what the controller wrote; and the controller's node
reconciler acts only when not in dry-run (a fake client records what it would send)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from conftest import PROFILES

from taugrid.api.crds import TauQuotaRequestSpec
from taugrid.api.errors import EXIT_USAGE, TauError
from taugrid.kube import quota as q
from taugrid.runs import load

SNAP = load.load_snapshot(PROFILES)


def ws() -> Any:
    return SNAP.workspaces[0]


def gpu_profile() -> Any:
    return next(p for p in SNAP.profiles if p.gpusPerWorker > 0 and p.applies_to(ws().name))


def test_a_valid_request_is_a_valid_object() -> None:
    p = gpu_profile()
    obj = q.new_request(SNAP, ws(), p, 2, "48h", " paper deadline ", "alice")
    spec = TauQuotaRequestSpec.model_validate(obj["spec"])
    assert spec.requested == 2 and spec.duration == "48h" and spec.reason == "paper deadline"
    assert (
        spec.flavor == p.flavor
        and spec.clusterQueue == p.clusterQueue
        and spec.requestedBy == "alice"
    )
    assert obj["metadata"]["namespace"] == ws().namespace and len(obj["metadata"]["name"]) <= 63


@pytest.mark.parametrize(
    ("gpus", "for_", "reason", "words"),
    [
        (0, "48h", "x", "at least 1"),
        (-3, "48h", "x", "at least 1"),
        (2, "2 days", "x", "not a duration"),
        (2, "48", "x", "not a duration"),
        (2, "0h", "x", "not a duration"),
        (2, "48h", "   ", "say why"),
        (10_000, "48h", "x", "at most"),
    ],
)
def test_bad_requests_are_refused_with_what_to_write(
    gpus: int, for_: str, reason: str, words: str
) -> None:
    with pytest.raises(TauError) as e:
        q.new_request(SNAP, ws(), gpu_profile(), gpus, for_, reason, "alice")
    assert e.value.exit_code == EXIT_USAGE and words in str(e.value)


def test_an_unknown_or_cpu_profile_names_the_gpu_ones() -> None:
    with pytest.raises(TauError) as e:
        q.pick_profile(SNAP, ws(), "nope")
    assert e.value.exit_code == EXIT_USAGE and gpu_profile().name in (e.value.hint or "")
    cpu = next((p for p in SNAP.profiles if p.gpusPerWorker == 0), None)
    if cpu is not None:
        with pytest.raises(TauError):
            q.pick_profile(SNAP, ws(), cpu.name)


def test_rows_say_what_the_controller_wrote_or_that_it_has_not() -> None:
    obj = q.new_request(SNAP, ws(), gpu_profile(), 2, "1h", "x", "alice")
    obj["metadata"]["creationTimestamp"] = "2026-12-01T12:00:00Z"
    row = q.row(obj)
    assert row["phase"] == "Pending" and "not seen by the controller" in row["message"]
    obj["status"] = {
        "phase": "Active",
        "granted": 2,
        "expiresAt": "2026-12-01T13:00:00Z",
        "message": "+2",
        "decision": {"verdict": "Approved", "by": "pat", "at": "2026-12-01T12:00:01Z"},
    }
    row = q.row(obj)
    assert (row["phase"], row["granted"], row["decidedBy"]) == ("Active", 2, "pat")


def test_an_ended_request_cannot_be_decided_again() -> None:
    obj = {"metadata": {"name": "r", "namespace": "n"}, "status": {"phase": "Expired"}}
    with pytest.raises(TauError) as e:
        q.decide(None, obj, "Approved", "", "pat")  # type: ignore[arg-type]
    assert "Expired" in str(e.value)


# --- the controller's node reconciler with a fake client ---------------------------------------
def _faulty(name: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {}},
        "spec": {},
        "status": {
            "allocatable": {"nvidia.com/gpu": "1"},
            "conditions": [
                {"type": "Ready", "status": "True"},
                {
                    "type": "GPUXidError",
                    "status": "True",
                    "reason": "XID79",
                    "lastTransitionTime": "2026-12-01T11:00:00Z",
                },
            ],
        },
    }


@pytest.mark.parametrize("dry_run", [True, False])
def test_dry_run_decides_but_touches_no_node(dry_run: bool) -> None:
    pytest.importorskip("kopf")
    from taugrid.api.platform import RemediationConfig
    from taugrid.controller.config import ControllerConfig
    from taugrid.controller.operator import Controller

    cfg = ControllerConfig(remediation=RemediationConfig(dry_run=dry_run))
    from taugrid.kube.fake import FakeKube

    fake = FakeKube(
        {
            "Pod": [
                {
                    "metadata": {"name": "run-pod", "namespace": "research"},
                    "spec": {"nodeName": "g0"},
                    "status": {"phase": "Running"},
                }
            ]
        }
    )
    ctl = Controller(cfg, fake)  # type: ignore[arg-type]
    ctl.nodes = {
        "g0": _faulty("g0"),
        "g1": {
            **_faulty("g1"),
            "status": {
                "allocatable": {"nvidia.com/gpu": "1"},
                "conditions": [{"type": "Ready", "status": "True"}],
            },
        },
    }
    for body in ctl.nodes.values():  # the cluster has them too (a patch of a node it has not: 404)
        fake.put("Node", body)
    asyncio.run(ctl.reconcile_nodes())
    assert ctl.breaker is not None and [
        d.node for d in ctl.breaker.by_action(ctl.breaker.decisions[0].action.__class__.quarantine)
    ] == ["g0"]
    if dry_run:
        assert fake.calls == []
    else:
        assert fake.calls == [
            ("patch", "Node", None),
            ("list", "Pod", None),
            ("evict", "Pod", "research"),
        ]
        assert fake.evicted == ["run-pod"]


def test_controller_run_refuses_a_bad_config_or_kubeconfig(tmp_path: Any) -> None:
    from conftest import run_tau

    bad = tmp_path / "ctl.yaml"
    bad.write_text("remediation: {max_unhealthy_share: 2}\n")
    res = run_tau(tmp_path, "controller", "run", "--config", str(bad))
    assert res.returncode == 2 and "remediation.max_unhealthy_share" in res.stderr
    assert "Traceback" not in res.stderr
    res = run_tau(tmp_path, "controller", "run", env={"KUBECONFIG": str(tmp_path / "none")})
    assert res.returncode == 4 and f"kubeconfig {tmp_path / 'none'}: no such file" in res.stderr
