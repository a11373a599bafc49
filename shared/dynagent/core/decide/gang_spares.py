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
more machines as have registered. Without spares, dynagent's p95 wait on cluster04 was
a second longer than Determined's on half the boot seeds (``make bench``).
"""

from __future__ import annotations

from collections import Counter

from dynagent.core.decide.context import Context
from dynagent.core.offerings import Shape
from dynagent.core.packing import Demand
from dynagent.core.plan import Launch
from dynagent.core.snapshot import PendingTask

# New machines for one task from which it gets a spare at launch. Below it, a spare cost
# more than it saved on the shared traces (cluster07's gangs of two machines).
GANG_SPARE_FROM = 3


def gang_spare_launches(
    ctx: Context, pending: tuple[PendingTask, ...], demand: Demand, live: int
) -> list[Launch]:
    """A spare machine for each large gang launched and each gang part registered, where
    no whole machine of its size is left unused; ``live`` counts the machines the pool
    has and this plan launches already."""
    if not ctx.provider.gang_spares:
        return []
    wanted = _large_gangs_launched(pending, demand)
    wanted += _gangs_part_registered(ctx, demand)
    if not wanted:
        return []
    unused = {size for size, free in demand.free_after if free == size > 0}
    cap = ctx.provider.machine_cap
    room = None if cap is None else cap - live
    budget = demand.budget
    launches: list[Launch] = []
    for shape, reason in wanted:
        if room is not None and room <= 0:
            break
        if shape.slots in unused or (budget is not None and budget.count(shape.slots) <= 0):
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


def _large_gangs_launched(
    pending: tuple[PendingTask, ...], demand: Demand
) -> list[tuple[Shape, str]]:
    """The shape and reason of a spare for each gang with GANG_SPARE_FROM new machines."""
    slots = {task.task: task.slots for task in pending}
    new: Counter[str] = Counter()
    shapes: dict[str, Shape] = {}
    for machine in demand.new_machines:
        tasks = machine.tasks
        # A gang's machine holds that one task, which is larger than the machine.
        if len(tasks) == 1 and slots.get(tasks[0], 0) > machine.shape.slots:
            new[tasks[0]] += 1
            shapes[tasks[0]] = machine.shape
    return [
        (
            shapes[task],
            f"spare for {task} ({slots[task]} slots on {count} new machines): it starts on "
            "the first of them to register",
        )
        for task, count in new.items()
        if count >= GANG_SPARE_FROM
    ]


def _gangs_part_registered(ctx: Context, demand: Demand) -> list[tuple[Shape, str]]:
    """The shape and reason of a spare for each gang waiting on both registered agents and
    machines still booting."""
    cheapest: dict[int, Shape] = {}
    for shape in ctx.shapes:
        held = cheapest.get(shape.slots)
        if held is None or shape.price < held.price:
            cheapest[shape.slots] = shape
    return [
        (
            cheapest[size],
            f"spare for {task}: some of its agents registered while the rest boot, and "
            "the master may give those to smaller tasks meanwhile",
        )
        for task, size in demand.gangs_part_registered
        if size in cheapest
    ]
