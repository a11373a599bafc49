"""The work expected before a new machine could take it: what ``warm_headroom_slots:
auto`` keeps free room for, sized from the pool's own arrivals (the snapshot's
``arrivals``, the last hour's, from ``dynagent bridge``).

A task finds room at once if the free room at its arrival holds it and what came in the
lead time before it (room taken is refilled only a lead time later: a warm start in a
pool with a warm pool, else a boot). Over the last hour's arrivals, the work in
the lead time before each is counted, and the room kept is that of the arrival at the
``QUANTILE`` of those counts (tasks weighed alike): the tasks that came then, by size.
So a pool whose work comes alone keeps room for one task, a pool whose work comes in
bursts room for a large burst, and a quiet pool nothing (no arrival within the hour).
The room is at most the slots busy now (``ROOM_SHARE``), of the smallest tasks first.

Tasks of a whole machine of the pool's largest shape start on empty machines only:
no machine is launched for them (it would bill whole while it waits), but an idle one
their recent arrivals predict is kept past its idle period, as Determined's provisioner
keeps its idle machines for its period. Tasks larger than a machine are left out.
"""

from __future__ import annotations

import math

from dynagent.core.decide.context import Context
from dynagent.core.snapshot import Arrival, PendingTask

# A stopped machine's start to a registered agent, and a boot with its image pull: the
# simulator's defaults, which docs/warm-pools.md measured on EC2.
START_SECONDS = 90
BOOT_SECONDS = 360
# The share of recent arrivals whose burst the room kept holds. Tuned on the shared
# traces, boot seed 0 (docs/warm-pools.md): at 0.6 cluster07's median task waited 50 s
# where Determined's started at once; 0.9 bills 0.6 % more there and starts it at once.
QUANTILE = 0.9
# The room kept is at most this share of the slots busy now: in a small or sparse pool,
# whose bursts are large beside the work it runs, room sized for them would bill more
# than the work (on a 60-task day, 1.05 x Determined's bill; 0.95 x with this bound).
ROOM_SHARE = 1.0


def expected_arrivals(ctx: Context, whole_machines: bool = False) -> tuple[PendingTask, ...]:
    """The tasks to keep free room for, largest first; none without arrivals. Tasks of
    a whole largest machine count only with ``whole_machines``: for the idle agents
    kept, never for machines launched."""
    snapshot = ctx.snapshot
    arrivals = snapshot.arrivals if snapshot is not None else None
    if not arrivals:
        return ()
    largest = max((shape.slots for shape in ctx.shapes), default=0)
    whole = largest + 1 if whole_machines else largest
    # Of the config, not of the stopped machines there now: the room kept changes only
    # with the arrivals, which every snapshot carries.
    lead = START_SECONDS if ctx.provider.warm_pool.enabled else BOOT_SECONDS
    sizes = burst_before(arrivals, whole, lead)
    busy = sum(agent.used_slots for agent in snapshot.agents) if snapshot else 0
    sizes = within_share(sizes, math.ceil(ROOM_SHARE * busy))
    return tuple(PendingTask(f"expected-{n}", slots) for n, slots in enumerate(sizes))


def within_share(sizes: list[int], allowed: int) -> list[int]:
    """The smallest of ``sizes`` (largest first) that fit in ``allowed`` slots together."""
    kept: list[int] = []
    total = 0
    for slots in reversed(sizes):
        if total + slots > allowed:
            break
        kept.append(slots)
        total += slots
    return kept[::-1]


def burst_before(arrivals: tuple[Arrival, ...], whole: int, lead: int) -> list[int]:
    """The sizes of the tasks that came within ``lead`` seconds up to the arrival at the
    QUANTILE of such bursts, largest first; tasks of ``whole`` slots or more left out."""
    # Oldest first, as (second, slots, count), the second counted back from the snapshot.
    timeline = sorted(
        ((-a.age, a.slots, a.count) for a in arrivals if 0 < a.slots < whole),
        key=lambda event: (event[0], -event[1], -event[2]),
    )
    if not timeline:
        return []
    bursts: list[tuple[int, int, int]] = []  # (slots in the lead time to it, index, tasks)
    first = slots = 0
    for index, (second, size, count) in enumerate(timeline):
        slots += size * count
        while timeline[first][0] < second - lead:
            slots -= timeline[first][1] * timeline[first][2]
            first += 1
        bursts.append((slots, index, count))
    bursts.sort()
    mark = QUANTILE * sum(count for _, _, count in bursts)
    seen = 0
    chosen = bursts[-1][1]
    for _, index, count in bursts:
        seen += count
        if seen >= mark:
            chosen = index
            break
    until = timeline[chosen][0]
    sizes = [
        size
        for second, size, count in timeline[: chosen + 1]
        if second >= until - lead
        for _ in range(count)
    ]
    return sorted(sizes, reverse=True)
