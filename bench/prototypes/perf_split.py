"""Splits a `perf script` dump of one backend into where its CPU went, per call.

A measuring instrument for dequeue_profile.sh, not part of bench/run. Each sample is put in
one category: the innermost of the frames below that its stack contains (so a heap fetch
inside an index scan inside a PL/pgSQL statement counts as the index scan, and PL/pgSQL
counts only its own interpretation: expressions, assignments, calls between functions).

    python perf_split.py LABEL UNIT SAMPLE_US COUNT:STACKS.txt [COUNT:STACKS.txt ...]

Each STACKS.txt is one `perf script` dump and COUNT how many UNITs (calls, messages) its
samples cover; the dumps (rounds, interleaved with other systems' by the caller) are
pooled. SAMPLE_US is the sampling period in microseconds. Prints microseconds per UNIT for
each category, and one JSON line with the same numbers.
"""

from __future__ import annotations

import json
import re
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

# Innermost first: a sample goes to the first of these its stack holds, read from the leaf.
CATEGORIES: dict[str, str] = {
    "index_getnext_slot": "index scans (descents, heap fetches)",
    "ExecInsertIndexTuples": "index entries inserted",
    "heap_update": "heap updates",
    "heap_lock_tuple": "row locks",
    "ExecSubPlan": "correlated subqueries",
    "standard_ExecutorStart": "executor start (plan trees set up)",
    "standard_ExecutorEnd": "executor end",
    "GetCachedPlan": "plan cache (revalidation, locks)",
    "standard_ExecutorRun": "executor run, the rest",
    "plpgsql_exec_function": "PL/pgSQL interpretation",
    "CommitTransactionCommand": "commit",
    "StartTransactionCommand": "transaction start",
}
OTHER = "protocol, parse/bind, the rest"
FRAME = re.compile(r"\s+[0-9a-f]+ (\S+)")


def stacks(path: Path) -> Iterator[list[str]]:
    """Each sample's frames, leaf first (symbols without offsets)."""
    frames: list[str] = []
    for line in path.read_text(errors="replace").splitlines():
        if not line.strip():
            if frames:
                yield frames
            frames = []
            continue
        match = FRAME.match(line)
        if match and line[0].isspace():
            frames.append(match.group(1).split("+")[0])
    if frames:
        yield frames


def split(path: Path) -> Counter[str]:
    counts: Counter[str] = Counter()
    for frames in stacks(path):
        category = next((CATEGORIES[f] for f in frames if f in CATEGORIES), OTHER)
        counts[category] += 1
    return counts


def main() -> None:
    label, unit, sample_us = sys.argv[1], sys.argv[2], float(sys.argv[3])
    counts: Counter[str] = Counter()
    units = 0
    for pair in sys.argv[4:]:
        n, path = pair.split(":", 1)
        units += int(n)
        counts += split(Path(path))
    if units <= 0:
        sys.exit(f"{label}: no {unit} counted")
    per_unit = {k: round(v * sample_us / units, 1) for k, v in counts.most_common()}
    total = round(sum(counts.values()) * sample_us / units, 1)
    print(f"{label}: {units} {unit}s sampled, {total} us of CPU per {unit}")
    for category, us in per_unit.items():
        print(f"  {us:7.1f} us  {category}")
    print(
        json.dumps(
            {"label": label, "unit": unit, "count": units, "cpu_us": total, "split": per_unit}
        )
    )


if __name__ == "__main__":
    main()
