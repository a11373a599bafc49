"""Demand: how many new instances the pending tasks need, packed first-fit-decreasing.

Tasks go first into the free slots of capacity already on its way (instances that have
not registered yet, open spot requests), then onto new instances. A task larger than
one instance takes whole, empty instances when its slots are an exact multiple.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field

from dynagent.plan import Unschedulable
from dynagent.snapshot import PendingTask


@dataclass
class Demand:
    # The tasks each new instance is for, one entry per instance to launch.
    new_instances: list[list[str]] = field(default_factory=list)
    unschedulable: list[Unschedulable] = field(default_factory=list)
    waiting: list[PendingTask] = field(default_factory=list)


class _Bins:
    """Instances being filled, found by free slots in O(slots log n) per task.

    ``by_free[f]`` is a heap of the indices of bins with ``f`` free slots, so the first
    (lowest-index) bin with at least ``s`` free is the least top among ``by_free[s:]``:
    first fit without scanning every bin.
    """

    def __init__(self, slots: int, existing: int) -> None:
        self.slots = slots
        self.free: list[int] = [slots] * existing
        self.existing = existing
        self.by_free: list[list[int]] = [[] for _ in range(slots + 1)]
        self.by_free[slots] = list(range(existing))
        self.tasks: list[list[str]] = [[] for _ in range(existing)]

    def _top(self, free: int) -> int | None:
        """The lowest bin with exactly ``free`` free slots; drops entries gone stale."""
        heap = self.by_free[free]
        while heap and self.free[heap[0]] != free:
            heapq.heappop(heap)
        return heap[0] if heap else None

    def first_fit(self, need: int) -> int | None:
        tops = (self._top(free) for free in range(need, self.slots + 1))
        return min((top for top in tops if top is not None), default=None)

    def take_empty(self, count: int) -> list[int]:
        """Up to ``count`` bins with nothing in them yet, lowest first."""
        taken: list[int] = []
        while len(taken) < count and self._top(self.slots) is not None:
            taken.append(heapq.heappop(self.by_free[self.slots]))
        return taken

    def give_back(self, indices: list[int]) -> None:
        for index in indices:
            heapq.heappush(self.by_free[self.free[index]], index)

    def put(self, index: int, task: str, need: int) -> None:
        self.tasks[index].append(task)
        if need:
            # The old heap entry goes stale and is dropped when it reaches the top.
            self.free[index] -= need
            heapq.heappush(self.by_free[self.free[index]], index)

    def open(self) -> int:
        index = len(self.free)
        self.free.append(self.slots)
        self.tasks.append([])
        heapq.heappush(self.by_free[self.slots], index)
        return index

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
    for task in sorted(pending, key=lambda t: -t.slots):
        if task.slots <= slots_per_instance:
            placed = packer.place(task)
        elif problem := _gang_problem(task, slots_per_instance, max_instances):
            demand.unschedulable.append(Unschedulable(task.task, task.slots, problem))
            continue
        else:
            placed = packer.place_gang(task)
        if not placed:
            demand.waiting.append(task)
    demand.new_instances = packer.bins.new_instances()
    return demand


@dataclass
class _Packer:
    bins: _Bins
    room: int
    opened: int = 0

    def place(self, task: PendingTask) -> bool:
        index = self.bins.first_fit(task.slots)
        if index is None:
            if self.opened >= self.room:
                return False
            index = self.bins.open()
            self.opened += 1
        self.bins.put(index, task.task, task.slots)
        return True

    def place_gang(self, task: PendingTask) -> bool:
        """A task over one instance: all its whole instances, or none of them."""
        slots = self.bins.slots
        need = task.slots // slots
        chosen = self.bins.take_empty(need)
        missing = need - len(chosen)
        if missing > self.room - self.opened:
            self.bins.give_back(chosen)
            return False
        chosen += [self.bins.open() for _ in range(missing)]
        self.opened += missing
        for index in chosen:
            self.bins.put(index, task.task, slots)
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
