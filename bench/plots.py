"""PNG plots of a results JSON (matplotlib, the `bench` extra of python/pyproject.toml)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

# Legend label and colour per throughput system, in the order the bars stand in each group.
SYSTEM_STYLE = {
    "floor": ("floor (bare SKIP LOCKED)", "#999999"),
    "pgmq": ("PGMQ", "#2ca02c"),
    "lonnymq_original": ("original LonnyMQ", "#ff7f0e"),
    "lonnymq": ("lonnymq", "#1f77b4"),
    "lonnymq_waited": ("lonnymq, a consumer waiting: events on (diagnostic)", "#aec7e8"),
}


def _save(fig: Any, path: Path) -> None:
    """Writes a finished figure and frees it."""
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def throughput(results: dict[str, Any], path: Path) -> None:
    summary = results["throughput"]["summary"]
    keys = list(summary)
    systems = [s for s in SYSTEM_STYLE if any(s in summary[k] for k in keys)]
    width = 0.8 / len(systems)
    fig, ax = plt.subplots(figsize=(12, 5))
    for j, system in enumerate(systems):
        label, colour = SYSTEM_STYLE[system]
        # A system keeps its slot in every group, so a workload it skips shows as a gap.
        ran = [(i, summary[k][system]) for i, k in enumerate(keys) if system in summary[k]]
        xs = [i - 0.4 + (j + 0.5) * width for i, _ in ran]
        ys = [stats["messages_per_s"] for _, stats in ran]
        ax.bar(xs, ys, width, label=label, color=colour)
        for x, y, (_, stats) in zip(xs, ys, ran, strict=True):
            if "ratio_to_floor" in stats:
                ax.annotate(
                    f"{stats['ratio_to_floor']:.2f}x",
                    (x, y),
                    ha="center",
                    va="bottom",
                    fontsize=6,
                    rotation=90,
                )
    ax.set_xticks(range(len(keys)))
    ax.set_xticklabels([k.replace("/sync_", "\nsync ") for k in keys], fontsize=8)
    ax.set_yscale("log")
    ax.set_ylim(top=ax.get_ylim()[1] * 1.6)  # room for the ratios above the tallest bars
    ax.set_ylabel("messages / s (median, log scale)")
    ax.set_title(
        "Workloads 1-4: lifecycle throughput, 4 producers + 4 consumers "
        "(ratio to the floor above bars)"
    )
    ax.legend(fontsize=8)
    _save(fig, path)


def near_empty(results: dict[str, Any], path: Path) -> None:
    """Both near-empty shapes per system; beside them, each system's mean depth in the run
    that set its number, round by round."""
    ne = results["near_empty"]
    summary = ne["summary"]
    keys = list(summary)
    systems = [s for s in SYSTEM_STYLE if any(s in summary[k] for k in keys)]
    width = 0.8 / len(systems)
    fig, (bars, depth) = plt.subplots(1, 2, figsize=(13, 5))
    for j, system in enumerate(systems):
        label, colour = SYSTEM_STYLE[system]
        ran = [(i, summary[k][system]) for i, k in enumerate(keys) if system in summary[k]]
        xs = [i - 0.4 + (j + 0.5) * width for i, _ in ran]
        bars.bar(
            xs, [stats["messages_per_s"] for _, stats in ran], width, label=label, color=colour
        )
        best = [
            r["at_best"]
            for r in ne["runs"]
            if r["system"] == system and r["workload"] == "near_empty"
        ]
        depth.plot(
            range(len(best)),
            [r["depth_mean"] for r in best],
            "o-",
            color=colour,
            label=label,
        )
    bars.set_xticks(range(len(keys)))
    shapes = {"near_empty": "4+4 clients", "near_empty_one_client": "one client in turn"}
    bars.set_xticklabels(
        [f"{shapes[k.split('/')[0]]}\nsync {k.split('_')[-1]}" for k in keys], fontsize=8
    )
    bars.set_yscale("log")
    bars.set_ylabel("messages / s (median of rounds, log scale)")
    bars.set_title("Near empty: highest offered rate kept up; one client in turn")
    bars.legend(fontsize=7)
    depth.set_xlabel("round x sync, in run order")
    depth.set_ylabel("mean queue depth at that rate")
    depth.set_xticks(range(len(best)))
    depth.set_title(
        "Mean depth at the rate kept up "
        f"(kept up: mean and end depth <= {ne['kept_up']['depth_end_at_most']})",
        fontsize=10,
    )
    _save(fig, path)


def statements(results: dict[str, Any], path: Path) -> None:
    """Statements per message by system and workload, split into create and consume."""
    counts = results["statements"]
    workloads = list(dict.fromkeys(c["workload"] for c in counts))
    systems = [s for s in SYSTEM_STYLE if any(c["system"] == s for c in counts)]
    width = 0.8 / len(systems)
    fig, ax = plt.subplots(figsize=(10, 4.5))
    for j, system in enumerate(systems):
        label, colour = SYSTEM_STYLE[system]
        ran = [
            (i, c)
            for i, w in enumerate(workloads)
            for c in counts
            if c["workload"] == w and c["system"] == system
        ]
        xs = [i - 0.4 + (j + 0.5) * width for i, _ in ran]
        create = [c["create_client_per_message"] + c["create_nested_per_message"] for _, c in ran]
        consume = [c["per_message"] - made for made, (_, c) in zip(create, ran, strict=True)]
        ax.bar(xs, create, width, label=label, color=colour)
        ax.bar(xs, consume, width, bottom=create, color=colour, alpha=0.55)
        for x, (_, c) in zip(xs, ran, strict=True):
            ax.annotate(
                f"{c['per_message']:.2f}" if c["per_message"] < 1 else f"{c['per_message']:.1f}",
                (x, c["per_message"]),
                ha="center",
                va="bottom",
                fontsize=7,
            )
    ax.set_xticks(range(len(workloads)))
    ax.set_xticklabels(workloads, fontsize=8)
    ax.set_ylabel("statements per message (nested included)")
    ax.set_title(
        "Statements per message, one client: create (solid) + dequeue and complete (light)"
    )
    ax.legend(fontsize=8)
    _save(fig, path)


def latency(results: dict[str, Any], path: Path) -> None:
    shapes = results["latency"]["shapes"]
    keys = list(shapes)
    fig, ax = plt.subplots(figsize=(11, 4.5))
    x = range(len(keys))
    w = 0.2
    ax.bar(
        [i - 1.5 * w for i in x],
        [shapes[k]["base_p50_ms"] for k in keys],
        w,
        color="#aec7e8",
        label="1k reference p50",
    )
    ax.bar(
        [i - 0.5 * w for i in x],
        [shapes[k]["p50_ms"] for k in keys],
        w,
        color="#1f77b4",
        label="shape p50",
    )
    ax.bar(
        [i + 0.5 * w for i in x],
        [shapes[k]["base_p99_ms"] for k in keys],
        w,
        color="#ffbb78",
        label="1k reference p99",
    )
    ax.bar(
        [i + 1.5 * w for i in x],
        [shapes[k]["p99_ms"] for k in keys],
        w,
        color="#ff7f0e",
        label="shape p99",
    )
    for i, k in enumerate(keys):
        worst = max(shapes[k]["p50_ratio"], shapes[k]["p99_ratio"])
        ax.annotate(
            f"{worst:.2f}x",
            (i, max(shapes[k]["p50_ms"], shapes[k]["p99_ms"])),
            ha="center",
            va="bottom",
            fontsize=8,
            color="red" if worst > 2 else "black",
        )
    ax.set_xticks(list(x))
    ax.set_xticklabels(keys, fontsize=8, rotation=15)
    ax.set_yscale("log")
    ax.set_ylabel("ms per message_dequeue (log scale)")
    ax.set_title(
        "Workload 5: single dequeue latency by shape (worst ratio vs the 1k reference; goal <= 2x)"
    )
    ax.legend(fontsize=8)
    _save(fig, path)


def fairness(results: dict[str, Any], path: Path) -> None:
    f = results["fairness"]["fairness"]
    cumulative = f["big_cumulative"]
    step = max(1, f["window"] // 500)  # fairness.py keeps every step-th point
    fig, ax = plt.subplots(figsize=(8, 4.5))
    xs = [i * step for i in range(len(cumulative))]
    ax.plot(xs, cumulative, label="big channel (100k backlog), measured")
    ax.plot(
        [0, f["window"]],
        [0, f["window"] / (f["small_channels"] + 1)],
        "--",
        label="exact round-robin",
    )
    ax.set_xlabel("deliveries so far")
    ax.set_ylabel("deliveries from the big channel")
    ax.set_title(f"Workload 6: share {f['big_share']:.2%} (goal 1%), Jain {f['jain_index']:.3f}")
    ax.legend()
    _save(fig, path)


def held_snapshot(w7: dict[str, Any], path: Path) -> None:
    s = w7["series"]
    tables = [k.removesuffix("_dead") for k in s[0] if k.endswith("_dead")]
    t = [p["t"] for p in s]
    minutes = w7["minutes"] * 60
    fig, axes = plt.subplots(3, 1, figsize=(9, 9), sharex=True)
    axes[0].plot(t, [p["completed_per_s"] for p in s], label="completed / s")
    axes[0].axhline(w7["target_msg_s"], color="grey", ls="--", lw=1, label="target rate")
    axes[0].set_ylabel("messages / s")
    for table in tables:
        axes[1].plot(t, [p[f"{table}_dead"] for p in s], label=table)
    axes[1].set_ylabel("dead tuples")
    for table in tables:
        axes[2].plot(
            t,
            [(p[f"{table}_heap_bytes"] + p[f"{table}_index_bytes"]) / 2**20 for p in s],
            label=f"{table} (heap + indexes)",
        )
    axes[2].set_ylabel("MiB")
    axes[2].set_xlabel("seconds")
    for ax in axes:
        ax.axvspan(minutes / 4, 3 * minutes / 4, color="orange", alpha=0.15)
        ax.legend(fontsize=8)
    axes[0].set_title(
        f"Workload 7 ({w7.get('system', 'lonnymq')}): 50% load, "
        "snapshot held in the shaded interval"
    )
    _save(fig, path)


def held_snapshot_compared(results: dict[str, Any], path: Path) -> None:
    """Workload 7 of every system on one chart: completions over each one's own clean rate."""
    runs = dict(results["held_snapshot_others"])
    if "held_snapshot" in results:
        runs = {"lonnymq": results["held_snapshot"], **runs}
    fig, ax = plt.subplots(figsize=(9, 4.5))
    for system, w7 in runs.items():
        t = [p["t"] for p in w7["series"]]
        ax.plot(
            t,
            [p["completed_per_s"] / w7["clean_msg_s"] for p in w7["series"]],
            label=f"{system} (clean {w7['clean_msg_s']:.0f} msg/s, held {w7['held_ratio']:.2f}x)",
        )
        minutes = w7["minutes"] * 60
    ax.axvspan(minutes / 4, 3 * minutes / 4, color="orange", alpha=0.15)
    ax.axhline(0.5, color="grey", ls="--", lw=1, label="lonnymq's goal while held")
    ax.set_ylabel("completed / s, over its clean phase")
    ax.set_xlabel("seconds")
    ax.set_yscale("log")
    ax.legend(fontsize=8)
    ax.set_title("Workload 7: each system at 50% of its own capacity, snapshot held (shaded)")
    _save(fig, path)


