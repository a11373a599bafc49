"""Demand: which new machines the pending tasks need, and of which shape.

Tasks go first into the free slots of machines the pool already has (instances that
have not registered yet, open spot requests, agents with free slots), then onto new
machines chosen to cost least per hour. A task larger than the largest shape takes
whole, empty machines of that shape when its slots are an exact multiple, as Determined
schedules it.

Placement is first-fit-decreasing: largest tasks first, each into the first machine with
room. That is the same as filling one machine at a time with the largest tasks that
still fit it, which is how it is done here: tasks are counted by size, so filling a
machine costs one step per distinct size, however many tasks there are.
"""

from __future__ import annotations

import functools
import itertools
import operator
from collections.abc import Sequence
from dataclasses import dataclass, field

from dynagent.offerings import Shape
from dynagent.plan import Unschedulable
from dynagent.snapshot import PendingTask

_SLOTS = operator.attrgetter("slots")
# How a reason for waiting demand starts when only max_instances holds it back.
AT_MAX = "pool is at max_instances"


@dataclass
class NewMachine:
    shape: Shape
    tasks: list[str] = field(default_factory=list)
    # Slots its tasks take.
    used: int = 0


@dataclass
class Demand:
    # One entry per machine to launch, with the tasks it is for.
    new_machines: list[NewMachine] = field(default_factory=list)
    unschedulable: list[Unschedulable] = field(default_factory=list)
    # Tasks left without a machine for now, and why.
    waiting: list[tuple[PendingTask, str]] = field(default_factory=list)
    # Free slots left on existing machines after placing, by machine slots.
    free_after: list[tuple[int, int]] = field(default_factory=list)

    @property
    def new_instances(self) -> list[list[str]]:
        return [machine.tasks for machine in self.new_machines]


@dataclass(frozen=True)
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
        self.names: dict[int, list[str]] = {}
        self.next: dict[int, int] = {}
        for slots, group in itertools.groupby(sorted(tasks, key=_SLOTS, reverse=True), _SLOTS):
            self.names[slots] = [t.task for t in group]
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

    def left(self) -> list[PendingTask]:
        return [
            PendingTask(task=name, slots=slots)
            for slots in self.waiting
            for name in self.names[slots][self.next[slots] :]
        ]


def pack(
    pending: tuple[PendingTask, ...],
    shapes: Sequence[Shape],
    existing: Sequence[Existing],
    room: int,
    max_instances: int,
    largest_slots: int | None = None,
    open_new: bool = True,
) -> Demand:
    """Place ``pending`` on ``existing`` machines, then on at most ``room`` new ones.

    ``shapes`` are what may be launched now; ``largest_slots`` is the largest machine the
    pool has at all (default: the largest shape), which decides whether a task can ever run.
    With ``open_new`` false, tasks that fit one machine are placed on existing ones only
    (for a look at which existing machines pending tasks would take).
    """
    demand = Demand()
    largest = largest_slots if largest_slots is not None else max(map(_SLOTS, shapes), default=0)
    if largest <= 0:
        demand.unschedulable = [
            Unschedulable(t.task, t.slots, "instances of this pool have no slots") for t in pending
        ]
        return demand
    small: list[PendingTask] = []
    gangs: list[PendingTask] = []
    for task in pending:
        (small if task.slots <= largest else gangs).append(task)
    free = [machine.free for machine in existing]
    opened = _place_gangs(demand, gangs, shapes, existing, free, largest, room, max_instances)
    queue = _Queue(small)
    for index, slots in enumerate(free):
        if slots and queue.sizes():
            _, free[index] = queue.fill(slots)
    if open_new:
        _open_machines(demand, queue, shapes, room - opened, max_instances)
    demand.free_after = [(m.slots, f) for m, f in zip(existing, free, strict=True)]
    return demand


def _place_gangs(
    demand: Demand,
    gangs: list[PendingTask],
    shapes: Sequence[Shape],
    existing: Sequence[Existing],
    free: list[int],
    largest: int,
    room: int,
    max_instances: int,
) -> int:
    """Tasks over one machine: all their whole machines of the largest shape, or none.
    Returns how many new machines they took."""
    opened = 0
    whole = [s for s in shapes if s.slots == largest]
    shape = min(whole, key=lambda s: s.price) if whole else None
    empty = [i for i, m in enumerate(existing) if m.slots == largest and m.free == largest]
    # Machines still booting first, then new ones, and registered idle agents last: the
    # master places smaller tasks on an idle agent while a task over several machines
    # waits for the rest of them, so counting on idle agents can cost a second boot.
    arriving = [i for i in empty if existing[i].arriving]
    idle = [i for i in empty if not existing[i].arriving]
    for task in sorted(gangs, key=_SLOTS, reverse=True):
        if problem := _gang_problem(task, largest, max_instances):
            demand.unschedulable.append(Unschedulable(task.task, task.slots, problem))
            continue
        need = task.slots // largest
        booting = arriving[:need]
        new = min(need - len(booting), room - opened) if shape is not None else 0
        agents = idle[: need - len(booting) - new]
        if len(booting) + new + len(agents) < need:
            why = (
                f"no {largest}-slot machine has capacity now"
                if shape is None
                else f"{AT_MAX} ({max_instances})"
            )
            demand.waiting.append((task, why))
            continue
        del arriving[: len(booting)], idle[: len(agents)]
        for index in booting + agents:
            free[index] = 0
        if shape is not None:
            demand.new_machines += [NewMachine(shape, [task.task], shape.slots) for _ in range(new)]
        opened += new
    return opened


