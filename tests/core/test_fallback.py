"""Launching on the next offering when the cloud has no capacity, and remembering it."""

from __future__ import annotations

from datetime import timedelta

from dynagent.core.offerings import Offering, Purchase
from dynagent.core.plan import Launch
from dynagent.run.fallback import Attempt, CapacityMemory, launch_with_fallback
from tests.builders import NOW

SMALL_SPOT = Offering("p3.2xlarge", 1, 0.9, "subnet-a", Purchase.SPOT)
SMALL_OD = Offering("p3.2xlarge", 1, 3.06, "subnet-a", Purchase.ON_DEMAND)
LARGE = Offering("p3.8xlarge", 4, 12.24, "subnet-a", Purchase.ON_DEMAND)


class Cloud:
    """Offerings with a capacity each (absent: plenty); records every call."""

    def __init__(self, capacity: dict[str, int]) -> None:
        self.capacity = capacity
        self.calls: list[tuple[str, int]] = []

    def __call__(self, offering: Offering, count: int) -> Attempt:
        self.calls.append((offering.key, count))
        free = self.capacity.get(offering.key, count)
        n = min(free, count)
        self.capacity[offering.key] = free - n
        ids = tuple(f"{offering.instance_type}-{len(self.calls)}-{i}" for i in range(n))
        return Attempt(started=ids, out_of_capacity=n < count)


def small(n: int) -> tuple[Launch, ...]:
    return tuple(Launch("t", offerings=(SMALL_SPOT, SMALL_OD, LARGE)) for _ in range(n))


def test_all_in_one_call_when_there_is_capacity() -> None:
    cloud = Cloud({})
    result = launch_with_fallback(small(3), cloud, CapacityMemory(), NOW)
    assert len(result.started) == 3
    assert cloud.calls == [(SMALL_SPOT.key, 3)]
    assert result.error is None and result.unavailable == ()


def test_spot_out_falls_to_on_demand_then_the_larger_type_in_one_pass() -> None:
    cloud = Cloud({SMALL_SPOT.key: 1, SMALL_OD.key: 1})
    memory = CapacityMemory()
    result = launch_with_fallback(small(3), cloud, memory, NOW)
    assert len(result.started) == 3
    assert cloud.calls == [(SMALL_SPOT.key, 3), (SMALL_OD.key, 2), (LARGE.key, 1)]
    assert result.unavailable == (SMALL_SPOT.key, SMALL_OD.key)
    assert memory.unavailable(NOW) == {SMALL_SPOT.key, SMALL_OD.key}
    # Each machine with the offering it started on: what a re-pack counts as launched.
    assert [o.key for _, o in result.placements] == [SMALL_SPOT.key, SMALL_OD.key, LARGE.key]
    assert tuple(i for i, _ in result.placements) == result.started


def test_all_out_is_one_call_per_offering_and_an_error() -> None:
    cloud = Cloud({SMALL_SPOT.key: 0, SMALL_OD.key: 0, LARGE.key: 0})
    result = launch_with_fallback(small(2), cloud, CapacityMemory(), NOW)
    assert result.started == ()
    assert [key for key, _ in cloud.calls] == [SMALL_SPOT.key, SMALL_OD.key, LARGE.key]
    assert result.error is not None and "no capacity for 2 machine(s)" in result.error


def test_memory_forgets_after_its_time() -> None:
    memory = CapacityMemory(remember_for=timedelta(minutes=5))
    memory.refused(SMALL_SPOT, NOW)
    assert memory.unavailable(NOW + timedelta(minutes=4)) == {SMALL_SPOT.key}
    assert memory.unavailable(NOW + timedelta(minutes=5)) == frozenset()


def test_another_refusal_stops_the_pass() -> None:
    def refuse(offering: Offering, count: int) -> Attempt:
        return Attempt(error="InvalidParameterValue: bad image")

    result = launch_with_fallback(small(2), refuse, CapacityMemory(), NOW)
    assert result.error == "InvalidParameterValue: bad image"
    assert result.unavailable == ()


def test_a_replayed_call_counts_as_launched() -> None:
    def replay(offering: Offering, count: int) -> Attempt:
        return Attempt(replayed=True)

    result = launch_with_fallback(small(2), replay, CapacityMemory(), NOW)
    assert result.replayed and result.error is None
