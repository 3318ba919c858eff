"""Turns a results JSON into the table of goals (markdown), as printed at the end of a run."""

from __future__ import annotations

from typing import Any


def _verdict(ok: bool | None) -> str:
    if ok is None:
        return "(no goal)"
    return "met" if ok else "**not met**"


def goals(results: dict[str, Any]) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    tp = results.get("throughput", {}).get("summary", {})
    targets = {"w1_lifecycle": 0.9, "w2_hot_channel": 0.8, "w3_channel_less": 0.9}
    names = {"w1_lifecycle": "1 lifecycle, 100 channels", "w2_hot_channel": "2 one hot channel",
             "w3_channel_less": "3 channel-less"}
    for workload, target in targets.items():
        for sync in ("on", "off"):
            entry = tp.get(f"{workload}/sync_{sync}")
            if not entry or "ratio" not in entry:
                continue
            ratio = entry["ratio"]
            rows.append({
                "workload": f"{names[workload]} (sync {sync})",
                "measured": f"{entry['lonnymq']['messages_per_s']:.0f} vs floor "
                            f"{entry['floor']['messages_per_s']:.0f} msg/s = {ratio:.2f}x",
                "goal": f">= {target}x", "met": ratio >= target,
                "by": f"{ratio / target:.2f} of goal",
            })
            if "ratio_notify_off" in entry:
                off = entry["lonnymq_notify_off"]["messages_per_s"]
                rows.append({
                    "workload": f"{names[workload]} (sync {sync}), events off: diagnostic",
                    "measured": f"{off:.0f} vs floor {entry['floor']['messages_per_s']:.0f} msg/s "
                                f"= {entry['ratio_notify_off']:.2f}x",
                    "goal": "(what NOTIFY costs)", "met": None, "by": "",
                })
    for sync in ("on", "off"):
        w4 = tp.get(f"w4_batches/sync_{sync}", {}).get("lonnymq")
        w1 = tp.get(f"w1_lifecycle/sync_{sync}", {}).get("lonnymq")
        if w4 and w1 and w1["messages_per_s"]:
            ratio = w4["messages_per_s"] / w1["messages_per_s"]
            rows.append({
                "workload": f"4 batches of 100 (sync {sync})",
                "measured": f"{w4['messages_per_s']:.0f} vs workload 1 {w1['messages_per_s']:.0f} msg/s = {ratio:.1f}x",
                "goal": ">= 10x workload 1", "met": ratio >= 10, "by": f"{ratio / 10:.2f} of goal",
            })
    lat = results.get("latency", {}).get("shapes", {})
    goal_shapes = ("ready_1m", "future_1m", "saturated_10k", "expired_100k", "empty_100k")
    for key, entry in lat.items():
        if key == "base_1k":
            continue
        worst = max(entry["p50_ratio"], entry["p99_ratio"])
        rows.append({
            "workload": f"5 dequeue latency, {entry['label']}" + ("" if key in goal_shapes else " (extra)"),
            "measured": f"p50 {entry['p50_ms']:.3f} ms ({entry['p50_ratio']:.2f}x), "
                        f"p99 {entry['p99_ms']:.3f} ms ({entry['p99_ratio']:.2f}x)",
            "goal": "<= 2x the 1k case", "met": worst <= 2, "by": f"worst {worst:.2f}x",
        })
    fair = results.get("fairness", {})
    if "fairness" in fair:
        f = fair["fairness"]
        ok_share = abs(f["big_share"] - 0.01) <= 0.002
        rows.append({"workload": "6 fairness: big channel's share of the first 9,900",
                     "measured": f"{f['big_share']:.2%}", "goal": "1% +- 0.2%", "met": ok_share,
                     "by": f"{f['big_share'] / 0.01:.1f}x the fair share"})
        rows.append({"workload": "6 fairness: Jain's index", "measured": f"{f['jain_index']:.4f}",
                     "goal": ">= 0.99", "met": f["jain_index"] >= 0.99,
                     "by": f"{f['jain_index'] - 0.99:+.3f}"})
    if "rate_limits" in fair:
        r = fair["rate_limits"]
        rows.append({"workload": "6 rate limits never exceeded",
                     "measured": f"min gap {r['min_gap_ms']} ms for interval {r['interval_ms']} ms, "
                                 f"{r['violations']} violations",
                     "goal": "0 violations", "met": r["violations"] == 0, "by": ""})
    w7 = results.get("held_snapshot")
    if w7:
        rows.append({"workload": "7 held snapshot: throughput while held",
                     "measured": f"{w7['held_msg_s']:.0f} vs clean {w7['clean_msg_s']:.0f} msg/s "
                                 f"= {w7['held_ratio']:.2f}x; after {w7['after_ratio']:.2f}x",
                     "goal": ">= 0.5x clean, recovers", "met": w7["held_ratio"] >= 0.5 and w7["after_ratio"] >= 0.9,
                     "by": ""})
    floor_w7 = results.get("held_snapshot_floor")
    if floor_w7:
        rows.append({"workload": "7 held snapshot, the floor (comparison)",
                     "measured": f"{floor_w7['held_msg_s']:.0f} vs clean {floor_w7['clean_msg_s']:.0f} msg/s "
                                 f"= {floor_w7['held_ratio']:.2f}x; after {floor_w7['after_ratio']:.2f}x",
                     "goal": "(no goal)", "met": None, "by": ""})
    return rows


def markdown(results: dict[str, Any]) -> str:
    lines = ["| workload | measured (medians) | goal | verdict |", "|---|---|---|---|"]
    for row in goals(results):
        verdict = _verdict(row["met"]) + (f" ({row['by']})" if row["by"] else "")
        lines.append(f"| {row['workload']} | {row['measured']} | {row['goal']} | {verdict} |")
    return "\n".join(lines) + "\n"
