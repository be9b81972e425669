#!/usr/bin/env python3
"""Turns RESULT lines (from one or more sittings of side_by_side.sh) into a markdown table.

Usage: benches/summarize.py sitting1.log [sitting2.log ...]   (or RESULT lines on stdin)

Each cell is the median over the sittings, with the range when there are several:
`median (min-max)`. Rows are workload/metric, columns implementations (ours, Netty, peers).
Runs at another N come from side_by_side.sh renamed (held_1e5, held_1e6, held_1e7, memory_1e7),
so they get rows of their own. A metric an implementation does not print shows n/a (for held,
Netty prints only cpu_ms_per_s; late_p99_ms, fired, stop_ms and drop_ms are the Rust harnesses').
"""
import collections
import re
import statistics
import sys

LINE = re.compile(r"^RESULT impl=(\S+) workload=(\S+) metric=(\S+) value=(\S+)$")
IMPL_ORDER = ["hashed-timer-wheel", "netty", "tokio-delayqueue", "tokio-sleep",
              "futures-timer", "hierarchical-hash-wheel-timer"]

values = collections.defaultdict(list)
rows, impls = [], []
files = [open(f) for f in sys.argv[1:]] or [sys.stdin]
for f in files:
    for line in f:
        m = LINE.match(line.strip())
        if not m:
            continue
        imp, w, metric, v = m.groups()
        values[(w, metric, imp)].append(float(v))
        if (w, metric) not in rows:
            rows.append((w, metric))
        if imp not in impls:
            impls.append(imp)
impls.sort(key=lambda i: IMPL_ORDER.index(i) if i in IMPL_ORDER else len(IMPL_ORDER))


def cell(xs):
    if not xs:
        return "n/a"
    med = statistics.median_high(xs) if len(xs) % 2 == 0 else statistics.median(xs)
    if len(xs) == 1 or min(xs) == max(xs):
        return f"{med:.3f}"
    return f"{med:.3f} ({min(xs):.3f}-{max(xs):.3f})"


print("| workload | metric | " + " | ".join(impls) + " |")
print("|---|---|" + "---|" * len(impls))
for w, metric in rows:
    print(f"| {w} | {metric} | " + " | ".join(cell(values[(w, metric, i)]) for i in impls) + " |")
