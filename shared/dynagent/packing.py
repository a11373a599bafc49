"""Demand: how many new instances the pending tasks need, packed first-fit-decreasing.

Tasks go first into the free slots of capacity already on its way (instances that have
not registered yet, open spot requests), then onto new instances. A task larger than
one instance takes whole, empty instances when its slots are an exact multiple.
"""

from __future__ import annotations

import itertools
import operator
from dataclasses import dataclass, field

from dynagent.plan import Unschedulable
from dynagent.snapshot import PendingTask

_SLOTS = operator.attrgetter("slots")


@dataclass
class Demand:
    # The tasks each new instance is for, one entry per instance to launch.
    new_instances: list[list[str]] = field(default_factory=list)
    unschedulable: list[Unschedulable] = field(default_factory=list)
    waiting: list[PendingTask] = field(default_factory=list)


class _Bins:
    """Instances being filled: the free slots and the tasks of each, arriving ones first."""

    def __init__(self, slots: int, existing: int) -> None:
        self.slots = slots
        self.free: list[int] = [slots] * existing
        self.existing = existing
        self.tasks: list[list[str]] = [[] for _ in range(existing)]

    def put(self, index: int, task: str, need: int) -> None:
        self.tasks[index].append(task)
        self.free[index] -= need

    def open(self) -> int:
        self.free.append(self.slots)
        self.tasks.append([])
        return len(self.free) - 1

    def new_instances(self) -> list[list[str]]:
        return self.tasks[self.existing :]


def pack(
    pending: tuple[PendingTask, ...],
    slots_per_instance: int,
    arriving: int,
    room: int,
    max_instances: int,
) -> Demand:
    """Pack ``pending`` into ``arriving`` empty instances, then into at most ``room`` new ones."""
    demand = Demand()
    if slots_per_instance <= 0:
        demand.unschedulable = [
            Unschedulable(t.task, t.slots, "instances of this pool have no slots") for t in pending
        ]
        return demand
    packer = _Packer(_Bins(slots_per_instance, arriving), room)
    # Largest first; a reverse sort keeps the order of equal tasks, as a stable sort does.
    ordered = sorted(pending, key=_SLOTS, reverse=True)
    for slots, group in itertools.groupby(ordered, key=_SLOTS):
        tasks = list(group)
        if slots <= slots_per_instance:
            demand.waiting += packer.place_all(slots, tasks)
            continue
        for task in tasks:
            if problem := _gang_problem(task, slots_per_instance, max_instances):
                demand.unschedulable.append(Unschedulable(task.task, task.slots, problem))
            elif not packer.place_gang(task):
                demand.waiting.append(task)
    demand.new_instances = packer.bins.new_instances()
    return demand


@dataclass
class _Packer:
    """First fit, decreasing: each task goes to the lowest-numbered instance it fits.

    Tasks come largest first, so tasks of one size come together, and first fit for a
    run of them is a single walk over the instances in order: the instance that took
    the last one takes the next too while it has room, then the next instance with
    room, then new ones. That is the same placement as looking up the first fit for
    each task, at the cost of one walk per distinct size.
    """

    bins: _Bins
    room: int
    opened: int = 0
    # Gangs come before any smaller task, and take arriving instances in order while
    # they are all still empty: the ones before this have been taken.
    next_empty: int = 0

    def place_all(self, slots: int, tasks: list[PendingTask]) -> list[PendingTask]:
        """Place tasks of ``slots`` each; return those left waiting for room."""
        free, placed = self.bins.free, 0
        for index in range(len(free)):
            if free[index] >= slots:
                placed = self._fill(index, slots, tasks, placed)
                if placed == len(tasks):
                    return []
        while placed < len(tasks) and self.opened < self.room:
            self.opened += 1
            placed = self._fill(self.bins.open(), slots, tasks, placed)
        return tasks[placed:]

    def _fill(self, index: int, slots: int, tasks: list[PendingTask], placed: int) -> int:
        """Put tasks[placed:] on instance ``index`` while it has room; the new count."""
        free, names = self.bins.free[index], self.bins.tasks[index]
        while placed < len(tasks) and free >= slots:
            names.append(tasks[placed].task)
            free -= slots
            placed += 1
        self.bins.free[index] = free
        return placed

    def place_gang(self, task: PendingTask) -> bool:
        """A task over one instance: all its whole instances, or none of them."""
        bins = self.bins
        need = task.slots // bins.slots
        empty = list(range(self.next_empty, min(bins.existing, self.next_empty + need)))
        missing = need - len(empty)
        if missing > self.room - self.opened:
            return False
        self.next_empty += len(empty)
        empty += [bins.open() for _ in range(missing)]
        self.opened += missing
        for index in empty:
            bins.put(index, task.task, bins.slots)
        return True


def _gang_problem(task: PendingTask, slots: int, max_instances: int) -> str | None:
    """Why a task larger than one instance can never run here, or None if it can."""
    if task.slots % slots:
        return (
            f"needs {task.slots} slots, which is not a multiple of the {slots} slots "
            "of one instance"
        )
    need = task.slots // slots
    if need > max_instances:
        return f"needs {need} instances of {slots} slots, more than max_instances ({max_instances})"
    return None
