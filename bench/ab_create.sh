#!/usr/bin/env bash
# message_create_batch of one version against the version in development, one
# client (bench/README.md, "Full run ... s9-full").
#   bench/cluster start && bench/ab_create.sh OLD_VERSION [ROUNDS] [SECONDS]
# Database ab_create_a has CREATE EXTENSION lonnymq VERSION 'OLD_VERSION' (a
# released script, installed by make install), ab_create_b the default
# version; both get 100 channels whose heads are set (a backlog and one
# dequeue, so no hints are written). Then ROUNDS (default 6) interleaved
# pairs of SECONDS (default 5) of batches of 100 over random channels, one
# pgbench client each. Prints every round and the medians, and writes
# bench/results/ab-create-OLD_VERSION.json.
set -euo pipefail
BENCH_DIR=$(cd "$(dirname "$0")" && pwd)
export PGHOST=127.0.0.1 PGPORT=${BENCH_PGPORT:-54339} PGUSER=postgres
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
    psql -XqA -d ab_create_$side -v ON_ERROR_STOP=1 >/dev/null <<SQL
CREATE EXTENSION lonnymq $version;
SELECT count(*) FROM lonnymq.message_create_batch('bench',
    (SELECT array_agg('c' || (i % 100 + 1)) FROM generate_series(1, 10000) i),
    (SELECT array_agg('x'::bytea) FROM generate_series(1, 10000)));
SELECT count(*) FROM lonnymq.message_dequeue('bench', 600000, 200);
VACUUM ANALYZE;
SQL
done
cat > "$work/batch.sql" <<'SQL'
SELECT count(*) FROM lonnymq.message_create_batch('bench',
    (SELECT array_agg('c' || (1 + (random() * 99)::int)) FROM generate_series(1, 100)),
    array_fill('x'::bytea, ARRAY[100]));
SQL
for round in $(seq "$rounds"); do
    for side in a b; do
        tps=$("$PGBIN/pgbench" -n -M prepared -T "$seconds" -c 1 -f "$work/batch.sql" ab_create_$side 2>/dev/null \
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
