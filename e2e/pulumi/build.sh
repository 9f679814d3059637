#!/usr/bin/env bash
# Build the Pulumi engine from Go modules into a version-keyed cache (`make pulumi`), the two
# binaries at once (each `go build` ends in a one-core link the other fills):
#   - the Pulumi CLI: github.com/pulumi/pulumi/pkg/v3 cmd/pulumi (the module's own `replace` for
#     atotto/clipboard is repeated in our wrapper, e2e/pulumi/cli/go.mod; the version is set
#     with -ldflags -X, as upstream's build does);
#   - the Kubernetes provider: github.com/pulumi/pulumi-kubernetes/provider/v4, served only at
#     the pseudo-version of the v4.25.0 commit. Its main embeds schema-embed.json and
#     terraform-mapping-embed.json, which the module zip lacks: they are generated here from the
#     schema.json / terraform-mapping.json it ships (compact JSON, version set), in a copy of the
#     module outside the read-only module cache. Pair it with pulumi-kubernetes==4.25.0. It
#     builds with its own go.mod: it needs pulumi/pkg v3.215, whose API the CLI's v3.274 changed.
# No Python language host is served by any registry: stacks are driven through the Automation
# API with inline programs (see docs/e2e.md). Cold: docs/ci.md. One module and build cache for
# every Go build here (e2e/gocache.sh).
# Cache: $TAUGRID_PULUMI_CACHE (default ~/.cache/taugrid/pulumi)/<cli>-<provider>/bin.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/../gocache.sh"
CLI_VERSION=v3.274.1
K8S_MODULE=github.com/pulumi/pulumi-kubernetes/provider/v4
K8S_PSEUDO=v4.0.0-20260115033456-f47bc2d6f199
K8S_VERSION=4.25.0
# Compiled without optimization (-N -l): the generated code these binaries carry and the tests
# never run hot: the provider's Go SDK (hundreds of generated API packages, most of its build)
# and the CLI's code generators (no program is generated: stacks are inline). The compiler's
# optimizing passes are most of its time on such code (30% less CPU measured on the SDK).
SDK_UNOPTIMIZED=github.com/pulumi/pulumi-kubernetes/sdk/v4/...
CLI_UNOPTIMIZED=github.com/pulumi/pulumi/pkg/v3/codegen/...
# TAU_PULUMI_JOBS=N: N packages compiled at once by each of the two builds (go build -p; default
# one per core). CI raises it so that the build keeps its share of a machine busy with tests.
JOBS=(${TAU_PULUMI_JOBS:+-p "$TAU_PULUMI_JOBS"})
ROOT=${TAUGRID_PULUMI_CACHE:-$HOME/.cache/taugrid/pulumi}
OUT="$ROOT/$CLI_VERSION-$K8S_VERSION"
mkdir -p "$OUT/bin"
rm -rf "$ROOT/.go"  # the per-build Go caches of an older layout
start=$(date +%s)

cli() {
  [ ! -x "$OUT/bin/pulumi" ] || return 0
  local t
  t=$(date +%s)
  echo "pulumi: building the CLI $CLI_VERSION ..."
  (cd "$HERE/cli" && go build "${JOBS[@]}" -gcflags="$CLI_UNOPTIMIZED=-N -l" \
    -ldflags "-s -w -X github.com/pulumi/pulumi/sdk/v3/go/common/version.Version=$CLI_VERSION" \
    -o "$OUT/bin/pulumi.new" github.com/pulumi/pulumi/pkg/v3/cmd/pulumi)
  mv "$OUT/bin/pulumi.new" "$OUT/bin/pulumi"
  echo "pulumi: the CLI built in $(( $(date +%s) - t ))s"
}

provider() {
  [ ! -x "$OUT/bin/pulumi-resource-kubernetes" ] || return 0
  local t src work
  t=$(date +%s)
  echo "pulumi: building the Kubernetes provider $K8S_VERSION ($K8S_PSEUDO) ..."
  src=$(cd "$HERE/cli" && go mod download -json "$K8S_MODULE@$K8S_PSEUDO" | python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')
  work=$(mktemp -d)
  cp -r "$src" "$work/provider" && chmod -R u+w "$work/provider" || return 1
  # The module's own replace points at ../sdk, which is not in the zip: use the required version.
  sed -i '/^replace github.com\/pulumi\/pulumi-kubernetes\/sdk\/v4 => ..\/sdk/d' "$work/provider/go.mod" || return 1
  python3 - "$work/provider/cmd/pulumi-resource-kubernetes" "$K8S_VERSION" <<'PY'
import json, sys
d, version = sys.argv[1], sys.argv[2]
spec = json.load(open(f"{d}/schema.json"))
spec["version"] = version
open(f"{d}/schema-embed.json", "w").write(json.dumps(spec, separators=(",", ":")))
mapping = json.load(open(f"{d}/terraform-mapping.json"))
open(f"{d}/terraform-mapping-embed.json", "w").write(json.dumps(mapping, separators=(",", ":"), sort_keys=True))
PY
  [ $? = 0 ] || return 1
  local rc=0
  (cd "$work/provider" && GOFLAGS="$GOFLAGS -mod=mod" go build "${JOBS[@]}" -gcflags="$SDK_UNOPTIMIZED=-N -l" \
    -ldflags "-s -w -X github.com/pulumi/pulumi-kubernetes/provider/v4/pkg/version.Version=$K8S_VERSION" \
    -o "$OUT/bin/pulumi-resource-kubernetes.new" ./cmd/pulumi-resource-kubernetes) || rc=$?
  rm -rf "$work"
  [ $rc = 0 ] || return $rc
  mv "$OUT/bin/pulumi-resource-kubernetes.new" "$OUT/bin/pulumi-resource-kubernetes" || return 1
  echo "pulumi: the provider built in $(( $(date +%s) - t ))s"
}

cli &
cli_pid=$!
provider_rc=0
provider || provider_rc=$?
cli_rc=0
wait "$cli_pid" || cli_rc=$?
[ "$cli_rc" = 0 ] && [ "$provider_rc" = 0 ] || exit 1

touch "$OUT/.complete"
ln -sfn "$OUT" "$ROOT/current"
echo "pulumi: ready in $(( $(date +%s) - start ))s at $OUT: $("$OUT/bin/pulumi" version)"
