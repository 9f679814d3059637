"""TauGrid CRDs: valid apiextensions.k8s.io/v1 objects with structural schemas."""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import pytest
from conftest import PROFILES
from k8s_schemas import as_json_schema, k8s_errors

from taugrid.api.crds import CRD_TYPES, render_crds
from taugrid.runs import load

ALLOWED = {
    "type",
    "properties",
    "items",
    "additionalProperties",
    "required",
    "description",
    "enum",
    "default",
    "format",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "minLength",
    "maxLength",
    "pattern",
    "minItems",
    "maxItems",
    "nullable",
    "x-kubernetes-int-or-string",
    "x-kubernetes-preserve-unknown-fields",
    "x-kubernetes-list-type",
    "x-kubernetes-list-map-keys",
    "x-kubernetes-map-type",
    "x-kubernetes-validations",
    "x-kubernetes-embedded-resource",
}


def structural_problems(node: Any, path: str = "") -> list[str]:
    """Kubernetes' structural-schema rules (the subset a generator can break)."""
    out: list[str] = []
    if not isinstance(node, dict):
        return [f"{path}: not a schema object"]
    for key in node:
        if key not in ALLOWED:
            out.append(f"{path}: keyword {key!r} is not allowed in a CRD schema")
    untyped_ok = node.get("x-kubernetes-int-or-string") or node.get(
        "x-kubernetes-preserve-unknown-fields"
    )
    if "type" not in node and not untyped_ok:
        out.append(f"{path}: missing type")
    if node.get("additionalProperties") is False:
        out.append(f"{path}: additionalProperties: false is not allowed")
    for bound in ("exclusiveMinimum", "exclusiveMaximum"):  # OpenAPI v3: a flag, not a number
        if bound in node and not isinstance(node[bound], bool):
            out.append(f"{path}: {bound} must be true or false (the API server refuses a number)")
    if "properties" in node and "additionalProperties" in node:
        out.append(f"{path}: properties and additionalProperties together")
    if node.get("type") == "array" and not isinstance(node.get("items"), dict):
        out.append(f"{path}: array without one items schema")
    if node.get("x-kubernetes-list-type") == "map":
        item = node.get("items", {})
        for key in node.get("x-kubernetes-list-map-keys", []):
            if key not in item.get("required", []) and "default" not in item.get(
                "properties", {}
            ).get(key, {}):
                out.append(f"{path}: list-map key {key!r} must be required or defaulted")
    for name, sub in node.get("properties", {}).items():
        out += structural_problems(sub, f"{path}.{name}")
    if isinstance(node.get("items"), dict):
        out += structural_problems(node["items"], f"{path}[]")
    if isinstance(node.get("additionalProperties"), dict):
        out += structural_problems(node["additionalProperties"], f"{path}{{}}")
    return out


@pytest.fixture(scope="module")
def crds() -> list[dict[str, Any]]:
    return render_crds()


def test_six_crds_with_names_and_short_names(crds: list[dict[str, Any]]) -> None:
    by_kind = {c["spec"]["names"]["kind"]: c for c in crds}
    assert set(by_kind) == {
        "TauCluster",
        "TauWorkspace",
        "TauQuotaRequest",
        "TauRun",
        "TauService",
        "TauUsage",
    }
    assert by_kind["TauCluster"]["spec"]["scope"] == "Cluster"
    assert by_kind["TauRun"]["spec"]["scope"] == "Namespaced"
    shorts = {k: c["spec"]["names"]["shortNames"] for k, c in by_kind.items()}
    assert shorts == {
        "TauCluster": ["tc"],
        "TauWorkspace": ["tw"],
        "TauQuotaRequest": ["tqr"],
        "TauRun": ["tr"],
        "TauService": ["tsvc"],
        "TauUsage": ["tu"],
    }
    for c in crds:
        assert c["metadata"]["name"] == f"{c['spec']['names']['plural']}.tau.azure.com"
        (v,) = c["spec"]["versions"]
        assert v["name"] == "v1alpha1" and v["served"] and v["storage"]
        assert v["subresources"] == {"status": {}}
        if c["spec"]["names"]["kind"] != "TauUsage":  # a ledger has no phase
            assert any(col["jsonPath"] == ".status.phase" for col in v["additionalPrinterColumns"])


@pytest.mark.parametrize("idx", range(len(CRD_TYPES)), ids=[t.kind for t in CRD_TYPES])
def test_crd_is_a_valid_kubernetes_object(crds: list[dict[str, Any]], idx: int) -> None:
    assert k8s_errors(crds[idx]) == []


