#!/usr/bin/env bash
# The test-only torch environment of `make distributed` (real torch, gloo on CPU), built once per
# lock file and Python version into a cache shared by every checkout on the machine:
#   $TAUGRID_TORCH_CACHE (default ~/.cache/taugrid/torch)/<key>, linked as .venv-torch.
# PyPI's Linux torch wheels bring the CUDA libraries: ~5 GB installed. To keep the peak disk use
# near that (a CI machine once ran out of space here), each package is installed on its own with
# --no-deps --no-cache-dir, so no wheel is kept after it is unpacked; the lock pins every
# dependency and `pip check` proves the set complete. Too little free space fails up front, with
# the numbers, rather than half-way through an install.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
LOCK="$REPO/requirements/torch.lock"
PYTHON=${PYTHON:-python3}
ROOT=${TAUGRID_TORCH_CACHE:-$HOME/.cache/taugrid/torch}
NEED_MB=${TAUGRID_TORCH_NEED_MB:-6500}
KEY=$( { cat "$LOCK"; "$PYTHON" -c 'import sys; print(sys.version)'; } | sha256sum | cut -c1-16)
ENV="$ROOT/$KEY"
LINK="$REPO/.venv-torch"
mkdir -p "$ROOT"

if [ ! -f "$ENV/.complete" ]; then
  start=$(date +%s)
  rm -rf "$ENV"  # an install that did not finish
  free_mb() { df -Pm "$ROOT" | awk 'NR==2 {print $4}'; }
  if [ "$(free_mb)" -lt "$NEED_MB" ]; then
    # Environments of other lock files are the only thing here we may take back.
    find "$ROOT" -mindepth 1 -maxdepth 1 -type d ! -name "$KEY" -exec rm -rf {} +
  fi
  if [ "$(free_mb)" -lt "$NEED_MB" ]; then
    echo "torch-env: needs ${NEED_MB} MB free in $ROOT for torch and its CUDA libraries; $(free_mb) MB are free" >&2
    exit 1
  fi
  echo "torch-env: installing torch into $ENV (test-only; the first time takes minutes)"
  "$PYTHON" -m venv "$ENV"
  grep -v '^\s*#' "$LOCK" | grep -v '^\s*$' | while read -r req; do
    "$ENV/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps --no-cache-dir "$req"
  done
  "$ENV/bin/python" -m pip check --disable-pip-version-check
  touch "$ENV/.complete"
  echo "torch-env: ready in $(( $(date +%s) - start ))s ($(du -sm "$ENV" | cut -f1) MB)"
fi
# An older checkout kept its own environment here: the link replaces it.
[ -L "$LINK" ] || rm -rf "$LINK"
ln -sfn "$ENV" "$LINK"
