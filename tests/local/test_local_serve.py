"""`tau serve` on the local Ray head with real Ray Serve and real HTTP requests (127.0.0.1):
a model trained by a run, registered, served by alias (pinned to its version), rolled out and
rolled back under 20 requests/s with no request failed, scaled to zero and woken by a request,
and deploys that cannot work refused or undone with nothing left deployed."""

from __future__ import annotations

import json
import re
import shutil
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from localkit import EXAMPLES, Tau, have_ray, wait_for
from servekit import BODY, Load

from taugrid.host.ports import listens
from taugrid.host.procs import still_running, tree

pytestmark = pytest.mark.skipif(not have_ray(), reason="Ray is not installed")


def ok(res: Any) -> Any:
    assert res.returncode == 0, res.stdout + res.stderr
    return res


def status(tau: Tau, name: str) -> dict[str, Any]:
    return dict(json.loads(ok(tau("serve", "status", name, "-o", "json")).stdout))


@pytest.fixture()
def example(tau: Tau, tmp_path: Path) -> Iterator[tuple[Path, list[str]]]:
    """The example trained once here, its best and latest checkpoints registered as two
    versions of model `iris` (prod -> the first); the services are deleted afterwards."""
    folder = tmp_path / "serve-model"
    shutil.copytree(EXAMPLES / "serve-model", folder)
    res = ok(tau("run", str(folder)))
    run_id = re.search(r"run (iris-\w+)", res.stderr).group(1)  # type: ignore[union-attr]
    versions = []
    for which in ("best", "latest"):
        reg = ok(
            tau(
                "data",
                "model",
                "register",
                "iris",
                "--from-run",
                run_id,
                "--checkpoint",
                which,
                "-o",
                "json",
            )
        )
        versions.append(json.loads(reg.stdout)["version"])
    assert versions[0] != versions[1]
    ok(tau("data", "model", "alias", "set", "iris", "prod", versions[0]))
    yield folder, versions
    for name in json.loads(tau("serve", "list", "-o", "json").stdout or "[]"):
        tau("serve", "delete", name["name"])


def test_serve_a_run_s_model_roll_out_and_back_under_load(
    tau: Tau, example: tuple[Path, list[str]]
) -> None:
    folder, (v1, v2) = example
    res = ok(tau("serve", "deploy", str(folder), "-o", "json"))
    st = json.loads(res.stdout)
    assert (st["phase"], st["revision"], st["serving"]) == ("Ready", 1, True)
    assert st["model"] == f"iris@{v1[:19]}"
    url = st["endpoint"]
    assert re.fullmatch(r"http://127\.0\.0\.1:\d+/iris", url)
    # a real request, answered by the pinned version
    ans = json.loads(ok(tau("serve", "invoke", "iris", "--data", BODY.decode())).stdout)
    assert ans["classes"] == ["virginica"] and ans["model_version"] == v1
    # the alias moves: the running revision does not (it was pinned at deploy time)
    ok(tau("data", "model", "alias", "set", "iris", "prod", v2, "--expect", v1))
    assert status(tau, "iris")["model"] == f"iris@{v1[:19]}"

    with Load(url, 20, at_least_s=60) as load:  # 20 requests/s for (at least) 60 s
        wait_for(lambda: sum(load.answers.values()) >= 40, 60, "load answered")
        out = ok(tau("serve", "rollout", "iris", "-o", "json", timeout=300))
        after = json.loads(out.stdout)
        assert (after["revision"], after["model"], after["phase"]) == (
            2,
            f"iris@{v2[:19]}",
            "Ready",
        )
        assert "rolling out revision 2 (rolling) over revision 1" in out.stderr
        seen = sum(load.answers.values())
        wait_for(lambda: sum(load.answers.values()) >= seen + 100, 60, "load on revision 2")
        back = ok(tau("serve", "rollback", "iris", "-o", "json", timeout=300))
        assert json.loads(back.stdout)["revision"] == 1
        seen = sum(load.answers.values())
        wait_for(lambda: sum(load.answers.values()) >= seen + 100, 60, "load on revision 1 again")
    assert load.failures == [], load.failures[:5]
    assert sum(load.answers.values()) >= 20 * 60 * 0.9  # the pace held: ~1,200 requests
    assert load.answers["1"] > 0 and load.answers["2"] > 0
    final = status(tau, "iris")
    assert final["revision"] == 1 and final["serving"] is True
    kinds = [e["kind"] for e in final["events"]]
    assert kinds[:1] == ["deploy"] and "rollout" in kinds and "rollback" in kinds
    assert kinds.count("rolled-out") >= 2
    assert [r["state"] for r in final["revisions"]] == ["serving", "previous"]
    # the same config and model again is no new revision: it is revision 2 again
    again = ok(tau("serve", "rollout", "iris", "--model", f"iris@{v2}", "-o", "json", timeout=300))
    assert json.loads(again.stdout)["revision"] == 2
    assert len(status(tau, "iris")["revisions"]) == 2


