"""Demand: where the master will put each pending task, and which new machines it needs.

The prediction follows Determined's scheduler (``master/internal/rm/agentrm``), which
the master runs on every tick:

- **Priority levels** (``priority.go`` ``prioritySchedulerWithFilter``): lower numbers
  first; within a level, in queue order, every task that fits is placed. Once a task of
  a level waits, nothing of a lower level starts (preemption off, Determined's default).
  So a lower level is planned for only while every task above it gets a machine in this
  plan; behind a task that waits (at the cap, say), it is held back and counts on no
  machine, so the idle agents it might have taken are reaped as any other.
- **On the agents registered now** (``dynagent.core.fitting``): a shared fit by the pool's
  fitting policy, else whole unused agents of one size that divides the task.
- **On machines still booting and new ones**: tasks that fit one machine go
  first-fit-decreasing, largest first, into the free slots of machines not registered
  yet (instances and open spot requests), then onto new machines of the shapes that hold
  them for the least money. A task over one machine takes machines of one size that
  divides it, the largest size first (``findDedicatedAgentFits``), drawn from booting
  machines, then new ones, then unused agents; commands, notebooks, shells, TensorBoards
  and checkpoint GC never span machines. A gang already waiting on booting machines
  counts unused agents before new ones: with staggered boots its own first machines
  register while the rest boot, and a new machine for each would idle once it starts.

New machines stay within the pool's caps: ``max_instances`` machines for a pool of one
shape; with ``offerings``, ``max_slots`` slots and, where the admin sets it,
``max_machines`` machines (``Budget``). Near a cap in machines the shape holds the most:
the cheapest per slot is chosen only while the room left holds what waits on it. A gang
the caps leave too little room for gets what room there is, machines of its size, and
the rest as the room frees, as Determined's provisioner launches up to the cap for it.

First-fit-decreasing is the same as filling one machine at a time with the largest
tasks that still fit it, which is how it is done here: tasks are counted by size, so
filling a machine costs one step per distinct size, however many tasks there are.
"""

from __future__ import annotations

import functools
import itertools
import operator
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from dynagent.core.fitting import DEFAULT_FITTING_POLICY, AgentFit, FittingPolicy
from dynagent.core.offerings import Shape
from dynagent.core.plan import Unschedulable
from dynagent.core.snapshot import PendingTask

_SLOTS = operator.attrgetter("slots")
_PRIORITY = operator.attrgetter("priority")
_TASK = operator.attrgetter("task")
# How a reason for waiting demand starts when only a cap of the pool holds it back.
AT_MAX = "pool is at max_instances"
AT_MAX_SLOTS = "pool is at max_slots"
AT_MAX_MACHINES = "pool is at max_machines"
AT_CAP = (AT_MAX, AT_MAX_SLOTS, AT_MAX_MACHINES)
# What a count of machines comes to when nothing caps it.
NO_CAP = 1 << 62
# scheduler_config.go: DefaultSchedulingPriority, the level of a task without one.
DEFAULT_PRIORITY = 42


@dataclass(slots=True)
class NewMachine:
    shape: Shape
    tasks: list[str] = field(default_factory=list)
    # Slots its tasks take.
    used: int = 0


@dataclass(frozen=True, slots=True)
class GangPlacement:
    """A task over one machine, placed: on ``new`` new machines of ``shape`` (of ``size``
    slots) besides the others; ``part_registered`` when it waits on registered agents
    and on machines still booting, whose agents the master may give to smaller tasks
    while the rest boot."""

    task: str
    slots: int
    size: int
    shape: Shape | None
    new: int
    part_registered: bool


