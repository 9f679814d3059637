#!/usr/bin/env bash
# Build the Pulumi engine from Go modules into a version-keyed cache (`make pulumi`):
#   - the Pulumi CLI: github.com/pulumi/pulumi/pkg/v3 cmd/pulumi (the module's own `replace` for
#     atotto/clipboard is repeated in our wrapper, e2e/pulumi/cli/go.mod; the version is set
#     with -ldflags -X, as upstream's build does);
#   - the Kubernetes provider: github.com/pulumi/pulumi-kubernetes/provider/v4, served only at
#     the pseudo-version of the v4.25.0 commit. Its main embeds schema-embed.json and
#     terraform-mapping-embed.json, which the module zip lacks: they are generated here from the
#     schema.json / terraform-mapping.json it ships (compact JSON, version set), in a copy of the
#     module outside the read-only module cache. Pair it with pulumi-kubernetes==4.25.0.
# No Python language host is served by any registry: stacks are driven through the Automation
# API with inline programs (see docs/e2e.md). Cold: ~10-15 min each on 2 cores.
# Cache: $TAUGRID_PULUMI_CACHE (default ~/.cache/taugrid/pulumi)/<cli>-<provider>/bin.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
CLI_VERSION=v3.274.1
K8S_MODULE=github.com/pulumi/pulumi-kubernetes/provider/v4
K8S_PSEUDO=v4.0.0-20260115033456-f47bc2d6f199
K8S_VERSION=4.25.0
ROOT=${TAUGRID_PULUMI_CACHE:-$HOME/.cache/taugrid/pulumi}
OUT="$ROOT/$CLI_VERSION-$K8S_VERSION"
mkdir -p "$OUT/bin"
command -v go >/dev/null || { echo "go is not installed: cannot build the Pulumi engine" >&2; exit 1; }
export CGO_ENABLED=0 GOFLAGS=-modcacherw
# This build's Go caches are its own and removed once the binaries are in place (see
# e2e/controlplane/build.sh).
export GOCACHE="$ROOT/.go/build" GOMODCACHE="$ROOT/.go/mod"
start=$(date +%s)

if [ ! -x "$OUT/bin/pulumi" ]; then
  echo "pulumi: building the CLI $CLI_VERSION ..."
  (cd "$HERE/cli" && go build -trimpath \
    -ldflags "-s -w -X github.com/pulumi/pulumi/sdk/v3/go/common/version.Version=$CLI_VERSION" \
    -o "$OUT/bin/pulumi" github.com/pulumi/pulumi/pkg/v3/cmd/pulumi)
fi

if [ ! -x "$OUT/bin/pulumi-resource-kubernetes" ]; then
  echo "pulumi: building the Kubernetes provider $K8S_VERSION ($K8S_PSEUDO) ..."
  src=$(cd "$HERE/cli" && go mod download -json "$K8S_MODULE@$K8S_PSEUDO" | python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  cp -r "$src" "$work/provider" && chmod -R u+w "$work/provider"
  # The module's own replace points at ../sdk, which is not in the zip: use the required version.
  sed -i '/^replace github.com\/pulumi\/pulumi-kubernetes\/sdk\/v4 => ..\/sdk/d' "$work/provider/go.mod"
  python3 - "$work/provider/cmd/pulumi-resource-kubernetes" "$K8S_VERSION" <<'PY'
import json, sys
d, version = sys.argv[1], sys.argv[2]
spec = json.load(open(f"{d}/schema.json"))
spec["version"] = version
open(f"{d}/schema-embed.json", "w").write(json.dumps(spec, separators=(",", ":")))
mapping = json.load(open(f"{d}/terraform-mapping.json"))
open(f"{d}/terraform-mapping-embed.json", "w").write(json.dumps(mapping, separators=(",", ":"), sort_keys=True))
PY
  (cd "$work/provider" && GOFLAGS="-mod=mod -modcacherw" go build -trimpath \
    -ldflags "-s -w -X github.com/pulumi/pulumi-kubernetes/provider/v4/pkg/version.Version=$K8S_VERSION" \
    -o "$OUT/bin/pulumi-resource-kubernetes" ./cmd/pulumi-resource-kubernetes)
fi

touch "$OUT/.complete"
ln -sfn "$OUT" "$ROOT/current"
rm -rf "$ROOT/.go"
echo "pulumi: ready in $(( $(date +%s) - start ))s at $OUT: $("$OUT/bin/pulumi" version)"
