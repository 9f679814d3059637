"""A run a researcher submitted, looked at by the platform admin on the same machine with the
admin kubeconfig (contexts admin and taugrid-sandbox, not the researcher's): the recorded
context yields to the current one (said once), to --context and to TAU_CONTEXT; a cancel
goes through the admin's context; a second cluster holding a TauRun of the same name is
refused, naming both."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from conftest import run_tau as tau
from sandboxkit import admin, gpu_rayjob, kube_env

from taugrid.api import constants as C

pytestmark = pytest.mark.e2e


def _contexts(kubeconfig: str) -> list[str]:
    return [c["name"] for c in json.loads(Path(kubeconfig).read_text())["contexts"]]


def test_the_admin_looks_at_and_cancels_a_researchers_run(sandbox: Path, tmp_path: Path) -> None:
    researcher = kube_env(sandbox)
    admin_env = {**kube_env(sandbox, "admin"), "TAU_CONTEXT": ""}
    recorded = _contexts(researcher["KUBECONFIG"])[0]
    assert recorded not in _contexts(admin_env["KUBECONFIG"])  # the situation
    project = tmp_path / "p"
    project.mkdir()
    gpu_rayjob(project, "ctx-run")  # runs until cancelled
    res = tau(sandbox, "run", str(project), "-d", env=researcher)
    assert res.returncode == 0, res.stderr
    run_id = res.stdout.strip()
    try:
        plain = tau(sandbox, "run", "status", run_id, "-o", "json", env=admin_env)
        assert plain.returncode == 0, plain.stderr
        assert json.loads(plain.stdout)["run_id"] == run_id
        note = f"submitted with context {recorded!r}; using 'admin'"
        assert plain.stderr.count(note) == 1, plain.stderr
        flag = tau(sandbox, "run", "status", run_id, "--context", "admin", env=admin_env)
        assert flag.returncode == 0 and "submitted with context" not in flag.stderr, flag.stderr
        env_var = tau(sandbox, "run", "status", run_id, env={**admin_env, "TAU_CONTEXT": "admin"})
        assert env_var.returncode == 0, env_var.stderr
        assert "submitted with context" not in env_var.stderr
        gone = tau(sandbox, "run", "cancel", run_id, "--context", "taugrid-sandbox", env=admin_env)
        assert gone.returncode == 0 and "cancelled" in gone.stdout, gone.stderr
    finally:
        tau(sandbox, "run", "cancel", run_id, env=researcher)
    st = tau(sandbox, "run", "status", run_id, "-o", "json", env=researcher)
    assert json.loads(st.stdout)["phase"] == "Cancelled", st.stderr


def test_a_same_named_run_on_another_cluster_is_refused(
    sandbox: Path, tmp_path: Path, cluster: Any, cluster_crds: Any
) -> None:
    from kubekit import apply

    researcher = kube_env(sandbox)
    project = tmp_path / "q"
    project.mkdir()
    gpu_rayjob(project, "twin-run")
    res = tau(sandbox, "run", str(project), "-d", env=researcher)
    assert res.returncode == 0, res.stderr
    run_id = res.stdout.strip()
    try:
        # the second cluster holds a TauRun of the same name: another run, another uid
        found = admin(sandbox).resources.get(api_version=C.API_VERSION, kind="TauRun")
        obj = found.get(name=run_id, namespace="research").to_dict()
        ns = obj["metadata"]["namespace"]
        apply(cluster_crds, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
        twin = {
            "apiVersion": obj["apiVersion"],
            "kind": "TauRun",
            "spec": obj["spec"],
            "metadata": {"name": run_id, "namespace": ns},
        }
        apply(cluster_crds, twin)
        other = {"KUBECONFIG": str(cluster.admin.kubeconfig), "TAU_TARGET": "kube"}
        for args in (("run", "status", run_id), ("run", "cancel", run_id), ("run", "logs", run_id)):
            got = tau(sandbox, *args, env=other)
            assert got.returncode == 4, (args, got.stdout, got.stderr)
            assert (
                "another run" in got.stderr
                and repr(_contexts(researcher["KUBECONFIG"])[0]) in got.stderr
                and cluster.url in got.stderr
            ), got.stderr
        twin_res = cluster_crds.resources.get(api_version=C.API_VERSION, kind="TauRun")
        assert twin_res.get(name=run_id, namespace=ns) is not None  # not cancelled there
        st = tau(sandbox, "run", "status", run_id, "-o", "json", env=researcher)
        assert json.loads(st.stdout)["phase"] not in ("Cancelled", "Failed"), st.stderr
    finally:
        tau(sandbox, "run", "cancel", run_id, env=researcher)
