"""CUDA libraries for a CPU image of PyPI's torch: one small stand-in per library torch links to
(libcudart.so.12, libcublas.so.12, ...), each defining every function torch's own libraries name
from it (with the library's symbol version), so `import torch` loads without the ~2.7 GB of NVIDIA
wheels. Each function answers "no device" (cudaGetDeviceCount: 0 devices, cudaErrorNoDevice);
torch.cuda.is_available() is False, and CPU work (gloo, autograd, DDP on CPU) never calls them.
The sandbox's real nodes have no GPU: this image stands in for pytorch/pytorch there.

    python3 cudastubs.py TORCH_LIB_DIR OUT_DIR       # writes and compiles OUT_DIR/lib*.so.*

Needs readelf and gcc (build-essential).
"""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

DRIVER = re.compile(r"^cu[A-Z]")  # the driver API: libcuda.so.1
CUDART_ANSWERS = """
int cudaGetDeviceCount(int *count) { if (count) *count = 0; return 100; }
int cudaGetLastError(void) { return 0; }
int cudaPeekAtLastError(void) { return 0; }
const char *cudaGetErrorString(int e) { (void)e; return "no CUDA device (a CPU image)"; }
const char *cudaGetErrorName(int e) { (void)e; return "cudaErrorNoDevice"; }
int cudaDriverGetVersion(int *v) { if (v) *v = 0; return 0; }
int cudaRuntimeGetVersion(int *v) { if (v) *v = 12040; return 0; }
"""
ANSWERED = {
    "cudaGetDeviceCount",
    "cudaGetLastError",
    "cudaPeekAtLastError",
    "cudaGetErrorString",
    "cudaGetErrorName",
    "cudaDriverGetVersion",
    "cudaRuntimeGetVersion",
}


def needed(lib_dir: Path) -> dict[str, set[str]]:
    """soname -> the functions torch's libraries take from it."""
    want: dict[str, set[str]] = defaultdict(set)
    libs = [p for p in lib_dir.glob("*.so*") if p.is_file()] + list(lib_dir.parent.glob("_C*.so"))
    for lib in libs:
        out = subprocess.run(
            ["readelf", "--dyn-syms", "-W", str(lib)], capture_output=True, text=True, check=True
        ).stdout
        for line in out.splitlines():
            f = line.split()
            if len(f) < 8 or f[6] != "UND" or f[3] != "FUNC":
                continue
            name, _, version = f[7].partition("@")
            version = version.lstrip("@").split(" ")[0]
            if version.startswith(("libcu", "libnvrtc", "libnccl")):
                want[version].add(name)
            elif not version and name.startswith("nccl"):
                want["libnccl.so.2"].add(name)
            elif not version and name.startswith("curand"):
                want["libcurand.so.10"].add(name)
            elif not version and DRIVER.match(name):
                want["libcuda.so.1"].add(name)
        for soname in _needed_sonames(lib):
            want.setdefault(soname, set())
    return want


def _needed_sonames(lib: Path) -> list[str]:
    out = subprocess.run(["readelf", "-d", str(lib)], capture_output=True, text=True, check=True)
    names = re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", out.stdout)
    return [
        n for n in names if n.startswith(("libcu", "libnvrtc", "libnccl")) and "cusparseLt" not in n
    ]


def build(want: dict[str, set[str]], out_dir: Path) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    made = []
    with tempfile.TemporaryDirectory() as tmp:
        for soname, names in sorted(want.items()):
            src = Path(tmp) / f"{soname}.c"
            body = [CUDART_ANSWERS] if soname.startswith("libcudart.") else []
            body += [f"int {n}(void) {{ return 100; }}" for n in sorted(names - ANSWERED)]
            src.write_text("\n".join(body) + "\n")
            versioned = soname not in ("libnccl.so.2", "libcurand.so.10", "libcuda.so.1")
            vmap = Path(tmp) / f"{soname}.map"
            vmap.write_text(f"{soname} {{ global: *; }};\n" if versioned else "{ global: *; };\n")
            target = out_dir / soname
            subprocess.run(
                [
                    "gcc",
                    "-shared",
                    "-fPIC",
                    "-O1",
                    "-o",
                    str(target),
                    f"-Wl,-soname,{soname}",
                    f"-Wl,--version-script={vmap}",
                    str(src),
                ],
                check=True,
            )
            made.append(target)
    return made


def main() -> int:
    lib_dir, out_dir = Path(sys.argv[1]), Path(sys.argv[2])
    made = build(needed(lib_dir), out_dir)
    print(f"cudastubs: {len(made)} stand-in libraries in {out_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
