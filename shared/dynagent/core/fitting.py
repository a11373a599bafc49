"""Where the master places a pending task on the agents it has now, as Determined does.

Determined's agent resource manager (``master/internal/rm/agentrm``) fits a task in
two steps (``fitting.go`` ``findFits``):

- **Shared fit** (``findSharedAgentFit``): one agent with at least the task's slots
  free. The fitting policy scores the candidates (``fitting_methods.go``): ``best``
  (``BestFit``, 1 / (1 + free slots)) takes the agent with the fewest free slots,
  ``worst`` (``WorstFit``, free / total slots) the emptiest by share.
- **Dedicated fit** (``findDedicatedAgentFits``), only for a task of more than one slot
  that may span agents (not a command, notebook, shell, TensorBoard or checkpoint GC:
  ``SingleAgent``): whole unused agents of one size that divides the task, every slot
  of each used, the largest size that has enough of them first.

Zero-slot tasks (commands, TensorBoards, checkpoint GC) take no slot but an auxiliary
container: an agent runs at most the pool's ``max_aux_containers_per_agent`` of them
(``fitting_methods.go`` ``maxZeroSlotContainersSatisfied``, ``agent_state.go``
``numEmptyZeroSlots``), busy or not; ``zero_slot_room`` and ``agents_for_zero_slot``
count them for the caller.

Simpler than Determined's, on purpose: ties between equally scored agents go to the one
listed first, where Determined orders them by an md5 distance between the task's and
the agent's ids (which only chooses among agents the prediction counts alike);
``allow_heterogeneous_fits`` (off by default) is not modelled.

The simulator's master applies the same rules through its own code
(``simulate.fitting``) on purpose: the simulator is what checks that the machines
packing launches are the ones the master places work on, which it could not do if the
two shared one implementation.

Agents are kept in buckets by (slots, free slots), so a placement looks at a few
buckets, not at every agent: a snapshot may list ten thousand.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Sequence
from typing import Literal

FittingPolicy = Literal["best", "worst"]
# scheduler_config.go: defaultFitPolicy.
DEFAULT_FITTING_POLICY: FittingPolicy = "best"
# resource_pool_config.go defaultRPConfig: MaxAuxContainersPerAgent.
DEFAULT_MAX_AUX_CONTAINERS = 100


def zero_slot_room(tasks: int, used_slots: int, max_aux: int) -> int:
    """How many more zero-slot tasks an agent that takes tasks may be given, at most:
    ``max_aux`` less the zero-slot containers it runs (``agent_state.go``
    ``numEmptyZeroSlots``; a draining or disabled agent has none, which the caller
    knows).

    A snapshot counts an agent's ``tasks`` without saying which use no slot. Each task
    that uses slots uses one at least, so at least ``tasks - used_slots`` of them are
    zero-slot, and the room is counted with that many: no machine is launched for a task
    an agent may still take."""
    return max(0, max_aux - max(0, tasks - used_slots))


def agents_for_zero_slot(tasks: int, max_aux: int) -> int:
    """New agents for ``tasks`` zero-slot tasks no agent has room for: ``max_aux`` on each
    (``scaling.go`` ``calculateDesiredNewAgentNum``, ``numAgentByZeroSlot``), none when
    ``max_aux`` is 0, as no agent would ever take them."""
    return -(-tasks // max_aux) if max_aux > 0 else 0


class AgentFit:
    """The registered agents a pending task may be placed on now, by free slots.

    ``free`` is the caller's list of every machine's free slots, indexed as its
    machines; placing a task lowers it in place. ``agents`` are the indices of the
    registered agents among them (the others are still booting: no task goes there yet).
    """

    def __init__(
        self,
        slots: Sequence[int],
        free: list[int],
        agents: Iterable[int],
        policy: FittingPolicy = DEFAULT_FITTING_POLICY,
    ) -> None:
        self.slots = slots
        self.free = free
        self.worst = policy == "worst"
        # (slots, free) -> agents in the order they came there (listing order at first),
        # for those with free slots; whole unused agents are the buckets with free ==
        # slots. Agents leave a bucket from its front (the first is the one given a
        # task), so a bucket is a queue: a dict's first key is found past every key
        # deleted before it, which made placing tasks on thousands of agents quadratic.
        self.buckets: dict[tuple[int, int], deque[int]] = {}
        for index in agents:
            if free[index] > 0:
                self.buckets.setdefault((slots[index], free[index]), deque()).append(index)
        # Asks (slots, single agent) that found no fit: room is only ever taken here, so
        # they never will. With
        # thousands of tasks waiting for new machines, each is then one lookup.
        self._unfit: set[tuple[int, bool]] = set()

    @property
    def full(self) -> bool:
        """No agent has a free slot: every task waits from now on."""
        return not self.buckets

    def place(self, task_slots: int, single_agent: bool) -> list[int] | None:
        """The agents the master gives a task of ``task_slots`` now, taking their slots;
        None when it must wait."""
        ask = (task_slots, single_agent or task_slots <= 1)
        if ask in self._unfit:
            return None
        index = self._shared(task_slots)
        if index is not None:
            self._take(index, task_slots)
            return [index]
        agents = None if ask[1] else self._dedicated(task_slots)
        if agents is None:
            self._unfit.add(ask)
        for index in agents or ():
            self._take(index, self.slots[index])
        return agents

    def idle(self, size: int) -> list[int]:
        """Unused agents of ``size`` slots, in listing order."""
        return list(self.buckets.get((size, size), ()))

    def take_whole(self, index: int) -> None:
        """An unused agent given whole to a task over several machines."""
        self._take(index, self.free[index])

    def _shared(self, task_slots: int) -> int | None:
        # Higher scores win: BestFit 1/(1+free), so the fewest free slots, and WorstFit
        # free/slots; then the agent listed first. Buckets are never empty.
        best: tuple[float, int] | None = None
        worst = self.worst
        for (slots, free), bucket in self.buckets.items():
            if free >= task_slots:
                candidate = (-free / slots if worst else free, bucket[0])
                if best is None or candidate < best:
                    best = candidate
        return None if best is None else best[1]

    def _dedicated(self, task_slots: int) -> list[int] | None:
        sizes = sorted({s for (s, f), b in self.buckets.items() if s == f and b}, reverse=True)
        for size in sizes:
            bucket = self.buckets[(size, size)]
            if task_slots % size == 0 and len(bucket) * size >= task_slots:
                return list(bucket)[: task_slots // size]
        return None

    def _take(self, index: int, slots: int) -> None:
        buckets, size, free = self.buckets, self.slots[index], self.free[index]
        bucket = buckets[size, free]
        if bucket[0] == index:
            bucket.popleft()
        else:
            bucket.remove(index)
        if not bucket:
            del buckets[size, free]
        free -= slots
        self.free[index] = free
        if free > 0:
            buckets.setdefault((size, free), deque()).append(index)
