"""Rules of the layout that import-linter cannot express (it takes packages, not modules)."""

from __future__ import annotations

import ast
import sys

import pytest
from conftest import ROOT

RUNLIB = sorted((ROOT / "runlib").glob("*.py"))


@pytest.mark.parametrize("path", RUNLIB, ids=lambda p: p.name)
def test_runlib_imports_the_standard_library_only(path: object) -> None:
    """runlib's modules are carried into every run's pod, whose image need not have TauGrid or
    any other package: each import is of the standard library (or of runlib itself)."""
    ours = {p.stem for p in RUNLIB}
    tree = ast.parse(path.read_text())  # type: ignore[attr-defined]
    # tau_ray drives Ray Train and Tune: it runs only where Ray is (a RayJob's driver), and
    # imports Ray (and torch, when it is there) inside the functions that need them
    inside = {"ray", "torch"} if path.name == "tau_ray.py" else set()  # type: ignore[attr-defined]
    top_level = {id(n) for n in tree.body}
    for node in ast.walk(tree):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        for name in names:
            top = name.split(".")[0]
            allowed = top in sys.stdlib_module_names or top in ours
            allowed = allowed or (top in inside and id(node) not in top_level)
            assert allowed, f"{path}: imports {name}"


def test_the_python_api_imports_nothing_heavy() -> None:
    """`import taugrid.client` (a notebook's first line) loads no Ray, Kubernetes client or
    Pulumi: the calls that need them import them."""
    import subprocess

    code = (
        "import sys, taugrid.client; heavy = [m for m in ('ray', 'lightkube', 'kubernetes', "
        "'pulumi', 'kopf') if m in sys.modules]; print(heavy)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_model_fields_use_the_cheap_list_factory() -> None:
    """`default_factory=list` costs every command ~150 us per field while pydantic builds a
    validator (see taugrid/api/defaults.py)."""
    slow = [
        p.name
        for p in (ROOT / "api").glob("*.py")
        if p.name != "defaults.py" and "default_factory=list" in p.read_text()
    ]
    assert slow == [], f"use default_factory=new_list in {slow}"


def test_no_test_module_imports_another() -> None:
    """Tests share helpers through kits (tests/*kit.py, conftest), never by importing another
    test module: a test module's collection would then run the other's module code and
    fixtures, and moving a test would break an unrelated one."""
    found = []
    for path in sorted((ROOT / "tests").rglob("test_*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            found += [
                f"{path.relative_to(ROOT)}: {n}"
                for n in names
                if n.split(".")[-1].startswith("test_") or n.startswith("tests.")
            ]
    assert found == []


def test_the_services_api_decides_the_target_once() -> None:
    """`taugrid.client.serve` picks a service's backend once (`backends.get` or `for_record`)
    and never branches on the target's name after: a new target is a backend and a line in its
    registry, not an edit of every verb. Nor does it reach past the backends to a target's own
    adapters. (`local_services` only selects: the services the local head's stop stops.)"""
    tree = ast.parse((ROOT / "client" / "serve.py").read_text())
    selects = next(
        n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "local_services"
    )
    exempt = {id(n) for n in ast.walk(selects)}
    branches = [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Compare)
        and id(node) not in exempt
        and any(
            isinstance(side, ast.Constant) and side.value in ("local", "kube")
            for side in [node.left, *node.comparators]
        )
    ]
    adapters = [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom)
        and (node.module or "") in ("taugrid.serve.local", "taugrid.serve.kube")
    ]
    assert (branches, adapters) == ([], []), f"client/serve.py: lines {branches + adapters}"


# Every folder of the distribution and the benchmarks (tests are not held to it).
FOLDERS = "api runs cli components infra sandbox policies controller kube client data portal"
CODE = [*FOLDERS.split(), "serve", "runlib", "host", "stacks", "bench", "examples"]
LONG = 60  # lines, signature and docstring included


def long_functions(root: object) -> list[str]:
    """Functions over LONG lines that do not say why (a "# Long because: ..." comment between
    their `def` and the first lines of their body)."""
    from pathlib import Path

    out = []
    for folder in CODE:
        for path in sorted((Path(str(root)) / folder).rglob("*.py")):
            text = path.read_text()
            lines = text.splitlines()
            for node in ast.walk(ast.parse(text)):
                if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                    continue
                size = (node.end_lineno or node.lineno) - node.lineno + 1
                head = lines[node.lineno - 1 : (node.body[0].end_lineno or node.lineno) + 3]
                if size > LONG and not any("# Long because:" in ln for ln in head):
                    out.append(f"{path.relative_to(Path(str(root)))}:{node.lineno} {node.name}")
    return out


def test_no_function_is_long_without_saying_why(tmp_path: object) -> None:
    """Functions split along their seams; the few that stay long say why (#44)."""
    from pathlib import Path

    assert long_functions(ROOT) == []
    # the check itself sees a long function, and a reason
    pkg = Path(str(tmp_path)) / "api"
    pkg.mkdir()
    body = "\n".join(f"    x{i} = {i}" for i in range(LONG))
    (pkg / "m.py").write_text(f"def f() -> None:\n{body}\n")
    assert long_functions(tmp_path) == ["api/m.py:1 f"]
    (pkg / "m.py").write_text(f"def f() -> None:\n    # Long because: a table\n{body}\n")
    assert long_functions(tmp_path) == []
