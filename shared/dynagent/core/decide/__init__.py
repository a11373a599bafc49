"""The decision: a pure function of (pool, observed fleet, snapshot or none, now) -> Plan.

It calls no cloud and reads no clock, so the Lambda, the Cloud Function, ``dynagent
plan``, the simulator and the tests all run exactly this code. Every action it returns
says why.

``decide`` applies the rules in order, each in a module of its own: ``spot_requests``,
the fleet ``walk`` (with the ``removals`` it makes), ``idle`` reaping, ``trim`` to the
caps, ``launches`` (with ``zero_slot`` work and warm ``headroom``) and ``marks``.
``context`` holds one decision's inputs and what the rules share.
"""

from __future__ import annotations

from datetime import datetime

from dynagent.core.config import Pool, Settings
from dynagent.core.decide.context import Context
from dynagent.core.decide.idle import agents_counted_on, reap_idle
from dynagent.core.decide.launches import launch_key, master_unknown, plan_launches
from dynagent.core.decide.marks import mark_writes, still_wanted
from dynagent.core.decide.removals import INTERRUPTION_GRACE
from dynagent.core.decide.spot_requests import review_spot_requests
from dynagent.core.decide.trim import trim_to_max
from dynagent.core.decide.walk import walk_fleet
from dynagent.core.fleet import Fleet
from dynagent.core.packing import AT_CAP
from dynagent.core.plan import Cancellation, Plan
from dynagent.core.snapshot import Snapshot

__all__ = ["INTERRUPTION_GRACE", "decide"]


def decide(
    pool: Pool,
    fleet: Fleet,
    snapshot: Snapshot | None,
    now: datetime,
    settings: Settings | None = None,
) -> Plan:
    """What to do to ``pool`` now, given what the cloud shows and the master said."""
    ctx = Context(pool, fleet, snapshot, now, settings or Settings())
    review_spot_requests(ctx)
    survey = walk_fleet(ctx)
    counted_on = agents_counted_on(ctx, survey)
    reap_idle(ctx, survey.idle, survey.room, counted_on)
    trim_to_max(ctx)
    launches, demand = plan_launches(ctx, survey.room)
    addresses = (snapshot.master_addresses if snapshot else None) or {}
    held = master_unknown(pool, addresses) if launches else None
    waiting = [f"{task.task} ({task.slots} slots): {why}" for task, why in demand.waiting]
    if held:
        waiting.append(f"{len(launches)} launches held: {held}")
        launches = ()
    return Plan(
        pool=pool.name,
        launch_key=launch_key(pool.name, snapshot, now),
        launch_at=snapshot.time if snapshot else now.replace(second=0, microsecond=0),
        launches=launches,
        terminations=tuple(ctx.terminations.values()),
        cancellations=tuple(Cancellation(i, r) for i, r in ctx.cancellations.items()),
        # Adopted before terminated: the managed tags are what allow the terminate.
        adoptions=tuple(ctx.adoptions),
        marks=mark_writes(ctx, survey.marks + still_wanted(ctx, counted_on)),
        unschedulable=tuple(demand.unschedulable),
        waiting=tuple(waiting),
        pending_at_max=any(why.startswith(AT_CAP) for _, why in demand.waiting),
        unmatched_agents=tuple(sorted(ctx.unmatched)),
        interruptions=tuple(ctx.interruptions),
        master_addresses=tuple(sorted(addresses.items())),
    )