def test_scale_to_zero_and_the_first_request_is_answered(
    tau: Tau, example: tuple[Path, list[str]]
) -> None:
    folder, (v1, _) = example
    text = (
        (folder / "tau.yaml")
        .read_text()
        .replace(
            "  replicas: 1\n",
            "  autoscaling: {min_replicas: 0, max_replicas: 1, downscale_delay_s: 1, "
            "upscale_delay_s: 0}\n",
        )
    )
    (folder / "tau.yaml").write_text(text)
    st = json.loads(ok(tau("serve", "deploy", str(folder), "--name", "iris0", "-o", "json")).stdout)
    assert st["scale"] == "0..1 replicas (autoscaling)"
    wait_for(lambda: status(tau, "iris0")["phase"] == "ScaledToZero", 120, "scaled to zero")
    idle = status(tau, "iris0")
    assert idle["replicas"]["ready"] == 0 and "next request starts a replica" in idle["summary"]
    ans = json.loads(
        ok(tau("serve", "invoke", "iris0", "--data", BODY.decode(), timeout=120)).stdout
    )
    assert ans["model_version"] == v1  # answered while a replica started: not dropped
    ok(tau("serve", "scale", "iris0", "--replicas", "1"))
    assert status(tau, "iris0")["replicas"]["ready"] == 1
    # sizes that cannot work are refused, with the fix, and nothing of them is recorded
    zero = tau("serve", "scale", "iris0", "--replicas", "0")
    assert zero.returncode == 2 and "--min 0 --max N" in zero.stderr, zero.stderr
    many = tau("serve", "scale", "iris0", "--replicas", "64")
    assert many.returncode == 2 and "the local Ray head has" in many.stderr, many.stderr
    assert "wait forever" in many.stderr and "Traceback" not in zero.stderr + many.stderr
    after = status(tau, "iris0")
    assert after["scale"] == "1 replica", after["scale"]
    scaled = [e["message"] for e in after["events"] if e["kind"] == "scale"]
    assert not any(m.startswith(("64 ", "0 replicas")) for m in scaled), scaled
    # `tau local stop` returns once every process of the head (Serve's proxy and replicas
    # too, which Ray starts outside the head's process group) has ended and its ports closed
    port = int(re.search(r":(\d+)", after["endpoint"]).group(1))  # type: ignore[union-attr]
    head = json.loads((tau.home / "ray" / "head.json").read_text())
    procs = tree(int(head["pid"]))
    assert len(procs) > 3 and listens(port)
    ok(tau("local", "stop", timeout=120))
    assert not listens(port), f"Serve's proxy still listens on {port}"
    assert still_running(procs) == []


def test_deploys_that_cannot_work_leave_nothing_deployed(
    tau: Tau, example: tuple[Path, list[str]]
) -> None:
    folder, _ = example
    # an import path that does not import: refused before Ray Serve sees it
    (folder / "tau.yaml").write_text(
        (folder / "tau.yaml").read_text().replace("serve_app:app", "serve_appp:app")
    )
    res = tau("serve", "deploy", str(folder), "--name", "typo")
    assert res.returncode == 2 and "module 'serve_appp' does not import" in res.stderr, res.stderr
    assert not (tau.home / "services" / "typo").exists()
    # an application whose replicas fail to start: undone, the evidence kept aside
    (folder / "tau.yaml").write_text(
        (folder / "tau.yaml").read_text().replace("serve_appp:app", "serve_app:app")
    )
    (folder / "serve_app.py").write_text(
        (folder / "serve_app.py").read_text().replace('"model.json"', '"missing.json"')
    )
    res = tau("serve", "deploy", str(folder), "--name", "nomodel", timeout=400)
    assert res.returncode == 1, res.stderr
    assert "revision 1 failed to deploy" in res.stderr and "nothing is left deployed" in res.stderr
    assert "missing.json" in res.stderr, res.stderr  # the replica's own error, not Ray's words
    later = tau("serve", "status", "nomodel")  # the deploy is undone; status still says why
    assert later.returncode == 2 and "its deploy failed" in later.stderr, later.stderr
    assert "missing.json" in later.stderr
    assert not (tau.home / "services" / "nomodel").exists()
    assert any(
        p.name.startswith("nomodel-") for p in (tau.home / "services" / ".deleted").iterdir()
    )
    listed = json.loads(ok(tau("serve", "list", "-o", "json")).stdout)
    assert "nomodel" not in [s["name"] for s in listed]


