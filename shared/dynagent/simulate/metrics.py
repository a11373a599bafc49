"""The figures a run is judged by: billed hours and cost, waits, and the physical limit.

The limit is what the trace itself needs: every GPU billed only while a task uses it,
with no boot, no idle time, no fragmentation and no waiting. It counts the tasks this
pool can run at all; a task larger than the pool is left out of it and reported.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from dynagent.simulate.fitting import fits_pool
from dynagent.simulate.run import PolicyRun
from dynagent.simulate.trace import Trace

HOUR = 3600


@dataclass(frozen=True)
class Summary:
    """One column of the report: a policy's run, or the limit."""

    name: str
    instance_hours: float
    gpu_hours: float
    # The billed GPU-hours split: running tasks, free beside them, idle agents, booting.
    busy_gpu_hours: float
    free_gpu_hours: float
    idle_gpu_hours: float
    booting_gpu_hours: float
    cost: float
    # Billed GPU-hours over the limit's: 1.0 is perfect.
    vs_limit: float
    # Seconds from arrival to start, over the tasks that started (None: none started).
    wait_p50: int | None
    wait_p95: int | None
    wait_p99: int | None
    wait_max: int | None
    wait_mean: float | None
    # The share of the tasks that started which waited at all (mostly for a boot).
    waited: float | None
    launches: int | None
    # Launches by machine type, in the order first launched; refused launch calls.
    launches_by_type: dict[str, int] | None
    refusals: int | None
    unused_launches: int | None
    terminations: int | None
    never_scheduled: int
    larger_than_pool: int
    decisions: int | None
    # Spot instances reclaimed, and what they cost in wait: tasks requeued, and how long
    # they waited to start again (mean and longest, seconds).
    interruptions: int | None = None
    requeued: int | None = None
    restart_wait_mean: float | None = None
    restart_wait_max: int | None = None
    # Seconds the policy's latest plan had demand waiting at max_instances.
    pending_at_max_seconds: int | None = None
    # The warm pool: stops, starts, starts refused, the most stopped at once, and what
    # the stopped machines' disks cost (in ``cost``).
    stops: int | None = None
    starts: int | None = None
    start_refusals: int | None = None
    most_stopped: int | None = None
    disk_cost: float | None = None
    # Reservations: place-hours held and used, what their windows cost (in ``cost``),
    # and on-demand machines launched of a reserved type while a place was free.
    reserved_hours: float | None = None
    reserved_used_hours: float | None = None
    reserved_cost: float | None = None
    on_demand_beside_free: int | None = None
    # An upgrade mid-trace: seconds until no machine of the old config was left (None:
    # some were at the end, or no upgrade), and tasks requeued after it.
    upgraded_after: int | None = None
    requeued_since_upgrade: int | None = None


def percentile(sorted_values: Sequence[int], percent: float) -> int | None:
    """Nearest rank: the smallest value with at least ``percent`` % of values at or below
    it, so every figure is a wait some task really had."""
    if not sorted_values:
        return None
    rank = max(1, math.ceil(percent / 100 * len(sorted_values)))
    return sorted_values[rank - 1]


def limit_gpu_seconds(trace: Trace, sizes: Iterable[int], max_instances: int) -> int:
    """Busy GPU-seconds of the tasks a pool of machines of these ``sizes`` (slots) can
    run at all."""
    sizes = tuple(sizes)
    return sum(
        job.gpus * job.duration
        for job in trace.jobs
        if fits_pool(job.gpus, sizes, max_instances, job.single_agent)
    )


def summarise(run: PolicyRun, limit_seconds: int) -> Summary:
    instance_hours = run.billed_instance_seconds / HOUR
    gpu_hours = run.billed_slot_seconds / HOUR
    return Summary(
        name=run.policy,
        instance_hours=instance_hours,
        gpu_hours=gpu_hours,
        busy_gpu_hours=run.usage.busy / HOUR,
        free_gpu_hours=run.usage.free / HOUR,
        idle_gpu_hours=run.usage.idle / HOUR,
        booting_gpu_hours=run.usage.booting / HOUR,
        cost=run.billed_dollars,
        vs_limit=gpu_hours / (limit_seconds / HOUR) if limit_seconds else math.inf,
        wait_p50=percentile(run.waits, 50),
        wait_p95=percentile(run.waits, 95),
        wait_p99=percentile(run.waits, 99),
        wait_max=run.waits[-1] if run.waits else None,
        wait_mean=sum(run.waits) / len(run.waits) if run.waits else None,
        waited=sum(1 for wait in run.waits if wait) / len(run.waits) if run.waits else None,
        launches=run.launches,
        launches_by_type=run.launches_by_type,
        refusals=run.refusals,
        unused_launches=run.unused_launches,
        terminations=run.terminations,
        never_scheduled=run.never_scheduled,
        larger_than_pool=run.larger_than_pool,
        decisions=run.decisions,
        interruptions=run.interruptions,
        requeued=run.requeued,
        restart_wait_mean=(
            sum(run.restart_waits) / len(run.restart_waits) if run.restart_waits else None
        ),
        restart_wait_max=run.restart_waits[-1] if run.restart_waits else None,
        pending_at_max_seconds=run.pending_at_max_seconds,
        stops=run.stops,
        starts=run.starts,
        start_refusals=run.start_refusals,
        most_stopped=run.most_stopped,
        disk_cost=run.disk_dollars,
        reserved_hours=run.reserved_hours,
        reserved_used_hours=run.reserved_used_hours,
        reserved_cost=run.reserved_dollars,
        on_demand_beside_free=run.on_demand_beside_free,
        upgraded_after=run.upgraded_after,
        requeued_since_upgrade=run.requeued_since_upgrade,
    )


def summarise_limit(
    limit_seconds: int, slots: int, gpu_hour_price: float, larger_than_pool: int
) -> Summary:
    """The limit's column: its GPU-hours on ``slots``-slot instances, each GPU-hour at
    ``gpu_hour_price`` (the cheapest per slot the pool can buy)."""
    gpu_hours = limit_seconds / HOUR
    instance_hours = gpu_hours / slots if slots else 0.0
    return Summary(
        name="limit",
        instance_hours=instance_hours,
        gpu_hours=gpu_hours,
        busy_gpu_hours=gpu_hours,
        free_gpu_hours=0.0,
        idle_gpu_hours=0.0,
        booting_gpu_hours=0.0,
        cost=gpu_hours * gpu_hour_price,
        vs_limit=1.0,
        wait_p50=0,
        wait_p95=0,
        wait_p99=0,
        wait_max=0,
        wait_mean=0.0,
        waited=0.0,
        launches=None,
        launches_by_type=None,
        refusals=None,
        unused_launches=None,
        terminations=None,
        never_scheduled=larger_than_pool,
        larger_than_pool=larger_than_pool,
        decisions=None,
    )
