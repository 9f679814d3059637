#!/usr/bin/env bash
# Build the e2e control plane from upstream Go modules into a cache (`make controlplane`):
#   components/ (one module graph): etcd (go.etcd.io/etcd/server/v3), kube-apiserver,
#     kube-controller-manager, kube-scheduler, and for the sandbox's real nodes kubelet and
#     kube-proxy (k8s.io/kubernetes with every staging module pinned), KWOK and Kueue, all by one
#     `go build`: each package they share (client-go, apiserver, etcd's client, grpc, ...)
#     compiles once, at one version, and the links run beside the compiles;
#   rayoperator/ (its own graph, built at the same time): our own main over the controllers of
#     KubeRay v1.5.0 (the proxy refuses v1.7.0), which needs k8s.io 0.34 and controller-runtime
#     0.22, while Kueue requires KubeRay 1.6.2 in a graph it is part of.
# The wrapper modules (go.mod/go.sum with `tool` lines, and the operator's main.go) are ours;
# nothing else from upstream is committed. One module and build cache for every Go build here
# (e2e/gocache.sh). Binaries: $TAUGRID_CP_CACHE (default ~/.cache/taugrid/controlplane)/<k8s
# version>/bin, each wrapper rebuilt only when it changes; `current` points at the version.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/../gocache.sh"
K8S_VERSION=v1.36.3
ROOT=${TAUGRID_CP_CACHE:-$HOME/.cache/taugrid/controlplane}
OUT="$ROOT/$K8S_VERSION"
mkdir -p "$OUT/bin"
rm -rf "$ROOT/.go"  # the per-build Go caches of an older layout
start=$(date +%s)

key() { cat "$HERE/$1/go.mod" "$HERE/$1/go.sum" $(ls "$HERE/$1"/*.go 2>/dev/null) <(echo "$K8S_VERSION") | sha256sum | cut -c1-16; }
fresh() { [ -f "$OUT/.$1.key" ] && [ "$(cat "$OUT/.$1.key")" = "$(key "$1")" ]; }
done_() { key "$1" > "$OUT/.$1.key"; }

minor=$(echo "$K8S_VERSION" | cut -d. -f2)
LDF="-s -w -X k8s.io/component-base/version.gitVersion=$K8S_VERSION -X k8s.io/component-base/version.gitMajor=1"
LDF="$LDF -X k8s.io/component-base/version.gitMinor=$minor -X k8s.io/component-base/version.gitTreeState=clean"
REQUIRED="etcd kube-apiserver kube-controller-manager kube-scheduler"
# Without these the tests that need them skip (or fail, where the suite requires them): the
# kubelet and kube-proxy are the real nodes', KWOK the simulated nodes', Kueue the queues'.
OPTIONAL="kubelet kube-proxy kwok kueue"
K8S=k8s.io/kubernetes/cmd
PACKAGES="go.etcd.io/etcd/server/v3 $K8S/kube-apiserver $K8S/kube-controller-manager $K8S/kube-scheduler
  $K8S/kubelet $K8S/kube-proxy sigs.k8s.io/kwok/cmd/kwok sigs.k8s.io/kueue/cmd/kueue"

# (Each step below says when it fails: `set -e` does not hold inside a function called with ||.)
components() {
  fresh components && return 0
  local t tmp="$OUT/bin.new" all=1
  t=$(date +%s)
  echo "control plane: building $REQUIRED $OPTIONAL (one go build) ..."
  rm -rf "$tmp" && mkdir -p "$tmp" || return 1
  # shellcheck disable=SC2086
  (cd "$HERE/components" && go build -ldflags "$LDF" -o "$tmp/" $PACKAGES) \
    || echo "control plane: not every component built (above)" >&2
  [ ! -f "$tmp/server" ] || mv "$tmp/server" "$tmp/etcd"  # etcd's main is .../server/v3
  for b in $REQUIRED; do
    [ -x "$tmp/$b" ] || { echo "control plane: $b did not build" >&2; return 1; }
  done
  for b in $OPTIONAL; do
    [ -x "$tmp/$b" ] || { all=0; rm -f "$OUT/bin/$b"; echo "control plane: $b did not build; tests that need it skip" >&2; }
  done
  mv "$tmp"/* "$OUT/bin/" && rmdir "$tmp" || return 1
  [ $all = 0 ] || done_ components  # else tried again next time
  echo "control plane: components built in $(( $(date +%s) - t ))s"
}

rayoperator() {
  fresh rayoperator && return 0
  local t
  t=$(date +%s)
  echo "control plane: building the KubeRay operator ..."
  if (cd "$HERE/rayoperator" && go build -ldflags "-s -w" -o "$OUT/bin/ray-operator.new" .); then
    mv "$OUT/bin/ray-operator.new" "$OUT/bin/ray-operator"
    done_ rayoperator
    echo "control plane: the KubeRay operator built in $(( $(date +%s) - t ))s"
  else
    rm -f "$OUT/bin/ray-operator" "$OUT/bin/ray-operator.new"
    echo "control plane: the KubeRay operator did not build (above); tests that need it skip" >&2
  fi
}

# Both at once: each `go build` ends in links that use one core, which the other fills.
rayoperator &
ray_pid=$!
components_rc=0
components || components_rc=$?
wait "$ray_pid" || true
[ "$components_rc" = 0 ] || exit "$components_rc"

moddir() {  # wrapper module, module path -> the module's directory in the module cache
  (cd "$HERE/$1" && go mod download -json "$2" | python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')
}

# Data that ships inside the modules and is used at test time (never copied into the repo):
# KWOK's stock node/pod lifecycle stages; Kueue's CRDs match ../shared/upstream-crds.
if [ -x "$OUT/bin/kwok" ] && [ ! -d "$OUT/kwok-stages" ]; then
  dir=$(moddir components sigs.k8s.io/kwok)
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
  dir=$(moddir "$2" "$3")
  rm -rf "$OUT/crds/$1" && mkdir -p "$OUT/crds/$1"
  cp "$dir/$4"/*.yaml "$OUT/crds/$1/"
  key "$2" > "$OUT/crds/.$1.key"
}
crds kueue components sigs.k8s.io/kueue config/components/crd/bases kueue
crds kuberay rayoperator github.com/ray-project/kuberay/ray-operator config/crd/bases ray-operator

version() { (cd "$HERE/$1" && go list -m -f '{{.Version}}' "$2" 2>/dev/null) || echo none; }
kwok=none; [ -x "$OUT/bin/kwok" ] && kwok=$(version components sigs.k8s.io/kwok)
kueue=none; [ -x "$OUT/bin/kueue" ] && kueue=$(version components sigs.k8s.io/kueue)
kuberay=none; [ -x "$OUT/bin/ray-operator" ] && kuberay=$(version rayoperator github.com/ray-project/kuberay/ray-operator)
printf '{"kubernetes": "%s", "etcd": "%s", "kwok": "%s", "kueue": "%s", "kuberay": "%s"}\n' \
  "$K8S_VERSION" "$(version components go.etcd.io/etcd/server/v3)" "$kwok" "$kueue" "$kuberay" > "$OUT/versions.json"
touch "$OUT/.complete"
ln -sfn "$OUT" "$ROOT/current"
echo "control plane: ready in $(( $(date +%s) - start ))s at $OUT: $(cat "$OUT/versions.json")"