WORKER_STYLE = {
    "lonnymq": ("lonnymq Worker, 100 channels", "#1f77b4"),
    "lonnymq_channelless": ("lonnymq Worker, channel-less", "#6baed6"),
    "lonnymq_baseline": ("lonnymq Worker, baseline revision", "#c6dbef"),
    "pgmq": ("PGMQ consumer, same shape", "#2ca02c"),
}


def worker(results: dict[str, Any], path: Path) -> None:
    w8 = results["worker"]
    systems = [s for s in WORKER_STYLE if s in w8["runs"]]
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5))
    for system in systems:
        label, colour = WORKER_STYLE[system]
        rates = [r["jobs_per_s"] for r in w8["runs"][system]]
        left.plot(range(1, len(rates) + 1), rates, "o-", color=colour, label=label)
    left.set_xticks(range(1, w8["rounds"] + 1))
    left.set_xlabel("round (systems interleaved within each round)")
    left.set_ylabel("jobs / s")
    left.set_ylim(bottom=0)
    left.set_title("throughput per round")
    left.legend(fontsize=8)
    parts = (
        ("consumer_backends_cpu_ms_per_job", "consumers' backends"),
        ("server_cpu_ms_per_job", "whole server"),
        ("client_cpu_ms_per_job", "worker processes"),
    )
    width = 0.8 / len(systems)
    for j, system in enumerate(systems):
        label, colour = WORKER_STYLE[system]
        xs = [i - 0.4 + (j + 0.5) * width for i in range(len(parts))]
        left_values = [w8["summary"][system][key] for key, _ in parts]
        right.bar(xs, left_values, width, color=colour, label=label)
    right.set_xticks(range(len(parts)))
    right.set_xticklabels([name for _, name in parts], fontsize=8)
    right.set_ylabel("CPU ms per job (median)")
    right.set_title("CPU per job")
    workers = w8["processes"] * w8["slots"]
    fig.suptitle(
        f"Workload 8: the Python Worker, {workers} workers ({w8['processes']} processes x "
        f"{w8['slots']} slots), backlog held at {w8['backlog']}, no-op handler"
    )
    _save(fig, path)


