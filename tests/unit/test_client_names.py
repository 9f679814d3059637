"""`taugrid.client` as a notebook sees it: its names are imported on first use (PEP 562), yet
`dir()` and tab completion offer them all, and each one (the submodules the docs name as
`client.data`, `client.serve`, `client.runs` too) resolves."""

from __future__ import annotations

import json
import subprocess
import sys

# A fresh interpreter: in this one, other tests have imported the submodules already.
PROBE = """
import json, sys, types
import taugrid.client as client
listed = dir(client)
resolved, modules = [], []
for name in client.__all__:
    value = getattr(client, name)
    resolved.append(name)
    if isinstance(value, types.ModuleType):
        modules.append(name)
try:
    client.no_such_name
    missing = "no error"
except AttributeError as e:
    missing = str(e)
print(json.dumps({"listed": listed, "all": client.__all__, "resolved": resolved,
                  "modules": modules, "missing": missing}))
"""


def probe() -> dict[str, object]:
    res = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, check=True)
    got: dict[str, object] = json.loads(res.stdout)
    return got


def test_dir_offers_every_public_name_before_it_is_used() -> None:
    got = probe()
    listed, public = set(got["listed"]), set(got["all"])  # type: ignore[call-overload]
    assert {"submit", "status", "follow", "logs", "cancel", "submit_many"} <= public
    assert public <= listed, sorted(public - listed)


def test_every_public_name_resolves_and_the_documented_submodules_are_attributes() -> None:
    got = probe()
    assert got["resolved"] == got["all"]
    assert {"data", "serve", "runs", "cluster", "quota", "platform"} <= set(got["modules"])  # type: ignore[call-overload]
    assert "no_such_name" in str(got["missing"])
