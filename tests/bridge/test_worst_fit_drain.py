"""Under the master's worst fit, the bridge drains the busy agents best fit would let empty.

Worst fit (``fitting_methods.go`` ``WorstFit``) places each new task on the agent with
the largest share free, so ten 1-GPU tasks hold ten 8-GPU agents busy where best fit
would fill two, and the fleet never shrinks: no agent goes idle. The bridge keeps the
fullest agents enabled, until their free slots hold one largest machine, and drains
the rest; the functions terminate each once its last task ends.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

from dynagent.bridge.drain import Drainer
from dynagent.bridge.reading import AgentReading, PoolReading
from dynagent.core.decide import decide
from dynagent.core.fleet import Fleet
from dynagent.core.snapshot import Agent, PendingTask, Snapshot
from tests.builders import agent_instance, ago, pool

NOW = datetime(2026, 11, 24, 3, 0, tzinfo=UTC)
DRAINED = pool(instance_type="p3.16xlarge", drain_idle_agents=True)  # 8 slots


def agent(agent_id: str, used: int, slots: int = 8) -> AgentReading:
    return AgentReading(agent_id, slots, used, used, enabled=True, draining=False)


def reading(*agents: AgentReading, policy: str = "worst", pending: int = 0) -> PoolReading:
    tasks = tuple(PendingTask(f"t{k}", 1) for k in range(pending))
    return PoolReading("gpu", "RESOURCE_POOL_TYPE_STATIC", agents, tasks, policy)


def drained(read: PoolReading, pool_: object = DRAINED) -> list[str]:
    actions = Drainer().actions(pool_, read, NOW)  # type: ignore[arg-type]
    assert all(not a.enable for a in actions)
    return [a.agent_id for a in actions]


def test_ten_1_gpu_tasks_on_ten_agents_keep_the_two_best_fit_would_fill() -> None:
    spread = reading(*(agent(f"a{k}", 1) for k in range(10)))
    assert drained(spread) == [f"a{k}" for k in range(2, 10)]


def test_the_fullest_agents_are_kept_and_full_ones_always() -> None:
    read = reading(agent("full", 8), agent("two", 2), agent("six", 6), agent("one", 1))
    # Fullest first: full (0 free), six (2), two (6 free: 8 in all); one is surplus.
    assert drained(read) == ["one"]


def test_an_idle_agent_is_the_spare_room_and_keeps_the_idle_period_rule() -> None:
    read = reading(agent("idle", 0), agent("a", 3), agent("b", 1))
    assert drained(read) == ["a", "b"]


def test_nothing_is_drained_while_tasks_wait_or_below_min_instances() -> None:
    spread = [agent(f"a{k}", 1) for k in range(4)]
    assert drained(reading(*spread, pending=1)) == []
    assert drained(reading(*spread), pool(instance_type="p3.16xlarge")) == []  # no drain
    floor = pool(instance_type="p3.16xlarge", drain_idle_agents=True, min_instances=3)
    assert drained(reading(*spread), floor) == ["a3"]


def test_mixed_sizes_keep_a_largest_machines_worth_of_free_slots() -> None:
    read = reading(agent("s1", 1, slots=4), agent("s2", 1, slots=4), agent("b1", 2), agent("b2", 7))
    # b2 (1 free), s1 (3), s2 (3): 7 < 8, so b1 (6 free) is kept too: nothing to drain.
    assert drained(read) == []
    read = reading(agent("s1", 3, slots=4), agent("b1", 1), agent("b2", 2), agent("b3", 1))
    # s1 (1 free), b2 (6): 7, then b1 (7): 14; b3 is surplus.
    assert drained(read) == ["b3"]


def test_a_drained_agent_is_terminated_when_its_last_task_ends() -> None:
    # The functions' side: draining and busy stays; draining and empty goes at once (the
    # snapshot's report is fresh), with no idle period of its own to wait out.
    cloud = Fleet((agent_instance("a", idle_since=ago(0)), agent_instance("b")))
    busy = Agent(id="b", slots=8, used_slots=1, tasks=1, draining=True)
    empty = Agent(id="a", slots=8, used_slots=0, draining=True)
    report = Snapshot(pool="gpu", seq=1, time=NOW, agents=(empty, busy), fitting_policy="worst")
    plan = decide(DRAINED, cloud, report, NOW)
    assert [t.instance_id for t in plan.terminations] == ["a"]


def enabled(read: PoolReading, drained_ids: set[str]) -> list[str]:
    actions = Drainer(drained=set(drained_ids)).actions(DRAINED, read, NOW)
    assert all(a.enable for a in actions)
    return [a.agent_id for a in actions]


def draining(agent_id: str, used: int) -> AgentReading:
    return AgentReading(agent_id, 8, used, 1 if used else 0, enabled=False, draining=True)


def test_a_drained_agent_comes_back_only_when_it_lets_a_waiting_task_fit() -> None:
    kept = (agent("a", 1), agent("b", 1))
    trial = (PendingTask("trial", 8),)
    # Busy drained agents (7 free) hold no 8-slot trial: it gets a new machine.
    busy = reading(*kept, draining("c", 1), draining("d", 1))
    assert enabled(replace(busy, pending=trial), {"c", "d"}) == []
    # An empty drained agent holds it; one is enough.
    empty = reading(*kept, draining("c", 1), draining("e", 0), draining("f", 0))
    assert enabled(replace(empty, pending=trial), {"c", "e", "f"}) == ["e"]
    # A 16-slot trial over two whole agents needs both, though neither alone helps.
    gang = (PendingTask("gang", 16),)
    assert enabled(replace(empty, pending=gang), {"c", "e", "f"}) == ["e", "f"]
    # The most free first is a 16-slot agent with 10 free, which holds no part of the
    # gang: it stays drained; the gang goes to the two whole 8-slot ones.
    wide = AgentReading("w", 16, 6, 1, enabled=False, draining=True)
    mixed = reading(*kept, wide, draining("e", 0), draining("f", 0))
    assert enabled(replace(mixed, pending=gang), {"w", "e", "f"}) == ["e", "f"]
    # A zero-slot task with no agent enabled: the most free drained agent.
    alone = reading(draining("c", 1), draining("e", 0))
    zero = (PendingTask("gc", 0, None, True), PendingTask("big", 8))
    assert enabled(replace(alone, pending=zero), {"c", "e"}) == ["e"]
    assert enabled(replace(alone, pending=zero[:1]), {"c", "e"}) == ["e"]
