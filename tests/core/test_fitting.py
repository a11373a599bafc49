"""Where the master places a task on the agents it has now (dynagent.core.fitting.AgentFit)."""

from __future__ import annotations

from dynagent.core.fitting import AgentFit


def fit(slots: list[int], free: list[int], policy: str = "best") -> AgentFit:
    return AgentFit(slots, free, range(len(slots)), "worst" if policy == "worst" else "best")


def test_best_fit_fills_the_first_listed_agent_before_the_next() -> None:
    agents = fit([4, 4, 4], [4, 4, 4])

    placed = [agents.place(1, single_agent=False) for _ in range(6)]

    assert placed == [[0], [0], [0], [0], [1], [1]]
    assert agents.free == [0, 2, 4]


def test_worst_fit_spreads_over_the_emptiest_first() -> None:
    agents = fit([4, 4, 4], [4, 4, 4], "worst")

    placed = [agents.place(1, single_agent=False) for _ in range(4)]

    assert placed == [[0], [1], [2], [0]]


def test_agents_keep_their_order_when_one_leaves_a_bucket_out_of_turn() -> None:
    agents = fit([8, 8, 8, 8], [8, 8, 8, 8])

    agents.take_whole(2)  # a gang took the third unused agent, not the first

    assert agents.idle(8) == [0, 1, 3]
    assert [agents.place(8, single_agent=True) for _ in range(3)] == [[0], [1], [3]]
    assert agents.full


def test_the_agents_are_full_once_no_slot_is_free() -> None:
    agents = fit([2, 2], [2, 1])
    assert not agents.full

    agents.place(2, single_agent=False)
    assert not agents.full
    agents.place(1, single_agent=False)

    assert agents.full
    assert agents.place(1, single_agent=False) is None


def test_thousands_of_idle_agents_take_tasks_in_listing_order() -> None:
    # Agents leave their bucket from its front: the order must hold however many left.
    count = 5_000
    agents = fit([8] * count, [8] * count)

    placed = [agents.place(8, single_agent=False) for _ in range(count)]

    assert placed == [[index] for index in range(count)]
    assert agents.full
