"""The decision: a pure function of (pool, observed fleet, snapshot or none, now) -> Plan.

It calls no cloud and reads no clock, so the Lambda, the Cloud Function, ``dynagent
plan``, the simulator and the tests all run exactly this code. Every action it returns
says why.

``decide`` applies the rules in order, each in a module of its own: ``spot_requests``,
the fleet ``walk`` (with the ``removals`` it makes), agents of an old config
(``drift``) or broken (``repair``) ``replace``d, ``idle`` reaping, ``trim`` to the
caps, ``launches`` (with ``gang_spares``, ``zero_slot`` work and warm ``headroom``) and
``marks``. The ``warm_pool`` of stopped machines takes part in the walk, the reaping and
the launches.
``context`` holds one decision's inputs and what the rules share.
"""

from __future__ import annotations

from datetime import datetime

from dynagent.core.config import Pool, Settings
from dynagent.core.decide.context import Context
from dynagent.core.decide.drift import drifted
from dynagent.core.decide.idle import agents_counted_on, reap_idle
from dynagent.core.decide.launches import launch_key, master_unknown, plan_launches
from dynagent.core.decide.marks import mark_writes, still_wanted, stop_marks
from dynagent.core.decide.removals import INTERRUPTION_GRACE
from dynagent.core.decide.repair import broken
from dynagent.core.decide.replace import replace_agents
from dynagent.core.decide.spot_requests import review_spot_requests
from dynagent.core.decide.trim import trim_to_max
from dynagent.core.decide.walk import walk_fleet
from dynagent.core.fleet import Fleet
from dynagent.core.packing import AT_CAP
from dynagent.core.plan import Cancellation, DrainNotice, Plan, Stop, Termination
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
    # A broken agent of an old config is counted broken: its GPU is the graver fault.
    retiring = broken(ctx)
    replace_agents(ctx, survey, retiring + drifted(ctx, {r.instance.id for r in retiring}))
    counted_on = agents_counted_on(ctx, survey)
    reap_idle(ctx, survey.idle, survey.room, counted_on)
    trim_to_max(ctx)
    launches, starts, demand = plan_launches(ctx, survey.room)
    addresses = (snapshot.master_addresses if snapshot else None) or {}
    held = master_unknown(pool, addresses) if launches or starts else None
    waiting = [f"{task.task} ({task.slots} slots): {why}" for task, why in demand.waiting]
    if held:
        # A stopped machine's boot config cannot be checked against an unknown master
        # either: its start waits too.
        waiting.append(f"{len(launches) + len(starts)} launches held: {held}")
        launches, starts = (), ()
    stops = tuple(Stop(i, f"{t.reason}: stopped for the warm pool") for i, t in stopped(ctx))
    return Plan(
        pool=pool.name,
        launch_key=launch_key(pool.name, snapshot, now),
        launch_at=snapshot.time if snapshot else now.replace(second=0, microsecond=0),
        launches=launches,
        terminations=tuple(t for i, t in ctx.terminations.items() if i not in ctx.stops),
        stops=stops,
        starts=starts,
        cancellations=tuple(Cancellation(i, r) for i, r in ctx.cancellations.items()),
        # Adopted before terminated: the managed tags are what allow the terminate.
        adoptions=tuple(ctx.adoptions),
        marks=mark_writes(ctx, survey.marks + still_wanted(ctx, counted_on)) + stop_marks(ctx),
        unschedulable=tuple(demand.unschedulable),
        waiting=tuple(waiting),
        pending_at_max=any(why.startswith(AT_CAP) for _, why in demand.waiting),
        unmatched_agents=tuple(sorted(ctx.unmatched)),
        interruptions=tuple(ctx.interruptions),
        master_addresses=tuple(sorted(addresses.items())),
        boot_config=ctx.boot_config if launches or starts or stops else "",
        boot_parts=ctx.boot_parts if launches or starts or stops else "",
        drain_notices=(drain_notices(ctx) if ctx.announced else ()) + tuple(ctx.drains),
        retiring=tuple(sorted(ctx.retiring.items())),
        replacing=tuple(sorted(ctx.replacing)),
    )


def drain_notices(ctx: Context) -> tuple[DrainNotice, ...]:
    """The live machines of reservations ending soon, for the bridge to drain in time."""
    announced = ctx.announced
    return tuple(
        DrainNotice(
            agent.id if agent is not None else instance.id, *announced[instance.reservation]
        )
        for instance, agent in zip(ctx.fleet.instances, ctx.connected, strict=True)
        if instance.reservation in announced and instance.live
    )


def stopped(ctx: Context) -> list[tuple[str, Termination]]:
    """The idle agents this plan stops for the warm pool, with why they were reaped."""
    return [(i, t) for i, t in ctx.terminations.items() if i in ctx.stops]
