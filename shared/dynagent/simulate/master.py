"""A cluster master, modelled for the simulator: a queue, agents, gang scheduling, snapshots.

It behaves as a Determined master does with its default scheduler as far as an
autoscaler can tell: tasks wait in arrival order; whatever fits is placed, so a small
task may pass a large one that does not fit yet; a task that fits on one agent goes to
the agent with the fewest free slots that can hold it (Determined's ``best`` fitting
policy, which leaves other agents idle for the autoscaler to reap); a task larger than
one agent takes whole idle agents of the largest size, all at once or not at all.

Agents may be of several sizes (a pool with offerings of several machine types): each
registers with its instance's slots, and best fit looks across all of them.

It is built for traces of tens of thousands of tasks on hundreds of agents: agents are
kept in buckets by free slots, so a placement costs a scan of at most ``slots`` buckets
(the largest agent's), and the wire objects of a snapshot are made once per change,
not per snapshot.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from dynagent.simulate.clock import Events, Kind
from dynagent.simulate.policy import Change
from dynagent.simulate.trace import Job
from dynagent.snapshot import Agent, PendingTask, Snapshot


def fits_pool(gpus: int, slots: int, max_instances: int) -> bool:
    """Whether some fleet of this pool could run a task: on one instance, or on whole
    instances (an exact multiple, and no more than max_instances), as decide judges it."""
    if gpus <= slots:
        return slots > 0
    return gpus % slots == 0 and gpus // slots <= max_instances


@dataclass(eq=False)
class Task:
    """A job of the trace as the master runs it."""

    job: Job
    # Whether any fleet of this pool could run it; if not it waits for ever, reported.
    schedulable: bool
    start: int | None = None  # when it first started
    agents: tuple[SimAgent, ...] = ()
    # Bumped when the task is started again after losing its agent: older ends are stale.
    run: int = 0
    # When its current run started, and when it was requeued (None: not waiting again).
    run_started: int = 0
    requeued_at: int | None = None
    # Seconds of work left: all of it, less what runs resumed from a checkpoint kept.
    remaining: int = field(init=False)
    wire: PendingTask = field(init=False)

    def __post_init__(self) -> None:
        self.remaining = self.job.duration
        # Trusted data: the trace reader checked the numbers, so no validation per task.
        self.wire = PendingTask(task=self.job.id, slots=self.job.gpus)

    @property
    def slots(self) -> int:
        return self.job.gpus


@dataclass(eq=False)
class SimAgent:
    id: str
    slots: int
    used: int = 0
    tasks: set[Task] = field(default_factory=set)
    ever_used: bool = False
    _wire: Agent | None = None

    @property
    def free(self) -> int:
        return self.slots - self.used

    def wire(self) -> Agent:
        if self._wire is None or self._wire.used_slots != self.used:
            self._wire = Agent(id=self.id, slots=self.slots, used_slots=self.used)
        return self._wire


class SimMaster:
    """One resource pool's master: agents of at most ``slots`` slots each (the largest
    machine's), at most ``max_agents`` of them.

    With ``free_slots_matter`` (a pool keeping warm headroom, which counts free slots),
    any agent's free slots changing is a change a decision reads.
    """

    def __init__(
        self,
        pool: str,
        slots: int,
        max_agents: int,
        events: Events,
        free_slots_matter: bool = False,
    ) -> None:
        self.pool = pool
        self.slots = slots
        self.max_agents = max_agents
        self.events = events
        self.free_slots_matter = free_slots_matter
        self.agents: dict[str, SimAgent] = {}
        # by_free[f]: agents with f free slots, in the order they got there (a dict keeps it).
        # by_free[slots] holds only idle agents of the largest size: what gangs take.
        self.by_free: list[dict[SimAgent, None]] = [{} for _ in range(slots + 1)]
        # Idle agents of every size, and the slots of connected and of idle agents.
        self.idle_agents: dict[SimAgent, None] = {}
        self.connected_slots = 0
        self.idle_slots = 0
        self.queue: list[Task] = []
        self.waits: list[int] = []
        self.busy_slots = 0
        self.queued_slots = 0
        self.running = 0
        self.requeued = 0
        # Seconds requeued tasks waited to start again.
        self.restart_waits: list[int] = []
        self.seq = 0
        # Set when something a decision reads changed: the pending tasks, which agents are
        # connected, or which are idle. A busy agent getting busier is not such a change,
        # though it is one to the master (``touched``), which publishes on any change.
        self.changed = False
        self.touched = False
        self.connections = 0
        # Agents that left having never run a task: launches the demand did not need.
        self.never_used = 0
        self._fresh = 0  # queue[_fresh:] arrived since the last scheduling pass
        self._freed = False  # slots were freed or added since the last pass

    # What happens to the master

    def submit(self, job: Job) -> Task:
        task = Task(job, fits_pool(job.gpus, self.slots, self.max_agents))
        self.queue.append(task)
        self.queued_slots += job.gpus
        self.touched = True
        return task

    def connect(self, agent_id: str, slots: int | None = None) -> None:
        """An agent registers with its instance's slots (default: the largest size)."""
        agent = SimAgent(agent_id, self.slots if slots is None else slots)
        if agent.slots > self.slots:
            raise ValueError(f"agent {agent_id} has {agent.slots} slots, over {self.slots}")
        self.agents[agent_id] = agent
        self.connections += 1
        self.by_free[agent.free][agent] = None
        self.connected_slots += agent.slots
        self._set_idle(agent)
        self.changed = self.touched = self._freed = True

    def disconnect(self, agent_id: str, now: int | None = None, resume: bool = False) -> None:
        """An agent went away: its tasks go back to the head of the queue, as Determined
        requeues them, and start over, or with ``resume`` go on with the time they had
        left (a trial restarts from its checkpoint: here, as if it checkpointed at the
        moment it was cut). Their wait to restart is counted from ``now``."""
        agent = self.agents.pop(agent_id, None)
        if agent is None:
            return
        del self.by_free[agent.free][agent]
        self.connected_slots -= agent.slots
        if agent.used == 0:
            del self.idle_agents[agent]
            self.idle_slots -= agent.slots
        self.never_used += not agent.ever_used
        lost = sorted(agent.tasks, key=lambda t: t.job.arrival)
        for task in lost:
            self._release(task, excluding=agent)
            if now is not None:
                task.requeued_at = now
                if resume:
                    task.remaining -= now - task.run_started
            task.run += 1
            self.queued_slots += task.slots
            self.requeued += 1
        self.queue[:0] = lost
        self._fresh += len(lost)  # they were queued before: not new arrivals
        self.changed = self.touched = self._freed = True

    def finish(self, task: Task, run: int) -> None:
        if task.run != run or not task.agents:
            return  # an end of a run that an agent's loss cut short
        self._release(task)
        self.touched = self._freed = True

    # Scheduling

    def schedule(self, now: int) -> None:
        """Place what fits, in arrival order. Tasks queued before the last pass did not fit
        then, so unless slots were freed since, only the new arrivals are tried."""
        start = 0 if self._freed else self._fresh
        if start < len(self.queue):
            kept = self.queue[:start]
            for index in range(start, len(self.queue)):
                task = self.queue[index]
                placed = self._place(task, now)
                if not placed:
                    kept.append(task)
                # The pending list changed if a queued task left it or a new one joined it.
                if placed != (index >= self._fresh):
                    self.changed = True
            self.queue = kept
        self._fresh = len(self.queue)
        self._freed = False

    def _place(self, task: Task, now: int) -> bool:
        agents = self._fit(task.slots)
        if agents is None:
            return False
        if task.start is None:
            task.start = now
            self.waits.append(now - task.job.arrival)
        elif task.requeued_at is not None:
            self.restart_waits.append(now - task.requeued_at)
            task.requeued_at = None
        task.run_started = now
        per_agent = task.slots if len(agents) == 1 else self.slots
        for agent in agents:
            self._use(agent, per_agent)
            agent.tasks.add(task)
            agent.ever_used = True
        task.agents = agents
        self.touched = True
        self.queued_slots -= task.slots
        self.running += 1
        self.events.schedule(now + task.remaining, Kind.JOB_END, (task, task.run))
        return True

    def _fit(self, slots: int) -> tuple[SimAgent, ...] | None:
        if slots <= self.slots:
            # Best fit: the agent with the fewest free slots that can hold the task.
            for free in range(slots, self.slots + 1):
                bucket = self.by_free[free]
                if bucket:
                    return (next(iter(bucket)),)
            return None
        if slots % self.slots:
            return None
        idle = self.by_free[self.slots]
        need = slots // self.slots
        if len(idle) < need:
            return None
        return tuple(agent for agent, _ in zip(idle, range(need), strict=False))

    def _use(self, agent: SimAgent, slots: int) -> None:
        if (agent.used == 0 or self.free_slots_matter) and slots:
            self.changed = True  # idle -> busy, or free slots that headroom counts
        self._move(agent, agent.used + slots)
        self.busy_slots += slots

    def _release(self, task: Task, excluding: SimAgent | None = None) -> None:
        per_agent = task.slots if len(task.agents) == 1 else self.slots
        for agent in task.agents:
            agent.tasks.discard(task)
            self.busy_slots -= per_agent
            if agent is not excluding:
                self._move(agent, agent.used - per_agent)
                if agent.used == 0 or self.free_slots_matter:
                    self.changed = True  # busy -> idle, or free slots headroom counts
        task.agents = ()
        self.running -= 1

    def _move(self, agent: SimAgent, used: int) -> None:
        was_idle = agent.used == 0
        del self.by_free[agent.free][agent]
        agent.used = used
        self.by_free[agent.free][agent] = None
        if was_idle != (used == 0):
            if was_idle:
                del self.idle_agents[agent]
                self.idle_slots -= agent.slots
            else:
                self._set_idle(agent)

    def _set_idle(self, agent: SimAgent) -> None:
        if agent.used == 0:
            self.idle_agents[agent] = None
            self.idle_slots += agent.slots

    # What the master says

    def snapshot(self, now: datetime) -> Snapshot:
        """The pool snapshot a master publishes: pending tasks and connected agents."""
        self.seq += 1
        # Trusted data built by the model itself: no need to validate it again.
        return Snapshot.model_construct(
            pool=self.pool,
            seq=self.seq,
            time=now,
            pending=tuple(task.wire for task in self.queue),
            agents=tuple(agent.wire() for agent in self.agents.values()),
        )

    def take_change(self) -> Change:
        """How the master changed since the last call."""
        change = Change.DECISION if self.changed else Change.OTHER if self.touched else Change.NONE
        self.changed = self.touched = False
        return change
