#!/usr/bin/env bash
# A/B rounds of the service bench (benches/service/README.md): the wheel's stack (A) against
# tokio's (B) under wrk, alternating which runs first each round, then the slow clients once
# per stack. Prints a summary table of the per-round ratios A/B and keeps the raw RESULT lines
# in a log (a temporary directory unless LOG_DIR says where; raw logs are not committed).
#
#   bash benches/service/run.sh
#   ROUNDS=5 DURATION=20 CONNECTIONS="64 512 2048" bash benches/service/run.sh
#
# Knobs: A (the wheel's stack set against tokio's: driven, the default, with the ticks run on
# the runtime's threads; or wheel, on the timer's own thread), ROUNDS (3), DURATION (10 s per
# run), WARMUP (2 s per run), CONNECTIONS ("64 512"), SLOW_CLIENTS (2000; 0 skips them),
# LOG_DIR (a new temporary directory).
set -euo pipefail
cd "$(dirname "$0")/../.."

A=${A:-driven}
ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-10}
WARMUP=${WARMUP:-2}
CONNECTIONS=${CONNECTIONS:-"64 512"}
SLOW_CLIENTS=${SLOW_CLIENTS:-2000}
LOG_DIR=${LOG_DIR:-$(mktemp -d)}
mkdir -p "$LOG_DIR"
log="$LOG_DIR/service-$(date -u +%Y%m%dT%H%M%SZ).log"

if ! command -v wrk >/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    # The package lists may be missing or stale on a fresh machine: update once if needed.
    apt-get install -y wrk || { apt-get update && apt-get install -y wrk; }
  else
    echo "wrk is missing: install it (Debian: apt-get install -y wrk), then run this again" >&2
    exit 1
  fi
fi

# Each slow client holds a socket in this process and the server holds another.
need=$((2 * SLOW_CLIENTS + 1024))
limit=$(ulimit -n)
if [ "$limit" != unlimited ] && [ "$limit" -lt "$need" ]; then
  ulimit -n "$need" 2>/dev/null || ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
  limit=$(ulimit -n)
  if [ "$limit" != unlimited ] && [ "$limit" -lt "$need" ]; then
    echo "note: open files limited to $limit (the slow clients need $need): raise ulimit -n" >&2
  fi
fi

echo "building the bench (release)..." >&2
bin=$(cargo bench --no-run --features hyper,tower,stream --bench service --message-format=json |
  grep '"reason":"compiler-artifact"' | grep '"name":"service"' | grep '"kind":\["bench"\]' |
  sed -n 's/.*"executable":"\([^"]*\)".*/\1/p' | tail -n 1)
if [ -z "$bin" ] || [ ! -x "$bin" ]; then
  echo "cannot find the service bench's executable" >&2
  exit 1
fi

{
  echo "# $(date -u +%FT%TZ) commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
  echo "# cpu: $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1), $(nproc) cpus"
  echo "# load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "# A=$A rounds=$ROUNDS duration=$DURATION warmup=$WARMUP connections=$CONNECTIONS"
} | tee "$log" >&2

for round in $(seq 1 "$ROUNDS"); do
  # Alternating the order spreads a drift of the machine (heat, neighbours) over both stacks.
  if [ $((round % 2)) -eq 1 ]; then order="$A tokio"; else order="tokio $A"; fi
  echo "# round $round" >>"$log"
  for c in $CONNECTIONS; do
    for stack in $order; do
      echo "round $round/$ROUNDS: stack=$stack c=$c (${WARMUP}+${DURATION} s)" >&2
      "$bin" --stack "$stack" --connections "$c" --duration "$DURATION" --warmup "$WARMUP" \
        >>"$log"
    done
  done
done

if [ "$SLOW_CLIENTS" -gt 0 ]; then
  echo "# slow clients" >>"$log"
  for stack in $A tokio; do
    echo "slow clients: stack=$stack n=$SLOW_CLIENTS" >&2
    "$bin" --stack "$stack" --slow-clients "$SLOW_CLIENTS" >>"$log"
  done
fi
echo "# load average after: $(cut -d' ' -f1-3 /proc/loadavg)" >>"$log"

# The summary: per concurrency and figure, A's and B's medians, the ratio A/B of each round
# (both measured within seconds of each other) and the median of those ratios.
awk -v A="$A" '
  function show(x) { return x >= 1000 ? sprintf("%.0f", x) : sprintf("%.4g", x) }
  function median(a, n,    i, j, t) {
    for (i = 2; i <= n; i++) { t = a[i]; for (j = i - 1; j >= 1 && a[j] > t; j--) a[j + 1] = a[j]; a[j + 1] = t }
    return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
  }
  /^# round / { round = $3; if (round > rounds) rounds = round; next }
  /^RESULT / {
    delete f
    for (i = 2; i <= NF; i++) { split($i, kv, "="); f[kv[1]] = kv[2]; last = kv[1] }
    if ("c" in f) {
      if (!(f["c"] in seen)) { seen[f["c"]] = 1; cs[++ncs] = f["c"] }
      v[round, f["c"], f["stack"], last] = f[last]
    } else if ("slow_clients" in f) {
      slow[f["stack"], last] = f[last]; slow_n = f["slow_clients"]; slow_seen[f["stack"]] = 1
    }
  }
  END {
    nm = split("cpu_us_per_req rps p50_ms p99_ms share_504 rss_mb voluntary_per_req", metrics, " ")
    for (ci = 1; ci <= ncs; ci++) {
      c = cs[ci]
      printf "\nc=%s (A = %s, B = tokio)\n\n| figure | A median | B median |", c, A
      for (r = 1; r <= rounds; r++) printf " A/B round %d |", r
      printf " A/B median |\n|---|---|---|"
      for (r = 1; r <= rounds; r++) printf "---|"
      printf "---|\n"
      for (mi = 1; mi <= nm; mi++) {
        m = metrics[mi]; na = nb = nr = 0
        line = ""
        for (r = 1; r <= rounds; r++) {
          a = v[r, c, A, m]; b = v[r, c, "tokio", m]
          if (a != "") xa[++na] = a + 0
          if (b != "") xb[++nb] = b + 0
          if (a != "" && b != "" && b + 0 != 0) { ratio = a / b; xr[++nr] = ratio; line = line sprintf(" %.3f |", ratio) }
          else line = line " - |"
        }
        printf "| %s | %s | %s |%s %s |\n", m, na ? show(median(xa, na)) : "-",
          nb ? show(median(xb, nb)) : "-", line, nr ? sprintf("%.3f", median(xr, nr)) : "-"
      }
    }
    if (slow_n != "") {
      printf "\nslow clients: %s connections, half a request head or nothing; header read timeout 2 s\n\n", slow_n
      printf "| stack | closed | min ms | p50 ms | p99 ms | max ms |\n|---|---|---|---|---|---|\n"
      split(A " tokio", stacks, " ")
      for (si = 1; si <= 2; si++) {
        s = stacks[si]
        if (s in slow_seen)
          printf "| %s | %s | %s | %s | %s | %s |\n", s, slow[s, "closed"], slow[s, "min_close_ms"],
            slow[s, "p50_close_ms"], slow[s, "p99_close_ms"], slow[s, "max_close_ms"]
      }
    }
  }
' "$log"
echo
echo "raw log: $log" >&2
