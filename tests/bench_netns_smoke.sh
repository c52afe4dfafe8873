#!/bin/sh
# scripts/bench-netns end to end at toy size: two ranks in their own network namespaces, two
# steps each of ddp and acco, one table row each. Skipped (77) where namespaces cannot be made
# (not root, or a container that forbids them).
# Usage: bench_netns_smoke.sh SOURCE_DIR BUILD_DIR
set -eu
source_dir=$1 build_dir=$2
probe=accb-probe-$$
ip netns add "$probe" 2>/dev/null || { echo "skipped: cannot create network namespaces here"; exit 77; }
ip netns del "$probe"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
"$source_dir/scripts/bench-netns" --workers 2 --rate 200mbit --steps 2 --eval-interval 1 --repetitions 1 \
  --algos ddp,acco --build "$build_dir" --out "$out" -- --model mlp >"$out/table.txt" 2>&1 ||
  { cat "$out/table.txt"; exit 1; }
cat "$out/table.txt"
grep -q '^| ddp |' "$out/table.txt" && grep -q '^| acco |' "$out/table.txt"
