"""Drain before terminate: which agents the bridge disables with drain, and enables again.

An agent idle for the pool's ``max_idle_agent_period`` is drained through the master
(it takes no new task), while the pool keeps ``min_instances`` enabled agents and no
task waits. As soon as pending tasks could use a drained agent, it is enabled again, in
the same pass and before the snapshot that would otherwise make the functions launch for
them: a task arriving while an agent is drained runs on it within one pass. A drained
agent idle for ``RETIRE_AFTER`` more, with no task wanting it, is retired: the snapshot
reports it so, this bridge never enables it again, and only then may the functions
terminate it. A retirement is never taken back, so a function may act on its report
however late (a slow delivery, a retried record) without killing work the master placed
there; a drained agent not retired is never terminated, so enabling it needs no wait.

What it remembers (when each agent went idle, which agents it drained and retired) lives
in the process: after a restart, idle periods start over, and an agent the master lists
as draining is claimed by draining it again, which the master refuses (HTTP 500) for one
that is only reconnecting; a claimed agent is retired at once, as the process before may
have reported it so. A reconnecting agent is never reported as draining.

Busy agents are drained too, to consolidate: while no task waits, the agents the
master fills first stay enabled, the fullest first, until their free slots hold one
largest machine's worth; the emptier busy agents are drained, take no new task, and are
terminated once their last task ends. Under worst fit this is what lets the fleet shrink
at all: each new task goes to the emptiest agent, so a few tasks keep many agents busy
and none ever goes idle (ten 1-GPU tasks hold ten 8-GPU agents where best fit uses
two). Under best fit the master fills the fullest agents first anyway, but once they
are full it places on the emptier ones and keeps them busy too; drained, they end with
their last task, without an idle period. Idle agents keep the idle-period rule above.

Under worst fit, at ``max_instances`` (nothing can be launched), a waiting task that
fits in no enabled agent's free slots while slots are free (a gang of a whole machine,
behind small tasks that land wherever a slot frees) gets one agent drained for it: the
busy one with the fewest slots in use, which worst fit would fill first. Its free slots
were of no use to any waiting task; now new tasks land on fuller agents, and it is
enabled again the moment a waiting task fits on it (empty, for the gang; or a smaller
task that fits nowhere else). Best fit needs no such hold: it fills that agent last.

One Drainer per pool: each pass forgets the agents its reading no longer lists.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from dynagent.core.config import Pool
from dynagent.core.durations import format_duration
from dynagent.core.fitting import FittingPolicy
from dynagent.core.packing import Existing, pack
from dynagent.core.snapshot import PendingTask

from .reading import AgentReading, PoolReading

# How long a drained agent stays idle and the pool's to enable again before it is
# retired for the functions to terminate: the bridge's heartbeat.
RETIRE_AFTER = timedelta(seconds=30)


@dataclass(frozen=True)
class DrainAction:
    agent_id: str
    enable: bool  # False: disable with drain
    reason: str
    # A drain of an agent listed draining that this process did not drain: retired at
    # once, since the process before it may have reported it retired.
    claim: bool = False


@dataclass
class Drainer:
    idle_since: dict[str, datetime] = field(default_factory=dict)
    drained: set[str] = field(default_factory=set)
    # Drained agents reported retired: never enabled again.
    retired: set[str] = field(default_factory=set)
    # Since when each drained agent has been idle, for its retirement.
    drained_idle_since: dict[str, datetime] = field(default_factory=dict)
    # Agents drained for good on the functions' notice (``loop._hand_back``): their
    # machine is taken back soon (a reservation's end), or must be replaced (of an old
    # boot config, or broken). Never enabled again, so reported draining and retired:
    # the functions may terminate them once idle.
    held: set[str] = field(default_factory=set)

    def actions(self, pool: Pool, reading: PoolReading, now: datetime) -> list[DrainAction]:
        present = {agent.id for agent in reading.agents}
        self.drained &= present
        self.retired &= present
        self.held &= present
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
        surplus = _surplus(pool, reading, draining)
        return self._claims(reading) + drains + surplus + self._reserve(pool, reading)

    def hold(self, agent_id: str) -> None:
        """The agent is drained for good: its machine is about to be taken back."""
        self.held.add(agent_id)
        self.drained.discard(agent_id)
        self.retired.discard(agent_id)
        self.drained_idle_since.pop(agent_id, None)

    def done(self, action: DrainAction) -> None:
        """The master carried ``action`` out: the agent is ours to report, or no more."""
        if action.enable:
            self.drained.discard(action.agent_id)
            self.drained_idle_since.pop(action.agent_id, None)
        else:
            self.drained.add(action.agent_id)
            if action.claim:
                self.retired.add(action.agent_id)

    def retire(self, reading: PoolReading, now: datetime) -> None:
        """Drained agents idle for RETIRE_AFTER, with no pending task wanting them (this
        pass enabled those): retired, for good. ``reading`` is after this pass's actions."""
        for agent in reading.agents:
            if agent.id in self.drained and agent.draining and agent.idle:
                since = self.drained_idle_since.setdefault(agent.id, now)
                if now - since >= RETIRE_AFTER:
                    self.retired.add(agent.id)
            else:
                self.drained_idle_since.pop(agent.id, None)

    def reported_retired(self, agent: AgentReading) -> bool:
        return agent.draining and (agent.id in self.retired or agent.id in self.held)

    def reported_draining(self, agent: AgentReading) -> bool:
        """Whether the snapshot may say draining: only agents this bridge drained."""
        return agent.draining and (agent.id in self.drained or agent.id in self.held)

    def reported_enabled(self, agent: AgentReading) -> bool:
        """Whether the snapshot says enabled, so its free slots may count as room: the
        master places work on it, or this bridge drained it and enables it again when
        pending tasks want it. Not one an admin disabled, nor one reconnecting."""
        return agent.enabled or (agent.id in self.drained and agent.id not in self.retired)

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
            (
                a
                for a in reading.agents
                if a.id in self.drained and a.draining and a.id not in self.retired
            ),
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
            DrainAction(a.id, False, "listed draining: drained again to tell it is ours", True)
            for a in reading.agents
            if a.draining
            and not a.enabled
            and a.id not in self.drained
            and a.id not in self.held
            and a.idle
        ]

    def _reserve(self, pool: Pool, reading: PoolReading) -> list[DrainAction]:
        """Under worst fit at max_instances, one agent drained for a waiting task that fits
        in no enabled agent's free slots while some are free: the busy one with the
        fewest slots in use that can hold it. None while an agent this bridge drained is
        still busy and can hold it: it is on its way to empty already."""
        if reading.fitting_policy != "worst" or not reading.pending:
            return []
        if len(reading.agents) < pool.provider.max_instances:
            return []
        enabled = [a for a in reading.agents if a.enabled and not a.draining]
        free = max((a.slots - a.used_slots for a in enabled), default=0)
        if free == 0:
            return []  # nothing is wasted: every waiting task has a slot coming
        largest = max(a.slots for a in reading.agents)
        waiting = [t.slots for t in reading.pending if t.slots > 0]
        if not waiting or min(waiting) <= free:
            return []  # a waiting task fits: the master places it
        needs = min((slots for slots in waiting if slots <= largest), default=None)
        if needs is None:
            return []  # only gangs over several agents wait: whole agents, not one
        if any(
            a.id in self.drained and a.draining and not a.idle and a.slots >= needs
            for a in reading.agents
        ):
            return []
        candidates = [a for a in enabled if not a.idle and a.slots >= needs]
        if not candidates:
            return []
        agent = min(candidates, key=lambda a: (a.used_slots, a.id))
        reason = (
            f"at max_instances ({pool.provider.max_instances}) a {needs}-slot task fits in "
            f"no agent's free slots: this one, {agent.used_slots} of {agent.slots} in use, "
            "takes no new task until it does"
        )
        return [DrainAction(agent.id, False, reason)]

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
    """The busy agents to let empty: what is left once the fullest agents' free slots
    hold one machine of the largest size (idle agents' free slots count first: best fit
    fills them last). The fullest first is best fit's order, ``fitting_methods.go``:
    best fit scores an agent 1 / (1 + free), worst fit free / slots."""
    if reading.pending:
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
            f"consolidating: {spare} free slots on fuller agents take new tasks; it takes "
            "none and goes when its last task ends"
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
