"""Which drained agents the bridge enables again: by fit, as the functions place tasks.

Found by reading (issue 17's bridge work): the bridge compared the pending tasks' slots
in sum with the enabled agents' free slots in sum, while the functions' core places
each task on one agent. An 8-slot task beside two enabled 8-slot agents with 4 free
each: the bridge saw room and enabled nothing; the core counted the drained agent as
room and launched nothing; the task waited for ever.
"""

from __future__ import annotations

from datetime import UTC, datetime

from dynagent.bridge.drain import Drainer
from dynagent.bridge.reading import AgentReading, PoolReading
from dynagent.core.decide import decide
from dynagent.core.fleet import Fleet
from dynagent.core.snapshot import PendingTask, Snapshot
from tests.builders import agent_instance, pool

NOW = datetime(2026, 11, 24, 3, 0, tzinfo=UTC)
DRAINED = pool(instance_type="p3.16xlarge", drain_idle_agents=True)  # 8 slots


def agent(agent_id: str, used: int, draining: bool = False) -> AgentReading:
    return AgentReading(agent_id, 8, used, 1 if used else 0, enabled=True, draining=draining)


def test_a_task_that_fits_only_in_sum_gets_a_drained_agent_back() -> None:
    reading = PoolReading(
        "gpu",
        "RESOURCE_POOL_TYPE_STATIC",
        agents=(agent("a", 4), agent("b", 4), agent("c", 0, draining=True)),
        pending=(PendingTask("trial-8", 8),),
    )
    drainer = Drainer(drained={"c"})
    (action,) = drainer.actions(DRAINED, reading, NOW)
    assert (action.agent_id, action.enable) == ("c", True)

    # What the functions decide on the same snapshot, had it been published as it was:
    # the drained agent is room, so they launch nothing; the bridge must enable it.
    published = Snapshot(
        pool="gpu",
        seq=1,
        time=NOW,
        pending=reading.pending,
        agents=tuple(a.as_agent(draining=a.draining, enabled=True) for a in reading.agents),
    )
    cloud = Fleet(instances=tuple(agent_instance(i) for i in ("a", "b", "c")))
    assert decide(DRAINED, cloud, published, NOW).launches == ()


def test_tasks_that_fit_the_enabled_agents_leave_drained_ones_drained() -> None:
    reading = PoolReading(
        "gpu",
        "RESOURCE_POOL_TYPE_STATIC",
        agents=(agent("a", 4), agent("b", 4), agent("c", 0, draining=True)),
        pending=(PendingTask("t1", 4), PendingTask("t2", 4)),
    )
    assert Drainer(drained={"c"}).actions(DRAINED, reading, NOW) == []
