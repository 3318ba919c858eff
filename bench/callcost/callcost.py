#!/usr/bin/env python3
"""Instructions per call of lonnymq's API shell, its statements and the peers.

Writes the script that one single-user backend runs under callgrind (see
run.sh), then reads callgrind's dumps back. Each case is a warm-up segment
(discarded) and a measured one of N top-level EXECUTEs, each its own
transaction as a client's call is; a marker statement between segments makes
callgrind dump and zero its counters (--dump-before=pg_postmaster_start_time).
Per call = the segment's instructions / N - the same for `SELECT 1`.
No autovacuum runs in a single-user backend: deleted rows stay dead in
every system's tables alike, as between two vacuums.

    callcost.py gen IDS_JSON > script.sql   # ids: first ids of each system
    callcost.py report DIR...               # the table, one column per run
    callcost.py profile DIR CASE...         # inclusive costs of a few functions
"""
import glob
import json
import os
import re
import sys

W = int(os.environ.get("CALLCOST_W", 20))    # warm-up calls per case
N = int(os.environ.get("CALLCOST_N", 200))   # measured calls per case
MARK = "SELECT pg_catalog.pg_postmaster_start_time();"

TRIVIAL = ["sql_c", "sql_c_sd", "sql_c_sd_sp", "pl_c", "pl_c_strict", "pl_c_stable", "pl_c_sd",
           "pl_c_sp", "pl_c_sd_sp", "pl_c_sd_ss", "pl_c_sd_pc", "pl_c_sd_all",
           "pl_q", "pl_q_sd", "pl_q_sd_sp", "pl_q_sd_all", "sql_q_sd_sp"]
ROWS = ["pl_tab", "pl_tab_sd_all", "pl_tab_empty", "pl_row", "pl_setof", "pl_out",
        "sql_setof", "sql_setof_sd_sp"]

# The statements of 1.12's functions as top-level prepared statements
# (copied from sql/*.sql at 7af9c46, the function's variables as parameters),
# run with the function's SET clauses as session settings.
PREPARES = [
    "PREPARE one AS SELECT 1;",
    # message_dequeue's probe (on an empty queue it is the whole body).
    "PREPARE s_probe(text, bigint) AS SELECT q AS queue, f.channelless_ms,"
    " (SELECT h.dequeue_ms FROM lonnymq.channel_hint h WHERE h.queue_id = q.id AND h.dequeue_ms <= $2"
    " ORDER BY h.dequeue_ms LIMIT 1) IS NOT NULL AS hinted,"
    " (SELECT m.locked_until_ms FROM lonnymq.message m WHERE m.queue_id = q.id AND m.locked_until_ms <= $2"
    " ORDER BY m.locked_until_ms LIMIT 1) IS NOT NULL AS expired,"
    " CASE WHEN f.channelless_ms IS NOT NULL THEN EXISTS (SELECT 1 FROM lonnymq.channel c"
    " WHERE c.queue_id = q.id AND c.ready_ms <= $2 AND NOT c.paused) END AS channels_ready"
    " FROM lonnymq.queue q LEFT JOIN LATERAL (SELECT greatest(m.dequeue_ms, q.channelless_turn_ms) AS channelless_ms"
    " FROM lonnymq.message m WHERE m.queue_id = q.id AND m.channel_id IS NULL AND m.locked_until_ms IS NULL"
    " AND m.dequeue_ms <= $2 ORDER BY m.dequeue_ms, m.id LIMIT 1) f ON true WHERE q.name = $1;",
    # message_create's pin, insert (+ hint) and the helpers it calls.
    "PREPARE s_pin(text, text) AS SELECT q.id, c.id, c.head_ms, c.max_size, c.lock_key FROM lonnymq.queue q"
    " LEFT JOIN LATERAL (SELECT c.id, c.head_ms, c.max_size, c.lock_key FROM lonnymq.channel c"
    " WHERE c.queue_id = q.id AND c.name = $2 LIMIT 1 FOR KEY SHARE) c ON true WHERE q.name = $1;",
    "PREPARE s_ins(integer, bigint, bytea, bigint, boolean, bigint) AS WITH created AS ("
    " INSERT INTO lonnymq.message AS m (queue_id, channel_id, content, state, dequeue_ms, priority, dedup_key)"
    " SELECT $1, $2, $3, NULL, $4, 0, NULL WHERE NULL::bigint IS NULL"
    " ON CONFLICT (queue_id, (coalesce(channel_id, 0)), dedup_key) WHERE dedup_key IS NOT NULL DO NOTHING"
    " RETURNING m.id, m.channel_id), hinted AS (INSERT INTO lonnymq.channel_hint (queue_id, channel_id, dequeue_ms)"
    " SELECT $1, k.channel_id, $4 FROM created k WHERE k.channel_id IS NOT NULL"
    " AND (NOT $5 OR $6 IS NULL OR $4 < $6)) SELECT k.id FROM created k;",
    "PREPARE s_misc(integer, text) AS SELECT lonnymq._hold_head_lock($1), lonnymq._read_committed(),"
    " lonnymq._notify_waiters($2, 'created');",
    # message_complete's common case.
    "PREPARE s_del(bigint, bigint) AS DELETE FROM lonnymq.message m"
    " WHERE m.ctid = (SELECT l.ctid FROM lonnymq.message l WHERE l.id = $1 FOR UPDATE)"
    " AND m.locked_until_ms IS NOT NULL AND m.num_attempts = $2"
    " AND (m.channel_id IS NULL OR EXISTS (SELECT 1 FROM lonnymq.channel c WHERE c.id = m.channel_id"
    " AND NOT lonnymq._complete_needs_settle(c.retain_completed, c.max_concurrency,"
    " c.release_interval_ms, c.max_size) FOR KEY SHARE));",
]


