"""Splits `perf script` dumps of backends into where their CPU went, per message.

A measuring instrument for dequeue_profile.sh, not part of bench/run. Each sample goes to one
category: that of the innermost frame of its stack found in CATEGORIES (so a heap fetch
inside an index scan inside a PL/pgSQL statement counts as the index scan, and "PL/pgSQL
interpretation" is PL/pgSQL's own work: expressions, assignments, calls between functions,
SPI's bookkeeping). Each sample weighs its period (`perf record -e cpu-clock -c N`: N ns of
the backend's CPU).

    python perf_split.py count STACKS.txt [FRAME] > ROUND.json
        one round's dump: CPU per category and the span of its samples, as JSON; with FRAME,
        only the samples whose stack holds that function (say ExecMakeTableFunctionResult:
        a call in a query's FROM list; in bench/pgbench's single consumer scripts only the
        dequeue is called so, in the create scripts the create too, in the batch consumer
        scripts the batch complete too), each in the category of the innermost listed frame
        inside FRAME's outermost call, or "FRAME itself", and the span still that of every
        sample (so report divides by every message of the round)
    python perf_split.py report LABEL UNIT ROUND.json:COUNT:SECONDS:FAULTS [...]
        rounds pooled: COUNT units (messages) were done in SECONDS of wall time around the
        round's samples, so the samples' own span covers COUNT * span / SECONDS of them;
        FAULTS minor page faults of the sampled backends in the same SECONDS;
        prints µs of CPU per unit by category, each round's total and page faults per
        unit, and one JSON line with the same numbers
    python perf_split.py frames FRAME CATEGORY STACKS.txt [...]
        what one category of the samples under FRAME is made of (dumps kept by
        dequeue_profile.sh's PROFILE_KEEP): the 25 named functions below the category's own
        frame that most of its samples pass through, each with its share of the category
        (inclusive, so shares overlap; frames without a symbol, such as PL/pgSQL's own
        and the server's static functions, are not listed)
"""

from __future__ import annotations

import json
import re
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

# The innermost of these frames in a sample's stack names its category.
CATEGORIES: dict[str, str] = {
    # The kernel's side of memory: a page touched for the first time (shared buffers new to
    # this backend, or heap just grown), and the heap grown or given back (glibc's malloc
    # trims the heap when 128 kB or more is free at its top, see bench/README.md).
    "asm_exc_page_fault": "page faults (memory touched first)",
    "__do_sys_brk": "heap grown or trimmed (brk)",
    # (index-only scans step through index_getnext_tid, bitmap scans' index half through
    # index_getbitmap; a bitmap scan's heap half counts as "executor run, the rest")
    "index_getnext_slot": "index scans (descents, heap fetches)",
    "index_getnext_tid": "index scans (descents, heap fetches)",
    "index_fetch_heap": "index scans (descents, heap fetches)",
    "index_getbitmap": "index scans (descents, heap fetches)",
    "ExecInsertIndexTuples": "index entries inserted",
    "heap_update": "heap updates",
    "heap_lock_tuple": "row locks",
    "ExecSubPlan": "correlated subqueries",
    "standard_ExecutorStart": "executor start (plan trees set up)",
    "standard_ExecutorEnd": "executor end",
    "standard_planner": "planning",
    "raw_parser": "parse and analysis",
    "parse_analyze_fixedparams": "parse and analysis",
    "parse_analyze_varparams": "parse and analysis",
    "parse_analyze_withcb": "parse and analysis",
    "pg_rewrite_query": "parse and analysis",
    "GetCachedPlan": "plan cache (revalidation, locks)",
    "standard_ExecutorRun": "executor run, the rest",
    "plpgsql_exec_function": "PL/pgSQL interpretation",
    "CommitTransactionCommand": "commit",
    "StartTransactionCommand": "transaction start",
}
OTHER = "protocol, the rest"
HEADER = re.compile(r"\s(\d+\.\d+):\s+(\d+)\s+\S+:")  # "... 10571.886242:  250000 cpu-clock:..."
FRAME = re.compile(r"\s+[0-9a-f]+ (\S+)")
USAGE = """\
    perf_split.py count STACKS.txt [FRAME] > ROUND.json
    perf_split.py report LABEL UNIT ROUND.json:COUNT:SECONDS:FAULTS [...]
    perf_split.py frames FRAME CATEGORY STACKS.txt [...]"""


