# Sourced by every Go build of the e2e parts (control plane, KubeRay operator, Pulumi engine,
# the pause image's source): one module cache and one build cache for all of them, so a module
# is downloaded once and a package compiled once (the standard library, and every package the
# builds share at the same version), and each build links without debug info (-s -w, set by
# each build's -ldflags) and without local paths (-trimpath).
#   $TAUGRID_GO_CACHE (default ~/.cache/taugrid/go)/mod and /build. Go trims its build cache
#   itself (entries unused for days); `rm -rf ~/.cache/taugrid/go` takes the space back at once
#   (the built binaries are kept elsewhere, by version).
command -v go >/dev/null || { echo "go is not installed: cannot build the e2e parts" >&2; exit 1; }
TAUGRID_GO_CACHE=${TAUGRID_GO_CACHE:-$HOME/.cache/taugrid/go}
export GOMODCACHE="$TAUGRID_GO_CACHE/mod" GOCACHE="$TAUGRID_GO_CACHE/build"
export GOFLAGS="-trimpath -modcacherw" CGO_ENABLED=0
mkdir -p "$GOMODCACHE" "$GOCACHE"
