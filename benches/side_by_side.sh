#!/usr/bin/env bash
# One sitting: for each workload in turn, Netty, this crate, then the Rust peers, with the load
# average before each, so that each ratio comes from runs seconds apart on the same machine (the
# machines here drift from one minute to the next; a whole Netty pass first and ours after put
# a minute between the two figures of a ratio).
# Usage: benches/side_by_side.sh [workload]   (from the crate root; output: RESULT lines + notes)
# Env: N, REPS (passed to the Rust harnesses; Netty always runs its defaults), CARGO_TARGET_DIR.
set -euo pipefail
cd "$(dirname "$0")/.."
note() { printf '# %s  %s  load: %s\n' "$(date -u +%FT%TZ)" "$1" "$(cut -d' ' -f1-3 /proc/loadavg)"; }
cargo bench --bench netty_workloads --bench peers --no-run >/dev/null 2>&1
if [ "${1:-all}" = all ]; then
  workloads=(schedule schedule_cancel multi_producer expire memory idle)
else
  workloads=("$1")
fi
for w in "${workloads[@]}"; do
  t=$SECONDS; note "$w: netty"
  bash ../shared/bench/netty/run "$w" | grep '^RESULT'
  note "$w: netty took $((SECONDS - t)) s"; t=$SECONDS; note "$w: hashed-timer-wheel"
  cargo bench -q --bench netty_workloads -- "$w" 2>/dev/null | grep '^RESULT'
  note "$w: hashed-timer-wheel took $((SECONDS - t)) s"
  case "$w" in
    schedule|schedule_cancel|expire|memory)
      t=$SECONDS; note "$w: peers"
      cargo bench -q --bench peers -- "$w" 2>/dev/null | grep '^RESULT'
      note "$w: peers took $((SECONDS - t)) s" ;;
    *) ;;  # multi_producer and idle have no peer version
  esac
done
