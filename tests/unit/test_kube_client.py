"""The client's reading of a Table response (the form `kubectl get` asks for)."""

from __future__ import annotations

from typing import Any

from taugrid.kube.client import objects_from_table

COLUMNS = {"Run": ".spec.runName", "Phase": ".status.phase",
           "User": r".metadata.annotations.tau\.azure\.com/cluster-user"}  # fmt: skip


def table(names: list[str], *rows: list[Any]) -> dict[str, Any]:
    """A Table as the API server sends it with includeObject=None (meta.k8s.io/v1)."""
    return {"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": {"resourceVersion": "7"},
            "columnDefinitions": [{"name": n, "type": "string", "format": "", "priority": 0}
                                  for n in names],
            "rows": [{"cells": list(r)} for r in rows]}  # fmt: skip


def test_each_row_is_an_object_made_of_its_columns() -> None:
    got = objects_from_table(
        table(["Name", "Run", "User", "Phase", "Age"],
              ["a-1", "a", "ada", "Running", "5m"], ["b-2", "b", None, None, "1s"]),
        COLUMNS, "research",
    )  # fmt: skip
    assert got == [
        {"spec": {"runName": "a"}, "status": {"phase": "Running"},
         "metadata": {"name": "a-1", "namespace": "research",
                      "annotations": {"tau.azure.com/cluster-user": "ada"}}},
        {"spec": {"runName": "b"}, "metadata": {"name": "b-2", "namespace": "research"}},
    ]  # fmt: skip


def test_a_table_that_cannot_say_everything_is_not_read() -> None:
    """An older CRD (a column missing), rows that do not match the columns, or not a Table:
    None, and the caller reads whole objects instead."""
    assert (
        objects_from_table(table(["Name", "Run", "Phase"], ["a-1", "a", "x"]), COLUMNS, "n") is None
    )
    assert (
        objects_from_table(table(["Name", "Run", "User", "Phase"], ["a-1", "a"]), COLUMNS, "n")
        is None
    )
    assert objects_from_table({"kind": "TauRunList", "items": []}, COLUMNS, "n") is None
    assert objects_from_table([], COLUMNS, "n") is None
    assert objects_from_table(table(["Name", "Run", "User", "Phase"]), COLUMNS, "n") == []
