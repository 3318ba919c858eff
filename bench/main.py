"""The benchmark driver: runs the workloads, writes results/<mode>.json, plots and the goal table.

Usually started through bench/run, which owns the cluster; see bench/README.md.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

import burst
import python_worker

import common
import fairness
import held_snapshot
import latency
import plots
import report
import throughput


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="~2 minute smoke run at reduced scale")
    parser.add_argument(
        "--only",
        default="throughput,near-empty,latency,fairness,worker,burst",
        help="comma list of: throughput (it counts the statements too), statements (the "
        "statements per message alone, ~15 s), near-empty, latency, fairness, worker, burst, "
        "held-snapshot, "
        "(held-snapshot: workload 7 on lonnymq, then on the floor and the loaded peers)",
    )
    parser.add_argument(
        "--workloads", default=",".join(throughput.WORKLOADS), help="throughput workloads to run"
    )
    parser.add_argument("--rounds", type=int, help="throughput rounds (default 3, quick 2)")
    parser.add_argument(
        "--seconds", type=float, help="seconds per throughput run (default 10, quick 4)"
    )
    parser.add_argument(
        "--minutes", type=float, default=10.0, help="held-snapshot run length, per system"
    )
    parser.add_argument(
        "--held-systems",
        default="lonnymq,floor,peers",
        help="the systems held-snapshot runs, in order (peers: those loaded; default "
        "lonnymq,floor,peers)",
    )
    parser.add_argument("--name", help="results file stem (default: full, quick or held-snapshot)")
    args = parser.parse_args()

    parts = [p.strip() for p in args.only.split(",") if p.strip()]
    solo = {("held-snapshot",): "held-snapshot", ("near-empty",): "near-empty"}
    mode = args.name or solo.get(tuple(parts)) or ("quick" if args.quick else "full")
    rounds = args.rounds or (2 if args.quick else 3)
    seconds = args.seconds or (3 if args.quick else 10)
    scale = 0.1 if args.quick else 1.0

    started = time.time()
    results: dict[str, Any] = {
        "mode": mode,
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
        "machine": common.machine(),
        "install": common.prepare_database(),
    }
    common.log(
        f"bench {mode}: {results['machine']['cpu']}, {results['machine']['cores']} cores; "
        f"lonnymq at {results['machine']['git_head']}"
        + (" (sql/ has uncommitted changes)" if results["machine"]["sql_dirty"] else "")
        + (
            ""
            if results["install"]["installed_from_checkout"]
            else f"; BENCH_NO_INSTALL: measuring the installed lonnymq "
            f"{results['install']['extversion']} "
            f"(functions md5 {results['install']['functions_md5']})"
        )
    )
    if "throughput" in parts:
        results["throughput"] = throughput.run(
            rounds, seconds, args.workloads.split(","), results["install"]["peers"]
        )
    if "statements" in parts or "throughput" in parts:
        common.log("statements per message, one client")
        results["statements"] = throughput.statement_counts(
            args.workloads.split(","), results["install"]["peers"]
        )
    if "near-empty" in parts:
        common.log("near-empty regime: producers held to an offered rate; one client in turn")
        results["near_empty"] = throughput.near_empty(
            rounds, seconds, results["install"]["peers"], probes=2 if args.quick else None
        )
    if "latency" in parts:
        common.log("workload 5: dequeue latency by shape")
        results["latency"] = latency.run(scale, 100 if args.quick else 1000, 20, mode)
    if "fairness" in parts:
        common.log("workload 6: fairness and rate limits")
        results["fairness"] = fairness.run(scale)
    if "worker" in parts:
        common.log("workload 8: the Python Worker against a PGMQ consumer, backlog held")
        results["worker"] = python_worker.run(rounds, seconds, results["install"]["peers"])
    if "burst" in parts:
        common.log("workload 9: plans made on an empty queue (a burst; a trickle)")
        results["burst"] = burst.run(
            results["install"]["peers"],
            messages=500 if args.quick else 5000,
            seconds=3 if args.quick else 10,
        )
    if "held-snapshot" in parts:
        held = [s.strip() for s in args.held_systems.split(",") if s.strip()]
        if "peers" in held:
            i = held.index("peers")
            held[i : i + 1] = results["install"]["peers"]
        w7 = held_snapshot.run_all(args.minutes, held)
        if "lonnymq" in w7:
            results["held_snapshot"] = w7.pop("lonnymq")
        if w7:  # the floor or peers ran: the comparison
            results["held_snapshot_others"] = w7
    results["elapsed_s"] = round(time.time() - started)
    results["load_at_end"] = list(__import__("os").getloadavg())
    path = common.write_json(f"{mode}.json", results)
    table = report.markdown(results)
    (common.RESULTS / f"{mode}-goals.md").write_text(table)
    made = plots.all_plots(results, common.RESULTS, mode)
    common.log(f"wrote {path}, {len(made)} plots; {results['elapsed_s']} s in all")
    print("\n" + table)
    _ = json  # results are written by common.write_json


if __name__ == "__main__":
    main()
