"""The simulator master's agents, indexed so that ``findFits`` costs a few bucket looks.

Agents are kept in buckets by (size, free slots). Determined's ``findFits`` scores every
agent (``simulate.fitting``); here the score's order is read off the buckets instead:

- best fit wants the fewest free slots that hold the task: the buckets from ``request``
  free upwards, across sizes, the first one not empty;
- worst fit wants the largest share free: per size, the fullest bucket not below
  ``request``, and among sizes the largest ``free / size``;
- a gang's dedicated fit wants unused agents of one size: the ``free == size`` buckets.

A zero-slot task's score depends on each agent's auxiliary containers, which no bucket
orders, so it is found by scoring every agent, as Determined does (zero-slot tasks are
few beside the rest).

Ties: Determined breaks equal scores by an md5 distance between the task's and the
agent's ids, then by agent id: a pseudo-random but fixed choice. Here the agent that has
had its number of free slots the longest wins (each bucket keeps the order agents came
into it): as fixed, and cheap, but not the same agent Determined would pick.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from dynagent.core.fitting import FittingPolicy
from dynagent.core.snapshot import Agent
from dynagent.simulate.fitting import SCORES, dedicated_size

Bucket = dict["SimAgent", None]  # an ordered set: agents in the order they came in


@dataclass(eq=False)
class SimAgent:
    id: str
    slots: int
    used: int = 0
    # Zero-slot tasks running on it: its auxiliary containers.
    aux: int = 0
    # The master's tasks running on it (``master.Task``, not imported: no cycle).
    tasks: set[Any] = field(default_factory=set)
    ever_used: bool = False
    # When it came into its bucket (a counter): the tie-break, the earliest first.
    since: int = 0
    # False once the bridge disabled it with drain: out of the index, tasks run on.
    enabled: bool = True
    _wire: Agent | None = None

    @property
    def free(self) -> int:
        return self.slots - self.used

    @property
    def idle(self) -> bool:
        """Running nothing, zero-slot tasks included (``agent_state.go`` ``idle``)."""
        return not self.tasks

    def wire(self) -> Agent:
        wire = self._wire
        if (
            wire is None
            or wire.used_slots != self.used
            or wire.tasks != len(self.tasks)
            or wire.draining == self.enabled
        ):
            # Only the bridge disables an agent here, so a disabled one is reported as
            # the bridge reports its own: draining, and enabled (it may enable it again).
            wire = Agent(
                id=self.id,
                slots=self.slots,
                used_slots=self.used,
                tasks=len(self.tasks),
                draining=not self.enabled,
            )
            self._wire = wire
        return wire


class Fit(NamedTuple):
    """Where a task goes: its agents, and the slots it takes on each."""

    agents: tuple[SimAgent, ...]
    slots_each: int


class AgentIndex:
    """The connected agents in buckets by size and free slots."""

    def __init__(self, policy: FittingPolicy, max_aux: int) -> None:
        self.policy = policy
        self.max_aux = max_aux
        # buckets[size][free]: the agents of that size with that many free slots.
        self.buckets: dict[int, list[Bucket]] = {}
        self.largest = 0
        # sizes_from[free]: the sizes that can have that many free slots, largest first.
        self._sizes_from: list[tuple[int, ...]] = [()]
        self._order = itertools.count()

    # Keeping the index

    def add(self, agent: SimAgent) -> None:
        if agent.slots not in self.buckets:
            self._new_size(agent.slots)
        agent.since = next(self._order)
        self.buckets[agent.slots][agent.free][agent] = None

    def remove(self, agent: SimAgent) -> None:
        del self.buckets[agent.slots][agent.free][agent]

    def move(self, agent: SimAgent, used: int) -> None:
        """The agent now uses ``used`` slots."""
        self.remove(agent)
        agent.used = used
        self.add(agent)

    def _new_size(self, size: int) -> None:
        self.buckets[size] = [{} for _ in range(size + 1)]
        self.largest = max(self.largest, size)
        sizes = sorted(self.buckets, reverse=True)
        self._sizes_from = [
            tuple(s for s in sizes if s >= free) for free in range(self.largest + 1)
        ]

    # findFits

    def fit(self, request: int, single_agent: bool) -> Fit | None:
        """Where Determined's ``findFits`` (``fitting.go``) places a task of ``request``
        slots: one agent if any holds it, else whole unused agents of one size, unless
        the task must stay on one agent or asks for at most one slot."""
        if request == 0:
            agent = self._zero_slot()
            return None if agent is None else Fit((agent,), 0)
        agent = self._best(request) if self.policy == "best" else self._worst(request)
        if agent is not None:
            return Fit((agent,), request)
        if single_agent or request <= 1:
            return None
        return self._dedicated(request)

    def _best(self, request: int) -> SimAgent | None:
        """``BestFit`` (``fitting_methods.go``): 1 / (1 + free): the fewest free slots."""
        for free in range(request, self.largest + 1):
            chosen: SimAgent | None = None
            for size in self._sizes_from[free]:
                bucket = self.buckets[size][free]
                if bucket:
                    head = next(iter(bucket))
                    if chosen is None or head.since < chosen.since:
                        chosen = head
            if chosen is not None:
                return chosen
        return None

    def _worst(self, request: int) -> SimAgent | None:
        """``WorstFit`` (``fitting_methods.go``): free / slots: the largest share free."""
        chosen: SimAgent | None = None
        for size in self._sizes_from[request] if request <= self.largest else ():
            buckets = self.buckets[size]
            for free in range(size, request - 1, -1):
                if buckets[free]:
                    head = next(iter(buckets[free]))
                    if chosen is None or _emptier(head, chosen):
                        chosen = head
                    break
        return chosen

    def _zero_slot(self) -> SimAgent | None:
        """The best-scored agent with room for another auxiliary container
        (``maxZeroSlotContainersSatisfied``), scored as Determined scores it."""
        score = SCORES[self.policy]
        chosen: SimAgent | None = None
        best = -1.0
        for buckets in self.buckets.values():
            for bucket in buckets:
                for agent in bucket:
                    if agent.aux >= self.max_aux:
                        continue
                    value = score(0, agent.slots, agent.used, agent.aux, self.max_aux)
                    if value > best or (
                        value == best and chosen is not None and agent.since < chosen.since
                    ):
                        chosen, best = agent, value
        return chosen

    def _dedicated(self, request: int) -> Fit | None:
        """``findDedicatedAgentFits``: whole unused agents of the size ``dedicated_size``
        picks, the ones unused the longest first (all score alike)."""
        unused = ((size, len(buckets[size])) for size, buckets in self.buckets.items())
        size = dedicated_size(request, unused)
        if size is None:
            return None
        whole = self.buckets[size][size]
        return Fit(tuple(itertools.islice(whole, request // size)), size)


def _emptier(agent: SimAgent, than: SimAgent) -> bool:
    """Whether ``agent`` has the larger share of its slots free, or as large and got
    there first: worst fit's order, in exact arithmetic."""
    mine, theirs = agent.free * than.slots, than.free * agent.slots
    return mine > theirs or (mine == theirs and agent.since < than.since)