def burst(results: dict[str, Any], path: Path) -> None:
    w9 = results["burst"]
    systems = [s for s in SYSTEM_STYLE if s in w9]
    cases = (
        ("cold_us", "burst, plans made\non an empty queue"),
        ("warm_us", "burst, plans made\non a full queue"),
    )
    fig, ax = plt.subplots(figsize=(8, 4.5))
    width = 0.8 / len(systems)
    for j, system in enumerate(systems):
        label, colour = SYSTEM_STYLE[system]
        values = [w9[system][key] for key, _ in cases] + [
            w9[system]["trickle"]["cpu_us_per_message"]
        ]
        xs = [i - 0.4 + (j + 0.5) * width for i in range(len(values))]
        ax.bar(xs, values, width, color=colour, label=label)
    ax.set_xticks(range(len(cases) + 1))
    ax.set_xticklabels(
        [name for _, name in cases] + ["trickle: create, dequeue,\ncomplete on one client"],
        fontsize=8,
    )
    ax.set_ylabel("server CPU us per message (median)")
    ax.legend(fontsize=8)
    fig.suptitle(
        f"Workload 9: a burst of {w9['messages']} drained one by one; a queue that keeps up"
    )
    _save(fig, path)


def all_plots(results: dict[str, Any], directory: Path, mode: str) -> list[Path]:
    made = []
    for key, fn, name in (
        ("throughput", throughput, "throughput"),
        ("statements", statements, "statements"),
        ("near_empty", near_empty, "near-empty"),
        ("latency", latency, "latency"),
        ("fairness", fairness, "fairness"),
        ("worker", worker, "worker"),
        ("burst", burst, "burst"),
        ("held_snapshot", lambda r, p: held_snapshot(r["held_snapshot"], p), "held-snapshot"),
        ("held_snapshot_others", held_snapshot_compared, "held-snapshot-compared"),
    ):
        if key in results:
            path = directory / f"{mode}-{name}.png"
            fn(results, path)
            made.append(path)
    for system, other in results.get("held_snapshot_others", {}).items():
        path = directory / f"{mode}-held-snapshot-{system}.png"
        held_snapshot(other, path)
        made.append(path)
    return made
