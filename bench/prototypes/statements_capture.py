"""Where the server's time goes in one workload: each system run once with nested
statements tracked (bench/throughput.py's capture run), its top statements printed and
written with their calls, total and mean time, buffers and rows (the rows a statement
returned or changed: a claim's messages, a turn update's channels).

    bench/cluster start
    .venv/bin/python bench/prototypes/statements_capture.py NAME \\
        [--workload w4_batches] [--systems lonnymq,pgmq] [--seconds 15] [--definitions B.sql]

--definitions applies B.sql over the lonnymq installed from this checkout (the old side of
a change, as for the pair scripts). Writes bench/results/statements-NAME.json. One run per
system, synchronous_commit on, tracking on: read the shares, not the rates.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import common
import throughput


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("name")
    parser.add_argument("--workload", default="w4_batches", choices=sorted(throughput.WORKLOADS))
    parser.add_argument("--systems", default="lonnymq,pgmq")
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument("--definitions", type=Path)
    args = parser.parse_args()
    setup = common.prepare_database()
    if args.definitions:
        subprocess.run(
            [
                str(common.PGBIN / "psql"),
                "-X",
                "-q",
                "-v",
                "ON_ERROR_STOP=1",
                common.DSN,
                "-f",
                str(args.definitions),
            ],
            check=True,
        )
    results = []
    for system in args.systems.split(","):
        result = throughput.run_once(
            system, args.workload, "on", args.seconds, capture_statements=True
        )
        results.append(result)
        common.log(f"{system}: {result['messages_per_s']:.0f} msg/s")
        for s in result["top_statements"][:16]:
            counts = f"{s['calls']:8d} {s['rows']:9d} {s['total_ms']:10.1f} {s['mean_ms']:8.3f}"
            print(f"  {counts}  {s['query'][:90]}")
    common.write_json(
        f"statements-{args.name}.json",
        {
            "setup": setup,
            "definitions": str(args.definitions or ""),
            "workload": args.workload,
            "runs": results,
        },
    )


if __name__ == "__main__":
    main()
