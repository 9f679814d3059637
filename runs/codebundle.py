"""The code snapshot a run carries: the files of the tau.yaml folder, content-addressed."""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

from taugrid.api import constants as C
from taugrid.api.errors import TauError

SKIP_DIRS = {
    "__pycache__",
    "node_modules",
    ".git",
    ".venv",
    "venv",
    ".mypy_cache",
    ".pytest_cache",
    ".ruff_cache",
}
SKIP_SUFFIXES = (
    ".pyc",
    ".pyo",
    ".so",
    ".o",
    ".pt",
    ".ckpt",
    ".safetensors",
    ".bin",
    ".npz",
    ".parquet",
)


@dataclass(frozen=True)
class CodeBundle:
    root: Path
    files: tuple[tuple[str, bytes], ...]  # (posix relative path, content), sorted

    @property
    def size(self) -> int:
        return sum(len(b) for _, b in self.files)

    @property
    def digest(self) -> str:
        h = hashlib.sha256()
        for rel, data in self.files:
            h.update(rel.encode() + b"\0" + hashlib.sha256(data).digest())
        return "sha256:" + h.hexdigest()


HELPER = "tau_run.py"


def collect(
    root: Path, limit: int = C.CODE_BUNDLE_LIMIT_BYTES, include_helper: bool = True
) -> CodeBundle:
    """Files under `root`, skipping hidden entries, caches, virtualenvs and weights.

    The stdlib-only `tau_run` helper is added (unless the folder has its own) so training code
    can `import tau_run` on cluster images that do not have TauGrid installed.
    """
    files: list[tuple[str, bytes]] = []
    total = 0
    for dirpath, dirnames, filenames in os.walk(root):
        here = Path(dirpath)
        dirnames[:] = sorted(
            d
            for d in dirnames
            if not d.startswith(".")
            and d not in SKIP_DIRS
            and not (here / d / "pyvenv.cfg").exists()
        )
        for name in sorted(filenames):
            if name.startswith(".") or name.endswith(SKIP_SUFFIXES):
                continue
            path = here / name
            if not path.is_file():
                continue
            data = path.read_bytes()
            total += len(data)
            if total > limit:
                raise TauError(
                    f"{root}: the code folder is over {limit // 1024} KiB (at {path.relative_to(root)}); "
                    "a run carries its code in a ConfigMap",
                    hint="keep data and weights out of the code folder: put them under /data/datasets",
                )
            files.append((path.relative_to(root).as_posix(), data))
    if include_helper and not any(rel == HELPER for rel, _ in files):
        import tau_run

        files.append((HELPER, Path(tau_run.__file__).read_bytes()))
    return CodeBundle(root=root, files=tuple(sorted(files)))
