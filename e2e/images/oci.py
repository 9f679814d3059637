"""Write an OCI image archive (what `ctr image import` takes) from a root file system folder:
one uncompressed layer (the folder as a tar, numeric owners), its config, its manifest and an
index naming the image. No registry, no Docker: the format is files and JSON.

    python3 oci.py ROOTFS ARCHIVE --ref NAME:TAG [--env K=V ...] [--entrypoint P] [--cmd C]
                   [--base BASE-ARCHIVE]

With --base, the image is BASE's layers and configuration with ROOTFS as one more layer on top
(the base's layers are shared: containerd unpacks them once for both images).
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import subprocess
import tarfile
import tempfile
import time
from pathlib import Path


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def add_bytes(archive: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mtime, info.mode = len(data), int(time.time()), 0o644
    archive.addfile(info, io.BytesIO(data))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("rootfs", type=Path)
    ap.add_argument("archive", type=Path)
    ap.add_argument("--ref", required=True)
    ap.add_argument("--env", action="append", default=[])
    ap.add_argument("--entrypoint")
    ap.add_argument("--cmd")
    ap.add_argument("--base", type=Path)
    a = ap.parse_args()
    base_layers: list[dict[str, object]] = []
    base_diffs: list[str] = []
    base_config: dict[str, object] = {}
    if a.base:
        base_layers, base_diffs, base_config = read_base(a.base)
    with tempfile.TemporaryDirectory(dir=a.archive.parent) as tmp:
        layer = Path(tmp) / "layer.tar"
        # GNU tar keeps modes, links, device nodes and owners as numbers; sorted for a stable digest
        subprocess.run(
            [
                "tar",
                "--numeric-owner",
                "--sort=name",
                "--mtime=@0",
                "-C",
                str(a.rootfs),
                "-cf",
                str(layer),
                ".",
            ],
            check=True,
        )
        digest = sha256_of(layer)
        env = [*[str(e) for e in base_config.get("Env") or []], *a.env] or ["PATH=/usr/bin:/bin"]
        config: dict[str, object] = {**base_config, "Env": env, "WorkingDir": "/"}
        if a.entrypoint:
            config["Entrypoint"] = [a.entrypoint]
        if a.cmd:
            config["Cmd"] = [a.cmd]
        cfg = json.dumps(
            {
                "architecture": "amd64",
                "os": "linux",
                "config": config,
                "rootfs": {"type": "layers", "diff_ids": [*base_diffs, f"sha256:{digest}"]},
            },
            sort_keys=True,
        ).encode()
        manifest = json.dumps(
            {
                "schemaVersion": 2,
                "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "config": {
                    "mediaType": "application/vnd.oci.image.config.v1+json",
                    "digest": "sha256:" + hashlib.sha256(cfg).hexdigest(),
                    "size": len(cfg),
                },
                "layers": [
                    *base_layers,
                    {
                        "mediaType": "application/vnd.oci.image.layer.v1.tar",
                        "digest": f"sha256:{digest}",
                        "size": layer.stat().st_size,
                    },
                ],
            },
            sort_keys=True,
        ).encode()
        index = json.dumps(
            {
                "schemaVersion": 2,
                "manifests": [
                    {
                        "mediaType": "application/vnd.oci.image.manifest.v1+json",
                        "digest": "sha256:" + hashlib.sha256(manifest).hexdigest(),
                        "size": len(manifest),
                        "annotations": {
                            "io.containerd.image.name": a.ref,
                            "org.opencontainers.image.ref.name": a.ref,
                        },
                    }
                ],
            },
            sort_keys=True,
        ).encode()
        with tarfile.open(a.archive, "w") as out:
            add_bytes(out, "oci-layout", b'{"imageLayoutVersion": "1.0.0"}')
            add_bytes(out, "index.json", index)
            for blob in (cfg, manifest):
                add_bytes(out, f"blobs/sha256/{hashlib.sha256(blob).hexdigest()}", blob)
            out.add(layer, f"blobs/sha256/{digest}")
            if a.base:
                with tarfile.open(a.base) as base:
                    for entry in base_layers:
                        name = f"blobs/sha256/{str(entry['digest']).removeprefix('sha256:')}"
                        member = base.getmember(name)
                        out.addfile(member, base.extractfile(member))
    os.chmod(a.archive, 0o644)


def read_base(archive: Path) -> tuple[list[dict[str, object]], list[str], dict[str, object]]:
    """(its layers as a manifest lists them, their diff ids, its configuration) of an archive
    this script wrote."""
    with tarfile.open(archive) as t:

        def blob(digest: str) -> dict[str, object]:
            f = t.extractfile(f"blobs/sha256/{digest.removeprefix('sha256:')}")
            assert f is not None
            return dict(json.load(f))

        index = json.load(t.extractfile("index.json"))  # type: ignore[arg-type]
        manifest = blob(index["manifests"][0]["digest"])
        config = blob(manifest["config"]["digest"])  # type: ignore[index]
    layers = list(manifest["layers"])  # type: ignore[call-overload]
    return layers, list(config["rootfs"]["diff_ids"]), dict(config.get("config") or {})  # type: ignore[index]


if __name__ == "__main__":
    main()
