#!/usr/bin/env bash
# The whole of .ci/run on a machine that is also busy (issue #45): N bounded busy loops (default 4,
# each at most the CI limit of 90 min plus a margin) run beside it; prints how long CI took, its
# exit code and the load average seen. Nothing is left running: the loops end with this script.
#
#     bash bench/busy_ci.sh [N]
set -uo pipefail
cd "$(dirname "$0")/.."
n="${1:-4}"
pids=()
for _ in $(seq "$n"); do
  timeout 6000 sh -c 'while :; do :; done' &
  pids+=("$!")
done
trap 'kill "${pids[@]}" 2>/dev/null' EXIT
start=$(date +%s)
( while sleep 60; do cut -d' ' -f1 /proc/loadavg; done ) > /tmp/busy_ci.load.$$ &
sampler=$!
bash .ci/run
rc=$?
kill "$sampler" 2>/dev/null
secs=$(( $(date +%s) - start ))
loads=$(sort -n /tmp/busy_ci.load.$$ | awk '{a[NR]=$1} END {if (NR) printf "min %s median %s max %s", a[1], a[int((NR+1)/2)], a[NR]}')
rm -f /tmp/busy_ci.load.$$
echo "busy_ci: .ci/run exit $rc in ${secs}s beside $n busy loops; load average (1 min) $loads"
exit $rc
