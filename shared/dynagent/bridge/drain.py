"""Drain before terminate: which agents the bridge disables with drain, and enables again.

An agent idle for the pool's ``max_idle_agent_period`` is drained through the master
(it takes no new task), while the pool keeps ``min_instances`` enabled agents and no
task waits. Only then does the snapshot report it draining, and only a draining, empty
agent may the functions terminate. As soon as pending tasks could use a drained agent,
it is enabled again, in the same pass and before the snapshot that would otherwise
make the functions launch for them.

What it remembers (when each agent went idle, which agents it drained) lives in the
process: after a restart, idle periods start over, and an agent the master lists as
draining is claimed by draining it again, which the master refuses (HTTP 500) for one
that is only reconnecting. A reconnecting agent is never reported as draining.

Under the master's worst fit, busy agents are drained too. Worst fit puts each new task
on the emptiest agent, so a few tasks keep many agents busy and none ever goes idle
(ten 1-GPU tasks hold ten 8-GPU agents where best fit uses two). So while no task
waits, the agents best fit would keep filling stay enabled: the fullest first, until
their free slots hold one largest machine's worth; the emptier busy agents are drained,
take no new task, and are terminated once their last task ends. Idle agents keep the
idle-period rule above.

One Drainer per pool: each pass forgets the agents its reading no longer lists.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from dynagent.config import Pool
from dynagent.durations import format_duration
from dynagent.fitting import FittingPolicy
from dynagent.packing import Existing, pack
from dynagent.snapshot import PendingTask

from .reading import AgentReading, PoolReading


@dataclass(frozen=True)
class DrainAction:
    agent_id: str
    enable: bool  # False: disable with drain
    reason: str


@dataclass
class Drainer:
    idle_since: dict[str, datetime] = field(default_factory=dict)
    drained: set[str] = field(default_factory=set)

    def actions(self, pool: Pool, reading: PoolReading, now: datetime) -> list[DrainAction]:
        present = {agent.id for agent in reading.agents}
        self.drained &= present
        for agent in reading.agents:
            if agent.enabled and not agent.draining and agent.idle:
                self.idle_since.setdefault(agent.id, now)
            else:
                self.idle_since.pop(agent.id, None)
        for gone in set(self.idle_since) - present:
            del self.idle_since[gone]
        enables = self._enables(pool, reading)
        if enables or not pool.provider.drain_idle_agents:
            return enables
        drains = self._drains(pool, reading, now)
        draining = {action.agent_id for action in drains}
        return self._claims(reading) + drains + _surplus(pool, reading, draining)

    def done(self, action: DrainAction) -> None:
        """The master carried ``action`` out: the agent is ours to report, or no more."""
        if action.enable:
            self.drained.discard(action.agent_id)
        else:
            self.drained.add(action.agent_id)

    def reported_draining(self, agent: AgentReading) -> bool:
        """Whether the snapshot may say draining: only agents this bridge drained."""
        return agent.draining and agent.id in self.drained

    def reported_enabled(self, agent: AgentReading) -> bool:
        """Whether the snapshot says enabled, so its free slots may count as room: the
        master places work on it, or this bridge drained it and enables it again when
        pending tasks want it. Not one an admin disabled, nor one reconnecting."""
        return agent.enabled or agent.id in self.drained

    def _enables(self, pool: Pool, reading: PoolReading) -> list[DrainAction]:
        """Drained agents back to work, the most free first, while pending tasks do not
        all fit on the enabled agents. Fit as the functions' core places them
        (``packing.pack``): a drained agent counts as room there, so a task that fits
        in the enabled agents' free slots only in sum must get one enabled here. Only
        agents that let more tasks fit come back: a drained agent still busy (worst fit
        drains those) may hold none of the tasks waiting, which then get a new machine."""
        if not reading.pending:
            return []
        enabled = [a for a in reading.agents if a.enabled and not a.draining]
        sized = tuple(task for task in reading.pending if task.slots > 0)
        # A zero-slot task runs on any agent: with none enabled, the first drained one.
        zero_slot = len(sized) < len(reading.pending) and not enabled
        waiting = _Waiting(sized, enabled, reading, pool.provider.max_instances)
        ours = sorted(
            (a for a in reading.agents if a.id in self.drained and a.draining),
            key=lambda a: (a.used_slots - a.slots, a.id),
        )
        least = waiting.count(ours)  # what no drained agent can help
        if not zero_slot and least == waiting.count([]):
            return []
        wanted: list[AgentReading] = []
        for agent in ours:
            if waiting.count(wanted) <= least and not (zero_slot and not wanted):
                break
            wanted.append(agent)
        # Then without any the later ones made useless: the most free first is greedy,
        # and a gang may fit only on whole agents taken after a busy larger one.
        for agent in reversed(wanted[1:] if zero_slot else wanted):
            without = [a for a in wanted if a is not agent]
            if waiting.count(without) <= least:
                wanted = without
        return [DrainAction(a.id, True, "pending tasks can use it") for a in wanted]

    def _claims(self, reading: PoolReading) -> list[DrainAction]:
        """Agents listed draining that this process did not drain (it restarted, or an
        admin did): drained again, which tells them from reconnecting ones."""
        return [
            DrainAction(a.id, False, "listed draining: drained again to tell it is ours")
            for a in reading.agents
            if a.draining and not a.enabled and a.id not in self.drained and a.idle
        ]

    def _drains(self, pool: Pool, reading: PoolReading, now: datetime) -> list[DrainAction]:
        if reading.pending:
            return []  # the master may place a waiting task on any idle agent
        provider = pool.provider
        limit = provider.max_idle_agent_period
        enabled = sum(1 for a in reading.agents if a.enabled and not a.draining)
        idle = sorted(
            (since, agent_id) for agent_id, since in self.idle_since.items() if now - since >= limit
        )
        actions: list[DrainAction] = []
        for since, agent_id in idle:
            if enabled <= provider.min_instances:
                break
            enabled -= 1
            reason = (
                f"idle for {format_duration(now - since)} "
                f"(max_idle_agent_period {format_duration(limit)})"
            )
            actions.append(DrainAction(agent_id, False, reason))
        return actions


def _surplus(pool: Pool, reading: PoolReading, draining: set[str]) -> list[DrainAction]:
    """Under worst fit, the busy agents best fit would leave to empty: what is left once
    the fullest agents' free slots hold one machine of the largest size (idle agents'
    free slots count first: best fit fills them last). ``fitting_methods.go``: best fit
    scores an agent 1 / (1 + free), worst fit free / slots."""
    if reading.fitting_policy != "worst" or reading.pending:
        return []
    enabled = [a for a in reading.agents if a.enabled and not a.draining and a.id not in draining]
    largest = max((a.slots for a in reading.agents), default=0)
    spare = sum(a.slots for a in enabled if a.idle)
    kept = sum(1 for a in enabled if a.idle)
    actions: list[DrainAction] = []
    for agent in sorted(
        (a for a in enabled if not a.idle), key=lambda a: (a.slots - a.used_slots, a.id)
    ):
        free = agent.slots - agent.used_slots
        if free == 0 or spare < largest or kept < pool.provider.min_instances:
            spare += free
            kept += 1
            continue
        reason = (
            f"worst fit would keep it busy: best fit leaves it to empty ({spare} free slots "
            "on fuller agents)"
        )
        actions.append(DrainAction(agent.id, False, reason))
    return actions


def _room(agent: AgentReading) -> Existing:
    return Existing(agent.slots, agent.slots - agent.used_slots, arriving=False)


@dataclass(frozen=True)
class _Waiting:
    """How many of the pending ``tasks`` wait with the enabled agents and some drained
    ones as room, placed as the functions' core places them (``packing.pack``, no
    machine launched)."""

    tasks: tuple[PendingTask, ...]
    enabled: list[AgentReading]
    reading: PoolReading
    max_instances: int

    def count(self, drained: list[AgentReading]) -> int:
        if not self.tasks:
            return 0
        rooms = [_room(a) for a in (*self.enabled, *drained)]
        largest = max((a.slots for a in self.reading.agents), default=0)
        policy: FittingPolicy = "worst" if self.reading.fitting_policy == "worst" else "best"
        demand = pack(self.tasks, (), rooms, 0, self.max_instances, largest, fitting_policy=policy)
        return len(demand.waiting)
