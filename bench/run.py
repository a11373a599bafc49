"""``make bench``: every benchmark in turn; the figures go to ``bench/results.json``.

Benchmarks, not tests: they measure and record, and fail only if something breaks.
Each figure sits beside the target the issue set for it and whether it was met, and
the file records the machine it was measured on.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import api_calls
import auto_headroom
import cap
import cold_start
import handler_cpu
import machine
import reservations
import simulator
import trace_read
import warm_pool

ROOT = Path(__file__).resolve().parents[1]
BENCHMARKS = (
    ("handler_cpu", "handler CPU: parse + validate + decide", handler_cpu.run),
    ("api_calls", "cloud API calls per reconcile (local AWS)", api_calls.run),
    ("cold_start", "cold start: function module imports", cold_start.run),
    ("simulator", "simulator: every shared trace", simulator.run),
    ("cap", "pools at their cap: cluster05 and cluster02 on g5 1/4/8", cap.run),
    ("warm_pool", "warm pools: every shared trace, a 6-minute boot, a 90 s start", warm_pool.run),
    (
        "auto_headroom",
        "headroom sized from arrivals: every shared trace, seeds 0 to 3, beside Determined's",
        auto_headroom.run,
    ),
    (
        "reservations",
        "reserved capacity: cluster05 on p4d with 10 reserved, beside the pool without",
        reservations.run,
    ),
    (
        "trace_read",
        "dynagent trace: a busy master's tasks, one at a time and at once",
        trace_read.run,
    ),
)


def targets(results: dict[str, Any]) -> list[str]:
    """One line per target: met or not."""
    lines = []
    for name, _, _ in BENCHMARKS:
        found = results[name]
        for key, value in found.get("targets", {}).items():
            if isinstance(value, bool):
                lines.append(f"  {name}.{key}: {'met' if value else 'NOT met'}")
        if name == "cold_start":
            for function, figures in found["functions"].items():
                if "ratio_met" in figures:
                    verdict = "met" if figures["ratio_met"] else "NOT met"
                    lines.append(f"  cold_start.{function}_ratio_met: {verdict}")
    return lines


def main(argv: list[str]) -> int:
    out = Path(argv[1]) if len(argv) > 1 else ROOT / "bench" / "results.json"
    results: dict[str, Any] = {"machine": machine.facts()}
    print(f"machine: {results['machine']['cpu']}, {results['machine']['cores']} cores")
    for name, title, run in BENCHMARKS:
        print(f"{title}:", flush=True)
        start = time.perf_counter()
        results[name] = run()
        results[name]["bench_seconds"] = round(time.perf_counter() - start, 1)
    out.write_text(json.dumps(results, indent=2) + "\n")
    print("targets:")
    print("\n".join(targets(results)))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
