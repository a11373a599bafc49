"""Idle agents: terminated past max_idle_agent_period, the costliest first, never below
min_instances or the warm headroom, never one that pending tasks count on, and never
one in an active reservation; stopped instead while the warm pool has room.
"""

from __future__ import annotations

from datetime import datetime

from dynagent.core.decide.context import Context, Survey, live_count, pack_pending
from dynagent.core.decide.headroom import ExpectedWorkGuard, HeadroomGuard
from dynagent.core.decide.warm_pool import stop_reaped
from dynagent.core.durations import format_duration
from dynagent.core.fitting import agents_for_zero_slot
from dynagent.core.packing import Existing


def agents_counted_on(ctx: Context, survey: Survey) -> set[str]:
    """Idle agents that pending tasks are packed onto: neither this pass nor the sweep
    may reap them while the tasks wait.

    A task larger than one machine waits for all its machines to be idle at once, so it
    counts an idle agent as one of them; reaping that agent meanwhile would make it wait
    for a second boot (found on the ITP traces: a 16-GPU task waited 355 s where
    Determined's provisioner, which never counts idle agents, took 184 s).
    """
    pending = ctx.snapshot.pending if ctx.snapshot else ()
    if not pending:
        return set()
    # Only agents idle half their period or longer can be reaped soon or need their mark
    # renewed; with none, there is nothing to keep (the common case: no second packing).
    # In a drained pool only drained agents can be reaped; the bridge enables them again
    # for the tasks. The walk noted both kinds (``Survey.waning``).
    if not survey.waning:
        return set()
    idle = set(survey.waning)
    candidates = [(i, m) for i, m in survey.room if i not in ctx.terminations]
    sized = tuple(task for task in pending if task.slots > 0)
    demand = pack_pending(ctx, sized, [machine for _, machine in candidates], live_count(ctx))
    return {
        instance_id
        for (instance_id, machine), (_, free) in zip(candidates, demand.free_after, strict=True)
        if free < machine.free and instance_id in idle
    }


def in_reservation(ctx: Context, instance_id: str) -> bool:
    """The machine runs in an active reservation: removing it saves nothing, as the
    reservation is paid for anyway. A retired agent is the exception: its publisher never
    enables it again, so it only frees its place for a machine that can take work."""
    instance = ctx.by_id[instance_id]
    if instance.reservation not in ctx.held:
        return False
    agent = ctx.agents_by_id.get(instance_id)
    return agent is None or not agent.retired


def reap_idle(
    ctx: Context,
    idle: list[tuple[datetime, str]],
    room: list[tuple[str, Existing]],
    counted_on: set[str],
) -> None:
    """Terminate agents idle past max_idle_agent_period, not below min_instances: the
    costliest first (they save most), then the oldest idle; not those pending tasks are
    counted on, and machines of the smallest shape only while the warm headroom stays."""
    provider = ctx.provider
    limit = provider.max_idle_agent_period
    live = live_count(ctx)
    by_id = ctx.by_id if idle else {}
    auto = provider.headroom_auto and idle
    headroom = ExpectedWorkGuard(ctx, room, idle) if auto else HeadroomGuard(ctx, room)
    ranked = sorted(idle, key=lambda item: (-ctx.price(by_id[item[1]]), item))
    # A pending zero-slot task is the master's to place on any agent: keep one for it.
    aux = ctx.pool.max_aux_containers_per_agent
    floor = max(provider.min_instances, agents_for_zero_slot(len(ctx.zero_slot), aux))
    reaped: list[str] = []
    for since, instance_id in ranked:
        if live <= floor:
            break
        if instance_id in counted_on or not headroom.may_remove(instance_id):
            continue
        if in_reservation(ctx, instance_id):
            continue
        reason = f"idle for {format_duration(ctx.now - since)}"
        if provider.drain_idle_agents:
            reason = f"drained by the master and empty ({reason})"
        ctx.terminate(
            instance_id, f"{reason} (max_idle_agent_period {format_duration(limit)})", "idle"
        )
        reaped.append(instance_id)
        live -= 1
    if provider.warm_pool.enabled:
        stop_reaped(ctx, reaped)
