"""Gang spares: one machine more for a task over several machines, where its wait is
most at risk.

A task over several machines (a gang) starts when the last of them registers, and
boots differ by tens of seconds from one launch to the next. Two rules launch one spare
machine of the gang's size:

- **A large gang launched.** A gang the plan launches ``GANG_SPARE_FROM`` or more new
  machines for waits for the slowest of them; with one more, it starts on the first n
  to register.
- **A gang part registered.** A gang whose first machines registered while the rest
  boot holds nothing: the master gives those agents to smaller tasks that arrive
  meanwhile (``findDedicatedAgentFits`` reserves no agent for a task that does not
  fit), and the gang then waits a whole new boot. A spare already booting takes the
  place of an agent taken.

Either way, no spare where the plan leaves a whole machine of that size unused (an
idle agent, or one booting that no pending task takes), and only within the caps' room.
A spare the gang does not need is a free agent for the next task, reaped when idle like
any other. The rules are level-triggered: the next pass counts the spare among the
machines still booting, so it launches nothing more.

Determined's provisioner launches such machines by accident, more of them: it counts a
waiting gang's slots without its agents already registered (``scaling.go``
``calculateDesiredNewAgentNum``), so a gang whose machines register apart gets as many
more machines as have registered, and bursts that follow a gang start on them. Without
spares, dynagent's p95 wait on cluster04 was 1 s longer than Determined's on three of
boot seeds 0 to 3; with them it is equal on seeds 0 to 11, for 0.07 % fewer GPU-hours
(docs/performance.md).
"""

from __future__ import annotations

from dynagent.core.decide.context import Context
from dynagent.core.packing import Demand, GangPlacement
from dynagent.core.plan import Launch

# New machines for one task from which it gets a spare at launch. A spare at launch for
# gangs of two made cluster07 dearer than Determined's provisioner: such a gang gets one
# only once part of it registered.
GANG_SPARE_FROM = 3


def gang_spare_launches(ctx: Context, demand: Demand, live: int) -> list[Launch]:
    """A spare machine for each large gang launched and each gang part registered, where
    no whole machine of its size is left unused; ``live`` counts the machines the pool
    has and this plan launches already."""
    if not demand.gangs or not ctx.provider.gang_spares:
        return []
    unused = {size for size, free in demand.free_after if free == size > 0}
    cap = ctx.provider.machine_cap
    room = None if cap is None else cap - live
    budget = demand.budget
    launches: list[Launch] = []
    for gang in demand.gangs:
        # Packing's cheapest shape of the gang's size; none where no such shape launches.
        shape, reason = gang.shape, _why_spare(gang)
        if shape is None or reason is None or shape.slots in unused:
            continue
        if room is not None and room <= 0:
            break
        if budget is not None and budget.count(shape.slots) <= 0:
            continue
        launches.append(
            Launch(reason=reason, offerings=ctx.catalog.fallbacks(shape), cause="gang_spare")
        )
        unused.add(shape.slots)
        if budget is not None:
            budget.spend(shape.slots)
        if room is not None:
            room -= 1
    return launches


def _why_spare(gang: GangPlacement) -> str | None:
    """Why the gang gets a spare, or None."""
    if gang.new >= GANG_SPARE_FROM:
        return (
            f"spare for {gang.task} ({gang.slots} slots on {gang.new} new machines): it "
            "starts on the first of them to register"
        )
    if gang.part_registered:
        return (
            f"spare for {gang.task}: some of its agents registered while the rest boot, "
            "and the master may give those to smaller tasks meanwhile"
        )
    return None
