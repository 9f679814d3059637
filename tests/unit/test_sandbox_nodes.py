"""How many real nodes the sandbox starts (sandbox/cluster.real_nodes_wanted), without starting
one."""

from __future__ import annotations

from pathlib import Path

import pytest
from kubekit import platform

from taugrid.api.errors import TauError


def test_the_sandbox_has_one_real_node_by_default_where_the_machine_can_run_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Asked for nothing: one where it can run, else none and why (never an error); asked for
    explicitly: what was asked, or an error that names what is missing."""
    from taugrid.sandbox import realnodes
    from taugrid.sandbox.cluster import real_nodes_wanted

    cfg = platform(cpuPools=[{"name": "cpu", "vmSize": "Standard_D4s_v5", "maxCount": 2}])
    monkeypatch.setattr(realnodes, "can_run", lambda: None)
    assert real_nodes_wanted(None, cfg) == (1, None)
    assert real_nodes_wanted(0, cfg) == (0, None) and real_nodes_wanted(2, cfg) == (2, None)
    monkeypatch.setattr(
        realnodes, "can_run", lambda: "the sandbox's images are not built (make images)"
    )
    assert real_nodes_wanted(None, cfg) == (0, "the sandbox's images are not built (make images)")
    with pytest.raises(TauError, match="make images"):
        real_nodes_wanted(1, cfg)
    with pytest.raises(TauError, match="0 to 3"):
        real_nodes_wanted(4, cfg)
    monkeypatch.setattr(realnodes, "can_run", lambda: None)
    assert real_nodes_wanted(None, platform()) == (0, "the stack declares no CPU pool for them")


def test_every_example_s_image_has_a_stand_in_on_the_sandbox_s_real_nodes() -> None:
    """The real nodes pull nothing: each image an example names (or gets by default: the GPU
    image) is one the sandbox's images stand in for, so every example runs there."""
    import yaml

    from taugrid.api import constants as C
    from taugrid.api.profiles import ImageMirror
    from taugrid.sandbox.cluster import SANDBOX_MIRRORED, SANDBOX_TORCH

    examples = Path(__file__).parents[2] / "examples"
    mirrors = [ImageMirror(match=m, image="stand-in") for m in (*SANDBOX_TORCH, *SANDBOX_MIRRORED)]
    seen = 0
    for manifest in sorted(examples.glob("*/tau.yaml")):
        doc = yaml.safe_load(manifest.read_text())
        image = (doc.get("runtime") or {}).get("image")
        if image is None and ((doc.get("compute") or {}).get("gpus") or 0) > 0:
            image = C.DEFAULT_GPU_IMAGE
        if image is None:
            continue
        seen += 1
        assert any(m.applies(image) for m in mirrors), f"{manifest.parent.name}: {image}"
    assert seen >= 6
