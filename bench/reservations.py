"""Reserved capacity: cluster05 on a pool of p4d.24xlarge (max_instances 40, as an admin
writes it, idle period 5 minutes) with 10 machines reserved over the whole trace, beside
the same pool without the reservation, dynagent and Determined's provisioner side by
side in one run.

The target (issue 30): reserved hours are never left idle while on-demand machines of
the same type run work; here, no on-demand p4d is launched while a reserved place is
free. The cost and waits are reported beside the pool without it.
"""

from __future__ import annotations

import json
import time
from typing import Any

from simulator import traces_dir

from dynagent.core.config import parse_config
from dynagent.simulate.replay import replay
from dynagent.simulate.reservations import parse_reservation
from dynagent.simulate.run import RunOptions
from dynagent.simulate.trace import load_trace

POOL_YAML = """
resource_pools:
  - pool_name: a100
    provider:
      type: aws
      region: us-east-1
      image_id: ami-00000000000000000
      instance_type: p4d.24xlarge
      max_instances: 40
      max_idle_agent_period: 5m
"""
RESERVATION = "p4d.24xlarge=10"


def run() -> dict[str, Any]:
    path = traces_dir() / "cluster05.csv"
    if not path.exists():
        print(f"  no {path}: skipped (set DYNAGENT_TRACES)")
        return {"skipped": f"no {path}"}
    started = time.perf_counter()
    config = parse_config(POOL_YAML)
    pool, trace = config.pool("a100"), load_trace(path)
    options = RunOptions(reservations=(parse_reservation(RESERVATION),))
    with_it = replay(trace, pool, config.settings, options=options)
    without = replay(trace, pool, config.settings)
    found: dict[str, Any] = {}
    for name in ("dynagent", "determined"):
        reserved, plain = with_it.column(name), without.column(name)
        found[name] = {
            "with": {
                "cost": round(reserved.cost),
                "reserved_cost": round(reserved.reserved_cost or 0),
                "wait_p50_s": reserved.wait_p50,
                "wait_p95_s": reserved.wait_p95,
                "reserved_hours": round(reserved.reserved_hours or 0, 1),
                "reserved_used_hours": round(reserved.reserved_used_hours or 0, 1),
                "bought_beside_a_free_place": reserved.on_demand_beside_free,
            },
            "without": {
                "cost": round(plain.cost),
                "wait_p50_s": plain.wait_p50,
                "wait_p95_s": plain.wait_p95,
            },
        }
        print(
            f"  {name}: cost ${plain.cost:,.0f} without, ${reserved.cost:,.0f} with (the "
            f"reservation ${reserved.reserved_cost or 0:,.0f}); p95 {plain.wait_p95} s -> "
            f"{reserved.wait_p95} s; reserved place-hours used "
            f"{reserved.reserved_used_hours or 0:,.0f} of {reserved.reserved_hours or 0:,.0f}; "
            f"bought beside a free place: {reserved.on_demand_beside_free}",
            flush=True,
        )
    return {
        "pool": "p4d.24xlarge, max_instances 40, idle 5m; reservation " + RESERVATION,
        "trace": path.stem,
        "policies": found,
        "wall_seconds": round(time.perf_counter() - started, 1),
        "targets": {
            "no_purchase_beside_a_free_place": found["dynagent"]["with"][
                "bought_beside_a_free_place"
            ]
            == 0,
        },
    }


if __name__ == "__main__":
    print(json.dumps(run(), indent=2))
