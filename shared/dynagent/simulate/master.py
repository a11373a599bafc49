"""A cluster master, modelled for the simulator: a queue, agents, scheduling, snapshots.

It places work as Determined's agent resource manager does with its default scheduler,
the priority scheduler without preemption (``master/internal/rm/agentrm``):

- Each pass places tasks by ``priority.go`` ``prioritySchedule``: zero-slot tasks and
  the others are scheduled independently; each by priority level, the lowest number
  first, and within a level in queue order, every task that fits is placed. Once a
  task of a level does not fit, lower levels are only "backfilling", and with
  preemption off (Determined's default, ``scheduler_config.go``) none of them starts.
- Where a task goes is ``fitting.go`` ``findFits`` (``simulate.fitting``,
  ``simulate.agents``): one agent by the fitting policy (best: the fewest free slots
  left; worst: the largest share free), else whole unused agents of one size.
- A pass runs at each second where something happened, after all of that second's
  events (Determined's ``resource_pool.go`` ``schedulerTick`` runs every 500 ms when
  anything changed). A newly registered agent goes to the first queued task that fits
  it, not to the task it was launched for.

Queue order is arrival order, and a task that lost its agent goes back to the head of
its level, as Determined's queue (ordered by job submission time) puts it.

A task no fleet of the pool could ever run waits for ever, in the pending list, but
holds no level back. Determined's admission refuses most such tasks at submission
(``resource_pool.go``: ``ValidateResources``, a single-agent task larger than an
instance; ``CapacityCheck``, more slots than ``max_instances`` hold); one it admits, a
gang no machine size divides, would hold back every lower priority for ever.

It is built for traces of tens of thousands of tasks on hundreds of agents: agents are
kept in buckets by free slots, so a placement costs a scan of a few buckets; a pass
after nothing was freed tries only the new arrivals (the tasks queued before did not
fit, and nothing since made room); and the wire objects of a snapshot are made once per
change, not per snapshot.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime

from dynagent.bridge.arrivals import grouped
from dynagent.bridge.reading import AgentReading, PoolReading
from dynagent.core.fitting import DEFAULT_FITTING_POLICY, FittingPolicy
from dynagent.core.snapshot import ARRIVALS_WINDOW_SECONDS, Arrival, PendingTask, Snapshot
from dynagent.simulate.agents import AgentIndex, SimAgent
from dynagent.simulate.clock import Events, Kind, seconds_at
from dynagent.simulate.fitting import MAX_AUX_CONTAINERS_PER_AGENT, fits_pool
from dynagent.simulate.policy import Change
from dynagent.simulate.trace import Job

__all__ = ["SimAgent", "SimMaster", "Task"]

# Pending tasks of one scheduling class (with slots, or zero-slot), by priority level.
Levels = dict[int, list["Task"]]


@dataclass(eq=False)
class Task:
    """A job of the trace as the master runs it."""

    job: Job
    # Whether any fleet of this pool could run it; if not it waits for ever, reported.
    schedulable: bool
    start: int | None = None  # when it first started
    agents: tuple[SimAgent, ...] = ()
    # The slots it takes on each of its agents (all of a gang's agents alike).
    slots_each: int = 0
    # Bumped when the task is started again after losing its agent: older ends are stale.
    run: int = 0
    # When its current run started, and when it was requeued (None: not waiting again).
    run_started: int = 0
    requeued_at: int | None = None
    # Left queued by a pass: in the pending list a snapshot publishes.
    pending: bool = False
    # Seconds of work left: all of it, less what runs resumed from a checkpoint kept.
    remaining: int = field(init=False)
    wire: PendingTask = field(init=False)

    def __post_init__(self) -> None:
        job = self.job
        self.remaining = job.duration
        # Trusted data: the trace reader checked the numbers, so no validation per task.
        self.wire = PendingTask(job.id, job.gpus, job.priority, job.single_agent)

    @property
    def slots(self) -> int:
        return self.job.gpus

    @property
    def priority(self) -> int:
        return self.job.priority

    @property
    def zero_slot(self) -> bool:
        return self.job.gpus == 0


class SimMaster:
    """One resource pool's master: agents of the pool's machine ``sizes`` (slots), at
    most ``max_agents`` of them.

    Any agent's free slots changing is a change a decision reads while tasks wait (the
    decision predicts where the master will place them, and a task held back by a
    higher priority waits though it fits), and always with ``free_slots_matter`` (a
    pool keeping warm headroom, which counts free slots).
    """

    def __init__(
        self,
        pool: str,
        sizes: Iterable[int],
        max_agents: int,
        events: Events,
        free_slots_matter: bool = False,
        fitting_policy: FittingPolicy = DEFAULT_FITTING_POLICY,
        max_aux: int = MAX_AUX_CONTAINERS_PER_AGENT,
        reports_arrivals: bool = False,
    ) -> None:
        self.pool = pool
        self.sizes = tuple(sorted(set(sizes)))
        self.slots = max(self.sizes, default=0)  # the largest machine's
        self.max_agents = max_agents
        self.events = events
        self.free_slots_matter = free_slots_matter
        self.fitting_policy = fitting_policy
        self.max_aux = max_aux
        self.agents: dict[str, SimAgent] = {}
        self.index = AgentIndex(fitting_policy, max_aux)
        # (second, slots) of the arrivals a snapshot reports, as ``dynagent bridge`` does
        # (``bridge.arrivals``); None: its snapshots report none.
        self.arrived: deque[tuple[int, int]] | None = deque() if reports_arrivals else None
        # Agents running nothing, and the slots of connected and of idle agents.
        self.idle_agents: dict[SimAgent, None] = {}
        self.connected_slots = 0
        self.idle_slots = 0
        # Queued tasks: with slots, and zero-slot, each by priority level.
        self.levels: tuple[Levels, Levels] = ({}, {})
        self._fresh: list[Task] = []  # arrived since the last scheduling pass
        # Tasks no fleet of this pool could run: pending for ever, never tried.
        self.never: list[Task] = []
        self._freed = False  # slots or room were freed or added since the last pass
        # (slots, single agent) of the tasks that found no fit in this pass: a pass only
        # takes room, so a task asking the same cannot fit either.
        self._unfit: set[tuple[int, bool]] = set()
        # How many tasks wait, by the slots they ask: what Determined's provisioner reads.
        self.waiting_by_slots: dict[int, int] = {}
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

    @property
    def queue(self) -> list[Task]:
        """The tasks waiting, in the order the scheduler tries them: tasks with slots,
        then zero-slot ones, each by priority level and queue order; then arrivals no
        pass has seen yet."""
        return (
            [
                task
                for levels in self.levels
                for priority in sorted(levels)
                for task in levels[priority]
            ]
            + self.never
            + self._fresh
        )

    # What happens to the master

    def submit(self, job: Job) -> Task:
        schedulable = fits_pool(
            job.gpus, self.sizes, self.max_agents, job.single_agent, self.max_aux
        )
        task = Task(job, schedulable)
        if self.arrived is not None:
            self.arrived.append((job.arrival, job.gpus))
        self._fresh.append(task)
        self._count_waiting(task, 1)
        self.touched = True
        return task

    def connect(self, agent_id: str, slots: int | None = None) -> None:
        """An agent registers with its instance's slots (default: the largest size)."""
        agent = SimAgent(agent_id, self.slots if slots is None else slots)
        self.agents[agent_id] = agent
        self.connections += 1
        self.index.add(agent)
        self.connected_slots += agent.slots
        self._set_idle(agent)
        self.changed = self.touched = self._freed = True

    def disconnect(self, agent_id: str, now: int | None = None, resume: bool = False) -> None:
        """An agent went away: its tasks go back to the head of their level of the queue,
        as Determined requeues them, and start over, or with ``resume`` go on with the
        time they had left (a trial restarts from its checkpoint: here, as if it
        checkpointed at the moment it was cut). Their wait to restart is counted from
        ``now``."""
        agent = self.agents.pop(agent_id, None)
        if agent is None:
            return
        if agent.enabled:
            self.index.remove(agent)
        self.connected_slots -= agent.slots
        if agent.idle:
            del self.idle_agents[agent]
            self.idle_slots -= agent.slots
        self.never_used += not agent.ever_used
        lost: list[Task] = sorted(agent.tasks, key=lambda t: t.job.arrival)
        for task in lost:
            self._release(task, excluding=agent)
            if now is not None:
                task.requeued_at = now
                if resume:
                    task.remaining -= now - task.run_started
            task.run += 1
            task.pending = True
            self._count_waiting(task, 1)
            self.requeued += 1
        for task in reversed(lost):
            self.levels[task.zero_slot].setdefault(task.priority, []).insert(0, task)
        self.changed = self.touched = self._freed = True

    def disable(self, agent_id: str) -> None:
        """``POST /api/v1/agents/{id}/disable`` with drain: its tasks run on, and no new
        task is placed on it."""
        agent = self.agents.get(agent_id)
        if agent is None or not agent.enabled:
            return
        self.index.remove(agent)
        agent.enabled = False
        self.changed = self.touched = True

    def enable(self, agent_id: str) -> None:
        agent = self.agents.get(agent_id)
        if agent is None or agent.enabled:
            return
        agent.enabled = True
        self.index.add(agent)
        self.changed = self.touched = self._freed = True

    def reading(self) -> PoolReading:
        """What the bridge reads of this pool from the master's API."""
        agents = tuple(
            AgentReading(a.id, a.slots, a.used, len(a.tasks), a.enabled, not a.enabled)
            for a in self.agents.values()
        )
        pending = tuple(task.wire for task in self.queue)
        return PoolReading(
            self.pool, "RESOURCE_POOL_TYPE_STATIC", agents, pending, self.fitting_policy
        )

    def finish(self, task: Task, run: int) -> None:
        if task.run != run or not task.agents:
            return  # an end of a run that an agent's loss cut short
        self._release(task)
        self.touched = self._freed = True

    # Scheduling

    def schedule(self, now: int) -> None:
        """One pass of ``prioritySchedule``. Tasks queued before the last pass did not fit
        then, or waited behind a level that did not; unless room was freed since, they
        still do, so only the new arrivals are tried."""
        fresh, self._fresh = self._fresh, []
        self._unfit.clear()
        left = [task for task in fresh if not task.schedulable]
        if left:
            self.never += left
            fresh = [task for task in fresh if task.schedulable]
        if self._freed:
            for task in fresh:
                self.levels[task.zero_slot].setdefault(task.priority, []).append(task)
            for levels in self.levels:
                self._schedule_levels(levels, now)
            left += [task for task in fresh if not task.agents]
        else:
            left += self._schedule_arrivals(fresh, now)
        for task in left:
            task.pending = True
            self.changed = True  # a new pending task
        self._freed = False

    def _schedule_levels(self, levels: Levels, now: int) -> None:
        """Every level in order, until one leaves a task waiting: with preemption off,
        the levels below it are backfilling and start nothing
        (``prioritySchedulerWithFilter``)."""
        for priority in sorted(levels):
            waiting = []
            for task in levels[priority]:
                if not self._place(task, now):
                    waiting.append(task)
            if waiting:
                levels[priority] = waiting
                return
            del levels[priority]

    def _schedule_arrivals(self, fresh: list[Task], now: int) -> list[Task]:
        """The new arrivals, by level, when nothing was freed: a task may start if no
        task of a higher level waits (the first level with tasks left holds only tasks
        that did not fit) and it fits. Returns those left waiting."""
        # The level below which every task is backfilling, per class.
        bars = [min(levels, default=math.inf) for levels in self.levels]
        left = []
        for task in sorted(fresh, key=lambda t: t.priority):
            kind = task.zero_slot
            if task.priority <= bars[kind]:
                if self._place(task, now):
                    continue
                bars[kind] = task.priority
            self.levels[kind].setdefault(task.priority, []).append(task)
            left.append(task)
        return left

    def _place(self, task: Task, now: int) -> bool:
        asks = (task.slots, task.job.single_agent)
        if asks in self._unfit:
            return False
        fit = self.index.fit(*asks)
        if fit is None:
            self._unfit.add(asks)
            return False
        if task.start is None:
            task.start = now
            self.waits.append(now - task.job.arrival)
        elif task.requeued_at is not None:
            self.restart_waits.append(now - task.requeued_at)
            task.requeued_at = None
        if task.pending:
            task.pending = False
            self.changed = True  # it left the pending list
        task.run_started = now
        self._count_waiting(task, -1)
        for agent in fit.agents:
            self._use(agent, task, fit.slots_each)
        task.agents, task.slots_each = fit.agents, fit.slots_each
        self.touched = True
        self.running += 1
        self.events.schedule(now + task.remaining, Kind.JOB_END, (task, task.run))
        return True

    def _count_waiting(self, task: Task, change: int) -> None:
        slots = task.slots
        self.queued_slots += change * slots
        count = self.waiting_by_slots.get(slots, 0) + change
        if count:
            self.waiting_by_slots[slots] = count
        else:
            del self.waiting_by_slots[slots]

    def _use(self, agent: SimAgent, task: Task, slots: int) -> None:
        if agent.idle:
            del self.idle_agents[agent]
            self.idle_slots -= agent.slots
            self.changed = True  # idle -> busy
        elif slots and self._free_slots_matter():
            self.changed = True
        agent.tasks.add(task)
        agent.ever_used = True
        if slots:
            self._set_used(agent, agent.used + slots)
            self.busy_slots += slots
        else:
            agent.aux += 1

    def _release(self, task: Task, excluding: SimAgent | None = None) -> None:
        slots = task.slots_each
        for agent in task.agents:
            agent.tasks.discard(task)
            self.busy_slots -= slots
            if agent is excluding:
                continue
            if slots:
                self._set_used(agent, agent.used - slots)
            else:
                agent.aux -= 1
            if agent.idle:
                self._set_idle(agent)
                self.changed = True  # busy -> idle
            elif slots and self._free_slots_matter():
                self.changed = True
        task.agents = ()
        self.running -= 1

    def _set_used(self, agent: SimAgent, used: int) -> None:
        if agent.enabled:
            self.index.move(agent, used)
        else:
            agent.used = used

    def _free_slots_matter(self) -> bool:
        """Whether a busy agent's free slots changing is a change a decision reads: for
        warm headroom, or for the tasks waiting (besides the one being placed)."""
        return self.free_slots_matter or bool(self.waiting_by_slots)

    def _set_idle(self, agent: SimAgent) -> None:
        if agent.idle:
            self.idle_agents[agent] = None
            self.idle_slots += agent.slots

    # What the master says

    def snapshot(self, now: datetime) -> Snapshot:
        """The pool snapshot a master publishes: pending tasks (with their priority and
        whether they stay on one agent), connected agents, and the fitting policy."""
        self.seq += 1
        # Trusted data built by the model itself: no need to validate it again.
        return Snapshot.model_construct(
            pool=self.pool,
            seq=self.seq,
            time=now,
            pending=tuple(task.wire for task in self.queue),
            agents=tuple(agent.wire() for agent in self.agents.values()),
            fitting_policy=self.fitting_policy,
            arrivals=None if self.arrived is None else self._arrivals(seconds_at(now)),
        )

    def _arrivals(self, now: int) -> tuple[Arrival, ...]:
        """The arrivals within the window before ``now``, newest first."""
        arrived = self.arrived
        assert arrived is not None
        while arrived and now - arrived[0][0] > ARRIVALS_WINDOW_SECONDS:
            arrived.popleft()
        return grouped((now - second, slots) for second, slots in reversed(arrived))

    def arrivals_leave_at(self, after: int) -> int | None:
        """The first second after ``after`` at which an arrival leaves the window."""
        if not self.arrived:
            return None
        return max(self.arrived[0][0] + ARRIVALS_WINDOW_SECONDS + 1, after + 1)

    def take_change(self) -> Change:
        """How the master changed since the last call."""
        change = Change.DECISION if self.changed else Change.OTHER if self.touched else Change.NONE
        self.changed = self.touched = False
        return change
