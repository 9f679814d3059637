#!/usr/bin/env bash
# await.sh STEPS STEP...: until each STEP is recorded in the steps file STEPS (.ci/run's
# steps.tsv: name, start, seconds, exit code); exit 1 as soon as one is recorded as failed.
# A background chain's first step, so the chain starts when the builds it needs are done
# while the steps in front go on.
set -u
steps=$1; shift
for step in "$@"; do
  until cut -f1 "$steps" | grep -qx "$step"; do sleep 2; done
  if ! cut -f1,4 "$steps" | grep -q "^$step	0$"; then
    echo "!!! $step failed (see its chain's log): not starting"
    exit 1
  fi
done
