"""Filling the cap: near its cap in GPUs, a pool that launches for waiting work launches
the rest of the cap too, on the machines cheapest per GPU.

A queue that brought the pool this near its cap tends to pass it: the tasks that follow
would each wait a boot for a machine of their own, launched one pass at a time, where
machines already there start them at once. Determined's provisioner has such free
slots by accident: every machine is of the pool's one type, so 1-GPU tasks leave seven
of eight free on the last one launched. dynagent buys each task a machine of its size
where that is cheapest, and loses that slack; near the cap, where a burst then waits
longest, the fill gives it back. So only where the cheapest machine per GPU is smaller
than the largest: a pool whose cover is machines of the largest size keeps
Determined's slack, and filling would only add to its bill (0.4 % on cluster05 at 10
machines of g5.48xlarge, 1.5 % on cluster08 at 20). Filled, the room bills only until
it is reaped as idle, and it is bought cheapest per GPU, where the work that fills it
otherwise often gets dearer shapes: at a cap the room is held for the large tasks'.

Measured on the shared traces at caps of 80 to 640 GPUs (g5 1/4/8, twelve pools):
within 30 % of the cap, the p95 wait is at most what it is without filling on eleven
and the bill lower on all twelve; within 50 %, cluster06 at 120 GPUs waited 12 % longer
(``FILL_WITHIN``, set on those traces). Filling is level-triggered: the next pass finds
no room and launches nothing more. No filling while a task waits for a larger machine
than the room holds (its room is held), nor while reserved places are free (they are
slack already paid for). ``fill_near_cap: false`` turns it off.
"""

from __future__ import annotations

from collections.abc import Sequence

from dynagent.core.decide.context import Context
from dynagent.core.offerings import Shape
from dynagent.core.packing import Demand
from dynagent.core.plan import Launch

# How near the cap in GPUs, as a share of it, a pass that launches fills the rest.
FILL_WITHIN = 0.3


def cap_fill_launches(ctx: Context, demand: Demand, for_work: int) -> list[Launch]:
    """Machines for the rest of the cap in slots, cheapest per slot first, when this plan
    launches ``for_work`` machines for pending tasks and leaves less than ``FILL_WITHIN``
    of the cap."""
    budget = demand.budget
    if not for_work or not ctx.provider.fill_near_cap or budget is None:
        return []
    room, cap = budget.slots, budget.max_slots
    if room is None or cap is None or budget.held_for is not None:
        return []
    if not 0 < room < FILL_WITHIN * cap:
        return []
    shapes = fill_shapes(ctx.shapes)
    if not shapes:
        return []
    launches: list[Launch] = []
    near = f"within {room} slots of max_slots ({cap})"
    for shape in shapes:
        count = budget.count(shape.slots)
        if count <= 0:
            continue
        budget.spend(shape.slots, count)
        launch = Launch(
            reason=f"fill the cap: {near}, work that waits a boot is likely to follow",
            offerings=ctx.catalog.fallbacks(shape),
            cause="cap_fill",
        )
        launches += [launch] * count
    return launches


def fill_shapes(shapes: Sequence[Shape]) -> list[Shape]:
    """The shapes a fill buys, cheapest per slot first (the smaller on a tie); none where
    the cheapest per slot is of the largest size."""
    ranked = sorted(shapes, key=lambda s: (s.price_per_slot, s.slots))
    if not ranked or ranked[0].slots >= max(s.slots for s in ranked):
        return []
    return ranked
