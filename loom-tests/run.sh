#!/usr/bin/env bash
# Runs every loom model in loom-tests/ and prints iterations and wall time per model.
# CI (.ci/run) calls it twice: most protocol files at LOOM_MAX_PREEMPTIONS=3, the three whose
# models take longest at 2. See loom-tests/README.md.
#
#   bash loom-tests/run.sh                          # every model at LOOM_MAX_PREEMPTIONS=3
#   LOOM_MAX_PREEMPTIONS=4 bash loom-tests/run.sh   # deeper (about half an hour on two cores)
#   bash loom-tests/run.sh sleep_wake stop_vs_cancel   # some protocol files only
set -euo pipefail
cd "$(dirname "$0")/.."

export LOOM_MAX_PREEMPTIONS="${LOOM_MAX_PREEMPTIONS:-3}"
export RUSTFLAGS="${RUSTFLAGS:-} --cfg loom"
# A target dir of its own: `--cfg loom` rebuilds every crate, and must not evict the normal
# build's cache (nor wait on its lock).
export CARGO_TARGET_DIR="${LOOM_TARGET_DIR:-$PWD/target/loom}"
threads="${LOOM_TEST_THREADS:-$(nproc 2>/dev/null || echo 2)}"

report=$(mktemp)
log=$(mktemp)
trap 'rm -f "$report" "$log"' EXIT
export LOOM_TESTS_REPORT="$report"

selection=()
for t in "$@"; do selection+=(--test "$t"); done

start=$SECONDS
cargo test -p loom-tests --release --no-run ${selection[@]+"${selection[@]}"}
built=$SECONDS
echo "loom models: preemption bound $LOOM_MAX_PREEMPTIONS, $threads test threads"
status=0
cargo test -p loom-tests --release ${selection[@]+"${selection[@]}"} -- --test-threads="$threads" \
  >"$log" 2>&1 || status=$?

printf '\n%-52s %12s %10s  %s\n' "model" "iterations" "seconds" "result"
sort "$report" | awk -F'\t' '
  { printf "%-52s %12s %10.2f  %s\n", $1, $2, $3, $5; n += $2; s += $3 }
  END { printf "%-52s %12d %10.2f\n", "total (" NR " models)", n, s }'
printf '\nbuild %ds, models %ds (wall, %s threads)\n' $((built - start)) $((SECONDS - built)) "$threads"

if [ "$status" -ne 0 ]; then
  echo
  echo "loom models FAILED; cargo test output:"
  cat "$log"
  echo
  echo "To replay one failure, see loom-tests/README.md (LOOM_CHECKPOINT_FILE)."
fi
exit "$status"
