"""Warm headroom: launches that keep ``warm_headroom_slots`` free on the pool's smallest
shape, and the guard that keeps idle machines of that shape while reaping. With ``auto``
the free room is for the work the pool's arrivals predict (``expected_work``), on the
shapes that hold it for the least money.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from dynagent.core.decide.context import Context, live_count, pack_pending
from dynagent.core.decide.expected_work import expected_arrivals
from dynagent.core.offerings import Shape
from dynagent.core.packing import Demand, Existing
from dynagent.core.plan import (
    Launch,
)
from dynagent.core.snapshot import ARRIVALS_WINDOW_SECONDS


def headroom_launches(
    ctx: Context,
    demand: Demand,
    smallest: Shape,
    live: int,
    launches: list[Launch],
) -> list[Launch]:
    """Machines of the smallest shape to keep ``warm_headroom_slots`` free slots; with
    ``auto``, machines for the expected work that the room left does not hold."""
    provider = ctx.provider
    if provider.headroom_auto:
        return _expected_work_launches(ctx, demand, live, launches)
    wanted = provider.headroom_slots
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


def _expected_work_launches(
    ctx: Context,
    demand: Demand,
    live: int,
    launches: list[Launch],
) -> list[Launch]:
    """New machines for the expected work the room left after the pending tasks, and
    the machines launched for them, does not hold."""
    expected = expected_arrivals(ctx)
    if not expected:
        return []
    # Booting or not, the room left counts alike: none of these tasks spans machines.
    room = [Existing(slots, free, arriving=False) for slots, free in demand.free_after]
    room += [Existing(m.shape.slots, m.shape.slots - m.used) for m in demand.new_machines]
    held = sum(la.offering.slots for la in launches if la.offering is not None)
    more = pack_pending(ctx, expected, room, live, held)
    if not more.new_machines:
        return []
    catalog = ctx.catalog
    return [
        Launch(
            reason=f"warm headroom (auto): room for {len(machine.tasks)} of the "
            f"{len(expected)} tasks the last hour's arrivals predict",
            offerings=catalog.fallbacks(machine.shape),
            cause="headroom",
        )
        for machine in more.new_machines
    ]


class ExpectedWorkGuard:
    """Keeps the idle agents the expected work would go to (``auto``), after the
    pending tasks, while idle agents go."""

    def __init__(
        self, ctx: Context, room: list[tuple[str, Existing]], idle: list[tuple[datetime, str]]
    ) -> None:
        self.kept: set[str] = set()
        if ctx.snapshot is None:
            # The sweep knows no arrivals: it leaves idle agents to the snapshots, which
            # the bridge publishes when an idle period runs out, unless none came for
            # the window's length past the period (the bridge is down).
            limit = ctx.provider.max_idle_agent_period + timedelta(seconds=ARRIVALS_WINDOW_SECONDS)
            self.kept = {i for since, i in idle if ctx.now - since < limit}
            return
        expected = expected_arrivals(ctx, whole_machines=True)
        if not expected:
            return
        candidates = [(i, m) for i, m in room if i not in ctx.terminations]
        machines = [m for _, m in candidates]
        pending = tuple(t for t in ctx.snapshot.pending if t.slots > 0)
        live = live_count(ctx)
        if pending:
            first = pack_pending(ctx, pending, machines, live, 0)
            machines = [
                Existing(m.slots, f, m.arriving)
                for m, (_, f) in zip(machines, first.free_after, strict=True)
            ]
        placed = pack_pending(ctx, expected, machines, live, 0)
        self.kept = {
            instance_id
            for (instance_id, machine), (_, free) in zip(candidates, placed.free_after, strict=True)
            if free < machine.free and machine.free == machine.slots
        }

    def may_remove(self, instance_id: str) -> bool:
        return instance_id not in self.kept


class HeadroomGuard:
    """Keeps ``warm_headroom_slots`` free on the smallest shape while idle agents go."""

    def __init__(self, ctx: Context, room: list[tuple[str, Existing]]) -> None:
        smallest = ctx.smallest
        self.wanted = ctx.provider.headroom_slots
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
