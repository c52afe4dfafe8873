#!/bin/sh
# scripts/bench-netns --peer torch end to end at toy size: two ranks in their own network
# namespaces, three steps of examples/torch_gpt (one layer) with torch DDP (plain, fp16 hook,
# PowerSGD compressing from step 2) and with accord.torch (DDP and ACCO in the script's own loop,
# ACCO driven by accord.torch.train), one table row each. Its own name prefix (acct), so it may run beside bench_netns_smoke.sh's. A rank
# that hangs ends the run within --stall-seconds, with a line naming it and what it waits for,
# well inside ctest's limit.
# Skipped (77) where namespaces cannot be made, or PYTHON lacks torch.
# Usage: bench_netns_torch_smoke.sh SOURCE_DIR BUILD_DIR PYTHON
set -eu
source_dir=$1 build_dir=$2 python=$3
probe=actp$$
. "$source_dir/tests/netns_probe.sh"
"$python" -c 'import torch.distributed' 2>/dev/null || { echo "skipped: $python has no torch.distributed"; exit 77; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
runs="torch-ddp;torch-ddp --hook fp16;torch-ddp --hook powersgd --powersgd-warmup 2;ddp --wire-precision fp16;acco;acco --loop accord"
"$source_dir/scripts/bench-netns" --peer torch --python "$python" --prefix acct --workers 2 --rate 200mbit --steps 3 \
  --stall-seconds 60 --timeout 200 --eval-interval 1 --repetitions 1 --runs "$runs" --build "$build_dir" --out "$out" \
  -- --layers 1 --warmup-steps 1 --eval-windows 16 >"$out/table.txt" 2>&1 ||
  { cat "$out/table.txt"; tail -n 40 "$out"/*.log; exit 1; }
cat "$out/table.txt"
echo "$runs" | tr ';' '\n' | while read -r run; do
  grep -q "^| $run |" "$out/table.txt" || { echo "no row for '$run'"; exit 1; }
done
# Loss at equal wall-clock: a column, and a loss in the baseline's own row.
grep -q "| eval at torch-ddp's end |" "$out/table.txt" || { echo "no loss-at-equal-wall-clock column"; exit 1; }
grep -Eq "^\| torch-ddp \|.* [0-9]+\.[0-9]{4} \| [0-9.]+ \|$" "$out/table.txt" || { echo "the baseline's row has no loss at its own end"; exit 1; }
