"""Warm headroom: launches that keep ``warm_headroom_slots`` free on the pool's smallest
shape, and the guard that keeps idle machines of that shape while reaping.
"""

from __future__ import annotations

from dynagent.core.decide.context import Context
from dynagent.core.offerings import Shape
from dynagent.core.packing import Demand, Existing
from dynagent.core.plan import (
    Launch,
)


def headroom_launches(ctx: Context, demand: Demand, smallest: Shape, live: int) -> list[Launch]:
    """Machines of the smallest shape to keep ``warm_headroom_slots`` free slots."""
    provider = ctx.provider
    wanted = provider.warm_headroom_slots
    # Without a snapshot the free slots of busy agents are unknown, and would count as
    # none: the sweep would launch headroom that is there. The next snapshot keeps it.
    if not wanted or smallest.slots <= 0 or ctx.snapshot is None:
        return []
    free = sum(f for slots, f in demand.free_after if slots == smallest.slots)
    free += sum(
        m.shape.slots - m.used for m in demand.new_machines if m.shape.slots == smallest.slots
    )
    missing = -(-(wanted - free) // smallest.slots)
    cap = provider.machine_cap
    count = missing if cap is None else min(missing, cap - live)
    if demand.budget is not None and provider.slot_cap is not None:
        count = min(count, demand.budget.count(smallest.slots))
    if count <= 0:
        return []
    launch = Launch(
        reason=f"keep warm_headroom_slots ({wanted}): {free} free on {smallest.instance_type}",
        offerings=ctx.catalog.fallbacks(smallest),
        cause="headroom",
    )
    return [launch] * count


class HeadroomGuard:
    """Keeps ``warm_headroom_slots`` free on the smallest shape while idle agents go."""

    def __init__(self, ctx: Context, room: list[tuple[str, Existing]]) -> None:
        smallest = ctx.smallest
        self.wanted = ctx.provider.warm_headroom_slots
        self.slots = smallest.slots if smallest else 0
        self.free = {i: m.free for i, m in room if m.slots == self.slots} if self.wanted else {}
        self.total = sum(self.free.values())

    def may_remove(self, instance_id: str) -> bool:
        free = self.free.get(instance_id)
        if free is None:
            return True
        if self.total - free < self.wanted:
            return False
        self.total -= free
        return True
