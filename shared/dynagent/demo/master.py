"""A small model of a Determined-style master, for the demo.

It queues tasks, places them on its agents' free slots (a task larger than one agent
takes whole idle agents), finishes them after their duration, and says what it sees as
a pool snapshot.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from dynagent.core.snapshot import Agent, PendingTask, Snapshot


@dataclass
class Task:
    name: str
    slots: int
    duration: timedelta
    # Where it runs: agent id -> slots held there.
    placement: dict[str, int] = field(default_factory=dict)
    ends_at: datetime | None = None


@dataclass
class AgentState:
    id: str
    slots: int
    used: int = 0

    @property
    def free(self) -> int:
        return self.slots - self.used


@dataclass
class Master:
    pool: str
    agents: dict[str, AgentState] = field(default_factory=dict)
    queue: list[Task] = field(default_factory=list)
    running: list[Task] = field(default_factory=list)
    seq: int = 0
    # An offline master publishes nothing; the sweep must cope alone.
    online: bool = True

    def submit(self, task: Task) -> None:
        self.queue.append(task)

    def cancel(self, name: str) -> bool:
        before = len(self.queue)
        self.queue = [task for task in self.queue if task.name != name]
        return len(self.queue) < before

    def connect(self, agent_id: str, slots: int) -> None:
        self.agents.setdefault(agent_id, AgentState(agent_id, slots))

    def disconnect(self, agent_id: str) -> list[Task]:
        """An agent went away: its tasks go back to the queue, as Determined requeues them."""
        self.agents.pop(agent_id, None)
        lost = [task for task in self.running if agent_id in task.placement]
        for task in lost:
            self._release(task)
            self.running.remove(task)
            task.placement, task.ends_at = {}, None
            self.queue.insert(0, task)
        return lost

    def finish_due(self, now: datetime) -> list[Task]:
        done = [task for task in self.running if task.ends_at and task.ends_at <= now]
        for task in done:
            self._release(task)
            self.running.remove(task)
        return done

    def schedule(self, now: datetime) -> list[Task]:
        """Place what fits, in queue order; return the tasks started."""
        started = []
        for task in list(self.queue):
            placement = self._fit(task)
            if placement is None:
                continue
            for agent_id, slots in placement.items():
                self.agents[agent_id].used += slots
            task.placement, task.ends_at = placement, now + task.duration
            self.queue.remove(task)
            self.running.append(task)
            started.append(task)
        return started

    def _fit(self, task: Task) -> dict[str, int] | None:
        agents = sorted(self.agents.values(), key=lambda a: a.id)
        for agent in agents:
            if agent.free >= task.slots and agent.slots >= task.slots:
                return {agent.id: task.slots}
        # Larger than one agent: whole idle agents, all or nothing.
        idle = [a for a in agents if a.used == 0 and a.slots > 0]
        if idle and task.slots > idle[0].slots and task.slots % idle[0].slots == 0:
            need = task.slots // idle[0].slots
            if len(idle) >= need:
                return {agent.id: agent.slots for agent in idle[:need]}
        return None

    def _release(self, task: Task) -> None:
        for agent_id, slots in task.placement.items():
            if agent_id in self.agents:
                self.agents[agent_id].used -= slots

    def snapshot(self, now: datetime) -> Snapshot:
        self.seq += 1
        return Snapshot(
            pool=self.pool,
            seq=self.seq,
            time=now,
            pending=tuple(PendingTask(task=t.name, slots=t.slots) for t in self.queue),
            agents=tuple(
                Agent(id=a.id, slots=a.slots, used_slots=a.used) for a in self.agents.values()
            ),
        )
