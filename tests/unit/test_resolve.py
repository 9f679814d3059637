"""Profile resolution: explicit, single match, ambiguity, bounds with numbers."""

from __future__ import annotations

from typing import Any

import pytest

from taugrid.api.manifest import Manifest
from taugrid.api.profiles import ProfileSnapshot, profile_set_hash
from taugrid.runs.resolve import ResolutionError, resolve


def prof(name: str, gpus: int, cpu: int = 22, mem: str = "200Gi", **kw: Any) -> dict[str, Any]:
    return {
        "name": name,
        "gpusPerWorker": gpus,
        "allocatable": {"cpu": cpu, "memory": mem},
        "flavor": name,
        "clusterQueue": "q",
        "localQueue": "q",
        "priorityClasses": ["low", "normal"],
        "defaultPriority": "normal",
        **kw,
    }


def snap(*profiles: dict[str, Any], workspaces: int = 1) -> ProfileSnapshot:
    ws = [{"name": f"ws{i}", "namespace": f"ns{i}", "pvc": f"pvc{i}"} for i in range(workspaces)]
    return ProfileSnapshot.model_validate(
        {"cluster": "c", "profiles": list(profiles), "workspaces": ws}
    )


def man(**compute: Any) -> Manifest:
    extra = compute.pop("_extra", {})
    return Manifest.model_validate(
        {
            "schema_version": 1,
            "name": "r",
            "run": {"entrypoint": "t.py"},
            "compute": compute,
            "runtime": {"image": "img"},
            **extra,
        }
    )


def test_single_match_is_picked() -> None:
    r = resolve(man(gpus=1), snap(prof("cpu", 0, 8, "32Gi"), prof("a100", 1)))
    assert r.profile.name == "a100" and r.kind == "job" and r.namespace == "ns0" and r.pvc == "pvc0"


def test_cpu_runs_never_land_on_gpu_profiles_by_default() -> None:
    r = resolve(man(gpus=0, workers=2), snap(prof("cpu", 0, 8, "32Gi"), prof("a100", 1)))
    assert r.profile.name == "cpu" and r.kind == "rayjob"


def test_exact_gpu_shape_preferred_then_ambiguity() -> None:
    s = snap(prof("a100-1x", 1), prof("a100-8x", 8, 96, "1800Gi"))
    assert resolve(man(gpus=1), s).profile.name == "a100-1x"
    s2 = snap(prof("a", 8, 96, "1800Gi"), prof("b", 8, 96, "1800Gi"))
    with pytest.raises(ResolutionError) as e:
        resolve(man(gpus=2), s2)
    assert (
        "several profiles fit" in e.value.message
        and "a (" in e.value.message
        and "b (" in e.value.message
    )


def test_explicit_profile_bounds_refused_with_numbers() -> None:
    s = snap(prof("a100-1x", 1, 22, "200Gi", maxWorkers=4))
    with pytest.raises(ResolutionError) as e:
        resolve(
            man(
                gpus=2,
                workers=6,
                worker_cpus=30,
                worker_memory="300Gi",
                _extra={"policy": {"profile": "a100-1x"}},
            ),
            s,
        )
    msg = e.value.message
    assert "compute.gpus=2 exceeds profile a100-1x: nodes have 1 GPU" in msg
    assert "compute.workers=6 exceeds profile a100-1x: at most 4 workers" in msg
    assert "compute.worker_cpus=30 exceeds profile a100-1x: a node has 22 allocatable CPUs" in msg
    assert (
        "compute.worker_memory=300Gi exceeds profile a100-1x: a node has 200Gi allocatable memory"
        in msg
    )


def test_requests_within_bounds_are_honoured() -> None:
    r = resolve(man(gpus=1, cpus="500m", memory="3Gi"), snap(prof("a100", 1)))
    res = r.worker.resources()
    assert res["requests"] == {"cpu": "500m", "memory": "3Gi"} and res["limits"] == res["requests"]


def test_default_size_is_the_gpu_share_of_a_node() -> None:
    r = resolve(man(gpus=2), snap(prof("a100-4x", 4, 96, "880Gi")))
    assert r.worker.resources()["requests"] == {"cpu": "48", "memory": "440Gi"}
    r = resolve(
        man(gpus=1), snap(prof("p", 1, 8, "32Gi", workerDefaults={"cpu": 4, "memory": "16Gi"}))
    )
    assert r.worker.resources()["requests"] == {"cpu": "4", "memory": "16Gi"}


def test_workspace_restriction_and_choice() -> None:
    s = snap(prof("a100", 1, workspaces=["ws1"]), workspaces=2)
    with pytest.raises(ResolutionError, match="which workspace"):
        resolve(man(gpus=1), s)
    with pytest.raises(ResolutionError, match="offers 1 GPU"):
        resolve(man(gpus=1), s, workspace="ws0")
    assert resolve(man(gpus=1), s, workspace="ws1").namespace == "ns1"
    with pytest.raises(ResolutionError, match="not available to workspace"):
        resolve(man(gpus=1), s, workspace="ws0", profile="a100")


