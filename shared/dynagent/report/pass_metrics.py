"""The metric points of one pass over a pool, from its ``Outcome``: pure, cloud-neutral.

Each cloud writes the points its own way (``dynagent.aws.emf``, ``dynagent.gcp.logs``).
What a pass emits:

- Gauges, every pass that knows them, zeros included, so a graph or an alarm reads a
  steady series: ``Instances`` (each state) and ``CostPerHour`` from the observed fleet;
  ``StoppedInstances`` (each type the pool offers) and ``StoppedDiskCost`` from the
  fleet the pass leaves, for a pool with a warm pool or stopped machines kept;
  ``PendingSlots``, ``Agents`` (each state) and ``PendingAtMax`` from a snapshot only (a
  sweep does not know demand or agents). Several passes a minute each report them: read
  gauges with Maximum or Average, never Sum.
- Counters only when not zero: ``Launches``, ``Terminations``, ``SpotRequestsCancelled``,
  ``LaunchErrors``, ``Stops``, ``Starts``, ``StartsRefused``, and ``LaunchesPaused`` (1
  for a pass whose launches launch_error_timeout/retries held). An alarm on them treats
  missing data as not breaching.
- ``SnapshotAge`` for a snapshot the pass applied or skipped as too old (then it is what
  says the queue is behind); ``SnapshotsApplied`` 1 and ``ReconcileDuration`` for each
  pass that ran. A pass that failed emits nothing: the function's errors count it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Any, Protocol

from dynagent.core.config import Pool
from dynagent.core.fleet import Fleet, InstanceState
from dynagent.core.plan import Launch, Plan
from dynagent.core.snapshot import Snapshot, snapshot_age
from dynagent.report.metrics import AGENT_STATES, INSTANCE_STATES, OTHER_TYPE, Point, point
from dynagent.run.provider import LaunchErrorKind, LaunchResult, StartResult
from dynagent.run.reconcile import Outcome


def pass_points(outcome: Outcome, pool: Pool | None, now: datetime) -> list[Point]:
    """What one pass over a pool measured. ``pool`` is its config (for prices), ``now``
    the time the pass decided with (for the snapshot's age)."""
    name = outcome.pool
    if outcome.error:
        return []
    points: list[Point] = []
    snapshot = outcome.snapshot
    if snapshot is not None:
        points.append(point("SnapshotAge", max(0.0, snapshot_age(snapshot, now)), name))
    plan = outcome.plan
    if plan is None:  # skipped: nothing observed, nothing done
        return points
    if snapshot is not None:
        points.append(point("SnapshotsApplied", 1, name))
        points += _demand(name, snapshot, plan)
    if outcome.duration is not None:
        points.append(point("ReconcileDuration", round(outcome.duration * 1000, 3), name))
    if outcome.fleet is not None:
        points += _fleet(name, outcome.fleet, pool)
        if pool is not None:
            points += _stopped(name, outcome.fleet, plan, outcome.start, pool)
    points += _actions(name, plan, outcome.launches, outcome.launch)
    points += _starts(name, outcome.start)
    if outcome.launches_paused_until is not None:
        points.append(point("LaunchesPaused", 1, name))
    return points


def _demand(name: str, snapshot: Snapshot, plan: Plan) -> list[Point]:
    states = Counter(_agent_state(a.draining, a.idle) for a in snapshot.agents)
    return [
        point("PendingSlots", sum(task.slots for task in snapshot.pending), name),
        *(point("Agents", states[state], name, state=state) for state in AGENT_STATES),
        point("PendingAtMax", 1 if plan.pending_at_max else 0, name),
    ]


def _agent_state(draining: bool, idle: bool) -> str:
    # A draining agent is on its way out whatever it still runs.
    if draining:
        return "draining"
    return "idle" if idle else "busy"


def _fleet(name: str, fleet: Fleet, pool: Pool | None) -> list[Point]:
    states = Counter(instance.state.value for instance in fleet.instances)
    points = [point("Instances", states[state], name, state=state) for state in INSTANCE_STATES]
    if pool is not None:
        catalog = pool.provider.catalog(fleet.spot_prices, fleet.unavailable)
        cost = sum(catalog.hourly_price(i) for i in fleet.instances if i.live)
        points.append(point("CostPerHour", round(cost, 4), name))
    return points


_STOPPED = (InstanceState.STOPPED, InstanceState.STOPPING)


def stopped_types(fleet: Fleet, plan: Plan, start: StartResult | None) -> list[str]:
    """The types of the stopped machines a pass leaves ("" when unknown): those observed
    stopped or stopping that the plan does not terminate and the cloud did not start,
    then those the plan stops."""
    gone = {t.instance_id for t in plan.terminations}
    gone.update(start.started if start is not None else ())
    kept = {i.id: i.instance_type for i in fleet.instances if i.state in _STOPPED}
    kept = {i: kind for i, kind in kept.items() if i not in gone}
    for stop in plan.stops:
        if stop.instance_id not in kept:
            found = fleet.instance(stop.instance_id)
            kept[stop.instance_id] = found.instance_type if found is not None else ""
    return list(kept.values())


def _stopped(
    name: str, fleet: Fleet, plan: Plan, start: StartResult | None, pool: Pool
) -> list[Point]:
    """``StoppedInstances`` for each type the pool offers (zeros too), then ``other``
    for types it does not (when there are such), and ``StoppedDiskCost``: for a pool with
    a warm pool, or one that still keeps stopped machines. Types come from the pool's
    config, never from the cloud: the series stay as few as its offerings."""
    types = stopped_types(fleet, plan, start)
    provider = pool.provider
    if not (provider.warm_pool.enabled or types):
        return []
    catalog = provider.catalog(fleet.spot_prices, fleet.unavailable)
    offered = tuple(dict.fromkeys(o.instance_type for o in catalog.offerings))
    counts = Counter(
        kind if kind in offered else OTHER_TYPE for kind in (t or offered[0] for t in types)
    )
    shown = offered + ((OTHER_TYPE,) if counts[OTHER_TYPE] else ())
    points = [point("StoppedInstances", counts[t], name, instance_type=t) for t in shown]
    cost = len(types) * provider.stopped_disk_per_hour
    points.append(point("StoppedDiskCost", round(cost, 4), name))
    return points


def _starts(name: str, start: StartResult | None) -> list[Point]:
    """What starting stopped machines did: those the cloud started, and its refusals by
    the kind their adapter gave them."""
    if start is None:
        return []
    points = [point("Starts", len(start.started), name)] if start.started else []
    refused = Counter(kind.value for _, _, kind in start.refused)
    points += [point("StartsRefused", n, name, code=code) for code, n in refused.items()]
    return points


def _actions(
    name: str, plan: Plan, launches: tuple[Launch, ...], launch: LaunchResult | None
) -> list[Point]:
    points = [
        point("Launches", count, name, reason=reason)
        for reason, count in _launched(launches, launch).items()
    ]
    terminated = Counter(t.cause for t in plan.terminations)
    points += [
        point("Terminations", count, name, reason=reason) for reason, count in terminated.items()
    ]
    if plan.stops:
        points.append(point("Stops", len(plan.stops), name))
    if plan.cancellations:
        points.append(point("SpotRequestsCancelled", len(plan.cancellations), name))
    seen = Counter(i.kind for i in plan.interruptions)
    points += [point("Interruptions", count, name, kind=kind) for kind, count in seen.items()]
    if launch is not None:
        points += [
            point("LaunchErrors", count, name, code=code)
            for code, count in _launch_errors(launch).items()
        ]
    return points


def _launched(launches: tuple[Launch, ...], launch: LaunchResult | None) -> Counter[str]:
    """Launches the cloud started, by cause. When it started fewer than tried (the plan's,
    then a re-pack's), the started ones are counted against those in order (demand first,
    then zero-slot, min_instances, headroom): a result does not say which of them it
    served. A replayed launch was counted by the pass that first made it."""
    if launch is None or launch.replayed:
        return Counter()
    started = min(len(launch.started), len(launches))
    return Counter(item.cause for item in launches[:started])


def _launch_errors(launch: LaunchResult) -> Counter[str]:
    """One capacity error per offering the cloud refused for capacity, and one for the
    launch's error, by the kind its adapter gave it, unless it only sums those refusals
    up."""
    errors: Counter[str] = Counter()
    if launch.unavailable:
        errors[LaunchErrorKind.CAPACITY.value] += len(launch.unavailable)
    kind = launch.error_kind or LaunchErrorKind.OTHER
    if launch.error and not (launch.unavailable and kind is LaunchErrorKind.CAPACITY):
        errors[kind.value] += 1
    return errors


def dead_letter_point(pool: str) -> Point:
    """One record set aside; ``pool`` is "unknown" when it named no configured pool."""
    return point("DeadLetters", 1, pool)


class MetricWriter(Protocol):
    def write(self, points: Iterable[Point], now: datetime) -> None: ...


def write_safely(
    metrics: MetricWriter, points: Callable[[], Iterable[Point]], now: datetime, logger: Any
) -> None:
    """Compute and write points; a failure is logged, never raised: metrics must not
    fail a pass that did its work."""
    try:
        metrics.write(points(), now)
    except Exception as error:
        logger.warning("metrics not written", extra={"error": repr(error)})
