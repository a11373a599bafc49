"""The master places work as Determined's agent resource manager does: ``findFits``
(``fitting.go``) and the priority scheduler without preemption (``priority.go``)."""

from __future__ import annotations

import pytest

from dynagent.core.fitting import FittingPolicy
from dynagent.simulate.clock import EPOCH, Events
from dynagent.simulate.fitting import dedicated_size, fits_pool
from dynagent.simulate.master import SimMaster
from dynagent.simulate.policy import Change
from dynagent.simulate.trace import Job


def master_of(
    *agents: tuple[str, int],
    policy: FittingPolicy = "best",
    max_aux: int = 100,
    max_agents: int = 16,
) -> SimMaster:
    """A master with these (id, slots) agents registered, in that order."""
    sizes = {slots for _, slots in agents} or {8}
    master = SimMaster("gpu", sizes, max_agents, Events(), fitting_policy=policy, max_aux=max_aux)
    for agent_id, slots in agents:
        master.connect(agent_id, slots)
    master.schedule(0)
    master.take_change()
    return master


def job(
    name: str, gpus: int, priority: int = 42, single_agent: bool = False, arrival: int = 0
) -> Job:
    return Job(name, arrival, 600, gpus, priority, single_agent)


def used(master: SimMaster) -> dict[str, int]:
    return {agent.id: agent.used for agent in master.agents.values()}


def where(master: SimMaster, name: str) -> list[str]:
    task = next(t for a in master.agents.values() for t in a.tasks if t.job.id == name)
    return [agent.id for agent in task.agents]


def waiting(master: SimMaster) -> list[str]:
    return [task.job.id for task in master.queue]


def fours(count: int) -> list[tuple[str, int]]:
    return [(f"four-{n}", 4) for n in range(1, count + 1)]


# findFits: a shared agent first, else whole agents of one size


def test_a_gang_goes_on_the_size_that_divides_it_not_the_largest() -> None:
    # Sizes are tried largest first: one 8 cannot hold 12, three 4s can.
    master = master_of(*fours(3), ("eight", 8))
    master.submit(job("twelve", 12))
    master.schedule(0)
    assert where(master, "twelve") == ["four-1", "four-2", "four-3"]
    assert used(master) == {"four-1": 4, "four-2": 4, "four-3": 4, "eight": 0}


@pytest.mark.parametrize("gpus", [20, 28])
def test_a_gang_takes_as_many_4_slot_agents_as_it_needs(gpus: int) -> None:
    master = master_of(*fours(8))
    master.submit(job("gang", gpus))
    master.schedule(0)
    assert len(where(master, "gang")) == gpus // 4
    assert master.busy_slots == gpus and list(used(master).values()).count(0) == 8 - gpus // 4


def test_a_16_slot_task_on_four_idle_4_slot_agents_starts_at_once() -> None:
    master = master_of(*fours(4))
    master.submit(job("sixteen", 16))
    master.schedule(5)
    assert waiting(master) == [] and master.waits == [5]
    assert sorted(where(master, "sixteen")) == ["four-1", "four-2", "four-3", "four-4"]


def test_a_gang_waits_for_unused_agents_and_a_size_that_divides_it() -> None:
    master = master_of(*fours(3), ("eight", 8))
    master.submit(job("one", 1))
    master.schedule(0)  # on a 4: the best fit among equals is the longest free
    master.submit(job("ten", 10))  # no size divides 10: it can never run here
    master.submit(job("twelve", 12))  # two unused 4s and an 8: neither size holds it
    master.schedule(0)
    assert waiting(master) == ["twelve", "ten"]
    assert [task.schedulable for task in master.queue] == [True, False]


def test_a_single_agent_task_is_never_split_across_agents() -> None:
    ones = [(f"one-{n}", 1) for n in range(1, 9)]
    master = master_of(*ones)
    master.submit(job("notebook", 8, single_agent=True))
    master.submit(job("trial", 8))
    master.schedule(0)
    # The trial may span eight 1-slot agents; the single-agent task waits for ever.
    assert waiting(master) == ["notebook"]
    assert len(where(master, "trial")) == 8
    assert not master.queue[0].schedulable
    assert fits_pool(8, (1,), 16) and not fits_pool(8, (1,), 16, single_agent=True)


