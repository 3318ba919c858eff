#!/usr/bin/env bash
# A MEASUREMENT, NOT A CHANGE TO KEEP (session 23): channel.lock_key as a plain column
# written by the insert (here _channel_for_create's; channel_set's would need the same)
# instead of a stored generated column, whose expression every UPDATE of a channel row
# (every turn) sets up again at executor start (ExecInitStoredGenerated, about 1.5% of a
# single dequeue in session 19's profile). Writes the definitions to apply over an
# installed 1.12 (from sql/30_channel.sql at 1.12's release, 7fc2678) and runs the pair:
#
#   bench/cluster start
#   bench/prototypes/lock_key_plain.sh [ROUNDS] [NAME]      # default 8 s23-lockkey-b1-again
#   bench/prototypes/consume_pair.sh B.sql 8 1 s23-aa-b1    # the A/A: B.sql is "SELECT 1;"
#
# Dequeue time B/A, one client, single dequeues over 100 channels: rounds 1.06, 0.97, 0.96,
# 0.89, 1.00, 0.96 (consume-s23-lockkey-b1.csv) and 0.98, 1.01, 0.86, 1.02, 0.94, 0.97, 0.94,
# 0.97 (consume-s23-lockkey-b1-again.csv), medians 0.962 and 0.969; the A/A 0.95-1.03,
# median 0.988 (consume-s23-aa-b1.csv): 2-3% below the A/A, not resolved. Not kept: a plain
# NOT NULL column with no default breaks restoring a dump of an earlier version into this
# one (pg_dump leaves generated columns out of the data and CREATE EXTENSION installs the
# default version), and a trigger to fill it would be a new mechanism for 2% at most.
# bench/README.md, "Session 23".
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
definitions=$(mktemp --suffix=.sql)
trap 'rm -f "$definitions"' EXIT
git -C "$here" show 7fc2678:sql/30_channel.sql | python3 -c '
import sys
s = sys.stdin.read()
fn = s[s.index("CREATE OR REPLACE FUNCTION lonnymq._channel_for_create"):
       s.index("COMMENT ON FUNCTION lonnymq._channel_for_create")]
insert = ("INSERT INTO lonnymq.channel (queue_id, name, last_turn_ms)\n"
          "        VALUES (p_queue_id, p_channel, lonnymq._now_ms())")
assert insert in fn
fn = fn.replace(insert, "INSERT INTO lonnymq.channel (queue_id, name, last_turn_ms, lock_key)\n"
                "        VALUES (p_queue_id, p_channel, lonnymq._now_ms(),"
                " lonnymq._channel_lock_key(p_queue_id, p_channel))")
print("ALTER TABLE lonnymq.channel ALTER COLUMN lock_key DROP EXPRESSION;")
print(fn)
' > "$definitions"
"$here/consume_pair.sh" "$definitions" "${1:-8}" 1 "${2:-s23-lockkey-b1-again}"
