"""The platform through the real Pulumi engine (built by `make pulumi`) on a sandbox that has no
platform yet: `tau platform up` creates it, a second `up` changes nothing, a config change
previews as exactly that change, researchers use what Pulumi made, and `destroy` removes it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import ROOT
from conftest import run_tau as tau
from sandboxkit import need_control_plane_and_pulumi

pytestmark = [pytest.mark.e2e, pytest.mark.engine]

pytest.importorskip("pulumi", reason="the platform extra (pulumi) is not installed")


TEAM_PASSPHRASE = "the team's passphrase"


@pytest.fixture(scope="module")
def bare(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A sandbox with the cluster only (`--no-platform`), in its own TAU_HOME, and the platform
    project as a team has it: a copy of Pulumi.yaml and the sandbox's stack file, `pulumi login`
    to a shared (file) backend, and the stack made by the stock CLI with the team's passphrase
    (`pulumi stack init`). Every tau command below finds the backend and the passphrase where
    `pulumi` does."""
    need_control_plane_and_pulumi()
    home = tmp_path_factory.mktemp("pulumihome")
    make_project(home)
    (home / "team-state").mkdir()
    assert pulumi_cli(home, "login", (home / "team-state").as_uri()).returncode == 0
    res = pulumi_cli(home, "stack", "init", "sandbox", "--secrets-provider", "passphrase")
    assert res.returncode == 0, res.stderr
    assert "encryptionsalt:" in stack_file(home).read_text()
    res = tau(home, "sandbox", "up", "--no-platform", "--real-nodes", "0")
    assert res.returncode == 0, res.stderr
    assert "tau platform up --stack sandbox" in res.stdout
    yield home
    tau(
        home,
        "platform",
        "destroy",
        "--stack",
        "sandbox",
        "--yes",
        *where(home),
        env=admin_env(home),
    )
    tau(home, "sandbox", "down")


def make_project(home: Path) -> Path:
    """The project's Pulumi.yaml and the sandbox's stack file (a plain copy, not the link), and
    the `main` folder the CLI checks for (the program itself runs inline here)."""
    project = home / "project"
    (project / "stacks").mkdir(parents=True)
    (project / "infra").mkdir()
    shutil.copy(ROOT / "Pulumi.yaml", project / "Pulumi.yaml")
    shutil.copy(ROOT / "stacks" / "Pulumi.sandbox.yaml", project / "stacks")
    return project


def stack_file(home: Path) -> Path:
    return home / "project" / "stacks" / "Pulumi.sandbox.yaml"


def where(home: Path) -> list[str]:
    return ["--stacks-dir", str(stack_file(home).parent)]


def pulumi_env(home: Path) -> dict[str, str]:
    """What the stock `pulumi` sees here: the same Pulumi home (its login) as tau's commands."""
    from taugrid.infra import engine

    return {
        **os.environ,
        "PULUMI_HOME": str(home / "pulumi-home"),
        "PULUMI_CONFIG_PASSPHRASE": TEAM_PASSPHRASE,
        "PULUMI_SKIP_UPDATE_CHECK": "true",
        "PATH": f"{engine.find_bin()}{os.pathsep}{os.environ['PATH']}",
    }


