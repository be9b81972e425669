#!/usr/bin/env bash
# One sitting: for each workload in turn, Netty, this crate, then the Rust peers, with the load
# average before each, so that each ratio comes from runs seconds apart on the same machine (the
# machines here drift from one minute to the next; a whole Netty pass first and ours after put
# a minute between the two figures of a ratio). Netty's side is benches/netty/run, which
# installs what it needs on Debian (a JDK 17, libnetty-java) or says what to install.
# Usage: benches/side_by_side.sh [workload]   (from the crate root; output: RESULT lines + notes)
# schedule_capture, expire and expire_rate also run on a typed timer (schedule_capture_typed,
# expire_typed, expire_rate_typed: this crate only; compare with Netty's workload of the same
# name without _typed), and schedule also through new_timeout_detached (schedule_detached: no
# handle; compare with Netty's schedule).
# Env: N, REPS, THREADS, IDLE_S, RATES, LEAD_MS, INTERLEAVE (given to both sides: to the Rust
# harnesses as they are, to Netty as -Dn, -Dreps, ...; unset, both run their defaults),
# CARGO_TARGET_DIR, NETTY_BENCH_OPTS (more JVM options), HELD_NS (the N of each held run, default
# "100000 1000000 10000000").
# held runs at each N of HELD_NS, and memory once more at N = 10 000 000, for Netty, this crate
# and (held only) the peers, with the N given to both sides; RESULT lines do not carry N, so those
# runs' lines are renamed held_1e5, held_1e6, held_1e7, memory_1e7 for summarize.py.
set -euo pipefail
cd "$(dirname "$0")/.."
# The harnesses' parameters, as Netty's system properties.
netty_opts="${NETTY_BENCH_OPTS:-}"
for p in n:N reps:REPS threads:THREADS idle_s:IDLE_S rates:RATES lead_ms:LEAD_MS interleave:INTERLEAVE; do
  v="${p#*:}"
  if [ -n "${!v:-}" ]; then netty_opts="$netty_opts -D${p%%:*}=${!v}"; fi
done
netty() { NETTY_BENCH_OPTS="$netty_opts ${1:-}" bash benches/netty/run "$2"; }
note() { printf '# %s  %s  load: %s\n' "$(date -u +%FT%TZ)" "$1" "$(cut -d' ' -f1-3 /proc/loadavg)"; }
# 1e<k> for a power of ten, else the number itself.
label() {
  local n=$1 k=0
  while [ "$n" -gt 1 ] && [ $((n % 10)) -eq 0 ]; do n=$((n / 10)); k=$((k + 1)); done
  if [ "$n" -eq 1 ]; then echo "1e$k"; else echo "$1"; fi
}
# Workload $1 at N = $2 for Netty, this crate and, if $3 is "peers", the peers; renamed <w>_<label>.
at_n() {
  local w=$1 n=$2 name rename t
  name="${w}_$(label "$n")"
  rename="s/ workload=$w / workload=$name /"
  t=$SECONDS; note "$name: netty"
  netty "-Dn=$n" "$w" | grep '^RESULT' | sed "$rename"
  note "$name: netty took $((SECONDS - t)) s"; t=$SECONDS; note "$name: hashed-timer-wheel"
  N=$n cargo bench -q --bench netty_workloads -- "$w" 2>/dev/null | grep '^RESULT' | sed "$rename"
  note "$name: hashed-timer-wheel took $((SECONDS - t)) s"
  if [ "${3:-}" = peers ]; then
    t=$SECONDS; note "$name: peers"
    N=$n cargo bench -q --bench peers -- "$w" 2>/dev/null | grep '^RESULT' | sed "$rename"
    note "$name: peers took $((SECONDS - t)) s"
  fi
}
t=$SECONDS; note "building the Rust harnesses"
cargo bench --bench netty_workloads --bench peers --no-run >/dev/null 2>&1
note "built in $((SECONDS - t)) s"
if [ "${1:-all}" = all ]; then
  workloads=(schedule schedule_capture schedule_cancel multi_producer expire expire_rate memory
    memory_capture idle held)
else
  workloads=("$1")
fi
for w in "${workloads[@]}"; do
  if [ "$w" = held ]; then
    for n in ${HELD_NS:-100000 1000000 10000000}; do at_n held "$n" peers; done
    continue
  fi
  t=$SECONDS; note "$w: netty"
  netty "" "$w" | grep '^RESULT'
  note "$w: netty took $((SECONDS - t)) s"; t=$SECONDS; note "$w: hashed-timer-wheel"
  cargo bench -q --bench netty_workloads -- "$w" 2>/dev/null | grep '^RESULT'
  note "$w: hashed-timer-wheel took $((SECONDS - t)) s"
  case "$w" in
    schedule_capture|expire|expire_rate)  # the same tasks on a typed timer, stored in place
      t=$SECONDS; note "${w}_typed: hashed-timer-wheel"
      cargo bench -q --bench netty_workloads -- "${w}_typed" 2>/dev/null | grep '^RESULT'
      note "${w}_typed: hashed-timer-wheel took $((SECONDS - t)) s" ;;
    schedule)  # the same calls with no handle (new_timeout_detached)
      t=$SECONDS; note "schedule_detached: hashed-timer-wheel"
      cargo bench -q --bench netty_workloads -- schedule_detached 2>/dev/null | grep '^RESULT'
      note "schedule_detached: hashed-timer-wheel took $((SECONDS - t)) s" ;;
    *) ;;
  esac
  case "$w" in
    schedule|schedule_cancel|expire|memory)
      t=$SECONDS; note "$w: peers"
      cargo bench -q --bench peers -- "$w" 2>/dev/null | grep '^RESULT'
      note "$w: peers took $((SECONDS - t)) s" ;;
    *) ;;  # schedule_capture, multi_producer, expire_rate, memory_capture and idle have none
  esac
  if [ "$w" = memory ]; then at_n memory 10000000; fi
done
