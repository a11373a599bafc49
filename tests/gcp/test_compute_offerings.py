"""A GCP pool with offerings over the wire: each VM on the first machine Compute Engine
has capacity for, the refusal remembered, and nothing created twice on a replay."""

from __future__ import annotations

from dynagent.core.decide import decide
from dynagent.core.fleet import Fleet
from dynagent.core.offerings import Offering
from dynagent.core.plan import Launch, Plan, Termination
from dynagent.core.snapshot import Snapshot
from dynagent.gcp.compute import GceProvider
from dynagent.run.fallback import CapacityMemory
from dynagent.testing.gcp.compute import LocalCompute

from .helpers import ZONE, config, gcp_pool_document, managed, now, provider_for, snapshot

SMALL = {"machine_type": "n1-standard-8", "gpu_type": "nvidia-tesla-t4", "gpu_num": 1}
LARGE = {"machine_type": "n1-standard-32", "gpu_type": "nvidia-tesla-t4", "gpu_num": 4}
SMALL_OFFERINGS = (Offering("n1-standard-8", 1, 0.73, ZONE),)


def offerings_provider(compute: LocalCompute, memory: CapacityMemory) -> GceProvider:
    # A cap in GPUs well under 10 of the largest: room to spare for small machines.
    offerings = {"machines": [SMALL, LARGE], "max_slots": 10}
    return provider_for(compute, memory=memory, offerings=offerings, max_instances=10)


def demand(seq: int, *slots: int) -> Snapshot:
    return snapshot(seq, "t4", pending=[(f"t{i}", n) for i, n in enumerate(slots)])


def machine_types(compute: LocalCompute) -> list[str]:
    return sorted(vm["machineType"].rsplit("/", 1)[-1] for vm in managed(compute))


def test_each_task_gets_the_cheapest_machine(compute: LocalCompute) -> None:
    provider = offerings_provider(compute, CapacityMemory())
    plan = decide(provider.pool, provider.observe(), demand(1, 1, 4), now())
    result = provider.launch(plan)

    assert result.error is None and len(result.started) == 2
    assert machine_types(compute) == ["n1-standard-32", "n1-standard-8"]
    fleet = provider.observe()
    assert sorted(i.instance_type for i in fleet.instances) == machine_types(compute)
    assert all(i.zone == compute.zone and not i.spot for i in fleet.instances)


def test_out_of_capacity_falls_to_the_larger_machine_and_is_remembered(
    compute: LocalCompute,
) -> None:
    memory = CapacityMemory()
    provider = offerings_provider(compute, memory)
    compute.fail_next_inserts(1, code="ZONE_RESOURCE_POOL_EXHAUSTED")
    plan = decide(provider.pool, provider.observe(), demand(1, 1), now())
    result = provider.launch(plan)

    assert result.error is None
    assert machine_types(compute) == ["n1-standard-32"]
    small = f"n1-standard-8@{compute.zone}/on-demand"
    assert result.unavailable == (small,)
    # The next decision leaves the refused offering aside, as long as it is remembered.
    assert provider.observe().unavailable == {small}
    later = decide(provider.pool, Fleet(unavailable=memory.unavailable(now())), demand(2, 1), now())
    assert [launch.offerings[0].instance_type for launch in later.launches] == ["n1-standard-32"]


def test_another_error_stops_without_falling_through(compute: LocalCompute) -> None:
    provider = offerings_provider(compute, CapacityMemory())
    compute.fail_next_inserts(1, code="INVALID_FIELD_VALUE", message="bad image")
    plan = decide(provider.pool, provider.observe(), demand(1, 1), now())
    result = provider.launch(plan)

    assert result.started == ()
    assert result.error is not None and "INVALID_FIELD_VALUE" in result.error
    assert managed(compute) == []


def test_a_replayed_plan_creates_nothing_more(compute: LocalCompute) -> None:
    provider = offerings_provider(compute, CapacityMemory())
    plan = decide(provider.pool, Fleet(), demand(3, 1, 1, 4), now())
    first = provider.launch(plan)
    again = provider.launch(plan)
    assert sorted(again.started) == sorted(first.started)
    assert len(first.started) == 3  # one machine per 1-slot task, one for the 4 slots
    assert len(managed(compute)) == 3


ZONE_B = "us-central1-b"


def test_a_zone_out_of_capacity_falls_to_the_next_zone_listed_in_one_call(
    compute: LocalCompute,
) -> None:
    provider = provider_for(
        compute,
        memory=CapacityMemory(),
        offerings={"machines": [SMALL], "zones": [compute.zone, ZONE_B]},
        max_instances=10,
    )
    compute.limit_capacity("n1-standard-8", zone=compute.zone, count=0)
    plan = decide(provider.pool, provider.observe(), demand(1, 1, 1), now())
    result = provider.launch(plan)

    assert result.error is None and len(result.started) == 2
    assert result.unavailable == (f"n1-standard-8@{compute.zone}/on-demand",)
    compute.clear_calls()
    fleet = provider.observe()
    assert sorted(i.zone for i in fleet.instances) == [ZONE_B, ZONE_B]
    # Two zones, one paged call: the listing does not grow with the offerings.
    assert compute.call_names() == ["instances.aggregatedList"]
    # Terminations reach each VM in its own zone.
    provider.terminate(tuple(Termination(i.id, "test") for i in fleet.instances))
    assert managed(compute) == []


def test_everything_out_is_one_insert_per_offering_and_no_hot_loop(
    compute: LocalCompute,
) -> None:
    memory = CapacityMemory()
    offerings = {"machines": [SMALL, LARGE], "max_slots": 10}
    provider = provider_for(compute, memory=memory, offerings=offerings)
    compute.limit_capacity("n1-standard-8", count=0)
    compute.limit_capacity("n1-standard-32", count=0, kind="quota")
    compute.clear_calls()
    plan = decide(provider.pool, provider.observe(), demand(1, 1), now())
    result = provider.launch(plan)

    assert result.started == ()
    assert result.error is not None and "no capacity for 1 machine(s)" in result.error
    inserts = [name for name in compute.call_names() if name == "instances.insert"]
    assert len(inserts) == 2  # one per offering tried
    # The next pass chooses nothing until the memory forgets: it says why, launches nothing.
    again = decide(provider.pool, provider.observe(), demand(2, 1), now())
    assert again.launches == ()
    assert again.waiting == ("t0 (1 slots): no machine of 1 or more slots has capacity now",)


def test_keys_too_long_for_a_name_still_name_distinct_vms(compute: LocalCompute) -> None:
    # The pool's name leaves a key's seq near the end of the 63 characters: cut there,
    # two snapshots (or a snapshot and its re-pack) would ask for the same VM names,
    # and the second would take the first one's VMs for its own.
    name = "a-pool-whose-name-takes-forty-characters"
    document = gcp_pool_document(name=name, offerings={"machines": [SMALL]}, max_instances=10)
    provider = provider_for(compute, config(document), memory=CapacityMemory())
    started = []
    for key in (f"{name}:1230", f"{name}:1231", f"{name}:1231:repack1"):
        plan = Plan(name, key, now(), launches=(Launch("t", offerings=SMALL_OFFERINGS),))
        started += provider.launch(plan).started
    assert len(set(started)) == 3 and all(len(vm) <= 63 for vm in started)
    assert len(managed(compute, name)) == 3
