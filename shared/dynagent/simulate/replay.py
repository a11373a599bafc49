"""A whole replay: the trace under each policy, summarised beside the physical limit."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from dynagent.config import Pool, Settings
from dynagent.simulate.metrics import Summary, limit_gpu_seconds, summarise, summarise_limit
from dynagent.simulate.run import POLICIES, PolicyRun, Progress, RunOptions, simulate
from dynagent.simulate.trace import Trace

# p4d.24xlarge (8 A100 GPUs), on-demand, Linux, us-east-1: $32.7726 per hour, from the
# EC2 on-demand pricing page. Any --price can be given instead.
DEFAULT_PRICE = 32.7726

# Makes the progress callback of one policy's run (or None for no progress shown).
ProgressFactory = Callable[[str], Progress | None]


@dataclass(frozen=True)
class Replay:
    """Everything one replay found: a column per policy and one for the limit."""

    trace: Trace
    pool: Pool
    options: RunOptions
    price: float
    runs: tuple[PolicyRun, ...]
    columns: tuple[Summary, ...]
    wall_seconds: float

    def column(self, name: str) -> Summary:
        return next(column for column in self.columns if column.name == name)


def replay(
    trace: Trace,
    pool: Pool,
    settings: Settings,
    policies: Sequence[str] = POLICIES,
    options: RunOptions | None = None,
    price: float = DEFAULT_PRICE,
    progress: ProgressFactory | None = None,
) -> Replay:
    """Run ``trace`` under each policy on fresh copies of the same master and cloud."""
    started = time.perf_counter()
    options = options or RunOptions()
    provider = pool.provider
    slots, max_instances = provider.slots_per_instance, provider.max_instances
    limit = limit_gpu_seconds(trace, slots, max_instances)
    runs = tuple(
        simulate(trace, pool, settings, name, options, progress(name) if progress else None)
        for name in policies
    )
    larger = runs[0].larger_than_pool if runs else 0
    columns = tuple(summarise(run, limit, price) for run in runs)
    columns += (summarise_limit(limit, slots, price, larger),)
    return Replay(
        trace, pool, options, price, runs, columns, wall_seconds=time.perf_counter() - started
    )
