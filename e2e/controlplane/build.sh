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
KEY=$(cat "$HERE"/*/go.mod "$HERE"/*/go.sum "$HERE/build.sh" | sha256sum | cut -c1-16)
OUT="$ROOT/$K8S_VERSION-$KEY"

if [ -f "$OUT/.complete" ]; then
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
touch "$OUT/.complete"
ln -sfn "$OUT" "$ROOT/current"
echo "control plane: built in $(( $(date +%s) - start ))s at $OUT"
"$OUT/bin/kube-apiserver" --version
