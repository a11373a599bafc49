"""The reconcile function re-packs in the same pass when the cheapest machine for the
tasks has no capacity in any zone: two 4-slot tasks decided onto one a2-highgpu-8g start
on two a2-highgpu-4g instead, on the local Compute, in a pool written as in master.yaml
(``max_instances: 10``, no ``max_slots``)."""

from __future__ import annotations

from collections import Counter
from typing import Any

from dynagent.gcp.functions import GcpFunctions
from dynagent.testing.gcp.compute import LocalCompute
from dynagent.testing.gcp.pubsub_events import message_event

from .helpers import ZONE, config, gcp_pool_document, managed, now, snapshot

ZONE_B = "us-central1-b"
A100 = "nvidia-tesla-a100"


def test_a_machine_out_in_every_zone_is_repacked_onto_smaller_machines_in_one_pass(
    compute: LocalCompute,
) -> None:
    offerings = {
        "machines": [
            {"machine_type": "a2-highgpu-4g", "gpu_type": A100, "gpu_num": 4},
            {"machine_type": "a2-highgpu-8g", "gpu_type": A100, "gpu_num": 8},
        ],
        "zones": [ZONE, ZONE_B],
        # As an admin writes it: no prices, no max_slots. At list prices one 8g costs a
        # tenth of a cent an hour less than two 4g, so it is the cover; the cap is 10 x 8
        # slots, in machines of either size.
    }
    document = gcp_pool_document(
        instance_type={"machine_type": "a2-highgpu-8g", "gpu_type": A100, "gpu_num": 8},
        offerings=offerings,
        max_instances=10,
    )
    instances, operations = compute.instances_client(), compute.zone_operations_client()

    def function() -> GcpFunctions:
        return GcpFunctions(
            config(document),
            instances=lambda: instances,
            operations=lambda: operations,
            sleep=lambda _: None,
        )

    functions = function()
    compute.limit_capacity("a2-highgpu-8g", count=0)
    pending = snapshot(1, pool="t4", pending=[("a", 4), ("b", 4)])
    delivery = message_event(
        pending.to_json().encode(), "projects/p/topics/snapshots", "projects/p/subscriptions/s"
    )

    outcome = functions.reconcile_event(delivery)

    assert outcome is not None and outcome.plan is not None
    assert [launch.tasks for launch in outcome.plan.launches] == [("a", "b")]  # one 8g
    vms = managed(compute)
    assert Counter(machine_type(vm) for vm in vms) == {"a2-highgpu-4g": 2}
    assert {vm["labels"]["dynagent-launch-key"] for vm in vms} == {"t4-1-repack1"}
    # Each 8g offering was asked once (one VM each), then the two 4g VMs.
    refused = Counter((o.machine_type, o.zone) for o in compute.capacity_refusals())
    assert refused == {("a2-highgpu-8g", ZONE): 1, ("a2-highgpu-8g", ZONE_B): 1}
    assert compute.call_names().count("instances.insert") == 4
    keys = {f"a2-highgpu-8g@{zone}/on-demand" for zone in (ZONE, ZONE_B)}
    assert functions.capacity["t4"].unavailable(now()) == keys
    assert outcome.launch is not None and outcome.launch.error is None
    assert set(outcome.report()["repacked"][0]["refused"]) == keys

    # The same message again (Pub/Sub delivers at least once), to this function or to a
    # cold one that remembers no refusal: nothing more is created.
    for again in (functions, function()):
        compute.clear_calls()
        replayed = again.reconcile_event(delivery)
        assert replayed is not None and replayed.plan is not None
        assert replayed.plan.launches == () and replayed.repacks == ()
        assert "instances.insert" not in compute.call_names()
    assert len(managed(compute)) == 2


def machine_type(vm: dict[str, Any]) -> str:
    return str(vm["machineType"]).rsplit("/", 1)[-1]
