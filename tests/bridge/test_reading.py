"""Reading the master's JSON into pools: plain data in the API's own shapes."""

from __future__ import annotations

from typing import Any

from dynagent.bridge.reading import read_pools
from dynagent.snapshot import PendingTask


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


def allocation(name: str, slots: int, on: tuple[str, ...] = ()) -> dict[str, Any]:
    return {
        "allocationId": name,
        "taskId": name.split(".")[0],
        "slotsNeeded": slots,
        "resourcePool": "a100",
        "resources": [{"agentDevices": {a: {"devices": []}}} for a in on],
    }


def job(
    job_id: str, requested: int, allocated: int = 0, state: str = "STATE_QUEUED"
) -> dict[str, Any]:
    return {
        "jobId": job_id,
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
        PendingTask("j1.1", 8),
        PendingTask("job:j2", 8),
        PendingTask("job:j3", 4),
    )


def test_every_listed_pool_is_read_even_without_agents() -> None:
    pools = read_pools([], [*POOLS, {"name": "gpu2", "type": "RESOURCE_POOL_TYPE_AWS"}], [], {})
    assert set(pools) == {"a100", "gpu2"} and pools["gpu2"].type == "RESOURCE_POOL_TYPE_AWS"
