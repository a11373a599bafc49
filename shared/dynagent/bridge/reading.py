"""What one read of the master says about each resource pool: pure, from its JSON.

Agents come from ``/api/v1/agents`` (a slot is used when it holds a container), the
tasks on each agent and the unplaced allocations from ``/api/v1/tasks`` (a zero-slot
task shows only there: in no slot and in no agent's containers), and queued jobs from
``/api/v1/job-queues-v2``, which add demand the allocations do not show yet. A pending
task's priority is its allocation's (a job's task has one), else its job's; it must stay
on one agent when its job is a command, notebook, shell or TensorBoard, or when it has no
job (checkpoint GC, Determined's only task outside a job). A pool's fitting policy is
its scheduler's (``schedulerFittingPolicy``).
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from dynagent.core.snapshot import Agent, PendingTask

Json = dict[str, Any]


@dataclass(frozen=True)
class AgentReading:
    id: str
    slots: int
    used_slots: int
    tasks: int
    enabled: bool
    draining: bool

    @property
    def idle(self) -> bool:
        return self.used_slots == 0 and self.tasks == 0

    def as_agent(self, *, draining: bool, enabled: bool, retired: bool = False) -> Agent:
        return Agent(
            id=self.id,
            slots=self.slots,
            used_slots=self.used_slots,
            draining=draining,
            tasks=self.tasks,
            enabled=enabled,
            retired=retired,
        )


# Job types whose tasks Determined places on one agent (command.go: NTSC tasks).
SINGLE_AGENT_JOBS = frozenset({"TYPE_COMMAND", "TYPE_NOTEBOOK", "TYPE_SHELL", "TYPE_TENSORBOARD"})
_FITTING_POLICIES = {"FITTING_POLICY_BEST": "best", "FITTING_POLICY_WORST": "worst"}


@dataclass(frozen=True)
class TaskReading:
    id: str
    slots: int
    registered: datetime | None = None


@dataclass(frozen=True)
class PoolReading:
    name: str
    type: str
    agents: tuple[AgentReading, ...] = ()
    pending: tuple[PendingTask, ...] = ()
    fitting_policy: str | None = None
    # Every task of the pool the master allocates for, placed or not: (allocation id,
    # slots, when the master registered it, if it says), for ``bridge.arrivals``.
    tasks: tuple[TaskReading, ...] = ()

    def with_state(self, agent_id: str, *, enabled: bool, draining: bool) -> PoolReading:
        """This reading with one agent enabled or drained, as a write just made it."""
        agents = tuple(
            replace(a, enabled=enabled, draining=draining) if a.id == agent_id else a
            for a in self.agents
        )
        return replace(self, agents=agents)


def read_pools(
    agents: Sequence[Json],
    pools: Sequence[Json],
    allocations: Sequence[Json],
    jobs: Mapping[str, Sequence[Json]],
) -> dict[str, PoolReading]:
    """Every pool the master lists, with its agents and pending demand."""
    tasks_on = Counter[str]()
    pending: dict[str, list[PendingTask]] = defaultdict(list)
    tasks: dict[str, list[TaskReading]] = defaultdict(list)
    job_of = _jobs_by_entity(jobs)
    for allocation in allocations:
        placed = {
            agent_id
            for resources in allocation.get("resources") or []
            for agent_id in (resources.get("agentDevices") or {})
        }
        tasks_on.update(placed)
        slots = int(allocation.get("slotsNeeded") or 0)
        name = str(allocation.get("allocationId") or allocation.get("taskId"))
        registered = _time(allocation.get("registeredTime"))
        tasks[str(allocation.get("resourcePool") or "")].append(
            TaskReading(name, slots, registered)
        )
        if not placed:
            # Only a job's task has a priority; the one kind without a job, checkpoint
            # GC, shares a trial's task id form (checkpoint_gc.go), so it is told apart so.
            if "priority" in allocation:
                job = _job_of(str(allocation.get("taskId") or ""), job_of)
                single = job is not None and job.get("type") in SINGLE_AGENT_JOBS
                task = PendingTask(name, slots, _priority(allocation["priority"]), single)
            else:
                task = PendingTask(name, slots, None, True)
            pending[str(allocation.get("resourcePool") or "")].append(task)
    by_pool: dict[str, list[AgentReading]] = defaultdict(list)
    for item in agents:
        devices: list[Json] = list((item.get("slots") or {}).values())
        reading = AgentReading(
            id=str(item["id"]),
            slots=len(devices),
            used_slots=len([slot for slot in devices if slot.get("container")]),
            tasks=tasks_on[str(item["id"])],
            enabled=bool(item.get("enabled")),
            draining=bool(item.get("draining")),
        )
        for pool in item.get("resourcePools") or []:
            by_pool[str(pool)].append(reading)
    return {
        name: PoolReading(
            name=name,
            type=str(pool.get("type") or ""),
            agents=tuple(sorted(by_pool[name], key=lambda a: a.id)),
            pending=tuple(pending[name]) + _queued_beyond(pending[name], jobs.get(name, ())),
            fitting_policy=_FITTING_POLICIES.get(str(pool.get("schedulerFittingPolicy"))),
            tasks=tuple(tasks[name]),
        )
        for pool in pools
        if (name := str(pool.get("name") or ""))
    }


def _queued_beyond(pending: list[PendingTask], jobs: Sequence[Json]) -> tuple[PendingTask, ...]:
    """Queued jobs' slots that no unplaced allocation accounts for yet.

    A job's allocations are not named in the queue, so the match is by slots, in queue
    order: the first queued jobs are the ones the pending allocations belong to.
    """
    unaccounted = sum(task.slots for task in pending)
    extra = []
    for job in jobs:
        if (job.get("summary") or {}).get("state") != "STATE_QUEUED":
            continue
        missing = int(job.get("requestedSlots") or 0) - int(job.get("allocatedSlots") or 0)
        taken = min(max(missing, 0), unaccounted)
        unaccounted -= taken
        if missing - taken > 0:
            single = job.get("type") in SINGLE_AGENT_JOBS
            name = f"job:{job.get('jobId')}"
            extra.append(PendingTask(name, missing - taken, _priority(job.get("priority")), single))
    return tuple(extra)


def _jobs_by_entity(jobs: Mapping[str, Sequence[Json]]) -> dict[str, Json]:
    """Every pool's jobs by entity id: a command's task id, an experiment's id."""
    return {str(job.get("entityId")): job for queue in jobs.values() for job in queue}


def _job_of(task_id: str, jobs: Mapping[str, Json]) -> Json | None:
    """The job a task belongs to: the job whose entity it is (a command's task id), or,
    for a trial (task id ``EXPERIMENT.UUID``, experiment.go), its experiment's."""
    job = jobs.get(task_id)
    if job is None and "." in task_id:
        job = jobs.get(task_id.split(".", 1)[0])
        if job is not None and job.get("type") != "TYPE_EXPERIMENT":
            return None
    return job


def _time(value: Any) -> datetime | None:
    """A protobuf timestamp as Determined's REST API writes it; None if absent or not one."""
    if not isinstance(value, str) or not value:
        return None
    # Up to nine fractional digits (nanoseconds), of which datetime keeps six.
    value = re.sub(r"(\.\d{6})\d+", r"\1", value)
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        return None
    return moment if moment.tzinfo is not None else None


def _priority(value: Any) -> int | None:
    return None if value is None else int(value)