def test_a_failed_rollout_is_rolled_back_and_names_are_not_taken_twice(
    tau: Tau, example: tuple[Path, list[str]]
) -> None:
    folder, (v1, _) = example
    ok(tau("serve", "deploy", str(folder), "--name", "guarded"))
    clash = tau("serve", "deploy", str(folder), "--name", "guarded")
    assert clash.returncode == 2 and "service 'guarded' exists" in clash.stderr
    assert "tau serve rollout guarded" in clash.stderr
    (folder / "serve_app.py").write_text(
        (folder / "serve_app.py").read_text().replace('"model.json"', '"missing.json"')
    )
    res = tau("serve", "rollout", "guarded", timeout=600)
    assert res.returncode == 1, res.stderr
    assert "revision 2 failed; revision 1 serves again" in res.stderr
    st = status(tau, "guarded")
    assert (st["revision"], st["phase"], st["serving"]) == (1, "Ready", True)
    ans = json.loads(ok(tau("serve", "invoke", "guarded", "--data", BODY.decode())).stdout)
    assert ans["model_version"] == v1
    gone = ok(tau("serve", "delete", "guarded"))
    assert "deleted guarded" in gone.stdout
    assert tau("serve", "status", "guarded").returncode == 2
    # the name is free again, and Ray Serve no longer has the application
    assert "guarded" not in ok(tau("serve", "list")).stdout


def answered_by(url: str, n: int) -> Counter[str]:
    """`n` requests in a row: which revision answered each (the body and the split's header)."""
    seen: Counter[str] = Counter()
    for _ in range(n):
        req = urllib.request.Request(
            url, data=BODY, method="POST", headers={"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(req, timeout=60) as resp:
            rev = json.loads(resp.read())["revision"]
            assert resp.headers.get("x-tau-revision") in (None, rev)
            seen[rev] += 1
    return seen


def test_a_canary_takes_its_share_then_ends_or_is_promoted_under_load(
    tau: Tau, example: tuple[Path, list[str]]
) -> None:
    folder, (v1, v2) = example
    st = json.loads(ok(tau("serve", "deploy", str(folder), "--name", "cy", "-o", "json")).stdout)
    url = st["endpoint"]
    # a canary of the second model: 20 of every 100 requests, exactly (a deterministic split)
    res = ok(
        tau(
            "serve",
            "rollout",
            "cy",
            "--model",
            f"iris@{v2}",
            "--strategy",
            "canary",
            "--step",
            "20",
            "-o",
            "json",
            timeout=300,
        )
    )
    st = json.loads(res.stdout)
    assert (st["phase"], st["revision"]) == ("Canary", 1), st["summary"]
    assert st["rollout"]["traffic"] == {"2": 20, "1": 80}
    assert answered_by(url, 100) == Counter({"1": 80, "2": 20})
    # nothing else changes the service while the canary runs
    res = tau("serve", "rollout", "cy", "--model", f"iris@{v1}")
    assert res.returncode == 2 and "waits for the canary of revision 2" in res.stderr
    # rollback ends it: every request to revision 1 again, none failed while the route moved
    with Load(url, 20) as load:
        wait_for(lambda: sum(load.answers.values()) >= 40, 60, "load answered")
        back = json.loads(ok(tau("serve", "rollback", "cy", "-o", "json", timeout=300)).stdout)
        seen = sum(load.answers.values())
        wait_for(lambda: sum(load.answers.values()) >= seen + 40, 60, "load after the rollback")
    assert load.failures == [], load.failures[:5]
    assert (back["phase"], back["revision"], back["rollout"]) == ("Ready", 1, None)
    assert answered_by(url, 20) == Counter({"1": 20})
    for bad in (["--step", "20"], ["--strategy", "canary", "--step", "100"]):
        res = tau("serve", "rollout", "cy", "--model", f"iris@{v2}", *bad)
        assert res.returncode == 2 and "--step" in res.stderr, res.stderr
    assert status(tau, "cy")["revision"] == 1
    # a canary again (the kept revision 2), then promoted under load: revision 2 takes all
    st = json.loads(
        ok(
            tau(
                "serve",
                "rollout",
                "cy",
                "--model",
                f"iris@{v2}",
                "--strategy",
                "canary",
                "--step",
                "50",
                "-o",
                "json",
                timeout=300,
            )
        ).stdout
    )
    assert st["phase"] == "Canary" and len(st["revisions"]) == 2  # no new revision
    with Load(url, 20) as load:
        wait_for(lambda: sum(load.answers.values()) >= 40, 60, "load answered")
        up = json.loads(ok(tau("serve", "promote", "cy", "-o", "json", timeout=300)).stdout)
        seen = sum(load.answers.values())
        wait_for(lambda: sum(load.answers.values()) >= seen + 40, 60, "load after the promote")
    assert load.failures == [], load.failures[:5]
    assert (up["phase"], up["revision"], up["model"]) == ("Ready", 2, f"iris@{v2[:19]}")
    assert answered_by(url, 20) == Counter({"2": 20})
    kinds = [e["kind"] for e in status(tau, "cy")["events"]]
    assert kinds.count("canary") == 2 and "canary-ended" in kinds and "promote" in kinds
    res = tau("serve", "promote", "cy")
    assert res.returncode == 2 and "nothing to promote" in res.stderr
    # nothing of the canary is left on the head
    ok(tau("serve", "delete", "cy"))