def gen(ids):
    out = [p for p in PREPARES]
    for f in TRIVIAL:
        out.append(f"PREPARE t_{f} AS SELECT cc.{f}('q', 3600000, 1);")
    for f in ROWS:
        out.append(f"PREPARE t_{f} AS SELECT * FROM cc.{f}('q', 3600000, 1);")
    out += [
        "PREPARE l_deq(text) AS SELECT * FROM lonnymq.message_dequeue($1, 3600000);",
        "PREPARE l_create AS SELECT * FROM lonnymq.message_create('q', 'c1', '\\x00');",
        "PREPARE l_complete(bigint) AS SELECT lonnymq.message_complete($1, 1);",
    ]
    if ids.get("pgmq"):
        out += ["PREPARE g_send AS SELECT pgmq.send('bench', '{\"hello\":\"world\"}'::jsonb);",
                "PREPARE g_read AS SELECT msg_id FROM pgmq.read('bench', 3600, 1);",
                "PREPARE g_delete(bigint) AS SELECT pgmq.delete('bench', $1);"]
    if ids.get("orig"):
        out += ["PREPARE o_create AS SELECT result_code FROM lonny_up.message_create('c1', '\\x00'::bytea, NULL);",
                "PREPARE o_deq AS SELECT (metadata->>'id')::bigint, (metadata->>'num_attempts')::bigint"
                " FROM lonny_up.message_dequeue(3600000);",
                "PREPARE o_complete(bigint) AS SELECT lonny_up.message_complete($1, 1);"]
    labels = []

    def mark(label, calls=N):
        # Closes the segment since the previous mark: callgrind dumps it.
        out.append(MARK)
        labels.append([label, calls])

    mark(None)

    def case(label, stmt, first_id=None):
        # stmt: a format string; {i} is the call's index from first_id.
        k = [first_id or 0]

        def calls(n):
            for _ in range(n):
                out.append(stmt.format(i=k[0]))
                k[0] += 1
        calls(W)
        mark(None)   # the warm-up, with whatever came before it
        calls(N)
        mark(label)

    def lifecycle(prefix, steps, first_id, n=N // 5):
        # Near empty: create, dequeue, complete one message at a time, a
        # mark after each call so that each step has segments of its own.
        k = first_id
        for j in range(W + n):
            for name, stmt in steps:
                out.append(stmt.format(i=k))
                mark(f"{prefix}{name}" if j >= W else None, 1)
            k += 1
        return k

    case("SELECT 1 (baseline)", "EXECUTE one;")
    lifecycle("", [("SELECT 1, a mark after each call (baseline of the near-empty rows)", "EXECUTE one;")], 0)
    case("2 x SELECT 1 in one transaction", "EXECUTE one; EXECUTE one;")
    for f in TRIVIAL + ROWS:
        case(f, f"EXECUTE t_{f};")
    case("message_dequeue, empty queue", "EXECUTE l_deq('qe');")
    sess = ("SET enable_seqscan = off; SET plan_cache_mode = force_generic_plan;")
    out.append(sess)
    case("  its probe statement, top level", "EXECUTE s_probe('qe', lonnymq._now_ms());")
    out.append("RESET enable_seqscan; RESET plan_cache_mode;")
    f = ids["lonnymq"]
    case("message_create, existing channel, backlog", "EXECUTE l_create;")
    out.append(sess)
    q, c = ids["q_id"], ids["c1_id"]
    case("  its statements, top level, one transaction",
         f"EXECUTE s_pin('q', 'c1'); EXECUTE s_ins({q}, {c}, '\\x00', lonnymq._now_ms(), true, 0);"
         f" EXECUTE s_misc({ids['c1_lock']}, 'q');")
    out.append("RESET enable_seqscan; RESET plan_cache_mode;")
    case("message_dequeue, one ready message", "EXECUTE l_deq('q');")
    case("message_complete", "EXECUTE l_complete({i});", f)
    # More deliveries for the complete's statements (not a case).
    out += ["EXECUTE l_deq('q');"] * (W + N)
    out.append(sess)
    case("  its DELETE + _read_committed, top level, one transaction",
         "EXECUTE s_del({i}, 1); SELECT lonnymq._read_committed();", f + W + N)
    out.append("RESET enable_seqscan; RESET plan_cache_mode;")
    lifecycle("near empty: ", [("message_create", "EXECUTE l_create;"),
                               ("message_dequeue", "EXECUTE l_deq('q');"),
                               ("message_complete", "EXECUTE l_complete({i});")], f + 2 * (W + N))
    if ids.get("pgmq"):
        case("pgmq.send", "EXECUTE g_send;")
        case("pgmq.read, one message", "EXECUTE g_read;")
        case("pgmq.delete", "EXECUTE g_delete({i});", ids["pgmq"])
        lifecycle("near empty: ", [("pgmq.send", "EXECUTE g_send;"), ("pgmq.read", "EXECUTE g_read;"),
                                   ("pgmq.delete", "EXECUTE g_delete({i});")], ids["pgmq"] + W + N)
    if ids.get("orig"):
        case("original message_create", "EXECUTE o_create;")
        case("original message_dequeue, one message", "EXECUTE o_deq;")
        case("original message_complete", "EXECUTE o_complete({i});", ids["orig"])
        lifecycle("near empty: ", [("original message_create", "EXECUTE o_create;"),
                                   ("original message_dequeue", "EXECUTE o_deq;"),
                                   ("original message_complete", "EXECUTE o_complete({i});")],
                  ids["orig"] + W + N)
    return "\n".join(out) + "\n", labels


def totals(path):
    with open(path) as fh:
        for line in fh:
            if line.startswith(("summary:", "totals:")):
                return int(line.split()[1])
    raise SystemExit(f"no totals in {path}")


def dumps_of(d):
    # callgrind.out.PID.K, K = 1, 2, ... in order (the one at exit has no K).
    return sorted(glob.glob(os.path.join(d, "callgrind.out.*.*")), key=lambda p: int(p.rsplit(".", 1)[1]))


def per_call(d):
    """Instructions per call of each case, minus those of `SELECT 1` (run the same way)."""
    meta = json.load(open(os.path.join(d, "labels.json")))
    dumps = dumps_of(d)
    if len(dumps) < len(meta["labels"]):
        raise SystemExit(f"{d}: {len(dumps)} dumps for {len(meta['labels'])} segments")
    acc = {}
    for (label, calls), path in zip(meta["labels"], dumps):
        if label:
            ir, c = acc.get(label, (0, 0))
            acc[label] = (ir + totals(path), c + calls)
    per = {label: ir / c for label, (ir, c) in acc.items()}
    base = per.pop("SELECT 1 (baseline)")
    base1 = per.pop("SELECT 1, a mark after each call (baseline of the near-empty rows)", base)
    return {label: v - (base1 if label.startswith("near empty") else base) for label, v in per.items()}, base


def report(dirs):
    runs = [per_call(d) for d in dirs]
    print("| case | " + " | ".join(os.path.basename(d.rstrip("/")) for d in dirs) + " |")
    print("|---|" + "---|" * len(dirs))
    print("| `SELECT 1` itself (subtracted below) | " + " | ".join(f"{b:,.0f}" for _, b in runs) + " |")
    for label in runs[0][0]:
        print(f"| {label} | " + " | ".join(f"{r.get(label, float('nan')):,.0f}" for r, _ in runs) + " |")


# Where a call goes (inclusive instructions per call, outermost activation):
# the whole call under fmgr_security_definer, the PL/pgSQL handler inside
# it, the statements run through SPI, the GUC work of the SET clauses.
PROFILED = ["ExecMakeTableFunctionResult", "fmgr_security_definer", "plpgsql_call_handler",
            "SPI_execute_plan_with_paramlist", "GetCachedPlan", "ExecutorStart", "ExecutorEnd",
            "NewGUCNestLevel", "ProcessGUCArray", "set_config_option", "AtEOXact_GUC",
            "tuplestore_begin_heap", "CommitTransactionCommand", "StartTransactionCommand"]


def profile(d, wanted):
    import subprocess
    meta = json.load(open(os.path.join(d, "labels.json")))
    labels = meta["labels"]
    dumps = dumps_of(d)
    for (label, calls), path in zip(labels, dumps):
        if not label or calls == 1 or not any(w in label for w in wanted):
            continue
        text = subprocess.run(["callgrind_annotate", "--inclusive=yes", "--threshold=100", path],
                              capture_output=True, text=True, check=True).stdout
        got = {}
        for line in text.splitlines():
            m = re.match(r"\s*([\d,]+) \(.*\)\s+\?\?\?:(\w+) \[", line)
            if m and m.group(2) in PROFILED and m.group(2) not in got:
                got[m.group(2)] = int(m.group(1).replace(",", "")) / calls
        print(f"### {label}")
        for f in PROFILED:
            if f in got:
                print(f"    {f:36s} {got[f]:12,.0f}")


if __name__ == "__main__":
    if sys.argv[1] == "profile":
        profile(sys.argv[2], sys.argv[3:])
        sys.exit()
    if sys.argv[1] == "gen":
        script, labels = gen(json.load(open(sys.argv[2])))
        sys.stdout.write(script)
        json.dump({"n": N, "labels": labels}, open(sys.argv[3], "w"))
    else:
        report(sys.argv[2:])
