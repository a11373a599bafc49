"""A GCP pool with offerings over the wire: each VM on the first machine Compute Engine
has capacity for, the refusal remembered, and nothing created twice on a replay."""

from __future__ import annotations

from typing import Any

from dynagent.decide import decide
from dynagent.fallback import CapacityMemory
from dynagent.fleet import Fleet
from dynagent.gcp.compute import GceProvider
from dynagent.local.gce import LocalCompute
from dynagent.snapshot import PendingTask, Snapshot

from .helpers import config, gcp_pool_document, managed, now

SMALL = {"machine_type": "n1-standard-8", "gpu_type": "nvidia-tesla-t4", "gpu_num": 1}
LARGE = {"machine_type": "n1-standard-32", "gpu_type": "nvidia-tesla-t4", "gpu_num": 4}


def offerings_provider(compute: LocalCompute, memory: CapacityMemory, **spec: Any) -> GceProvider:
    offerings = {"machines": [SMALL, LARGE], **spec}
    cfg = config(gcp_pool_document(offerings=offerings, max_instances=10))
    pool = next(iter(cfg.pools.values()))
    return GceProvider(
        pool,
        compute.instances_client(),
        compute.zone_operations_client(),
        cfg.settings,
        sleep=lambda _: None,
        memory=memory,
    )


def demand(seq: int, *slots: int) -> Snapshot:
    tasks = tuple(PendingTask(task=f"t{i}", slots=n) for i, n in enumerate(slots))
    return Snapshot(pool="t4", seq=seq, time=now(), pending=tasks)


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
