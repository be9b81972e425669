#!/usr/bin/env bash
# One sitting: Netty's workloads, this crate's, then the Rust peers, with the load average
# before each, so that the ratios come from the same machine at the same time.
# Usage: benches/side_by_side.sh [workload]   (from the crate root; output: RESULT lines + notes)
# Env: N, REPS (passed to the Rust harnesses; Netty always runs its defaults), CARGO_TARGET_DIR.
set -euo pipefail
cd "$(dirname "$0")/.."
w="${1:-all}"
note() { printf '# %s  %s  load: %s\n' "$(date -u +%FT%TZ)" "$1" "$(cut -d' ' -f1-3 /proc/loadavg)"; }
cargo bench --bench netty_workloads --bench peers --no-run >/dev/null 2>&1
t=$SECONDS; note "netty"
bash ../shared/bench/netty/run "$w" | grep '^RESULT'
note "netty took $((SECONDS - t)) s"; t=$SECONDS; note "hashed-timer-wheel"
cargo bench -q --bench netty_workloads -- "$w" 2>/dev/null | grep '^RESULT'
note "hashed-timer-wheel took $((SECONDS - t)) s"; t=$SECONDS; note "peers"
case "$w" in
  all) cargo bench -q --bench peers 2>/dev/null | grep '^RESULT' ;;
  schedule|schedule_cancel|expire|memory) cargo bench -q --bench peers -- "$w" 2>/dev/null | grep '^RESULT' ;;
  *) ;;  # multi_producer and idle have no peer version
esac
note "peers took $((SECONDS - t)) s"
