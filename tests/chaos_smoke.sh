#!/bin/sh
# scripts/chaos end to end at toy size: three ranks in their own network namespaces, a job of 240
# steps without faults, then the same with a worker SIGKILLed or SIGSTOPped every 3 s (the
# coordinator spared: its failover has its own tests in test_multiprocess), each rank restarting
# as a joiner. The job must finish with identical replicas, and the table and JSON line appear.
# Skipped (77) where namespaces, veth pairs or tc's tbf cannot be made.
# Usage: chaos_smoke.sh SOURCE_DIR BUILD_DIR
set -eu
source_dir=$1 build_dir=$2
probe=accch$$
. "$source_dir/tests/netns_probe.sh"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
"$source_dir/scripts/chaos" --workers 3 --steps 240 --every 3 --faults kill,stop --stop-seconds 3 \
  --spare-coordinator --prefix acs --build "$build_dir" --out "$out" >"$out/table.txt" 2>&1 ||
  { cat "$out/table.txt"; tail -n 30 "$out"/*.log; exit 1; }
cat "$out/table.txt"
grep -q '^goodput (tokens/s' "$out/table.txt" && grep -Eq "^goodput against the faulted run's own pace +[0-9.]+%" "$out/table.txt" &&
  grep -Eq '^pace of 3-rank steps \(fault-free / faulted\) +[0-9]+ / [0-9]+ tokens/s' "$out/table.txt" &&
  grep -q '^replicas  *identical' "$out/table.txt" &&
  grep -q '^hangs  *0' "$out/table.txt" && grep -q '"goodput": ' "$out/table.txt" &&
  grep -Eq '^[0-9.]+ (kill|stop) slot [0-9]' "$out/faulted-faults.log"
