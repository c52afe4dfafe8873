#!/bin/sh
# scripts/bench-netns end to end at toy size: two ranks in their own network namespaces, two
# steps each of ddp and of acco with its own compressed rounds (--runs), then of three topologies with a straggler, one table row each. Skipped (77) where namespaces, veth pairs or
# tc's tbf cannot be made (not root, or a container that forbids them).
# Usage: bench_netns_smoke.sh SOURCE_DIR BUILD_DIR
set -eu
source_dir=$1 build_dir=$2
probe=accbp$$
. "$source_dir/tests/netns_probe.sh"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
"$source_dir/scripts/bench-netns" --workers 2 --rate 200mbit --steps 2 --eval-interval 1 --repetitions 1 \
  --runs "ddp;acco --wire-precision fp8 --estimate-precision sign" --build "$build_dir" --out "$out" -- --model mlp >"$out/table.txt" 2>&1 ||
  { cat "$out/table.txt"; tail -n 40 "$out"/*.log; exit 1; }
cat "$out/table.txt"
grep -q '^| ddp |' "$out/table.txt" && grep -q '^| acco --wire-precision fp8 --estimate-precision sign |' "$out/table.txt"
"$source_dir/scripts/bench-netns" --workers 2 --rate 200mbit --steps 2 --eval-interval 1 --repetitions 1 \
  --topologies "ring;parameter-server --max-staleness 2;gossip --gossip-rate 1" --speed 1,2 --build "$build_dir" \
  --out "$out" -- --model mlp >"$out/topologies.txt" 2>&1 || { cat "$out/topologies.txt"; tail -n 40 "$out"/*.log; exit 1; }
cat "$out/topologies.txt"
grep -q '^| ring |' "$out/topologies.txt" && grep -q '^| parameter-server --max-staleness 2 |' "$out/topologies.txt" &&
  grep -q '^| gossip --gossip-rate 1 |' "$out/topologies.txt"
