"""The agent resource manager's scheduler tick (``rm/agentrm``) over the master's state:
prune after a provisioner's launch error, fit each pending task, place it; and a task's
end (finished, killed with its agent, or failed), which frees its devices and goes into the
master's history, with its experiment's end when it was the last trial running."""

from __future__ import annotations

from dynagent.testing.determined.admission import tasks_to_prune
from dynagent.testing.determined.state import Agent, MasterState, Resources, Task


def tick(state: MasterState) -> list[str]:
    """One scheduler tick: first prune the pools whose provisioner has a launch
    error, then place what fits, in priority then submission order; the task ids
    placed."""
    _prune(state)
    placed: list[str] = []
    pending = [t for t in state.tasks.values() if not t.placed]
    for task in sorted(pending, key=lambda t: (t.priority, t.seq)):
        found = _fit(state, task)
        if found is None:
            continue
        for agent, devices in found:
            container_id = state.new_id("container")
            if devices:
                for device in devices:
                    agent.owners[device] = container_id
            else:
                agent.zero_slot.append(container_id)
            task.resources.append(Resources(container_id, agent.id, devices))
        task.started = state.tick()
        placed.append(task.task_id)
    return placed


def _prune(state: MasterState) -> None:
    """resource_pool.go pruneTaskList, for each pool with a launch error."""
    for pool in state.pools.values():
        if pool.provider is None or pool.launch_error is None:
            continue
        pending = [
            (t.task_id, t.slots)
            for t in state.tasks.values()
            if t.pool == pool.name and not t.placed
        ]
        for task_id in tasks_to_prune(pending, pool.provider, pool.listed_instances):
            # sproto.InvalidResourcesRequestError, which fails the allocation
            state.errors[task_id] = f"invalid resources request: {pool.launch_error}"
            end_task(state, state.tasks[task_id], "ERROR")


def _fit(state: MasterState, task: Task) -> list[tuple[Agent, list[int]]] | None:
    agents = sorted(
        (a for a in state.agents.values() if a.pool == task.pool and a.schedulable()),
        key=lambda a: a.id,
    )
    if task.slots == 0:
        for agent in agents:
            limit = state.pools[task.pool].max_aux_containers_per_agent
            if len(agent.zero_slot) < limit:
                return [(agent, [])]
        return None
    fits = [a for a in agents if len(a.free_devices()) >= task.slots]
    if fits:
        chosen = _shared_fit(fits, state.pools[task.pool].fitting_policy)
        return [(chosen, chosen.free_devices()[: task.slots])]
    if any(a.slots >= task.slots for a in state.agents.values() if a.pool == task.pool):
        return None  # it fits on one agent, just not now
    idle = [a for a in agents if a.slots and a.used() == 0]
    for size in sorted({a.slots for a in idle}, reverse=True):
        same = [a for a in idle if a.slots == size]
        if task.slots % size == 0 and len(same) >= task.slots // size:
            return [(a, list(range(size))) for a in same[: task.slots // size]]
    return None


def _shared_fit(fits: list[Agent], policy: str) -> Agent:
    """``fitting_methods.go``: best fit takes the fewest free slots (``BestFit``,
    1 / (1 + free)), worst fit the largest share free (``WorstFit``, free / slots);
    a tie goes to the lowest id."""
    if policy == "worst":
        return max(fits, key=lambda a: len(a.free_devices()) / a.slots)
    return min(fits, key=lambda a: len(a.free_devices()))


def end_task(state: MasterState, task: Task, how: str) -> None:
    """The task ends (FINISHED, KILLED or ERROR): its devices and aux slots are free, and
    it is kept in the history with its end."""
    for res in task.resources:
        agent = state.agents.get(res.agent_id)
        if agent is None:
            continue
        agent.owners = [None if o == res.container_id else o for o in agent.owners]
        if res.container_id in agent.zero_slot:
            agent.zero_slot.remove(res.container_id)
    del state.tasks[task.task_id]
    state.ended[task.task_id] = how
    task.ended, task.end_state = state.tick(), how
    state.history[task.task_id] = task
    if task.trial_id is not None:
        _end_experiment_if_done(state, task)


def _end_experiment_if_done(state: MasterState, trial: Task) -> None:
    """An experiment ends with its last trial (its searcher made no more: create_trial is
    refused after), COMPLETED if a trial completed, else ERROR (experiment.go, when the
    searcher shuts down or every trial failed)."""
    experiment = state.records.get(int(trial.entity_id))
    if experiment is None or any(t in state.tasks for t in experiment.task_ids):
        return
    ended = [state.history[t] for t in experiment.task_ids]
    completed = any(t.end_state == "FINISHED" for t in ended)
    experiment.ended = trial.ended
    experiment.outcome = "COMPLETED" if completed else "ERROR"


def kill_tasks_on(state: MasterState, agent: Agent) -> None:
    for task in list(state.tasks.values()):
        if any(r.agent_id == agent.id for r in task.resources):
            end_task(state, task, "KILLED")