def pulumi_cli(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """The stock Pulumi CLI in the project (the commands that need no language host)."""
    env = {k: v for k, v in pulumi_env(home).items() if k != "PULUMI_BACKEND_URL"}
    return subprocess.run(
        ["pulumi", *args],
        cwd=home / "project",
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def admin_env(home: Path) -> dict[str, str]:
    return {
        "KUBECONFIG": tau(home, "sandbox", "kubeconfig").stdout.strip(),
        "PULUMI_CONFIG_PASSPHRASE": TEAM_PASSPHRASE,
    }


def platform(home: Path, *args: str, stacks: Path | None = None) -> dict[str, Any]:
    extra = ["--stacks-dir", str(stacks)] if stacks else where(home)
    res = tau(
        home,
        "platform",
        *args,
        "--stack",
        "sandbox",
        *extra,
        "-o",
        "json",
        env=admin_env(home),
        timeout=600,
    )
    assert res.returncode == 0, res.stderr
    return dict(json.loads(res.stdout))


def variant(home: Path, folder: Path, *changes: tuple[str, str]) -> Path:
    """The project's stack file with some changes (old, new), in a folder of its own (outside
    the project: tau runs it from its work folder, in the same backend)."""
    text = stack_file(home).read_text()
    for old, new in changes:
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    (folder / "Pulumi.sandbox.yaml").write_text(text)
    return folder


QUOTA_6, QUOTA_8 = (
    "nominalQuota: {cpu: 6, memory: 24Gi}\n",
    "nominalQuota: {cpu: 8, memory: 24Gi}\n",
)


def admin(home: Path) -> Any:
    from kubernetes import config, dynamic

    kc = admin_env(home)["KUBECONFIG"]
    return dynamic.DynamicClient(config.new_client_from_config(config_file=kc))


def names(home: Path, api_version: str, kind: str, namespace: str | None = None) -> set[str]:
    res = admin(home).resources.get(api_version=api_version, kind=kind)
    items = res.get(namespace=namespace).items if namespace else res.get().items
    return {o.metadata.name for o in items if not o.metadata.deletionTimestamp}


def test_up_creates_the_platform_and_a_second_up_changes_nothing(
    bare: Path, tmp_path: Path
) -> None:
    assert "tau.azure.com" not in {
        n.split(".", 1)[-1]
        for n in names(bare, "apiextensions.k8s.io/v1", "CustomResourceDefinition")
    }
    # without --yes and without a terminal to ask, nothing is applied
    res = tau(
        bare, "platform", "up", "--stack", "sandbox", *where(bare), env=admin_env(bare), timeout=300
    )
    assert res.returncode == 2 and "pass --yes" in res.stderr, res.stderr
    # its first line says where the state is: the backend `pulumi login` chose, the project
    first_line = res.stderr.splitlines()[0]
    assert (bare / "team-state").as_uri() in first_line and "pulumi login" in first_line
    assert str(bare / "project") in first_line

    first = platform(bare, "up", "--yes")
    assert first["changes"]["create"] > 40 and first["changes"]["delete"] == 0
    crds = names(bare, "apiextensions.k8s.io/v1", "CustomResourceDefinition")
    assert {"runs.tau.azure.com", "clusters.tau.azure.com", "workspaces.tau.azure.com"} <= crds
    assert names(bare, "tau.azure.com/v1alpha1", "TauCluster", "taugrid-system") == {"cluster"}
    # the shared queues, the teams' (and the spare one they borrow from), and the active
    # tier's validation queue (no quota of its own)
    assert names(bare, "kueue.x-k8s.io/v1beta2", "ClusterQueue") == {
        "gpu",
        "cpu",
        "spare",
        "vision",
        "nlp",
        "speech",
        "tau-validation",
    }
    assert names(bare, "kueue.x-k8s.io/v1beta2", "LocalQueue", "research") == {"gpu", "cpu"}
    assert names(bare, "kueue.x-k8s.io/v1beta2", "LocalQueue", "taugrid-validation") == {
        "validation"
    }

    again = platform(bare, "up", "--yes")
    assert again["changes"]["same"] == first["changes"]["create"]
    assert {k: v for k, v in again["changes"].items() if k != "same" and v} == {}
    assert again["steps"] == []

    # researchers use what Pulumi made: profiles from its TauCluster, a run through its queues
    env = {"KUBECONFIG": tau(bare, "sandbox", "kubeconfig", "--as", "researcher").stdout.strip()}
    profiles = json.loads(tau(bare, "profiles", "-o", "json", env=env).stdout)
    assert [p["name"] for p in profiles] == [
        "a100x1",
        "a100x2",
        "cpu",
        "t4x1-vision",
        "t4x1-nlp",
        "t4x1-speech",
    ]
    (tmp_path / "s.py").write_text("print('done')\n")
    (tmp_path / "tau.yaml").write_text(
        "schema_version: 1\nname: pu\nrun: {entrypoint: s.py, workload_kind: job}\n"
        "compute: {gpus: 0, cpus: 1, memory: 1Gi}\nruntime: {image: python:3.12-slim}\n"
    )
    res = tau(bare, "run", str(tmp_path), "--target", "kube", env=env, timeout=180)
    assert res.returncode == 0, res.stderr
    assert "[succeeded]" in res.stderr


def pulumi_way(home: Path) -> Any:
    """The stack as `pulumi` drives it: the project's own folder and settings (its Pulumi.yaml,
    its stack file), the CLI's login for the backend (no URL given), the program `pulumi up`
    runs (infra/__main__.py, inline here: no Python language host is served)."""
    import runpy

    from pulumi import automation as auto

    from taugrid.infra import engine

    env = {
        **pulumi_env(home),
        **admin_env(home),
        "PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION": "true",
    }
    env.pop("PULUMI_BACKEND_URL", None)
    return auto.select_stack(
        stack_name="sandbox",
        project_name="taugrid",
        program=lambda: runpy.run_path(str(ROOT / "infra" / "__main__.py")),
        opts=auto.LocalWorkspaceOptions(
            work_dir=str(home / "project"),
            env_vars=env,
            pulumi_command=auto.PulumiCommand(
                root=str(engine.find_bin().parent), skip_version_check=True
            ),
        ),
    )


def test_tau_and_pulumi_share_one_state(bare: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """One backend, one stack, one stack file: what `tau platform up` made is what `pulumi`
    sees (and unchanged), what `pulumi up` changes is what tau sees (tau used to keep its own
    private state: a plain `pulumi up` re-created all its objects, a plain destroy emptied the
    cluster while tau said "same"). The stack was made by the stock CLI with the team's
    passphrase; a wrong or missing passphrase is refused with the fix."""
    listed = json.loads(pulumi_cli(bare, "stack", "ls", "--json").stdout)
    (mine,) = [s for s in listed if s["name"] == "sandbox"]
    assert int(mine["resourceCount"]) > 40  # the stock CLI counts what tau created

    # the program reads KUBECONFIG where it runs (for the provider): in this process here
    monkeypatch.setenv("KUBECONFIG", admin_env(bare)["KUBECONFIG"])
    stack = pulumi_way(bare)
    events: list[Any] = []
    seen = stack.preview(color="never", on_event=events.append)
    pre = [e.resource_pre_event.metadata for e in events if e.resource_pre_event]
    changed = [(m.urn, m.diffs) for m in pre if m.op.value != "same"]
    assert {k for k, v in seen.change_summary.items() if v} == {"same"}, changed

    # the reverse: a quota change applied the stock way is in the state tau reads
    original = stack_file(bare).read_text()
    stack_file(bare).write_text(original.replace(QUOTA_6, QUOTA_8))
    try:
        assert stack.up(color="never").summary.resource_changes.get("update") == 1
        assert platform(bare, "preview")["steps"] == []  # tau: nothing left to apply
    finally:
        stack_file(bare).write_text(original)
    back = platform(bare, "up", "--yes")
    assert back["changes"]["update"] == 1 and back["backend"] == (bare / "team-state").as_uri()

    env = admin_env(bare)
    res = tau(
        bare,
        "platform",
        "preview",
        "--stack",
        "sandbox",
        *where(bare),
        env={**env, "PULUMI_CONFIG_PASSPHRASE": "a guess"},
        timeout=300,
    )
    assert res.returncode == 4, res.stderr
    assert "not the one the stack was created with" in res.stderr and "Traceback" not in res.stderr
    res = tau(
        bare,
        "platform",
        "preview",
        "--stack",
        "sandbox",
        *where(bare),
        env={"KUBECONFIG": env["KUBECONFIG"]},
        timeout=300,
    )
    assert res.returncode == 4, res.stderr
    assert "PULUMI_CONFIG_PASSPHRASE" in res.stderr and str(stack_file(bare)) in res.stderr


def test_a_config_change_previews_as_exactly_that_change(bare: Path, tmp_path: Path) -> None:
    variant(bare, tmp_path, (QUOTA_6, QUOTA_8))
    preview = platform(bare, "preview", stacks=tmp_path)
    (step,) = preview["steps"]
    assert (step["op"], step["name"]) == ("update", "kueue-queues:cpu")
    assert step["type"].endswith("kueue.x-k8s.io/v1beta2:ClusterQueue")
    assert preview["changes"]["update"] == 1
    assert sum(v for k, v in preview["changes"].items() if k != "same") == 1
    # what changes, field by field, with its old and new value (the engine's diffs were [])
    (change,) = step["changes"]
    assert change["field"].endswith("nominalQuota") and "[cpu]" in change["field"], change
    assert (str(change["old"]), str(change["new"])) == ("6", "8")
    assert step["diffs"] == ["spec"]
    # and nothing was applied: the stack file as it is still previews clean
    assert platform(bare, "preview")["steps"] == []


def test_a_mandatory_policy_violation_blocks_up_and_changes_nothing(
    bare: Path, tmp_path: Path
) -> None:
    """TauGrid's policy pack runs in the real engine (as an executable pack: no Python language
    host): a floating version in the stack's version lock stops `up` before anything changes."""
    variant(
        bare,
        tmp_path,
        (QUOTA_6, QUOTA_8),
        ("kuberay: {install: external}", "kuberay: {install: external, version: latest}"),
    )
    before = platform(bare, "preview")["changes"]
    res = tau(
        bare,
        "platform",
        "up",
        "--stack",
        "sandbox",
        "--stacks-dir",
        str(tmp_path),
        "--yes",
        env=admin_env(bare),
        timeout=300,
    )
    assert res.returncode == 4, res.stderr
    assert "mandatory policy violation" in res.stderr and "nothing was changed" in res.stderr
    assert "versions-pinned: component kuberay has version 'latest'" in res.stderr
    # the quota change in the same config was not applied either
    assert platform(bare, "preview")["changes"] == before
    cpu = admin(bare).resources.get(api_version="kueue.x-k8s.io/v1beta2", kind="ClusterQueue")
    quota = cpu.get(name="cpu").spec.resourceGroups[0].flavors[0].resources[0].nominalQuota
    assert quota == "6"
    # the same config without the checks would go through: the pack is what stopped it
    res = tau(
        bare,
        "platform",
        "preview",
        "--stack",
        "sandbox",
        "--stacks-dir",
        str(tmp_path),
        "--no-policies",
        "-o",
        "json",
        env=admin_env(bare),
        timeout=300,
    )
    assert res.returncode == 0, res.stderr


def test_a_controller_grant_survives_pulumi_up_of_a_new_base_quota(
    bare: Path, tmp_path: Path
) -> None:
    """Ownership with the real engine: the controller's grant (the quota of the queue's grant
    cohort, field manager taugrid-controller) and Pulumi's declarations (the queue's base quota,
    the cohort's parent) are different fields: `up` with a new base quota neither conflicts nor
    reverts the grant, and the next `up` sees no drift."""
    dyn = admin(bare)
    cohorts = dyn.resources.get(api_version="kueue.x-k8s.io/v1beta2", kind="Cohort")
    cqs = dyn.resources.get(api_version="kueue.x-k8s.io/v1beta2", kind="ClusterQueue")
    grant = [
        {
            "coveredResources": ["cpu"],
            "flavors": [
                {
                    "name": "cpu",
                    "resources": [{"name": "cpu", "nominalQuota": "2", "lendingLimit": "0"}],
                }
            ],
        }
    ]
    cohorts.server_side_apply(
        body={
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "Cohort",
            "metadata": {"name": "tau-grants-cpu"},
            "spec": {"resourceGroups": grant},
        },
        field_manager="taugrid-controller",
        force_conflicts=True,
    )
    variant(bare, tmp_path, (QUOTA_6, QUOTA_8))
    try:
        up = platform(bare, "up", "--yes", stacks=tmp_path)
        assert up["changes"]["update"] == 1
        assert (
            cqs.get(name="cpu").spec.resourceGroups[0].flavors[0].resources[0].nominalQuota == "8"
        )
        got = cohorts.get(name="tau-grants-cpu").to_dict()["spec"]
        assert got["parentName"] == "sandbox" and got["resourceGroups"] == grant
        assert platform(bare, "preview", stacks=tmp_path)["steps"] == []  # no drift seen
    finally:
        platform(bare, "up", "--yes")
    assert cohorts.get(name="tau-grants-cpu").to_dict()["spec"]["resourceGroups"] == grant


def test_drift_is_seen_and_repaired(bare: Path) -> None:
    """On a cluster changed out of band (a ClusterQueue and a workspace's namespace deleted by
    hand), `up` used to print "same" from the state's memory. `preview --refresh` shows both,
    `tau platform refresh` reports them, `up --refresh` puts them back."""
    from kubekit import wait_until

    dyn = admin(bare)
    dyn.resources.get(api_version="kueue.x-k8s.io/v1beta2", kind="ClusterQueue").delete(name="cpu")
    namespaces = dyn.resources.get(api_version="v1", kind="Namespace")
    namespaces.delete(name="llm")

    def gone() -> bool:  # not just terminating: a terminating namespace still exists
        from kubernetes.dynamic.exceptions import NotFoundError

        try:
            namespaces.get(name="llm")
        except NotFoundError:
            return True
        return False

    wait_until(gone, timeout=180, what="the namespace to be gone")
    assert "cpu" not in names(bare, "kueue.x-k8s.io/v1beta2", "ClusterQueue")
    seen = platform(bare, "preview", "--refresh")
    created = {
        (st["type"].rsplit(":", 1)[-1], st["name"]) for st in seen["steps"] if st["op"] == "create"
    }
    assert ("ClusterQueue", "kueue-queues:cpu") in created or any(
        t == "ClusterQueue" and n.endswith("cpu") for t, n in created
    ), created
    assert any(t == "Namespace" and "llm" in n for t, n in created), created
    drift = platform(bare, "refresh")["drift"]
    gone = {d["name"] for d in drift if d["drift"] == "gone"}
    assert any(n.endswith("cpu") for n in gone) and any("llm" in n for n in gone), drift
    platform(bare, "up", "--refresh", "--yes")
    assert "cpu" in names(bare, "kueue.x-k8s.io/v1beta2", "ClusterQueue")
    assert "llm" in names(bare, "v1", "Namespace")
    assert platform(bare, "preview", "--refresh")["steps"] == []  # nothing left to repair


def test_destroy_removes_everything_it_created(bare: Path) -> None:
    created = platform(bare, "preview")["changes"]["same"]
    gone = platform(bare, "destroy", "--yes")
    assert gone["changes"]["delete"] == created
    crds = names(bare, "apiextensions.k8s.io/v1", "CustomResourceDefinition")
    assert not {c for c in crds if c.endswith(".tau.azure.com")}
    assert names(bare, "kueue.x-k8s.io/v1beta2", "ClusterQueue") == set()
    assert not {"research", "llm", "taugrid-system"} & names(bare, "v1", "Namespace")
    # the external components stay: they were never the stack's
    assert "clusterqueues.kueue.x-k8s.io" in crds


def test_a_ci_cluster_verifies_a_lock_which_then_promotes(bare: Path, tmp_path: Path) -> None:
    """ci up --from dev on the sandbox (the CI template here targets it), down --passed records
    dev's lock, and only then does promote dev staging write it; reap destroys expired ones."""
    stacks = tmp_path / "stacks"
    shutil.copytree(ROOT / "stacks", stacks)  # links followed: plain files
    dev = stacks / "Pulumi.dev.yaml"
    dev.write_text(
        dev.read_text().replace(
            "      nodeProblemDetector: {enabled: true}\n",
            "      nodeProblemDetector: {enabled: true}\n      kueue: {version: 0.19.3}\n",
            1,
        )
    )
    (stacks / "Pulumi.ci.yaml").write_text((ROOT / "stacks" / "Pulumi.sandbox.yaml").read_text())
    env, where = admin_env(bare), ["--stacks-dir", str(stacks)]

    def ci(*args: str) -> Any:
        return tau(bare, "platform", "ci", *args, env=env, timeout=600)

    assert tau(bare, "platform", "promote", "dev", "staging", "--yes", *where).returncode == 2
    res = ci("up", "--name", "e2e1", "--from", "dev", "--ttl", "1h", *where)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip().splitlines()[-1] == "e2e1"
    tc = admin(bare).resources.get(api_version="tau.azure.com/v1alpha1", kind="TauCluster")
    assert tc.get(name="cluster", namespace="taugrid-system").spec.components.kueue == "0.19.3"
    # a second pipeline on this one existing cluster is refused, not merged into the first
    res = ci("up", "--name", "e2e2", *where)
    assert res.returncode == 4 and "holds one CI platform at a time" in res.stderr
    (listed,) = json.loads(ci("list", "-o", "json").stdout)
    assert (listed["id"], listed["from"], listed["expired"]) == ("e2e1", "dev", False)

    res = ci("down", "e2e1", "--passed", *where)
    assert res.returncode == 0, res.stderr
    assert "recorded: dev's version lock" in res.stderr
    assert (
        json.loads((stacks / "verified" / "dev.json").read_text())["records"][0]["verifiedOn"]
        == "ci-e2e1"
    )
    res = tau(bare, "platform", "promote", "dev", "staging", "--yes", *where)
    assert res.returncode == 0, res.stderr
    assert "kueue: {version: 0.19.3}" in (stacks / "Pulumi.staging.yaml").read_text() or (
        "version: 0.19.3" in (stacks / "Pulumi.staging.yaml").read_text()
    )

    # expired CI stacks are destroyed by reap (its 1 s are over once up returns)
    assert ci("up", "--name", "e2e3", "--ttl", "1s", *where).returncode == 0
    res = ci("reap", "-o", "json")
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout) == {"reaped": ["e2e3"]}
    assert json.loads(ci("list", "-o", "json").stdout) == []
    assert names(bare, "kueue.x-k8s.io/v1beta2", "ClusterQueue") == set()