def samples(path: Path) -> Iterator[tuple[float, int, list[str]]]:
    """Each sample's time (s), period (ns) and frames, leaf first (symbols without offsets)."""
    header: tuple[float, int] | None = None
    frames: list[str] = []
    for line in path.read_text(errors="replace").splitlines():
        if not line.strip():
            if header is not None:
                yield (*header, frames)
            header, frames = None, []
        elif not line[0].isspace():
            match = HEADER.search(line)
            header = (float(match.group(1)), int(match.group(2))) if match else None
        elif match := FRAME.match(line):
            frames.append(match.group(1).split("+")[0])
    if header is not None:
        yield (*header, frames)


def below(frames: list[str], within: str) -> list[str]:
    """The frames inside the outermost call of `within` (frames run leaf first)."""
    return frames[: len(frames) - 1 - frames[::-1].index(within)]


def category(frames: list[str], default: str = OTHER) -> str:
    """The category of the innermost frame of `frames` found in CATEGORIES, else `default`."""
    return next((CATEGORIES[f] for f in frames if f in CATEGORIES), default)


def count(path: Path, within: str | None = None) -> dict[str, object]:
    cpu_ns: Counter[str] = Counter()
    times: list[float] = []
    for at, period_ns, frames in samples(path):
        times.append(at)
        if within is None:
            cpu_ns[category(frames)] += period_ns
        elif within in frames:
            cpu_ns[category(below(frames, within), f"{within} itself")] += period_ns
    if not times:
        sys.exit(f"perf_split: no samples in {path}")
    return {"span_s": max(times) - min(times), "cpu_ns": dict(cpu_ns)}


def frames_of(within: str, wanted: str, paths: list[Path]) -> None:
    shares: Counter[str] = Counter()
    total = 0
    for path in paths:
        for _, period_ns, frames in samples(path):
            if within not in frames:
                continue
            inner = below(frames, within)
            if category(inner, f"{within} itself") != wanted:
                continue
            own = next((i for i, f in enumerate(inner) if f in CATEGORIES), len(inner))
            total += period_ns
            for name in set(inner[:own]):
                if not name.startswith("["):
                    shares[name] += period_ns
    if not total:
        sys.exit(f"perf_split: no samples of {wanted!r} under {within}")
    for name, ns in shares.most_common(25):
        print(f"  {100 * ns / total:5.1f}%  {name}")


def report(label: str, unit: str, rounds: list[str]) -> None:
    cpu_ns: Counter[str] = Counter()
    units = 0.0
    per_round: list[float] = []  # each round's total µs per unit: the spread between rounds
    faults: list[float] = []  # each round's minor page faults per unit
    for spec in rounds:
        path, done, seconds, round_faults = spec.rsplit(":", 3)
        data = json.loads(Path(path).read_text())
        cpu_ns.update(data["cpu_ns"])
        round_units = int(done) * data["span_s"] / float(seconds)
        if round_units <= 0:
            sys.exit(f"perf_split: {label}: no {unit} done while {path} was sampled")
        units += round_units
        per_round.append(round(sum(data["cpu_ns"].values()) / 1000 / round_units, 1))
        faults.append(round(int(round_faults) / int(done), 1))
    per_unit = {k: round(v / 1000 / units, 1) for k, v in cpu_ns.most_common()}
    total = round(sum(cpu_ns.values()) / 1000 / units, 1)
    print(
        f"{label}: {units:.0f} {unit}s sampled, {total} us of CPU per {unit}"
        f" (rounds: {', '.join(map(str, per_round))};"
        f" minor page faults per {unit}: {', '.join(map(str, faults))})"
    )
    for category, us in per_unit.items():
        print(f"  {us:7.1f} us  {category}")
    print(
        json.dumps(
            {
                "label": label,
                "unit": unit,
                "count": round(units),
                "cpu_us": total,
                "rounds_cpu_us": per_round,
                "rounds_page_faults": faults,
                "split": per_unit,
            }
        )
    )


def main() -> None:
    args = sys.argv[1:]
    if len(args) in (2, 3) and args[0] == "count":
        print(json.dumps(count(Path(args[1]), args[2] if len(args) == 3 else None)))
    elif len(args) >= 4 and args[0] == "report":
        report(args[1], args[2], args[3:])
    elif len(args) >= 4 and args[0] == "frames":
        frames_of(args[1], args[2], [Path(a) for a in args[3:]])
    else:
        sys.exit("usage:\n" + USAGE)


if __name__ == "__main__":
    main()
