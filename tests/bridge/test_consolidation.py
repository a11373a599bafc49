"""The bridge's drains: consolidation under best fit, and an agent held for a gang at the cap.

Best fit (``fitting_methods.go`` ``BestFit``) fills the fullest agents first, but once
they are full it places on the emptier ones and keeps them busy too. While no task
waits, the bridge drains the busy agents beyond a largest machine's worth of free slots
on fuller ones, so they end with their last task. Under worst fit at ``max_instances``
nothing can be launched, and each small task goes to the emptiest agent: a waiting
8-slot task would wait for every agent's small tasks at once, so the bridge drains the
agent nearest to empty for it, and enables it again as soon as a waiting task fits on it.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

from dynagent.bridge.drain import DrainAction, Drainer
from dynagent.bridge.reading import AgentReading, PoolReading
from dynagent.core.config import Pool
from dynagent.core.snapshot import PendingTask
from tests.builders import pool

NOW = datetime(2026, 11, 24, 3, 0, tzinfo=UTC)
CAPPED = pool(instance_type="p3.16xlarge", drain_idle_agents=True, max_instances=3)  # 8 slots


def agent(agent_id: str, used: int, slots: int = 8) -> AgentReading:
    return AgentReading(agent_id, slots, used, used, enabled=True, draining=False)


def draining(agent_id: str, used: int) -> AgentReading:
    return AgentReading(agent_id, 8, used, used, enabled=False, draining=True)


def reading(
    *agents: AgentReading, pending: tuple[int, ...] = (), policy: str = "worst"
) -> PoolReading:
    tasks = tuple(PendingTask(f"t{k}", slots) for k, slots in enumerate(pending))
    return PoolReading("gpu", "RESOURCE_POOL_TYPE_STATIC", agents, tasks, policy)


def actions(
    read: PoolReading, drained: tuple[str, ...] = (), shape: Pool = CAPPED
) -> list[DrainAction]:
    return Drainer(drained=set(drained)).actions(shape, read, NOW)


def test_under_best_fit_the_emptier_busy_agents_are_drained_to_end_with_their_tasks() -> None:
    spread = reading(agent("a", 5), agent("b", 1), agent("c", 2), agent("d", 1), policy="best")
    # Fullest first: a (3 free), c (6: 9 in all, a largest machine's worth); b, d drain.
    drained = actions(spread)
    assert [(a.agent_id, a.enable) for a in drained] == [("b", False), ("d", False)]
    assert drained[0].reason.startswith("consolidating: 9 free slots on fuller agents")


def test_under_worst_fit_at_the_cap_a_gang_that_fits_nowhere_holds_the_emptiest_agent() -> None:
    full = reading(agent("a", 7), agent("b", 5), agent("c", 6), pending=(8,))
    [held] = actions(full)
    assert (held.agent_id, held.enable) == ("b", False)
    assert held.reason == (
        "at max_instances (3) a 8-slot task fits in no agent's free slots: this one, 5 of 8 "
        "in use, takes no new task until it does"
    )


def test_no_agent_is_held_while_anything_else_could_help() -> None:
    below_cap = reading(agent("a", 7), agent("b", 5), pending=(8,))
    assert actions(below_cap) == []  # the functions launch a machine for it
    small_fits = reading(agent("a", 7), agent("b", 5), agent("c", 6), pending=(8, 1))
    assert actions(small_fits) == []  # the master places the 1-slot task first
    no_free = reading(agent("a", 8), agent("b", 8), agent("c", 8), pending=(8,))
    assert actions(no_free) == []  # no slot is wasted: the next to free is a task's
    gang = reading(agent("a", 7), agent("b", 5), agent("c", 6), pending=(16,))
    assert actions(gang) == []  # over two agents: whole idle ones, not one held
    undrained = pool(instance_type="p3.16xlarge", max_instances=3)
    capped = reading(agent("a", 7), agent("b", 5), agent("c", 6), pending=(8,))
    assert actions(capped, shape=undrained) == []  # the master is never changed
    # Best fit fills the emptiest agent last: holding it would change nothing.
    assert actions(replace(capped, fitting_policy="best")) == []


def test_one_held_agent_at_a_time_and_back_as_soon_as_a_waiting_task_fits_on_it() -> None:
    held = reading(agent("a", 7), draining("b", 5), agent("c", 6), pending=(8,))
    assert actions(held, ("b",)) == []  # b is on its way to empty already
    emptied = replace(held, agents=(agent("a", 7), draining("b", 0), agent("c", 6)))
    assert [(a.agent_id, a.enable) for a in actions(emptied, ("b",))] == [("b", True)]
    # A 3-slot task fits only in b's free slots: b takes it, as the master would.
    smaller = reading(agent("a", 7), draining("b", 5), agent("c", 6), pending=(8, 3))
    assert [(a.agent_id, a.enable) for a in actions(smaller, ("b",))] == [("b", True)]