@pytest.mark.parametrize("idx", range(len(CRD_TYPES)), ids=[t.kind for t in CRD_TYPES])
def test_schema_is_structural(crds: list[dict[str, Any]], idx: int) -> None:
    schema = crds[idx]["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    assert structural_problems(schema) == []
    assert "$ref" not in json.dumps(schema)


def test_structural_checker_catches_violations() -> None:
    assert structural_problems(
        {"type": "object", "properties": {"a": {"anyOf": [{"type": "string"}]}}}
    )
    assert structural_problems({"type": "object", "additionalProperties": False})
    assert structural_problems({"type": "array"})
    assert structural_problems({"type": "number", "exclusiveMinimum": 0})  # pydantic's `gt=0`
    assert structural_problems(
        {"type": "object", "properties": {"x": {"type": "string", "title": "X"}}}
    )


def test_objects_built_from_models_validate_against_generated_schema(
    crds: list[dict[str, Any]],
) -> None:
    snap = load.load_snapshot(PROFILES)
    cluster = {
        "apiVersion": "tau.azure.com/v1alpha1",
        "kind": "TauCluster",
        "metadata": {"name": "cluster"},
        "spec": {
            "stack": "prod",
            "workloadProfiles": [
                p.model_dump(mode="json", exclude_none=True) for p in snap.profiles
            ],
        },
        "status": {
            "phase": "Ready",
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "AllGood",
                    "lastTransitionTime": "2026-11-29T10:00:00Z",
                }
            ],
        },
    }
    run = {
        "apiVersion": "tau.azure.com/v1alpha1",
        "kind": "TauRun",
        "metadata": {"name": "x-abcde", "namespace": "research"},
        "spec": {
            "runId": "x-abcde",
            "runName": "x",
            "workspace": "research",
            "profile": "cpu",
            "workloadKind": "job",
            "configHash": "sha256:00",
            "manifest": {"anything": {"goes": [1, 2]}},
        },
        "status": {"signals": [{"name": "Admitted", "state": "pending"}]},
    }
    schemas = {
        c["spec"]["names"]["kind"]: as_json_schema(
            c["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
        )
        for c in crds
    }
    jsonschema.validate(cluster, schemas["TauCluster"])
    # a workspace's registry is in the schema (the API server would prune it otherwise, and
    # clients would never copy a run's inputs there)
    ws_schema = schemas["TauCluster"]["properties"]["spec"]["properties"]["workspaces"]["items"]
    assert ws_schema["properties"]["registry"]["type"] == "string"
    # and so are a manager's workers' registries of the same workspace (#43)
    worker_regs = ws_schema["properties"]["workerRegistries"]
    assert worker_regs["type"] == "object"
    assert worker_regs["additionalProperties"]["type"] == "string"
    jsonschema.validate(run, schemas["TauRun"])
    bad = json.loads(json.dumps(run))
    bad["status"]["signals"][0]["state"] = "maybe"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, schemas["TauRun"])
    bad = json.loads(json.dumps(cluster))
    bad["spec"]["workloadProfiles"][0]["gpusPerWorker"] = -1
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, schemas["TauCluster"])


def test_cli_prints_crds(capsys: pytest.CaptureFixture[str]) -> None:
    import yaml

    from taugrid.cli.app import main

    assert main(["crds"]) == 0
    docs = list(yaml.safe_load_all(capsys.readouterr().out))
    assert [d["spec"]["names"]["kind"] for d in docs] == [t.kind for t in CRD_TYPES]


def _schema_has(schema: dict[str, Any], keys: tuple[str, ...]) -> bool:
    """Whether a JSONPath's keys name a field the schema defines (or lets through)."""
    for key in keys:
        if schema.get("x-kubernetes-preserve-unknown-fields"):
            return True
        props = schema.get("properties") or {}
        if key not in props:
            return False
        schema = props[key]
    return True


@pytest.mark.parametrize("t", CRD_TYPES, ids=lambda t: t.kind)
def test_every_printer_column_names_a_field_of_its_schema(t: Any) -> None:
    """A column whose path names no field shows blanks in `kubectl get` and drops that field
    from every listing tau reads through the Table form."""
    from taugrid.api.crds import path_keys, render_crd

    crd = render_crd(t)
    version = crd["spec"]["versions"][0]
    root = version["schema"]["openAPIV3Schema"]
    for col in version["additionalPrinterColumns"]:
        keys = path_keys(col["jsonPath"])
        if keys[0] == "metadata":
            assert keys[1] in {"name", "namespace", "creationTimestamp", "labels", "annotations"}
            continue
        assert _schema_has(root, keys), (t.kind, col)
    names = [c["name"] for c in version["additionalPrinterColumns"]]
    assert len(names) == len(set(names)), names
    assert all(
        c.get("priority", 0) == 1
        for c in version["additionalPrinterColumns"]
        if c["name"] in {n for n, _ty, _p in t.wide}
    )


def test_a_printer_columns_path_is_read_as_the_api_server_reads_it() -> None:
    from taugrid.api.crds import column_value, from_columns, path_keys, row_columns

    assert path_keys(".spec.runId") == ("spec", "runId")
    assert path_keys(r".metadata.annotations.tau\.azure\.com/cluster-user") == (
        "metadata",
        "annotations",
        "tau.azure.com/cluster-user",
    )
    obj = {
        "metadata": {"annotations": {"tau.azure.com/cluster-user": "ada"}},
        "spec": {"attempt": 0, "manifest": "not a map"},
    }
    assert column_value(obj, r".metadata.annotations.tau\.azure\.com/cluster-user") == "ada"
    assert column_value(obj, ".spec.attempt") == 0  # a zero is a value, not an absence
    assert column_value(obj, ".spec.manifest.experiment.name") is None
    assert column_value(obj, ".status.phase") is None
    assert from_columns({".spec.attempt": 0, ".status.phase": None, r".a.b\.c": "x"}) == {
        "spec": {"attempt": 0},
        "a": {"b.c": "x"},
    }
    # a "date" column is an age on the server ("6m58s"): never read as a time
    assert ".metadata.creationTimestamp" in row_columns("TauRun").values()
    assert "Age" not in row_columns("TauRun")


