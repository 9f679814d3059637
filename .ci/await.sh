#!/usr/bin/env bash
# await.sh [--ended] STEPS STEP...: until each STEP is recorded in the steps file STEPS (.ci/run's
# steps.tsv: name, start, seconds, exit code); exit 1 as soon as one is recorded as failed
# (with --ended: whatever its result, e.g. a suite that must not overlap the next one).
# A background chain's first step, so the chain starts when what it needs is done while the
# steps in front go on.
set -u
any=0
if [ "${1:-}" = "--ended" ]; then any=1; shift; fi
steps=$1; shift
for step in "$@"; do
  until cut -f1 "$steps" | grep -qx "$step"; do sleep 2; done
  if [ "$any" = 0 ] && ! cut -f1,4 "$steps" | grep -q "^$step	0$"; then
    echo "!!! $step failed (see its chain's log): not starting"
    exit 1
  fi
done
