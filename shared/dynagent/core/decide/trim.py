"""Over the pool's caps (max_instances; with offerings max_slots and max_machines): open
spot requests go first, then idle, never-registered and the newest instances.
"""

from __future__ import annotations

from dynagent.core.decide.context import (
    Context,
    idle_start,
    live_count,
    request_is_capacity,
    slots_left,
)
from dynagent.core.fleet import Instance, RequestState
from dynagent.core.snapshot import Agent


def trim_to_max(ctx: Context) -> None:
    """Over the pool's caps (``max_instances``; with offerings ``max_slots`` and any
    ``max_machines``): open requests first, then idle, never-registered, newest."""
    provider = ctx.provider
    machines, cap = provider.machine_cap, provider.slot_cap
    excess = 0 if machines is None else live_count(ctx) - machines
    slot_room = slots_left(ctx, floor=False)
    over = 0 if slot_room is None else -slot_room
    if excess <= 0 and over <= 0:
        return
    if provider.offerings is None:
        reason = f"over max_instances ({machines})"
    elif excess > 0:
        reason = f"over offerings.max_machines ({machines})"
    else:
        reason = f"over max_slots ({cap})"
    requests = sorted(
        (r for r in ctx.fleet.spot_requests if request_is_capacity(ctx, r)),
        key=lambda r: (r.state is RequestState.ACTIVE, -r.created_at.timestamp()),
    )
    for request in requests:
        if excess <= 0 and over <= 0:
            return
        ctx.cancel(request.id, reason)
        if request.state is RequestState.ACTIVE and request.instance_id:
            ctx.terminate(request.instance_id, reason, "over_max")
        excess, over = excess - 1, over - provider.slots_per_instance
    candidates = sorted(
        (
            pair
            for pair in zip(ctx.fleet.instances, ctx.connected, strict=True)
            if ctx.kept(pair[0])
        ),
        # Machines in an active reservation last: removing them saves nothing.
        key=lambda pair: (pair[0].reservation in ctx.held, trim_rank(ctx, *pair)),
    )
    for instance, agent in candidates:
        if excess <= 0 and over <= 0:
            return
        ctx.terminate(instance.id, reason, "over_max")
        excess, over = excess - 1, over - ctx.slots(instance, agent)


def trim_rank(ctx: Context, instance: Instance, agent: Agent | None) -> tuple[int, float]:
    idle_since = idle_start(ctx, instance, agent)
    if idle_since is not None:
        return (0, idle_since.timestamp())  # oldest idle first
    if instance.registered_at is None and agent is None:
        return (1, -instance.launched_at.timestamp())
    return (2, -instance.launched_at.timestamp())  # then the newest
