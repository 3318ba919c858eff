#!/usr/bin/env bash
# message_create_batch of one version against the version in development, one
# client (bench/README.md, "A/B tools").
#   bench/cluster start && bench/ab_create.sh OLD_VERSION [ROUNDS] [SECONDS]
# Database ab_create_a has CREATE EXTENSION lonnymq VERSION 'OLD_VERSION' (a
# released script, installed by make install), ab_create_b the default
# version; both get bench/create_backlog.sql. Then ROUNDS (default 6) interleaved
# pairs of SECONDS (default 5) of bench/create_batch.sql, one pgbench client
# each. Prints every round and the medians, and writes
# bench/results/ab-create-OLD_VERSION.json.
set -euo pipefail
BENCH_DIR=$(cd "$(dirname "$0")" && pwd)
export PGHOST=127.0.0.1 PGPORT=${BENCH_PGPORT:-25439} PGUSER=postgres
. "$BENCH_DIR/../scripts/lib.sh"
old=${1:?usage: bench/ab_create.sh OLD_VERSION [ROUNDS] [SECONDS]}
rounds=${2:-6}
seconds=${3:-5}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

for side in a b; do
    version=""
    [ $side = a ] && version="VERSION '$old'"
    psql -XqA -d postgres -v ON_ERROR_STOP=1 -c "DROP DATABASE IF EXISTS ab_create_$side" \
        -c "CREATE DATABASE ab_create_$side" >/dev/null
    psql -XqA -d ab_create_$side -v ON_ERROR_STOP=1 -c "CREATE EXTENSION lonnymq $version" \
        -f "$BENCH_DIR/create_backlog.sql" >/dev/null
done
for round in $(seq "$rounds"); do
    for side in a b; do
        tps=$("$PGBIN/pgbench" -n -M prepared -T "$seconds" -c 1 -f "$BENCH_DIR/create_batch.sql" ab_create_$side 2>/dev/null \
              | sed -n 's/^tps = \([0-9.]*\).*/\1/p')
        echo "$round $side $tps" | tee -a "$work/rounds"
    done
done
new=$(sed -n "s/^default_version = '\(.*\)'/\1/p" "$LONNYMQ_ROOT/lonnymq.control")
"$LONNYMQ_ROOT/.venv/bin/python" - "$work/rounds" "$old" "$new" "$LONNYMQ_ROOT/bench/results/ab-create-$old.json" <<'PY'
import json, statistics, sys
rows = [line.split() for line in open(sys.argv[1])]
tps = {side: [float(t) for _, s, t in rows if s == side] for side in ("a", "b")}
a, b = statistics.median(tps["a"]), statistics.median(tps["b"])
result = {"old": sys.argv[2], "new": sys.argv[3], "batch": 100, "channels": 100,
          "batches_per_s": tps, "median_ms": {"old": 1000 / a, "new": 1000 / b},
          "new_over_old_time": a / b}
json.dump(result, open(sys.argv[4], "w"), indent=2)
print(f"{sys.argv[2]}: {1000 / a:.3f} ms per batch; {sys.argv[3]}: {1000 / b:.3f} ms; "
      f"new/old time {a / b:.3f} (written to {sys.argv[4]})")
PY
psql -XqA -d postgres -c "DROP DATABASE ab_create_a" -c "DROP DATABASE ab_create_b" >/dev/null
