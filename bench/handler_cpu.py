"""Handler CPU: parse + validate + decide for snapshots of 100 to 100,000 agents.

Each snapshot has N agents (nine in ten busy, one in ten idle for 5 minutes) and N
pending tasks of 1, 2, 4 and 8 GPUs in turn; the fleet has the N instances the agents
run on, all registered, and room for what the pending tasks need: the idle agents take
some, and about 0.37 N new 8-GPU instances the rest. ``json.loads`` of the same
message, timed in the same run, is the baseline: a handler cannot do less than read
its message.

Timing follows ``timeit``: the cyclic garbage collector is off while a call runs. The
three are timed in turn in each round, so a noisy moment on a shared machine hits all
of them alike, and each figure is the median over the rounds.
"""

from __future__ import annotations

import gc
import json
import statistics
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from dynagent.core.config import Pool
from dynagent.core.decide import decide
from dynagent.core.fleet import Fleet, Instance, InstanceState, Mark
from dynagent.core.snapshot import parse_snapshot

# Agents (and pending tasks) per snapshot, and the rounds each is timed for.
SIZES = {100: 51, 1_000: 51, 10_000: 21, 100_000: 7}
NOW = datetime(2026, 11, 21, 23, 0, tzinfo=UTC)
# Targets of the issue: 10k within 5x json.loads; 100k within 12x what 10k costs.
TARGET_RATIO_10K = 5.0
TARGET_SCALING = 12.0


def _used(k: int) -> int:
    """One agent in ten is idle; the rest are full."""
    return 0 if k % 10 == 0 else 8


def message(n: int) -> str:
    agents = [{"id": f"i-{k:017x}", "slots": 8, "used_slots": _used(k)} for k in range(n)]
    pending = [{"task": f"trial-{k}.0", "slots": (1, 2, 4, 8)[k % 4]} for k in range(n)]
    return json.dumps(
        {
            "type": "pool.snapshot",
            "version": 1,
            "pool": "a100",
            "seq": 1042,
            "time": NOW.strftime("%Y-%m-%dT%H:%M:%SZ"),
            "pending": pending,
            "agents": agents,
        }
    )


def pool(n: int) -> Pool:
    provider = {
        "type": "aws",
        "region": "us-east-1",
        "image_id": "ami-0123456789abcdef0",
        "instance_type": "p4d.24xlarge",
        "max_instances": 2 * n,
    }
    return Pool.model_validate({"name": "a100", "provider": provider})


def fleet(n: int) -> Fleet:
    """The instances of the message's agents, as an EC2 describe would show them."""
    registered = {Mark.REGISTERED: NOW - timedelta(minutes=50)}
    idle = {**registered, Mark.IDLE_SINCE: NOW - timedelta(minutes=5)}
    return Fleet(
        instances=tuple(
            Instance(
                f"i-{k:017x}",
                InstanceState.RUNNING,
                NOW - timedelta(hours=1),
                dict(registered if _used(k) else idle),
            )
            for k in range(n)
        )
    )


def timed_ms(call: Callable[[], object]) -> float:
    """One call's wall time, with the cyclic garbage collector off, as timeit does."""
    gc.collect()
    gc.disable()
    try:
        start = time.perf_counter()
        call()
        return (time.perf_counter() - start) * 1000
    finally:
        gc.enable()


def measure(n: int) -> dict[str, Any]:
    body, shape = message(n), pool(n)
    snapshot = parse_snapshot(body)
    runs = SIZES[n]
    times: dict[str, list[float]] = {"json": [], "parse": [], "decide": []}
    # Interleaved, so a noisy moment on a shared machine hits all three alike.
    for _ in range(runs):
        observed = fleet(n)  # each invocation observes a fleet of its own: built untimed
        times["json"].append(timed_ms(lambda: json.loads(body)))
        times["parse"].append(timed_ms(lambda: parse_snapshot(body)))
        times["decide"].append(timed_ms(lambda: decide(shape, observed, snapshot, NOW)))  # noqa: B023
    json_ms, parse_ms, decide_ms = (statistics.median(times[key]) for key in times)
    plan = decide(shape, fleet(n), snapshot, NOW)
    return {
        "agents": n,
        "pending": n,
        "message_bytes": len(body),
        "launches": len(plan.launches),
        "runs": runs,
        "json_loads_ms": round(json_ms, 3),
        "parse_ms": round(parse_ms, 3),
        "decide_ms": round(decide_ms, 3),
        "parse_decide_ms": round(parse_ms + decide_ms, 3),
        "ratio_to_json_loads": round((parse_ms + decide_ms) / json_ms, 2),
    }


def run() -> dict[str, Any]:
    rows = []
    for n in SIZES:
        row = measure(n)
        print(
            f"  {n:>7,} agents + tasks: json.loads {row['json_loads_ms']:8.2f} ms, "
            f"parse {row['parse_ms']:8.2f} ms, decide {row['decide_ms']:8.2f} ms: "
            f"{row['ratio_to_json_loads']:.2f}x json.loads",
            flush=True,
        )
        rows.append(row)
    by_n = {row["agents"]: row for row in rows}
    ratio = by_n[10_000]["ratio_to_json_loads"]
    scaling = by_n[100_000]["parse_decide_ms"] / by_n[10_000]["parse_decide_ms"]
    return {
        "sizes": rows,
        "ratio_10k": ratio,
        "scaling_100k_over_10k": round(scaling, 2),
        "targets": {
            "ratio_10k_at_most": TARGET_RATIO_10K,
            "ratio_10k_met": ratio <= TARGET_RATIO_10K,
            "scaling_at_most": TARGET_SCALING,
            "scaling_met": scaling <= TARGET_SCALING,
        },
    }


if __name__ == "__main__":
    print(json.dumps(run(), indent=2))
