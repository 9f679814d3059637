#!/usr/bin/env bash
# Build the e2e control plane from upstream Go modules into a version-keyed cache, once.
#   etcd (go.etcd.io/etcd/server/v3), kube-apiserver, kube-controller-manager, kube-scheduler
#   (k8s.io/kubernetes with every staging module pinned), and KWOK where it builds.
# The wrapper modules (go.mod/go.sum with `tool` lines) are ours; nothing else from upstream
# is committed. Cache: $TAUGRID_CP_CACHE (default ~/.cache/taugrid/controlplane)/<key>/bin,
# with `current` pointing at the newest complete build.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
K8S_VERSION=v1.36.3
ROOT=${TAUGRID_CP_CACHE:-$HOME/.cache/taugrid/controlplane}
# The cache key covers what the binaries are built from: the pinned modules and the version.
KEY=$(cat "$HERE"/*/go.mod "$HERE"/*/go.sum <(echo "$K8S_VERSION") | sha256sum | cut -c1-16)
OUT="$ROOT/$K8S_VERSION-$KEY"

# KWOK's stock node and pod lifecycle stages ship inside its module: use them from the module
# cache at test time (nothing is copied into this repository).
kwok_stages() {
  [ -x "$OUT/bin/kwok" ] || return 0
  [ -d "$OUT/kwok-stages" ] && return 0
  local dir
  dir=$(cd "$HERE/kwok" && go mod download -json sigs.k8s.io/kwok | python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')
  rm -rf "$OUT/kwok-stages.tmp" && mkdir -p "$OUT/kwok-stages.tmp"
  cp "$dir"/kustomize/stage/node/fast/node-initialize.yaml "$dir"/kustomize/stage/node/heartbeat/node-heartbeat.yaml \
     "$dir"/kustomize/stage/pod/fast/pod-ready.yaml "$dir"/kustomize/stage/pod/fast/pod-complete.yaml \
     "$dir"/kustomize/stage/pod/fast/pod-delete.yaml "$OUT/kwok-stages.tmp/"
  mv "$OUT/kwok-stages.tmp" "$OUT/kwok-stages"
}

if [ -f "$OUT/.complete" ]; then
  kwok_stages
  ln -sfn "$OUT" "$ROOT/current"
  echo "control plane: cached at $OUT"
  exit 0
fi
command -v go >/dev/null || { echo "go is not installed: cannot build the control plane" >&2; exit 1; }
rm -rf "$OUT" && mkdir -p "$OUT/bin"
start=$(date +%s)
export GOFLAGS=-trimpath CGO_ENABLED=0

step() { echo "control plane: building $1 ..."; }
step etcd
(cd "$HERE/etcd" && go build -ldflags "-s -w" -o "$OUT/bin/etcd" go.etcd.io/etcd/server/v3)

minor=$(echo "$K8S_VERSION" | cut -d. -f2)
LDF="-s -w -X k8s.io/component-base/version.gitVersion=$K8S_VERSION -X k8s.io/component-base/version.gitMajor=1"
LDF="$LDF -X k8s.io/component-base/version.gitMinor=$minor -X k8s.io/component-base/version.gitTreeState=clean"
for c in kube-apiserver kube-controller-manager kube-scheduler; do
  step "$c"
  (cd "$HERE/kubernetes" && go build -ldflags "$LDF" -o "$OUT/bin/$c" "k8s.io/kubernetes/cmd/$c")
done

kwok=none
if [ -f "$HERE/kwok/go.mod" ]; then
  step kwok
  if (cd "$HERE/kwok" && go build -ldflags "-s -w" -o "$OUT/bin/kwok" sigs.k8s.io/kwok/cmd/kwok); then
    kwok=$(cd "$HERE/kwok" && go list -m -f '{{.Version}}' sigs.k8s.io/kwok)
  else
    echo "control plane: kwok did not build; the fixture's fake nodes are used instead" >&2
  fi
fi

etcd=$(cd "$HERE/etcd" && go list -m -f '{{.Version}}' go.etcd.io/etcd/server/v3)
printf '{"kubernetes": "%s", "etcd": "%s", "kwok": "%s"}\n' "$K8S_VERSION" "$etcd" "$kwok" > "$OUT/versions.json"
kwok_stages
touch "$OUT/.complete"
ln -sfn "$OUT" "$ROOT/current"
echo "control plane: built in $(( $(date +%s) - start ))s at $OUT"
"$OUT/bin/kube-apiserver" --version
