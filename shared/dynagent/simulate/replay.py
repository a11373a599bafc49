"""A whole replay: the trace under each policy, summarised beside the physical limit."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from dynagent.core.config import ConfigError, Pool, Settings
from dynagent.core.offerings import Purchase
from dynagent.simulate.determined import baseline_offering
from dynagent.simulate.fitting import pool_sizes
from dynagent.simulate.metrics import Summary, limit_gpu_seconds, summarise, summarise_limit
from dynagent.simulate.run import POLICIES, PolicyRun, Progress, RunOptions, simulate
from dynagent.simulate.trace import Trace

# Makes the progress callback of one policy's run (or None for no progress shown).
ProgressFactory = Callable[[str], Progress | None]


@dataclass(frozen=True)
class Prices:
    """What the cloud bills per instance-hour: each type dynagent may launch, and the
    baseline's one type; and the cheapest GPU-hour, which is what the limit pays."""

    by_type: dict[str, float]
    baseline_type: str
    baseline: float
    gpu_hour: float


def prices(pool: Pool, override: float | None) -> Prices:
    """The pool's prices: from its catalog, or ``override`` for a pool of one type.

    Refuses a price the simulation cannot know: a type with no built-in price and no
    ``--price`` (or ``offerings.prices``), or ``--price`` on a pool with offerings."""
    provider = pool.provider
    if override is not None and provider.offerings is not None:
        raise ConfigError(
            f"pool {pool.name!r} has offerings: give their prices in offerings.prices, "
            "not --price (which prices a pool of one instance type)"
        )
    if override is not None and override <= 0:
        raise ConfigError("--price must be a positive price per instance-hour")
    shapes = provider.catalog().shapes()
    by_type = {s.instance_type: s.price if override is None else override for s in shapes}
    baseline = baseline_offering(pool)
    if override is None:
        by_type.setdefault(baseline.instance_type, baseline.price)
    unpriced = sorted(t for t, price in by_type.items() if price <= 0)
    if unpriced:
        raise ConfigError(
            f"pool {pool.name!r}: no built-in price for {', '.join(unpriced)}; give --price "
            "(or offerings.prices)"
        )
    return Prices(
        by_type,
        baseline.instance_type,
        baseline.price if override is None else override,
        gpu_hour=min(by_type[s.instance_type] / max(1, s.slots) for s in shapes),
    )


def check_interruptions(pool: Pool, rate: float) -> None:
    """Only spot machines are interrupted: a rate on a pool that buys none would say
    nothing, so it is refused rather than reported as no interruptions."""
    if rate < 0:
        raise ConfigError("--interruption-rate must not be negative")
    offerings = pool.provider.catalog().offerings
    if rate and not any(o.purchase is Purchase.SPOT for o in offerings):
        raise ConfigError(
            f"pool {pool.name!r} buys no spot machines, so none is interrupted: set spot: "
            "true, or list spot in offerings.purchase"
        )


def check_reservations(pool: Pool, options: RunOptions) -> None:
    """A reservation of a type the pool does not buy could never be used."""
    catalog = pool.provider.catalog()
    for reservation in options.reservations:
        if not catalog.offers(reservation.instance_type):
            bought = ", ".join(dict.fromkeys(o.instance_type for o in catalog.offerings))
            raise ConfigError(
                f"--reservation of {reservation.instance_type}: pool {pool.name!r} does not "
                f"buy that type (it buys {bought})"
            )


@dataclass(frozen=True)
class Replay:
    """Everything one replay found: a column per policy and one for the limit."""

    trace: Trace
    pool: Pool
    options: RunOptions
    prices: Prices
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
    progress: ProgressFactory | None = None,
) -> Replay:
    """Run ``trace`` under each policy on fresh copies of the same master and cloud."""
    started = time.perf_counter()
    options = options or RunOptions()
    billed = prices(pool, options.price)
    check_interruptions(pool, options.interruption_rate)
    check_reservations(pool, options)
    provider = pool.provider
    limit = limit_gpu_seconds(trace, pool_sizes(pool), provider.max_instances)
    runs = tuple(
        simulate(trace, pool, settings, name, options, progress(name) if progress else None)
        for name in policies
    )
    larger = runs[0].larger_than_pool if runs else 0
    columns = tuple(summarise(run, limit) for run in runs)
    columns += (summarise_limit(limit, provider.slots_per_instance, billed.gpu_hour, larger),)
    return Replay(
        trace, pool, options, billed, runs, columns, wall_seconds=time.perf_counter() - started
    )