def _nodes(schema: Any) -> Any:
    if isinstance(schema, dict):
        yield schema
        for v in schema.values():
            yield from _nodes(v)
    elif isinstance(schema, list):
        for v in schema:
            yield from _nodes(v)


@pytest.mark.parametrize("idx", range(len(CRD_TYPES)))
def test_a_map_kept_as_sent_has_no_schema_for_its_values(
    crds: list[dict[str, Any]], idx: int
) -> None:
    """The API server prunes a map's values by `additionalProperties`; `true` reads as an empty
    schema, so every nested map under it lost its fields (the TauRun's tau.yaml did)."""
    for node in _nodes(crds[idx]["spec"]["versions"][0]["schema"]):
        if node.get("x-kubernetes-preserve-unknown-fields"):
            assert "additionalProperties" not in node, node


def test_a_status_is_read_into_its_model_or_says_why_not() -> None:
    """One reader of a cluster object's status: a good one is its model; one written by
    another version of the controller (a phase this one does not know) says where it is wrong;
    none at all is neither. Each reader of TauRun and TauQuotaRequest statuses uses it."""
    from taugrid.api.crds import TauQuotaRequestStatus, TauRunStatus, read_status
    from taugrid.controller.decide import model
    from taugrid.kube.facts import recorded_status

    good = {"phase": "Running", "attempt": 1}
    st, why = read_status(TauRunStatus, good)
    assert why is None and st is not None and st.phase == "Running" and st.attempt == 1
    st, why = read_status(TauRunStatus, {"phase": "Hibernating"})
    assert st is None and why is not None and why.startswith("phase:"), why
    assert read_status(TauRunStatus, None) == (None, None)
    assert read_status(TauRunStatus, {}) == (None, None)
    assert recorded_status({"status": {"phase": "Hibernating"}}) is None
    assert recorded_status({"status": good}) == read_status(TauRunStatus, good)[0]
    odd = model(TauQuotaRequestStatus, {"phase": "Sleeping", "clusterQueue": "gpu"})
    assert odd == TauQuotaRequestStatus()  # unreadable: none of it, not a part


def test_a_spec_is_read_into_its_model_across_versions() -> None:
    """Written from the model, read into it: fields a newer tau added (at any depth) are left
    out, a thin object's missing fields read as given, and a field this tau reads otherwise is
    named with the object and the fix (exit 3), never a KeyError or a wrong type later."""
    from taugrid.api.crds import TauServiceSpec, read_spec
    from taugrid.api.errors import EXIT_PLATFORM, TauError

    spec = {
        "serviceName": "iris",
        "workspace": "research",
        "profile": "cpu",
        "revision": 2,
        "configHash": "h",
        "replicas": 1,
        "routePrefix": "/iris",
        "generation": 3,
        "shadow": {"percent": 5},  # a newer tau's
        "canary": {
            "revision": 3,
            "percent": 20,
            "generation": 3,
            "stableGeneration": 2,
            "startedAt": "2026-12-01T00:00:00Z",
            "mirror": True,  # a newer tau's
        },
    }
    obj = {"kind": "TauService", "metadata": {"name": "iris", "namespace": "research"}}
    got = read_spec(TauServiceSpec, {**obj, "spec": spec})
    assert got.canary is not None and got.canary.stableGeneration == 2
    assert got.model_dump(exclude_none=True)["canary"]["percent"] == 20
    thin = read_spec(TauServiceSpec, {**obj, "spec": {"serviceName": "iris"}}, {**spec})
    assert (thin.serviceName, thin.replicas) == ("iris", 1)
    with pytest.raises(TauError) as e:
        read_spec(TauServiceSpec, {**obj, "spec": {**spec, "replicas": "many"}})
    assert e.value.exit_code == EXIT_PLATFORM
    assert "TauService research/iris: spec.replicas" in e.value.message
    with pytest.raises(TauError) as e:
        read_spec(TauServiceSpec, {**obj, "spec": {"serviceName": "iris"}})
    assert "Field required" in e.value.message


def test_no_crd_schema_has_an_empty_properties_map(crds: list[dict[str, Any]]) -> None:
    """The API server stores none (Go's omitempty): an empty map in ours made every apply of
    the TauUsage CRD (its status has no fields) an update."""

    def empty(node: Any) -> bool:
        if isinstance(node, dict):
            return node.get("properties") == {} or any(empty(v) for v in node.values())
        if isinstance(node, list):
            return any(empty(v) for v in node)
        return False

    assert [c["metadata"]["name"] for c in crds if empty(c["spec"])] == []
