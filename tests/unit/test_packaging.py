"""The wheel carries every package of the source tree (an editable install hides a missing one)."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_every_source_package_is_listed_for_the_wheel() -> None:
    tool = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(tool["packages"])
    found: set[str] = set()
    for dotted, folder in tool["package-dir"].items():
        if not dotted:
            continue
        base = ROOT / folder
        for init in base.rglob("__init__.py"):
            rel = init.parent.relative_to(base).parts
            found.add(".".join((dotted, *rel)))
    assert found, "no packages found under package-dir"
    assert found - listed == set(), "packages missing from [tool.setuptools] packages"
    assert listed - found == set(), "listed packages without an __init__.py"


def test_the_stdlib_modules_every_run_carries_are_listed() -> None:
    tool = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    runlib = ROOT / tool["package-dir"][""]
    assert sorted(tool["py-modules"]) == sorted(p.stem for p in runlib.glob("*.py"))
