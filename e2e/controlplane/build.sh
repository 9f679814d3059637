#!/usr/bin/env bash
# Build the e2e control plane from upstream Go modules into a cache, each component once:
#   etcd (go.etcd.io/etcd/server/v3), kube-apiserver, kube-controller-manager, kube-scheduler
#   (k8s.io/kubernetes with every staging module pinned), kubelet and kube-proxy (the sandbox's
#   real nodes), KWOK, Kueue and the KubeRay operator
#   (v1.5.0: the proxy refuses v1.7.0) where they build.
# The wrapper modules (go.mod/go.sum with `tool` lines) are ours; nothing else from upstream is
# committed. The KubeRay operator is our own main (rayoperator/) over KubeRay's controllers as a
# library, with sandbox dashboard clients for KWOK's pods (see its main.go). Cache: $TAUGRID_CP_CACHE (default ~/.cache/taugrid/controlplane)/<k8s version>/;
# each component is rebuilt only when its wrapper module changes. `current` points at it.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
K8S_VERSION=v1.36.3
ROOT=${TAUGRID_CP_CACHE:-$HOME/.cache/taugrid/controlplane}
OUT="$ROOT/$K8S_VERSION"
mkdir -p "$OUT/bin"
command -v go >/dev/null || { echo "go is not installed: cannot build the control plane" >&2; exit 1; }
export GOFLAGS="-trimpath -modcacherw" CGO_ENABLED=0
# The Go build and module caches of this build are its own, and removed once the binaries are in
# place (several GB that nothing reads again until a version changes; CI machines can be short of
# disk). An interrupted build keeps them for its next try.
export GOCACHE="$ROOT/.go/build" GOMODCACHE="$ROOT/.go/mod"
start=$(date +%s)

