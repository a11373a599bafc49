"""The simulator's small pools and hand-made traces.

The default pool: 8-GPU instances (p4d.24xlarge), 0..4 of them, idle and starting
periods short enough that a hand-worked answer stays a few lines of arithmetic. Runs
boot every machine alike (``UNIFORM``: 60 s to running, 180 s to a registered agent)
unless given options of their own: the arithmetic counts on it.
"""

from __future__ import annotations

from typing import Any

from dynagent.core.config import Pool, Settings
from dynagent.simulate.boot import UNIFORM
from dynagent.simulate.replay import Replay, replay
from dynagent.simulate.run import PolicyRun, RunOptions, simulate
from dynagent.simulate.trace import Job, Trace
from tests import builders

SETTINGS = Settings()


# The simulator's small pool (tests/builders.py builds it): short periods, four 8-GPU
# machines at most.
SIMULATED_POOL: dict[str, Any] = {
    "instance_type": "p4d.24xlarge",
    "max_instances": 4,
    "max_idle_agent_period": "5m",
    "max_agent_starting_period": "20m",
}


def pool(**overrides: Any) -> Pool:
    return builders.pool(**(SIMULATED_POOL | overrides))


def mixed_pool(**overrides: Any) -> Pool:
    """Three sizes of V100 machine at list prices (1, 4 and 8 GPUs, $3.06 a GPU-hour on
    each); Determined's baseline runs on the p3.16xlarge alone."""
    fields: dict[str, Any] = {
        "instance_type": "p3.16xlarge",
        "offerings": {"instance_types": ["p3.2xlarge", "p3.8xlarge", "p3.16xlarge"]},
        "max_instances": 8,
    }
    fields |= overrides
    # As an admin copies it from master.yaml: no offerings.max_slots, so the cap is
    # max_instances x the 8 GPUs of instance_type, in machines of any size.
    return pool(**fields)


def trace(*jobs: tuple[int, int, int]) -> Trace:
    """Jobs as (arrival, duration, gpus), named job-1, job-2, ... in that order."""
    made = [Job(f"job-{n}", arrival, duration, gpus) for n, (arrival, duration, gpus) in
            enumerate(jobs, start=1)]  # fmt: skip
    return Trace("hand-made", tuple(sorted(made, key=lambda job: job.arrival)))


def run(
    jobs: Trace, policy: str, pool_: Pool | None = None, options: RunOptions | None = None
) -> PolicyRun:
    return simulate(jobs, pool_ or pool(), SETTINGS, policy, options or RunOptions(boot=UNIFORM))


def replay_both(jobs: Trace, pool_: Pool | None = None, **options: Any) -> Replay:
    return replay(
        jobs, pool_ or pool(), SETTINGS, options=RunOptions(**{"boot": UNIFORM} | options)
    )
