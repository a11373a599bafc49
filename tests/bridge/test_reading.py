"""Reading the master's JSON into pools: plain data in the API's own shapes."""

from __future__ import annotations

from typing import Any

from dynagent.bridge.reading import read_pools
from dynagent.core.snapshot import PendingTask


def agent(agent_id: str, used: int, slots: int = 4, **fields: Any) -> dict[str, Any]:
    container = {"id": "c", "state": "STATE_RUNNING", "devices": [], "parent": ""}
    return {
        "id": agent_id,
        "enabled": True,
        "draining": False,
        "resourcePools": ["a100"],
        "slots": {
            f"/agents/{agent_id}/slots/{n}": {
                "id": str(n),
                "container": container if n < used else None,
            }
            for n in range(slots)
        },
        **fields,
    }


def allocation(
    name: str, slots: int, on: tuple[str, ...] = (), priority: int | None = 42
) -> dict[str, Any]:
    """A task's allocation ``TASK.N``; only a job's task has a priority (proto3 optional)."""
    found = {
        "allocationId": name,
        "taskId": name.rsplit(".", 1)[0],
        "slotsNeeded": slots,
        "resourcePool": "a100",
        "resources": [{"agentDevices": {a: {"devices": []}}} for a in on],
    }
    if priority is not None:
        found["priority"] = priority
    return found


def job(
    job_id: str,
    requested: int,
    allocated: int = 0,
    state: str = "STATE_QUEUED",
    *,
    type: str = "TYPE_EXPERIMENT",
    entity: str = "",
    priority: int = 42,
) -> dict[str, Any]:
    return {
        "jobId": job_id,
        "type": type,
        "entityId": entity or job_id,
        "priority": priority,
        "requestedSlots": requested,
        "allocatedSlots": allocated,
        "summary": {"state": state, "jobsAhead": 0},
    }


POOLS = [{"name": "a100", "type": "RESOURCE_POOL_TYPE_STATIC"}]


def test_a_zero_slot_task_shows_only_in_the_allocations() -> None:
    pools = read_pools(
        [agent("i-1", 0), agent("i-2", 2)],
        POOLS,
        [allocation("cmd.1", 0, on=("i-1",)), allocation("t.1", 2, on=("i-2",))],
        {},
    )
    agents = {a.id: (a.used_slots, a.tasks, a.idle) for a in pools["a100"].agents}
    assert agents == {"i-1": (0, 1, False), "i-2": (2, 1, False)}


def test_queued_jobs_add_only_what_unplaced_allocations_do_not_show() -> None:
    jobs = [job("j1", 8), job("j2", 8), job("j3", 4), job("run", 8, 8, "STATE_SCHEDULED")]
    pools = read_pools([], POOLS, [allocation("j1.1", 8)], {"a100": jobs})
    assert pools["a100"].pending == (
        PendingTask("j1.1", 8, 42),
        PendingTask("job:j2", 8, 42),
        PendingTask("job:j3", 4, 42),
    )


def test_each_pending_task_carries_its_priority_and_whether_it_stays_on_one_agent() -> None:
    """Trials may span agents; commands, notebooks, shells, TensorBoards and checkpoint GC
    (no job, so no priority; its task id has a trial's form) may not."""
    jobs = [
        job("j-cmd", 8, type="TYPE_COMMAND", entity="cmd-1", priority=10),
        job("j-exp", 16, type="TYPE_EXPERIMENT", entity="7", priority=42),
        job("j-nb", 1, type="TYPE_NOTEBOOK", entity="nb-1", priority=50),
        job("j-tb", 0, type="TYPE_TENSORBOARD", entity="tb-1"),
        job("j-exp2", 4, type="TYPE_EXPERIMENT", entity="8", priority=60),
    ]
    allocations = [
        allocation("cmd-1.1", 8, priority=10),
        allocation("7.3f1e.1", 16, priority=42),  # the trial of experiment 7
        allocation("7.9c2d.1", 0, priority=None),  # checkpoint GC of experiment 7
        allocation("tb-1.1", 0, priority=42),
    ]
    pools = read_pools([], POOLS, allocations, {"a100": jobs})
    assert pools["a100"].pending == (
        PendingTask("cmd-1.1", 8, 10, True),
        PendingTask("7.3f1e.1", 16, 42, False),
        PendingTask("7.9c2d.1", 0, None, True),
        PendingTask("tb-1.1", 0, 42, True),
        PendingTask("job:j-nb", 1, 50, True),  # queued, no allocation yet
        PendingTask("job:j-exp2", 4, 60, False),
    )


def test_the_pool_carries_its_schedulers_fitting_policy() -> None:
    pools = read_pools(
        [],
        [
            {**POOLS[0], "schedulerFittingPolicy": "FITTING_POLICY_WORST"},
            {"name": "b", "schedulerFittingPolicy": "FITTING_POLICY_BEST"},
            {"name": "k8s", "schedulerFittingPolicy": "FITTING_POLICY_KUBERNETES"},
        ],
        [],
        {},
    )
    assert {name: pool.fitting_policy for name, pool in pools.items()} == {
        "a100": "worst",
        "b": "best",
        "k8s": None,
    }


def test_every_listed_pool_is_read_even_without_agents() -> None:
    pools = read_pools([], [*POOLS, {"name": "gpu2", "type": "RESOURCE_POOL_TYPE_AWS"}], [], {})
    assert set(pools) == {"a100", "gpu2"} and pools["gpu2"].type == "RESOURCE_POOL_TYPE_AWS"
