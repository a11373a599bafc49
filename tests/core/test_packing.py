"""Demand: pending tasks packed first-fit-decreasing onto arriving, then new, instances."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from dynagent.core.offerings import Shape
from dynagent.core.packing import Demand, Existing, pack
from dynagent.core.snapshot import PendingTask
from tests.builders import task


def packed(
    pending: list[PendingTask],
    *,
    slots: int = 4,
    arriving: int = 0,
    room: int = 100,
    max_instances: int = 100,
) -> Demand:
    shapes = [Shape("m", slots, 1.0 * slots)]
    existing = [Existing(slots, slots)] * arriving
    return pack(tuple(pending), shapes, existing, room=room, max_machines=max_instances)


def test_no_pending_no_instances() -> None:
    demand = packed([])
    assert demand.new_instances == []
    assert demand.unschedulable == []
    assert demand.waiting == []


def test_first_fit_decreasing_across_several_tasks() -> None:
    # In the given order first fit would need 4 instances; largest first needs 3.
    pending = [task("a2", 2), task("b3", 3), task("c1", 1), task("d4", 4), task("e2", 2)]

    demand = packed(pending)

    assert demand.new_instances == [["d4"], ["b3", "c1"], ["a2", "e2"]]


def test_first_fit_takes_the_lowest_bin_that_fits() -> None:
    # After 3, 3, 2: bins have 1, 1, 2 free; the 1-slot tasks go to the first two.
    pending = [task("x3", 3), task("y3", 3), task("z2", 2), task("p1", 1), task("q1", 1)]

    assert packed(pending).new_instances == [["x3", "p1"], ["y3", "q1"], ["z2"]]


def test_equal_sizes_keep_their_order() -> None:
    pending = [task(f"t{i}", 2) for i in range(5)]
    assert packed(pending).new_instances == [["t0", "t1"], ["t2", "t3"], ["t4"]]


def test_arriving_instances_are_filled_first() -> None:
    demand = packed([task("a", 4), task("b", 4), task("c", 4)], arriving=2)
    assert demand.new_instances == [["c"]]


def test_arriving_capacity_is_shared_between_small_tasks() -> None:
    demand = packed([task("a", 1), task("b", 2), task("c", 1)], arriving=1)
    assert demand.new_instances == []


def test_no_room_means_waiting() -> None:
    demand = packed([task("a", 4), task("b", 4), task("c", 2)], room=1)

    assert demand.new_instances == [["a"]]
    assert [t.task for t, _ in demand.waiting] == ["b", "c"]


def test_a_small_task_still_fills_a_started_instance_when_out_of_room() -> None:
    demand = packed([task("a", 3), task("b", 2), task("c", 1)], room=1)

    assert demand.new_instances == [["a", "c"]]
    assert [t.task for t, _ in demand.waiting] == ["b"]


def test_gang_task_takes_whole_new_instances() -> None:
    demand = packed([task("big", 12)])
    assert demand.new_instances == [["big"], ["big"], ["big"]]


def test_gang_task_takes_empty_arriving_instances_first() -> None:
    demand = packed([task("big", 8)], arriving=1)
    assert demand.new_instances == [["big"]]


def test_gang_task_does_not_share_instances_with_small_tasks() -> None:
    demand = packed([task("small", 1), task("big", 8)])
    assert demand.new_instances == [["big"], ["big"], ["small"]]


def test_a_gang_at_the_cap_gets_the_room_there_is() -> None:
    # 3 instances needed, only 2 of room: both are launched for it, and the small task
    # takes one meanwhile, as the master starts it there while the gang cannot start.
    demand = packed([task("big", 12), task("small", 2)], room=2)

    assert demand.new_instances == [["big", "small"], ["big"]]
    assert [t.task for t, _ in demand.waiting] == ["big"]


def test_a_waiting_gang_gives_back_the_arriving_instances_it_looked_at() -> None:
    # The gang needs 2 instances: 1 arriving, and no room for another. The arriving
    # instance must still be free for the 4-slot task after it.
    demand = packed([task("big", 8), task("four", 4)], arriving=1, room=0)

    assert demand.new_instances == []
    assert [t.task for t, _ in demand.waiting] == ["big"]


def test_two_gangs_and_small_tasks() -> None:
    pending = [task("g1", 8), task("s1", 3), task("g2", 8), task("s2", 1)]

    demand = packed(pending, arriving=1)

    # g1 takes the arriving instance and one new; g2 two new; s1 and s2 share one.
    assert demand.new_instances == [["g1"], ["g2"], ["g2"], ["s1", "s2"]]


@pytest.mark.parametrize(
    ("slots", "max_instances", "reason"),
    [
        (6, 5, "needs 6 slots, which is not a multiple of the 4 slots of one instance"),
        (5, 5, "not a multiple"),
        (24, 5, "needs 6 instances of 4 slots, more than max_instances (5)"),
    ],
    ids=["not-multiple", "one-over", "over-max"],
)
def test_tasks_that_can_never_fit(slots: int, max_instances: int, reason: str) -> None:
    demand = packed([task("never", slots), task("fine", 4)], max_instances=max_instances)

    assert [(u.task, u.slots) for u in demand.unschedulable] == [("never", slots)]
    assert reason in demand.unschedulable[0].reason
    assert demand.new_instances == [["fine"]]
    assert demand.waiting == []


def test_a_gang_of_exactly_max_instances_is_schedulable() -> None:
    demand = packed([task("big", 20)], max_instances=5, room=5)
    assert len(demand.new_instances) == 5
    assert demand.unschedulable == []


def test_instances_without_slots_schedule_nothing() -> None:
    demand = packed([task("a", 1)], slots=0)

    assert demand.new_instances == []
    assert [u.task for u in demand.unschedulable] == ["a"]
    assert "no slots" in demand.unschedulable[0].reason


def test_many_tasks_pack_tightly() -> None:
    # 300 tasks of 3 and 300 of 1 on 4-slot instances: exactly 300 instances.
    pending = [task(f"a{i}", 3) for i in range(300)] + [task(f"b{i}", 1) for i in range(300)]

    demand = packed(pending, room=1000)

    assert len(demand.new_instances) == 300
    assert all(len(tasks) == 2 for tasks in demand.new_instances)


def _reference_pack(
    pending: list[PendingTask], slots: int, arriving: int, room: int
) -> tuple[list[list[str]], list[str]]:
    """First-fit-decreasing the obvious quadratic way, to check the indexed packer."""
    free = [slots] * arriving
    tasks: list[list[str]] = [[] for _ in range(arriving)]
    opened = 0
    waiting = []
    # Machines a gang waiting at the cap took, open to smaller tasks meanwhile.
    claimed: set[int] = set()
    for item in sorted(pending, key=lambda t: -t.slots):
        if item.slots <= slots:
            fits = [i for i, f in enumerate(free) if f >= item.slots]
            if fits:
                index = fits[0]
            elif opened < room:
                free.append(slots)
                tasks.append([])
                opened += 1
                index = len(free) - 1
            else:
                waiting.append(item.task)
                continue
            free[index] -= item.slots
            tasks[index].append(item.task)
        else:
            need = item.slots // slots
            empty = [i for i, f in enumerate(free) if f == slots and i not in claimed][:need]
            missing = need - len(empty)
            if missing > room - opened:
                for _ in range(room - opened):
                    free.append(slots)
                    tasks.append([])
                    empty.append(len(free) - 1)
                opened = room
                for index in empty:
                    claimed.add(index)
                    tasks[index].append(item.task)
                waiting.append(item.task)
                continue
            for _ in range(missing):
                free.append(slots)
                tasks.append([])
                empty.append(len(free) - 1)
            opened += missing
            for index in empty:
                free[index] = 0
                tasks[index].append(item.task)
    return tasks[arriving:], waiting


@pytest.mark.parametrize("seed", range(40))
def test_matches_a_plain_first_fit_decreasing(seed: int) -> None:
    rng = random.Random(seed)
    slots = rng.choice([1, 2, 4, 8])
    sizes = [s for s in range(1, 3 * slots + 1) if s <= slots or s % slots == 0]
    pending = [task(f"t{i}", rng.choice(sizes)) for i in range(rng.randrange(1, 40))]
    arriving = rng.randrange(0, 4)
    room = rng.randrange(0, 20)

    demand = packed(pending, slots=slots, arriving=arriving, room=room)

    expected_new, expected_waiting = _reference_pack(pending, slots, arriving, room)
    assert demand.new_instances == expected_new
    assert [t.task for t, _ in demand.waiting] == expected_waiting
    assert len(demand.new_instances) <= room


SHAPES = [Shape("s", 1, 3.06), Shape("m", 4, 12.24), Shape("l", 8, 24.48)]


@pytest.mark.parametrize("seed", range(30))
def test_several_shapes_place_every_task_once_and_never_cost_more(seed: int) -> None:
    rng = random.Random(seed)
    sizes = [1, 1, 1, 2, 2, 3, 4, 5, 8, 16]
    pending = tuple(task(f"t{i}", rng.choice(sizes)) for i in range(rng.randrange(1, 60)))

    demand = pack(pending, SHAPES, [], room=1000, max_machines=1000)
    largest_only = pack(pending, SHAPES[2:], [], room=1000, max_machines=1000)

    slots = {t.task: t.slots for t in pending}
    placed = Counter(name for machine in demand.new_machines for name in machine.tasks)
    # A gang is on each of its whole machines; any other task on one machine.
    assert placed == {name: max(1, n // 8) for name, n in slots.items()}
    for machine in demand.new_machines:
        used = sum(min(slots[name], machine.shape.slots) for name in machine.tasks)
        assert used == machine.used <= machine.shape.slots
    cost = sum(m.shape.price for m in demand.new_machines)
    assert cost <= sum(m.shape.price for m in largest_only.new_machines) + 1e-9


def test_two_two_slot_tasks_share_a_four_gpu_machine() -> None:
    demand = pack((task("a", 2), task("b", 2)), SHAPES, [], room=10, max_machines=10)
    assert [(m.shape.instance_type, m.tasks) for m in demand.new_machines] == [("m", ["a", "b"])]


P3 = [Shape("p3.2xlarge", 1, 3.06), Shape("p3.8xlarge", 4, 12.24), Shape("p3.16xlarge", 8, 24.48)]


def test_the_last_machines_may_be_smaller_than_the_largest_task() -> None:
    # 2 + 2 + 1 slots: a p3.8xlarge for the 2s and a p3.2xlarge for the 1 cost $15.30 an
    # hour; a p3.16xlarge for all three $24.48. The 1-slot task's machine may be smaller
    # than the 2-slot tasks'.
    pending = (task("a", 2), task("b", 2), task("c", 1))
    demand = pack(pending, P3, [], room=10, max_machines=10)
    machines = sorted((m.shape.instance_type, tuple(m.tasks)) for m in demand.new_machines)
    assert machines == [("p3.2xlarge", ("c",)), ("p3.8xlarge", ("a", "b"))]