def _open_machines(
    demand: Demand, queue: _Queue, shapes: Sequence[Shape], room: int, max_instances: int
) -> None:
    """New machines for what is left, each of the shape that serves it cheapest."""
    opened, before = 0, len(demand.new_machines)
    fits: dict[int, list[Shape]] = {}
    while queue.sizes():
        top = queue.sizes()[0]
        if top not in fits:
            fits[top] = [s for s in shapes if s.slots >= top]
        fitting = fits[top]
        if not fitting or opened >= room:
            break
        if _open_whole(demand, queue, _bulk(fitting), room - opened):
            opened = len(demand.new_machines) - before
            continue
        shape = _next_shape(queue, fitting, shapes, room - opened)
        tasks, free = queue.fill(shape.slots)
        demand.new_machines.append(NewMachine(shape, tasks, shape.slots - free))
        opened += 1
    for task in queue.left():
        if not any(s.slots >= task.slots for s in shapes):
            reason = f"no machine of {task.slots} or more slots has capacity now"
        else:
            reason = f"{AT_MAX} ({max_instances})"
        demand.waiting.append((task, reason))


def _bulk(fitting: list[Shape]) -> Shape:
    """The shape cheapest per slot; the larger on a tie (fewer machines)."""
    return min(fitting, key=lambda s: (s.price_per_slot, -s.slots))


def _open_whole(demand: Demand, queue: _Queue, bulk: Shape, room: int) -> bool:
    """Open at once every machine that tasks of the largest size fill exactly, as filling
    them one by one would: a pass of thousands of equal tasks is one step, not thousands.
    Whether it opened any."""
    top = queue.sizes()[0]
    if queue.total < bulk.slots or top <= 0 or bulk.slots % top:
        return False
    per = bulk.slots // top
    count = min(queue.count(top) // per, room)
    if count <= 0:
        return False
    names = queue.take(top, count * per)
    demand.new_machines += [
        NewMachine(bulk, names[k * per : (k + 1) * per], bulk.slots) for k in range(count)
    ]
    return True


def _next_shape(queue: _Queue, fitting: list[Shape], shapes: Sequence[Shape], room: int) -> Shape:
    """The shape of the next machine to open, among those ``fitting`` the largest task.

    While the tasks left fill whole machines, the shape cheapest per slot (the larger on
    a tie: fewer machines); for the last, partly filled ones, the cheapest way to hold
    what is left, found by trying each shape in turn (what is left is less than one
    machine, so the search is small). With too little room for that, the largest shape.
    The cover may use every shape: after the largest tasks, the machines for the small
    ones left may be smaller than the first (2 + 2 + 1 slots: a 4-slot and a 1-slot
    machine), and it checks at each step that the machine holds its largest task.
    """
    bulk = _bulk(fitting)
    if queue.total >= bulk.slots:
        return bulk
    _, machines, first = _cheapest_cover(queue.counts(), tuple(shapes))
    if first is None or machines > room:
        return max(fitting, key=lambda s: (s.slots, -s.price))
    return first


@functools.lru_cache(maxsize=4096)
def _cheapest_cover(
    counts: tuple[tuple[int, int], ...], shapes: tuple[Shape, ...]
) -> tuple[float, int, Shape | None]:
    """(price per hour, machines, first machine's shape) of the cheapest set of machines
    that holds tasks of these (size, count)s, filling each first-fit-decreasing."""
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
        if candidate[:2] < best[:2]:
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


def _gang_problem(task: PendingTask, slots: int, max_instances: int) -> str | None:
    """Why a task larger than one machine can never run here, or None if it can."""
    if task.slots % slots:
        return (
            f"needs {task.slots} slots, which is not a multiple of the {slots} slots "
            "of one instance"
        )
    need = task.slots // slots
    if need > max_instances:
        return f"needs {need} instances of {slots} slots, more than max_instances ({max_instances})"
    return None