key() { cat "$HERE/$1/go.mod" "$HERE/$1/go.sum" $(ls "$HERE/$1"/*.go 2>/dev/null) <(echo "$K8S_VERSION") | sha256sum | cut -c1-16; }
fresh() { [ -f "$OUT/.$1.key" ] && [ "$(cat "$OUT/.$1.key")" = "$(key "$1")" ]; }
done_() { key "$1" > "$OUT/.$1.key"; }

if ! fresh etcd; then
  echo "control plane: building etcd ..."
  (cd "$HERE/etcd" && go build -ldflags "-s -w" -o "$OUT/bin/etcd" go.etcd.io/etcd/server/v3)
  done_ etcd
fi

minor=$(echo "$K8S_VERSION" | cut -d. -f2)
LDF="-s -w -X k8s.io/component-base/version.gitVersion=$K8S_VERSION -X k8s.io/component-base/version.gitMajor=1"
LDF="$LDF -X k8s.io/component-base/version.gitMinor=$minor -X k8s.io/component-base/version.gitTreeState=clean"
if ! fresh kubernetes; then
  for c in kube-apiserver kube-controller-manager kube-scheduler; do
    echo "control plane: building $c ..."
    (cd "$HERE/kubernetes" && go build -ldflags "$LDF" -o "$OUT/bin/$c" "k8s.io/kubernetes/cmd/$c")
  done
  done_ kubernetes
fi

# The sandbox's real nodes: the kubelet and kube-proxy from the same k8s.io/kubernetes version
# (their own wrapper module: the node's requirements differ from the control plane's). Optional:
# without them the sandbox's nodes are all KWOK's.
if ! fresh node; then
  ok=1
  for c in kubelet kube-proxy; do
    echo "control plane: building $c (the real nodes) ..."
    (cd "$HERE/node" && go build -ldflags "$LDF" -o "$OUT/bin/$c" "k8s.io/kubernetes/cmd/$c") || ok=0
  done
  if [ $ok = 1 ]; then done_ node; else
    rm -f "$OUT/bin/kubelet" "$OUT/bin/kube-proxy"
    echo "control plane: the kubelet did not build (see above); the sandbox's nodes are KWOK's only" >&2
  fi
fi

# Optional components: a failure is reported and the suite falls back (tests skip with a reason).
optional() {  # name module-path binary
  fresh "$1" && return 0
  echo "control plane: building $1 ..."
  if (cd "$HERE/$1" && go build -ldflags "-s -w" -o "$OUT/bin/$3" "$2"); then
    done_ "$1"
  else
    rm -f "$OUT/bin/$3"
    echo "control plane: $1 did not build (see above); tests that need it skip" >&2
  fi
}
optional kwok sigs.k8s.io/kwok/cmd/kwok kwok
optional kueue sigs.k8s.io/kueue/cmd/kueue kueue
optional rayoperator . ray-operator

# Data that ships inside the modules and is used at test time (never copied into the repo):
# KWOK's stock node/pod lifecycle stages; Kueue's CRDs match ../shared/upstream-crds.
if [ -x "$OUT/bin/kwok" ] && [ ! -d "$OUT/kwok-stages" ]; then
  dir=$(cd "$HERE/kwok" && go mod download -json sigs.k8s.io/kwok | python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')
  rm -rf "$OUT/kwok-stages.tmp" && mkdir -p "$OUT/kwok-stages.tmp"
  cp "$dir"/kustomize/stage/node/fast/node-initialize.yaml "$dir"/kustomize/stage/node/heartbeat/node-heartbeat.yaml \
     "$dir"/kustomize/stage/pod/fast/pod-ready.yaml "$dir"/kustomize/stage/pod/fast/pod-complete.yaml \
     "$dir"/kustomize/stage/pod/fast/pod-delete.yaml "$OUT/kwok-stages.tmp/"
  mv "$OUT/kwok-stages.tmp" "$OUT/kwok-stages"
fi

# The CRDs that ship in the Kueue and KubeRay modules (the sandbox installs them; the e2e suite
# checks rendered objects against ../shared/upstream-crds).
crds() {  # name wrapper-dir module subdir binary
  [ -x "$OUT/bin/$5" ] || return 0
  [ -d "$OUT/crds/$1" ] && [ "$(cat "$OUT/crds/.$1.key" 2>/dev/null)" = "$(key "$2")" ] && return 0
  local dir
  dir=$(cd "$HERE/$2" && go mod download -json "$3" | python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')
  rm -rf "$OUT/crds/$1" && mkdir -p "$OUT/crds/$1"
  cp "$dir/$4"/*.yaml "$OUT/crds/$1/"
  key "$2" > "$OUT/crds/.$1.key"
}
crds kueue kueue sigs.k8s.io/kueue config/components/crd/bases kueue
crds kuberay rayoperator github.com/ray-project/kuberay/ray-operator config/crd/bases ray-operator

version() { (cd "$HERE/$1" && go list -m -f '{{.Version}}' "$2" 2>/dev/null) || echo none; }
if [ -d "$ROOT/.go" ] || [ ! -f "$OUT/versions.json" ]; then
  kwok=none; [ -x "$OUT/bin/kwok" ] && kwok=$(version kwok sigs.k8s.io/kwok)
  kueue=none; [ -x "$OUT/bin/kueue" ] && kueue=$(version kueue sigs.k8s.io/kueue)
  kuberay=none; [ -x "$OUT/bin/ray-operator" ] && kuberay=$(version rayoperator github.com/ray-project/kuberay/ray-operator)
  printf '{"kubernetes": "%s", "etcd": "%s", "kwok": "%s", "kueue": "%s", "kuberay": "%s"}\n' \
    "$K8S_VERSION" "$(version etcd go.etcd.io/etcd/server/v3)" "$kwok" "$kueue" "$kuberay" > "$OUT/versions.json"
fi
touch "$OUT/.complete"
ln -sfn "$OUT" "$ROOT/current"
rm -rf "$ROOT/.go"
echo "control plane: ready in $(( $(date +%s) - start ))s at $OUT: $(cat "$OUT/versions.json")"