@dataclass
class Demand:
    # One entry per machine to launch, with the tasks it is for.
    new_machines: list[NewMachine] = field(default_factory=list)
    unschedulable: list[Unschedulable] = field(default_factory=list)
    # Tasks left without a machine for now, and why.
    waiting: list[tuple[PendingTask, str]] = field(default_factory=list)
    # Free slots left on existing machines after placing, by machine slots.
    free_after: list[tuple[int, int]] = field(default_factory=list)
    # What the caps still allow after these new machines (None: nothing was packed).
    budget: Budget | None = None
    # The tasks placed on each machine still booting, by its index in ``existing``.
    placed_on: dict[int, list[str]] = field(default_factory=dict)
    # Where each task over one machine goes (for ``gang_spares``).
    gangs: list[GangPlacement] = field(default_factory=list)

    @property
    def new_instances(self) -> list[list[str]]:
        return [machine.tasks for machine in self.new_machines]


@dataclass(frozen=True, slots=True)
class Existing:
    """A machine of the pool that pending tasks may go to: its slots and free slots."""

    slots: int
    free: int
    # Launched and not registered yet (or a spot request): no task can take it before
    # it registers, so it is as good as a new machine for a task over several machines.
    arriving: bool = True


class _Queue:
    """The tasks still to place, by size, largest first, each size in arrival order.

    Kept as counts by size, with the sizes still waiting and their slots in total at
    hand: a pass over 10,000 tasks opens thousands of machines, each asking these.
    """

    def __init__(self, tasks: Sequence[PendingTask]) -> None:
        self.tasks: dict[int, list[PendingTask]] = {}
        self.names: dict[int, list[str]] = {}
        self.next: dict[int, int] = {}
        for slots, group in itertools.groupby(sorted(tasks, key=_SLOTS, reverse=True), _SLOTS):
            self.tasks[slots] = list(group)
            self.names[slots] = list(map(_TASK, self.tasks[slots]))
            self.next[slots] = 0
        # Sizes with tasks left, largest first.
        self.waiting: list[int] = list(self.names)
        self.total = sum(slots * len(names) for slots, names in self.names.items())

    def sizes(self) -> list[int]:
        return self.waiting

    def count(self, slots: int) -> int:
        return len(self.names[slots]) - self.next[slots]

    def counts(self) -> tuple[tuple[int, int], ...]:
        return tuple((s, self.count(s)) for s in self.waiting)

    def take(self, slots: int, count: int) -> list[str]:
        start = self.next[slots]
        self.next[slots] = start + count
        self.total -= slots * count
        if self.next[slots] >= len(self.names[slots]):
            self.waiting.remove(slots)
        return self.names[slots][start : start + count]

    def fill(self, free: int) -> tuple[list[str], int]:
        """The largest tasks that fit in ``free`` slots, largest first; the slots left."""
        placed: list[str] = []
        for slots in list(self.waiting):
            if slots > free:
                continue
            fit = self.count(slots) if slots == 0 else min(self.count(slots), free // slots)
            if fit:
                placed += self.take(slots, fit)
                free -= slots * fit
        return placed, free

    def drop(self, slots: int) -> list[PendingTask]:
        """The tasks of ``slots`` still waiting, taken out of the queue."""
        tasks = self.tasks[slots][self.next[slots] :]
        self.take(slots, len(tasks))
        return tasks

    def left(self) -> list[PendingTask]:
        return [task for slots in self.waiting for task in self.tasks[slots][self.next[slots] :]]


@dataclass
class Budget:
    """New machines still allowed under the pool's caps: ``machines`` more (None: no cap
    in machines, a pool with offerings by default), and ``slots`` more in all (None: no
    cap in slots, a pool of one shape).

    Below the cap in slots, any shape is allowed: the cheapest cover is bought. Once a
    task waits at that cap, the room left is held for the shape that holds it: no machine
    smaller is launched for the tasks after it in the pass, so the slots that idle
    machines free as they are reaped go to that shape, not back to small machines one
    freed slot at a time. Machines of that size or larger still are: a gang waiting for
    room gets its machines one by one (``_Placement._gang_at_cap``), and smaller tasks
    take the agents it cannot use yet, as they would under Determined's provisioner.
    (Holding all of the room instead left a fifth of cluster02's 160-slot cap unused
    behind a 64-slot gang: a p95 wait of 55 h against Determined's 17 h.)

    With both caps (``offerings.max_machines`` set), the cap in machines must never bind
    first: a machine smaller than the ``largest`` is allowed only while the machines left
    could still, at the largest size, reach the cap in slots. Otherwise cheap small
    machines fill it and large tasks wait with most of the slots unused (cluster05 at 10
    machines of g5 1/4/8: a p95 wait of 209 h against Determined's 4 h).
    """

    machines: int | None
    slots: int | None
    max_machines: int | None
    max_slots: int | None
    largest: int
    # The task the room is held for, once one waits at the cap in slots, and the size of
    # the machines that hold it: none smaller is launched while it waits.
    held_for: str | None = None
    held_size: int = 0

    def count(self, size: int) -> int:
        """How many more machines of ``size`` slots the caps allow."""
        machines = self.machines
        if self.slots is None or size <= 0:
            return max(0, machines) if machines is not None else NO_CAP
        if self.held_for is not None and size < self.held_size:
            return 0
        allowed = self.slots // size
        if machines is not None:
            allowed = min(allowed, machines)
            if size < self.largest:
                slack = machines * self.largest - self.slots
                allowed = min(allowed, slack // (self.largest - size))
        return max(0, allowed)

    def spend(self, size: int, count: int = 1) -> None:
        if self.machines is not None:
            self.machines -= count
        if self.slots is not None:
            self.slots -= size * count

    def hold(self, task: str, slots: int, size: int) -> None:
        """A task of ``slots`` waits at the cap in slots for machines of ``size``: hold
        the room left for machines of that size."""
        if self.held_for is None and self.slots is not None and self.slots < slots:
            self.held_for = f"{task} ({slots} slots)"
            self.held_size = size

    def why(self, size: int) -> str:
        """Why no machine of ``size`` slots may be launched now."""
        machines = self.machines
        if self.slots is None:
            return f"{AT_MAX} ({self.max_machines})"
        if machines is not None and machines <= 0:
            return f"{AT_MAX_MACHINES} ({self.max_machines})"
        if self.held_for is not None and size < self.held_size and self.slots >= size:
            return (
                f"{AT_MAX_SLOTS} ({self.max_slots}): the room left is held for machines of "
                f"{self.held_size} slots, for {self.held_for}, which waits for it"
            )
        if machines is not None and size < self.largest and self.slots >= size:
            return (
                f"{AT_MAX_MACHINES} ({self.max_machines}) for machines of {size} slots: the "
                f"machines left must be able to reach max_slots ({self.max_slots})"
            )
        return f"{AT_MAX_SLOTS} ({self.max_slots})"


def pack(
    pending: tuple[PendingTask, ...],
    shapes: Sequence[Shape],
    existing: Sequence[Existing],
    room: int | None,
    max_machines: int | None,
    largest_slots: int | None = None,
    *,
    slot_room: int | None = None,
    max_slots: int | None = None,
    sizes: Sequence[int] = (),
    fitting_policy: FittingPolicy | None = None,
) -> Demand:
    """Place ``pending`` as the master will: on registered agents, on ``existing``
    machines still booting, then on at most ``room`` new ones (None: no cap in machines)
    of at most ``slot_room`` slots in all (None: no cap in slots); ``max_machines`` and
    ``max_slots`` are the pool's caps, which no task may need more than.

    ``shapes`` are what may be launched now; ``sizes`` the slots of every machine the
    pool has at all (default: the shapes'), which decide whether a task can ever run;
    ``largest_slots`` is the largest of them (default: the largest shape).
    """
    demand = Demand()
    largest = largest_slots if largest_slots is not None else max(map(_SLOTS, shapes), default=0)
    if largest <= 0:
        demand.unschedulable = [
            Unschedulable(t.task, t.slots, "instances of this pool have no slots") for t in pending
        ]
        return demand
    free = [machine.free for machine in existing]
    registered = (i for i, machine in enumerate(existing) if not machine.arriving)
    policy = fitting_policy or DEFAULT_FITTING_POLICY
    place = _Placement(
        demand,
        shapes,
        existing,
        free,
        AgentFit([m.slots for m in existing], free, registered, policy),
        Budget(room, slot_room, max_machines, max_slots, largest),
        largest,
        sorted({*sizes, *map(_SLOTS, shapes), largest} - {0}, reverse=True),
    )
    blocked: str | None = None
    for level, tasks in _levels(pending):
        if blocked is not None:
            demand.waiting += [(task, blocked) for task in tasks]
            continue
        later = _wait_for_room(place.fit, tasks)
        if later:
            blocker = place.later(later)
            if blocker is not None:
                blocked = (
                    f"waits behind {blocker} (priority {level}): the master starts nothing "
                    "of a lower priority while it waits"
                )
    demand.free_after = [(m.slots, f) for m, f in zip(existing, free, strict=True)]
    demand.budget = place.budget
    return demand


def _wait_for_room(fit: AgentFit, tasks: Sequence[PendingTask]) -> list[PendingTask]:
    """Place ``tasks`` in turn on the registered agents; those that must wait, in order.

    Once the agents are full, the rest wait without being asked about: a pass of 10,000
    tasks often fills the idle agents with its first thousands."""
    later: list[PendingTask] = []
    if fit.full:
        return list(tasks)
    place = fit.place
    for index, task in enumerate(tasks):
        if place(task.slots, task.single_agent) is None:
            later.append(task)
        elif fit.full:
            later.extend(itertools.islice(tasks, index + 1, None))
            return later
    return later


def _levels(pending: Sequence[PendingTask]) -> Iterator[tuple[int, Sequence[PendingTask]]]:
    """The tasks by priority level, the master's first (the lowest number), each in
    queue order; a task without a priority is at Determined's default level."""
    priorities = set(map(_PRIORITY, pending))
    if len(priorities) == 1:  # the common case, and thousands of tasks: one level, as is
        (priority,) = priorities
        return iter([(DEFAULT_PRIORITY if priority is None else priority, pending)])
    levels: dict[int, list[PendingTask]] = {}
    for task in pending:
        priority = DEFAULT_PRIORITY if task.priority is None else task.priority
        levels.setdefault(priority, []).append(task)
    return iter(sorted(levels.items()))


@dataclass
class _Placement:
    """One packing's machines, and where the tasks that must wait for a boot go."""

    demand: Demand
    shapes: Sequence[Shape]
    existing: Sequence[Existing]
    free: list[int]
    fit: AgentFit
    budget: Budget
    largest: int
    # Every machine size of the pool, largest first.
    sizes: list[int]
    # Booting machines not yet given to anything, by size (filtered as they fill).
    empty: dict[int, list[int]] = field(init=False)
    cheapest: dict[int, Shape] = field(init=False)
    # New machines of a gang waiting at a cap, which smaller tasks may take meanwhile.
    shared: list[NewMachine] = field(init=False, default_factory=list)

    def __post_init__(self) -> None:
        self.empty = {}
        for index, machine in enumerate(self.existing):
            if machine.arriving and machine.free == machine.slots:
                self.empty.setdefault(machine.slots, []).append(index)
        self.cheapest = {}
        for shape in sorted(self.shapes, key=lambda s: s.price, reverse=True):
            self.cheapest[shape.slots] = shape

    def later(self, tasks: list[PendingTask]) -> str | None:
        """Machines still booting and new ones for tasks no registered agent takes now;
        the first of them that must wait for all that (or can never run), if any."""
        demand = self.demand
        held = len(demand.waiting), len(demand.unschedulable)
        small, gangs = self._split(tasks)
        for task in sorted(gangs, key=_SLOTS, reverse=True):
            self._gang(task)
        queue = _Queue(small)
        free = self.free
        placed_on = demand.placed_on
        for index, machine in enumerate(self.existing):
            if machine.arriving and free[index] and queue.sizes():
                placed, free[index] = queue.fill(free[index])
                placed_on.setdefault(index, []).extend(placed)
        for new in self.shared:
            if queue.sizes():
                placed, left = queue.fill(new.shape.slots - new.used)
                new.tasks += placed
                new.used = new.shape.slots - left
        _open_machines(demand, queue, self.shapes, self.budget)
        stuck = {t.task for t, _ in demand.waiting[held[0] :]}
        stuck.update(u.task for u in demand.unschedulable[held[1] :])
        if not stuck:
            return None
        return next((task.task for task in tasks if task.task in stuck), None)

    def _split(self, tasks: list[PendingTask]) -> tuple[list[PendingTask], list[PendingTask]]:
        """The tasks that fit one machine, and those over one that may span machines; a
        task over one that may not is unschedulable."""
        if max(map(_SLOTS, tasks), default=0) <= self.largest:  # the common case
            return tasks, []
        small: list[PendingTask] = []
        gangs: list[PendingTask] = []
        for task in tasks:
            if task.slots <= self.largest:
                small.append(task)
            elif task.single_agent:
                self.demand.unschedulable.append(
                    Unschedulable(
                        task.task,
                        task.slots,
                        "runs on one agent (a command, notebook, shell, TensorBoard or "
                        f"checkpoint GC), and the largest machine has {self.largest} slots",
                    )
                )
            else:
                gangs.append(task)
        return small, gangs

    def _gang(self, task: PendingTask) -> None:
        """A task over one machine: machines of one size that divides it, the largest
        size first, from those booting, then new ones, then unused agents; unused agents
        before new ones once it waits on booting machines anyway.

        Without booting machines, a new one is surer than an idle agent: while the gang
        waits a boot, the master may give that agent to a smaller task (then the gang
        waits a second boot). With them, the agent is most likely one of the gang's own
        that registered first; if a small task takes it, the next pass launches one."""
        demand, budget = self.demand, self.budget
        problem = _gang_problem(task, self.sizes, budget.max_machines, budget.max_slots)
        if problem is not None:
            demand.unschedulable.append(Unschedulable(task.task, task.slots, problem))
            return
        limit = budget.max_machines
        dividing = [
            s
            for s in self.sizes
            if task.slots % s == 0 and (limit is None or task.slots // s <= limit)
        ]
        for size in dividing:
            need = task.slots // size
            booting = self._booting(size, need)
            shape = self.cheapest.get(size)
            if booting:
                idle = self.fit.idle(size)[: need - len(booting)]
                short = need - len(booting) - len(idle)
                new = min(short, budget.count(size)) if shape is not None else 0
            else:
                new = min(need, budget.count(size)) if shape is not None else 0
                idle = self.fit.idle(size)[: need - new]
            if len(booting) + new + len(idle) == need:
                break
        else:
            launchable = [s for s in dividing if s in self.cheapest]
            why = (
                budget.why(launchable[-1])
                if launchable
                else f"no machine of a size dividing its {task.slots} slots has capacity now"
            )
            if launchable:
                budget.hold(task.task, task.slots, launchable[0])
                why += self._gang_at_cap(task, launchable[0])
            demand.waiting.append((task, why))
            return
        demand.gangs.append(
            GangPlacement(task.task, task.slots, size, shape, new, bool(booting and idle))
        )
        for index in booting:
            self.free[index] = 0
            demand.placed_on.setdefault(index, []).append(task.task)
        for index in idle:
            self.fit.take_whole(index)
        if shape is not None and new:
            budget.spend(size, new)
            demand.new_machines += [NewMachine(shape, [task.task], size) for _ in range(new)]

    def _booting(self, size: int, need: int) -> list[int]:
        """Up to ``need`` machines of ``size`` still booting that nothing was put on."""
        return [i for i in self.empty.get(size, ()) if self.free[i] == size][:need]

    def _gang_at_cap(self, task: PendingTask, size: int) -> str:
        """A gang the caps leave too little room for: its machines of ``size`` booting,
        idle or new, as many as there are, so each slot that frees goes to its shape;
        the words its reason ends with.

        Determined's provisioner launches up to the cap for a waiting gang (``scaling.go``
        ``calculateDesiredNewAgentNum``), and the master gives such agents to smaller
        tasks until the gang fits (``findDedicatedAgentFits`` reserves none). Without
        them, on a pool of one 8-GPU type capped at 10 to 20 machines, dynagent's p95
        wait was about 200 s longer than Determined's on cluster01, 02 and 06; with them
        it is the same. The idle agents counted here are kept from the reap: reaping one
        would only launch its like for the gang again.
        """
        demand, budget = self.demand, self.budget
        need = task.slots // size
        booting = self._booting(size, need)
        idle = self.fit.idle(size)[: need - len(booting)]
        new = max(0, min(need - len(booting) - len(idle), budget.count(size)))
        # Its booting and new machines stay open to the pass's smaller tasks: the master
        # starts them there while the gang cannot start.
        for index in booting:
            demand.placed_on.setdefault(index, []).append(task.task)
        if booting:
            self.empty[size] = [i for i in self.empty[size] if i not in booting]
        for index in idle:
            self.fit.take_whole(index)
        if new:
            budget.spend(size, new)
            shape = self.cheapest[size]
            machines = [NewMachine(shape, [task.task]) for _ in range(new)]
            demand.new_machines += machines
            self.shared += machines
        have = len(booting) + len(idle) + new
        if not have:
            return ""
        return f"; {have} of its {need} machines of {size} slots are there or launched"


def _open_machines(demand: Demand, queue: _Queue, shapes: Sequence[Shape], budget: Budget) -> None:
    """New machines for what is left, each of the shape that serves it cheapest."""
    stranded: list[PendingTask] = []
    while queue.sizes():
        top = queue.sizes()[0]
        fitting = [s for s in shapes if s.slots >= top and budget.count(s.slots)]
        if not fitting:
            # Smaller tasks may still have a machine, unless the cap in slots holds them
            # back for this one.
            holding = [s.slots for s in shapes if s.slots >= top]
            dropped = queue.drop(top)
            if holding and dropped:
                budget.hold(dropped[0].task, min(holding), min(holding))
            stranded += dropped
            continue
        room = NO_CAP if budget.machines is None else budget.machines
        bulk = _bulk(fitting, queue.total, room)
        if _open_whole(demand, queue, bulk, budget):
            continue
        allowed = tuple(s for s in shapes if budget.count(s.slots))
        shape = _next_shape(queue, fitting, allowed, room, bulk)
        tasks, free = queue.fill(shape.slots)
        demand.new_machines.append(NewMachine(shape, tasks, shape.slots - free))
        budget.spend(shape.slots)
    for task in stranded + queue.left():
        sizes = [s.slots for s in shapes if s.slots >= task.slots]
        if not sizes:
            reason = f"no machine of {task.slots} or more slots has capacity now"
        else:
            reason = budget.why(min(sizes))
        demand.waiting.append((task, reason))


def _bulk(fitting: list[Shape], total: int, room: int) -> Shape:
    """The shape cheapest per slot (the smaller on a tie: each machine goes when its own
    tasks end, where a larger one bills its free slots until the last ends) among those
    whose machines, within the ``room`` left, hold the ``total`` slots waiting; with none
    that can, the largest: near a cap in machines, small machines would leave tasks
    waiting that larger ones hold."""
    holding = [s for s in fitting if s.slots * room >= total]
    if not holding:
        return max(fitting, key=lambda s: (s.slots, -s.price))
    return min(holding, key=lambda s: (s.price_per_slot, s.slots))


def _open_whole(demand: Demand, queue: _Queue, bulk: Shape, budget: Budget) -> bool:
    """Open at once every machine that tasks of the largest size fill exactly, as filling
    them one by one would: a pass of thousands of equal tasks is one step, not thousands.
    Whether it opened any."""
    top = queue.sizes()[0]
    if queue.total < bulk.slots or top <= 0 or bulk.slots % top:
        return False
    per = bulk.slots // top
    count = min(queue.count(top) // per, budget.count(bulk.slots))
    if count <= 0:
        return False
    budget.spend(bulk.slots, count)
    names = queue.take(top, count * per)
    demand.new_machines += [
        NewMachine(bulk, names[k * per : (k + 1) * per], bulk.slots) for k in range(count)
    ]
    return True


def _next_shape(
    queue: _Queue, fitting: list[Shape], shapes: tuple[Shape, ...], room: int, bulk: Shape
) -> Shape:
    """The shape of the next machine to open, among those ``fitting`` the largest task.

    While the tasks left fill whole machines, the shape cheapest per slot (the smaller
    on a tie); for the last, partly filled ones, the cheapest way to hold what is left
    (on a tie, in more and smaller machines), found by trying each shape in turn (what
    is left is less than one machine, so the search is small). With too little room for
    that, the largest shape. The cover may use every shape: after the largest tasks, the
    machines for the small ones left may be smaller than the first (2 + 2 + 1 slots: a
    4-slot and a 1-slot machine), and it checks at each step that the machine holds its
    largest task.
    """
    if queue.total >= bulk.slots:
        return bulk
    _, machines, first = _cheapest_cover(queue.counts(), shapes)
    if first is None or machines > room:
        return max(fitting, key=lambda s: (s.slots, -s.price))
    return first


@functools.lru_cache(maxsize=4096)
def _cheapest_cover(
    counts: tuple[tuple[int, int], ...], shapes: tuple[Shape, ...]
) -> tuple[float, int, Shape | None]:
    """(price per hour, machines, first machine's shape) of the cheapest set of machines
    that holds tasks of these (size, count)s, filling each first-fit-decreasing; of sets
    that cost alike, the one of more machines: smaller ones, each gone with its tasks."""
    if not counts:
        return 0.0, 0, None
    top = counts[0][0]
    best: tuple[float, int, Shape | None] = (float("inf"), 0, None)
    for shape in shapes:
        if shape.slots < top:
            continue
        rest = _after_fill(counts, shape.slots)
        cost, machines, _ = _cheapest_cover(rest, shapes)
        candidate = (round(shape.price + cost, 6), machines + 1, shape)
        if candidate[0] < best[0] or (candidate[0] == best[0] and candidate[1] > best[1]):
            best = candidate
    return best


def _after_fill(counts: tuple[tuple[int, int], ...], free: int) -> tuple[tuple[int, int], ...]:
    left = []
    for slots, count in counts:
        fit = count if slots == 0 else min(count, free // slots) if slots <= free else 0
        free -= slots * fit
        if count > fit:
            left.append((slots, count - fit))
    return tuple(left)


def _gang_problem(
    task: PendingTask, sizes: list[int], max_machines: int | None, max_slots: int | None
) -> str | None:
    """Why a task over one machine can never run here, or None: more slots than the cap
    (Determined admits no more, resource_pool.go ``CapacityCheck``), or no machine size
    divides it into at most ``max_machines`` machines (``findDedicatedAgentFits``)."""
    if max_slots is not None and task.slots > max_slots:
        return f"needs {task.slots} slots, more than the pool's cap, max_slots ({max_slots})"
    fits = [
        s
        for s in sizes
        if task.slots % s == 0 and (max_machines is None or task.slots // s <= max_machines)
    ]
    if fits:
        return None
    cap = "max_instances" if max_slots is None else "max_machines"
    if len(sizes) == 1:
        slots = sizes[0]
        if task.slots % slots:
            return (
                f"needs {task.slots} slots, which is not a multiple of the {slots} slots "
                "of one instance"
            )
        need = task.slots // slots
        return f"needs {need} instances of {slots} slots, more than {cap} ({max_machines})"
    listed = ", ".join(map(str, sizes))
    if max_machines is None:
        return f"needs {task.slots} slots: no machine size of this pool ({listed} slots) divides it"
    return (
        f"needs {task.slots} slots: no machine size of this pool ({listed} slots) divides it "
        f"into at most {cap} ({max_machines}) machines"
    )