def test_priority_queue_namespace_and_image_rules() -> None:
    s = snap(prof("cpu", 0, 8, "32Gi"))
    assert resolve(man(_extra={"policy": {"priority": "low"}}), s).priority == "low"
    with pytest.raises(ResolutionError, match="allowed: low, normal"):
        resolve(man(_extra={"policy": {"priority": "urgent"}}), s)
    with pytest.raises(ResolutionError, match="conflicts with profile cpu"):
        resolve(man(_extra={"policy": {"queue": "other"}}), s)
    with pytest.raises(ResolutionError, match="namespace is 'ns0'"):
        resolve(man(_extra={"policy": {"namespace": "elsewhere"}}), s)
    no_image = Manifest.model_validate(
        {"schema_version": 1, "name": "r", "run": {"entrypoint": "t.py"}}
    )
    with pytest.raises(ResolutionError, match=r"runtime.image is required"):
        resolve(no_image, s)


def test_mig_profile_changes_the_gpu_resource() -> None:
    r = resolve(man(gpus=1, mig_profile="1g.10gb"), snap(prof("a100", 1)))
    assert r.gpu_resource == "nvidia.com/mig-1g.10gb"


def test_snapshot_rejects_duplicates_and_bad_default_workspace() -> None:
    with pytest.raises(ValueError, match="unique"):
        snap(prof("a", 1), prof("a", 1))
    with pytest.raises(ValueError, match="defaultWorkspace"):
        ProfileSnapshot.model_validate({"cluster": "c", "profiles": [], "defaultWorkspace": "x"})


def test_profile_set_hash_is_order_independent() -> None:
    s = snap(prof("a", 1), prof("b", 2))
    assert profile_set_hash(list(s.profiles)) == profile_set_hash(list(reversed(s.profiles)))
    changed = snap(prof("a", 1), prof("b", 4))
    assert profile_set_hash(list(s.profiles)) != profile_set_hash(list(changed.profiles))


def test_an_image_the_cluster_mirrors_runs_as_its_mirror_and_keeps_its_ray_version() -> None:
    from taugrid.runs.render import ray_version

    mirrors = [
        {"match": "rayproject/ray:*", "image": "local/runtime:1"},
        {"match": "python:3.*", "image": "local/py:1"},
        {"match": "*", "image": "never-reached-for-ray"},
    ]
    s = ProfileSnapshot.model_validate(
        {**snap(prof("cpu", 0, 8, "32Gi")).model_dump(), "imageMirrors": mirrors}
    )

    def image(named: str) -> tuple[str, str]:
        m = man(_extra={"runtime": {"image": named}})
        r = resolve(m, s)
        return r.image, r.named_image

    assert image("rayproject/ray:2.56.0-py312") == (
        "local/runtime:1",
        "rayproject/ray:2.56.0-py312",
    )
    assert image("docker.io/rayproject/ray:2.9.0") == (
        "local/runtime:1",
        "docker.io/rayproject/ray:2.9.0",
    )
    assert image("python:3.11-slim") == ("local/py:1", "python:3.11-slim")
    assert image("docker.io/library/python:3.12") == ("local/py:1", "docker.io/library/python:3.12")
    assert image("python:2.7")[0] == "never-reached-for-ray"  # the first match wins, in order
    assert ray_version("rayproject/ray:2.56.0-py312") == "2.56.0"
    # no mirrors: the image as named
    r = resolve(man(_extra={"runtime": {"image": "python:3.11"}}), snap(prof("cpu", 0, 8, "32Gi")))
    assert r.image == r.named_image == "python:3.11"
    with pytest.raises(ValueError):
        ProfileSnapshot.model_validate({**s.model_dump(), "imageMirrors": [{"match": ""}]})


def test_a_cluster_that_pulls_nothing_refuses_an_image_no_mirror_covers() -> None:
    """The sandbox's real nodes (an air-gapped AKS too): a run whose image no mirror covers
    would wait in ImagePullBackOff forever; it is refused at submission, naming what it has."""
    mirrors = [{"match": "rayproject/ray:*", "image": "local/runtime:1"}]
    base = snap(prof("cpu", 0, 8, "32Gi")).model_dump()
    s = ProfileSnapshot.model_validate({**base, "imageMirrors": mirrors, "imageMirrorsOnly": True})

    def resolved(named: str) -> str:
        return resolve(man(_extra={"runtime": {"image": named}}), s).image

    assert resolved("rayproject/ray:2.56.0-py312") == "local/runtime:1"
    assert resolved("local/runtime:1") == "local/runtime:1"  # an image it has, named directly
    with pytest.raises(ResolutionError) as e:
        resolved("ghcr.io/acme/trainer:7")
    msg = e.value.render()
    assert "ghcr.io/acme/trainer:7" in msg and "pull no image" in msg
    assert "rayproject/ray:* (as local/runtime:1)" in msg and "imageMirrors" in msg
    # a cluster that pulls: any image goes, as named
    pulls = ProfileSnapshot.model_validate({**base, "imageMirrors": mirrors})
    assert resolve(man(_extra={"runtime": {"image": "ghcr.io/acme/trainer:7"}}), pulls).image == (
        "ghcr.io/acme/trainer:7"
    )