def test_best_fit_takes_the_fullest_agent_of_any_size() -> None:
    master = master_of(("eight", 8), ("four", 4))
    master.submit(job("six", 6))
    master.schedule(0)
    master.submit(job("two", 2))
    master.schedule(0)
    # 2 free on the 8 beside the 6-slot task: fuller than the empty 4.
    assert used(master) == {"eight": 8, "four": 0}


def test_worst_fit_spreads_single_slot_tasks_over_empty_agents() -> None:
    master = master_of(("a", 4), ("b", 4), ("c", 4), policy="worst")
    for n in range(1, 4):
        master.submit(job(f"t{n}", 1))
    master.schedule(0)
    assert used(master) == {"a": 1, "b": 1, "c": 1}
    best = master_of(("a", 4), ("b", 4), ("c", 4))
    for n in range(1, 4):
        best.submit(job(f"t{n}", 1))
    best.schedule(0)
    assert used(best) == {"a": 3, "b": 0, "c": 0}


def test_worst_fit_compares_the_share_free_across_sizes() -> None:
    master = master_of(("eight", 8), ("four", 4), policy="worst")
    master.submit(job("five", 5))
    master.schedule(0)  # 3/8 free on the 8 after it, 4/4 on the 4
    master.submit(job("one", 1))
    master.schedule(0)
    assert used(master) == {"eight": 5, "four": 1}


@pytest.mark.parametrize(
    ("request_", "unused", "size"),
    [
        (12, [(4, 3), (8, 1)], 4),
        (16, [(8, 2), (4, 4)], 8),
        (16, [(8, 1), (4, 4)], 4),
        (12, [(8, 2), (4, 2)], None),  # 8 does not divide 12; two 4s hold only 8
        (6, [(0, 5), (2, 3)], 2),
    ],
)
def test_the_dedicated_size(request_: int, unused: list[tuple[int, int]], size: int | None) -> None:
    assert dedicated_size(request_, unused) == size


@pytest.mark.parametrize(
    ("gpus", "sizes", "max_instances", "fits"),
    [
        (0, (8,), 1, True),
        (8, (8,), 1, True),
        (12, (1, 4, 8), 3, True),  # three 4s
        (12, (8,), 10, False),
        (24, (8,), 2, False),  # three instances, two allowed
        (24, (1, 8), 3, True),
        (3, (2,), 10, False),
        (1, (8,), 0, False),
    ],
)
def test_fits_pool_by_the_pools_machine_sizes(
    gpus: int, sizes: tuple[int, ...], max_instances: int, fits: bool
) -> None:
    assert fits_pool(gpus, sizes, max_instances) is fits


# The priority scheduler, preemption off


def test_a_lower_priority_task_waits_behind_a_higher_level_even_if_it_fits() -> None:
    master = master_of(("a", 8))
    master.submit(job("big", 16, priority=10))  # does not fit: one agent only
    master.submit(job("small", 1, priority=50))
    master.schedule(0)
    assert waiting(master) == ["big", "small"] and used(master) == {"a": 0}
    # A later arrival of the waiting level, or above it, still starts if it fits.
    master.submit(job("same", 1, priority=10))
    master.submit(job("higher", 2, priority=5))
    master.submit(job("lower", 1, priority=42))
    master.schedule(1)
    assert waiting(master) == ["big", "lower", "small"]
    assert used(master) == {"a": 3}
    # An agent added: the whole queue is tried again; "big" needs two unused agents.
    master.connect("b", 8)
    master.schedule(2)
    assert waiting(master) == ["big", "lower", "small"] and used(master)["b"] == 0
    # With "big" started on two, the lower levels start too.
    master.connect("c", 8)
    master.schedule(3)
    assert waiting(master) == [] and sorted(where(master, "big")) == ["b", "c"]
    assert used(master) == {"a": 5, "b": 8, "c": 8}


