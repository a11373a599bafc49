"""Agents for the pending tasks of no slots that no agent has room for: one per
``max_aux_containers_per_agent`` of them, as Determined's provisioner wants.
"""

from __future__ import annotations

from dynagent.core.decide.context import Context, request_is_capacity, takes_tasks
from dynagent.core.fitting import agents_for_zero_slot, zero_slot_room
from dynagent.core.offerings import Shape
from dynagent.core.packing import AT_MAX, NO_CAP, Demand
from dynagent.core.plan import (
    Launch,
    Unschedulable,
)


def zero_slot_launches(
    ctx: Context, demand: Demand, smallest: Shape | None, live: int, planned: int
) -> list[Launch]:
    """Agents for the pending zero-slot tasks no agent has room for.

    An agent runs up to max_aux_containers_per_agent zero-slot tasks, busy or not
    (``fitting.zero_slot_room``): they wait only where every agent that takes tasks is
    full of them, or the pool has none. For those, Determined's provisioner wants one
    agent per max_aux_containers_per_agent of them (``scaling.go``
    ``calculateDesiredNewAgentNum``: ``fitting.agents_for_zero_slot``), of the smallest
    shape here, within the pool's caps. Machines still booting, open spot requests and
    the ``planned`` launches of this plan count as agents with all that room. With
    max_aux_containers_per_agent 0 no agent ever runs one: they are unschedulable.
    """
    tasks = ctx.zero_slot
    if not tasks:
        return []
    max_aux = ctx.pool.max_aux_containers_per_agent
    if max_aux == 0:
        demand.unschedulable += [
            Unschedulable(
                t.task, 0, "max_aux_containers_per_agent is 0: no agent runs a task of no slots"
            )
            for t in tasks
        ]
        return []
    left = tasks[zero_slot_capacity(ctx, max_aux, len(tasks)) + planned * max_aux :]
    if not left or smallest is None:
        return []
    need = agents_for_zero_slot(len(left), max_aux)
    budget = demand.budget
    cap = ctx.provider.machine_cap
    room = NO_CAP if cap is None else max(0, cap - live - planned)
    allowed = budget.count(smallest.slots) if budget is not None else room
    count = min(need, allowed)
    if count < need:
        why = budget.why(smallest.slots) if budget else f"{AT_MAX} ({cap})"
        demand.waiting += [(task, why) for task in left[count * max_aux :]]
    offerings = ctx.catalog.fallbacks(smallest)
    chunks = [[t.task for t in left[k * max_aux : (k + 1) * max_aux]] for k in range(count)]
    return [
        Launch(
            reason=f"pending zero-slot tasks need an agent: {', '.join(names)}",
            tasks=tuple(names),
            offerings=offerings,
            cause="zero_slot",
        )
        for names in chunks
    ]


def zero_slot_capacity(ctx: Context, max_aux: int, wanted: int) -> int:
    """Zero-slot tasks the machines this plan keeps may take, counted up to ``wanted``:
    an agent that takes tasks, its room (``fitting.zero_slot_room``; a draining or
    disabled one has none, ``agent_state.go`` ``numEmptyZeroSlots``); a machine not
    connected (booting, or away for now) and an open spot request, all of it once up."""
    drain = ctx.provider.drain_idle_agents
    room = max_aux * sum(1 for r in ctx.fleet.spot_requests if request_is_capacity(ctx, r))
    for instance, agent in zip(ctx.fleet.instances, ctx.connected, strict=True):
        if room >= wanted:
            break
        if not ctx.kept(instance):
            continue
        if agent is None:
            room += max_aux
        elif takes_tasks(agent, drain):
            room += zero_slot_room(agent.tasks, agent.used_slots, max_aux)
    return room
