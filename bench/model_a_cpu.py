"""Issue 37, model A: server CPU per lifecycle (create, dequeue, complete, each committed), one
backend per system, read from /proc: robust where wall-clock rates swing 5x on a shared machine.

Each system runs its own create / dequeue / complete calls (the statements of its bench/pgbench
scripts) in a procedure-style DO loop with COMMIT after each call, 100 channels, synchronous_commit
off; rounds interleave the systems (order reversed every other round); µs of CPU per lifecycle
(user + system of the backend) and the median per system and of per-round ratios are printed.
Databases as set up by model_a_nearempty.py.

    python3 bench/model_a_cpu.py --rounds 7 --lifecycles 2000
    python3 bench/model_a_cpu.py --rounds 4 --lifecycles 4000 --no-vacuum --systems lonnymq_1.12,model_a
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import time
from pathlib import Path

PGBIN = Path(os.environ.get("PGBIN", "/usr/lib/postgresql/15/bin"))
PORT = os.environ.get("BENCH_PGPORT", "25439")
PAYLOAD = "\\x" + "ab" * 128
TICK = os.sysconf("SC_CLK_TCK")

LOOPS = {
    "floor": ("ne_floor", """
        INSERT INTO floor.message (channel, content) VALUES ('c' || (1 + i % 100), p); COMMIT;
        WITH c AS (UPDATE floor.message m SET locked_until = now() + interval '30 seconds',
                          num_attempts = m.num_attempts + 1
                   WHERE m.id = (SELECT f.id FROM floor.message f WHERE f.locked_until IS NULL
                                 AND f.dequeue_at <= now() ORDER BY f.dequeue_at, f.id LIMIT 1
                                 FOR UPDATE SKIP LOCKED) RETURNING m.id, m.num_attempts)
        SELECT c.id, c.num_attempts INTO v_id, v_na FROM c; COMMIT;
        DELETE FROM floor.message WHERE id = v_id AND num_attempts = v_na; COMMIT;"""),
    "pgmq": ("ne_pgmq", """
        PERFORM pgmq.send('bench', jsonb_build_object('content', encode(p, 'base64'))); COMMIT;
        SELECT msg_id INTO v_id FROM pgmq.read('bench', 30, 1); COMMIT;
        PERFORM pgmq.delete('bench', v_id); COMMIT;"""),
    "original": ("ne_orig", """
        PERFORM lonny_up.message_create('c' || (1 + i % 100), p, NULL); COMMIT;
        SELECT (metadata->>'id')::bigint, (metadata->>'num_attempts')::bigint INTO v_id, v_na
        FROM lonny_up.message_dequeue(30000); COMMIT;
        PERFORM lonny_up.message_complete(v_id, v_na); COMMIT;"""),
    "lonnymq_1.12": ("ne_112", """
        PERFORM lonnymq.message_create('bench', 'c' || (1 + i % 100), p); COMMIT;
        SELECT d.id, d.num_attempts INTO v_id, v_na FROM lonnymq.message_dequeue('bench', 30000) d; COMMIT;
        PERFORM lonnymq.message_complete(v_id, v_na); COMMIT;"""),
    "model_a": ("ne_a", """
        PERFORM lonnymq.message_create('bench', 'c' || (1 + i % 100), p); COMMIT;
        SELECT d.id, d.num_attempts INTO v_id, v_na FROM lonnymq.message_dequeue('bench', 30000) d; COMMIT;
        PERFORM lonnymq.message_complete(v_id, v_na); COMMIT;"""),
}


def psql_session(db: str) -> subprocess.Popen[str]:
    return subprocess.Popen([str(PGBIN / "psql"), "-XAtq", "-v", "ON_ERROR_STOP=1", "-h", "127.0.0.1", "-p", PORT,
                             "-U", "postgres", "-d", db],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=dict(os.environ, PGOPTIONS="-c synchronous_commit=off"))


def cpu_ticks(pid: int) -> int:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime + stime


VACUUMED = {
    "floor": "floor.message", "pgmq": "pgmq.q_bench, pgmq.a_bench", "original": "lonny_up.message, lonny_up.channel",
    "lonnymq_1.12": "lonnymq.message, lonnymq.channel, lonnymq.channel_hint", "model_a": "lonnymq.message, lonnymq.channel",
}


def measure(system: str, n: int, vacuum: bool = True) -> float:
    """µs of the backend's CPU per lifecycle, after a VACUUM of its tables (the same starting line for
    every system: what dead index entries cost between vacuums is the held-snapshot question, not
    this one) and a warm-up of 200 lifecycles in the same backend."""
    db, body = LOOPS[system]
    if vacuum:
        subprocess.run([str(PGBIN / "psql"), "-XAtq", "-h", "127.0.0.1", "-p", PORT, "-U", "postgres", "-d", db,
                        "-c", f"VACUUM {VACUUMED[system]}"], check=True, capture_output=True)
    do = ("DO $$ DECLARE v_id bigint; v_na bigint; p bytea := '" + PAYLOAD + "'::bytea; "
          "BEGIN FOR i IN 1..{n} LOOP " + body + " END LOOP; END $$;\n")
    s = psql_session(db)
    assert s.stdin is not None and s.stdout is not None
    s.stdin.write("SELECT pg_backend_pid();\n" + do.replace("{n}", "200") + "SELECT 'warm';\n")
    s.stdin.flush()
    pid = int(s.stdout.readline())
    assert s.stdout.readline().strip() == "warm"
    before = cpu_ticks(pid)
    s.stdin.write(do.replace("{n}", str(n)) + "SELECT 'done';\n")
    s.stdin.flush()
    assert s.stdout.readline().strip() == "done"
    used = cpu_ticks(pid) - before
    s.stdin.close()
    s.wait()
    return used / TICK * 1e6 / n


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--lifecycles", type=int, default=2000)
    parser.add_argument("--systems", default=",".join(LOOPS))
    parser.add_argument("--no-vacuum", action="store_true",
                        help="no VACUUM before a measurement: dead entries pile up from round to round "
                             "(autovacuum off for these tables meanwhile)")
    args = parser.parse_args()
    systems = args.systems.split(",")
    rows = []
    for r in range(args.rounds):
        row = {}
        for system in systems if r % 2 == 0 else reversed(systems):
            row[system] = measure(system, args.lifecycles, not args.no_vacuum)
        rows.append(row)
        print(f"[{time.strftime('%H:%M:%S')}] round {r + 1}: "
              + ", ".join(f"{s} {v:.0f}" for s, v in row.items()), flush=True)
    print("median µs CPU per lifecycle: " + ", ".join(
        f"{s} {statistics.median(x[s] for x in rows):.0f}" for s in systems))
    if "model_a" in systems:
        print("model_a / x, median of rounds: " + ", ".join(
            f"{s} {statistics.median(x['model_a'] / x[s] for x in rows):.2f}" for s in systems if s != "model_a"))


if __name__ == "__main__":
    main()