def test_a_task_that_can_never_run_holds_no_level_back() -> None:
    master = master_of(("a", 8))
    master.submit(job("notebook", 16, priority=1, single_agent=True))
    master.submit(job("small", 1, priority=50))
    master.schedule(0)
    assert waiting(master) == ["notebook"] and used(master) == {"a": 1}


def test_tasks_of_one_level_that_fit_start_past_one_that_does_not() -> None:
    master = master_of(("a", 8))
    master.submit(job("gang", 16))
    master.submit(job("small", 4))
    master.schedule(0)
    assert waiting(master) == ["gang"] and used(master) == {"a": 4}


def test_zero_slot_tasks_are_scheduled_apart_from_the_others() -> None:
    master = master_of(("a", 8))
    master.submit(job("big", 16, priority=1))
    master.submit(job("gc", 0, priority=99))
    master.schedule(0)
    assert waiting(master) == ["big"]
    assert [t.job.id for t in master.agents["a"].tasks] == ["gc"]


def test_zero_slot_tasks_are_bounded_by_max_aux_containers() -> None:
    master = master_of(("a", 8), ("b", 8), max_aux=2)
    for n in range(1, 6):
        master.submit(job(f"cmd{n}", 0))
    master.schedule(0)
    assert waiting(master) == ["cmd5"]
    assert [agent.aux for agent in master.agents.values()] == [2, 2]
    assert master.busy_slots == 0 and used(master) == {"a": 0, "b": 0}
    # An agent running only zero-slot tasks is busy: not idle, not to be reaped.
    assert master.idle_slots == 0
    assert [(a.used_slots, a.tasks, a.idle) for a in master.snapshot(EPOCH).agents] == [
        (0, 2, False),
        (0, 2, False),
    ]
    master.connect("c", 8)
    master.schedule(1)
    assert waiting(master) == [] and master.agents["c"].aux == 1


def test_a_zero_slot_task_goes_beside_work_under_best_fit() -> None:
    master = master_of(("a", 8), ("b", 8))
    master.submit(job("trial", 2))
    master.schedule(0)
    master.submit(job("tensorboard", 0))
    master.schedule(0)
    assert where(master, "trial") == where(master, "tensorboard")
    assert master.idle_slots == 8  # the other agent stays idle


def test_unused_agents_running_zero_slot_tasks_still_take_a_gang() -> None:
    master = master_of(("a", 8), ("b", 8))
    master.submit(job("shell", 0))
    master.schedule(0)
    master.submit(job("gang", 16))
    master.schedule(0)
    assert sorted(where(master, "gang")) == ["a", "b"]


def test_the_first_agent_to_register_goes_to_the_first_task_that_fits() -> None:
    master = master_of()
    master.submit(job("one", 1, arrival=0))
    master.submit(job("eight", 8, arrival=0))
    master.schedule(0)
    # The 8-slot machine launched for "eight" registers first: "one" was queued first.
    master.connect("i-eight", 8)
    master.schedule(180)
    assert where(master, "one") == ["i-eight"] and waiting(master) == ["eight"]
    master.connect("i-one", 1)
    master.schedule(190)
    assert waiting(master) == ["eight"]  # the 1-slot machine holds nothing it can run


def test_a_lost_agent_puts_its_tasks_back_at_the_head_of_their_level() -> None:
    master = master_of(("a", 8))
    master.submit(job("first", 8, priority=30))
    master.schedule(0)
    master.submit(job("queued", 8, priority=30, arrival=5))
    master.submit(job("urgent", 8, priority=10, arrival=5))
    master.schedule(5)
    master.disconnect("a", now=10)
    assert waiting(master) == ["urgent", "first", "queued"]


def test_the_snapshot_carries_priority_single_agent_and_the_fitting_policy() -> None:
    master = master_of(("a", 4), policy="worst")
    master.submit(job("notebook", 8, priority=7, single_agent=True))
    master.schedule(0)
    assert master.take_change() is Change.DECISION
    snapshot = master.snapshot(EPOCH)
    assert [(t.task, t.slots, t.priority, t.single_agent) for t in snapshot.pending] == [
        ("notebook", 8, 7, True)
    ]
    assert snapshot.fitting_policy == "worst"
