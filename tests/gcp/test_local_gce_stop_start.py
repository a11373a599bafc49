"""The local Compute's instances.stop and instances.start, through the real client.

A warm pool keeps stopped VMs to start again: these tests pin what the fake reproduces of
the API for that (the states a VM passes through, what it keeps, a start refused for
capacity), so a fake that drifts from Compute Engine fails here first.
"""

from __future__ import annotations

import time
import uuid
from datetime import datetime
from typing import Any

import pytest
from google.api_core import exceptions
from google.cloud import compute_v1

from dynagent.testing.gcp.compute import LocalCompute, Offering

from .test_local_gce import FAST, OTHER_ZONE, get, gpu_instance, insert, stockout_message, vm


def where(compute: LocalCompute, name: str, zone: str | None = None) -> dict[str, str]:
    return {"project": compute.project, "zone": zone or compute.zone, "instance": name}


def stop(
    client: Any,
    compute: LocalCompute,
    name: str,
    request_id: str | None = None,
    zone: str | None = None,
) -> Any:
    request = compute_v1.StopInstanceRequest(**where(compute, name, zone))
    if request_id is not None:
        request.request_id = request_id
    return client.stop(request=request)


def start(client: Any, compute: LocalCompute, name: str, zone: str | None = None) -> Any:
    return client.start(request=compute_v1.StartInstanceRequest(**where(compute, name, zone)))


def stopped_vm(
    client: Any, compute: LocalCompute, body: compute_v1.Instance, zone: str | None = None
) -> None:
    client.insert(project=compute.project, zone=zone or compute.zone, instance_resource=body)
    stop(client, compute, body.name, zone=zone).result(timeout=5)


def when(stamp: str) -> datetime:
    return datetime.fromisoformat(stamp)


# --------------------------------------------------------------------------------------
# What a stopped VM keeps, and the states on the way
# --------------------------------------------------------------------------------------


def test_stop_then_start_keeps_the_vm_its_name_labels_metadata_and_disks(
    compute: LocalCompute, instances_client: Any
) -> None:
    insert(instances_client, compute, gpu_instance(compute, "gpu-1", pool="a100")).result(timeout=5)
    before = get(instances_client, compute, "gpu-1")
    time.sleep(0.01)  # the API's timestamps have milliseconds: make each step's differ

    operation = stop(instances_client, compute, "gpu-1")
    assert operation.result(timeout=5) is None
    assert operation.operation_type == "stop"
    assert operation.target_link == before.self_link
    stopped = get(instances_client, compute, "gpu-1")
    assert stopped.status == "TERMINATED"
    assert when(stopped.last_stop_timestamp) > when(before.last_start_timestamp)
    time.sleep(0.01)

    operation = start(instances_client, compute, "gpu-1")
    assert operation.result(timeout=5) is None
    assert operation.operation_type == "start"
    started = get(instances_client, compute, "gpu-1")
    assert started.status == "RUNNING"
    assert when(started.last_start_timestamp) > when(stopped.last_stop_timestamp)
    assert started.last_stop_timestamp == stopped.last_stop_timestamp

    for after in (stopped, started):
        assert (after.name, after.id, after.self_link) == ("gpu-1", before.id, before.self_link)
        assert dict(after.labels) == {"pool": "a100"}
        assert after.label_fingerprint == before.label_fingerprint
        assert after.metadata.items == before.metadata.items
        assert [(d.device_name, d.source, d.boot) for d in after.disks] == [
            (d.device_name, d.source, d.boot) for d in before.disks
        ]
        assert after.creation_timestamp == before.creation_timestamp
    assert compute.created() == ["gpu-1"]  # a start is not a creation


def test_held_operations_show_stopping_then_terminated_and_provisioning_then_running(
    compute: LocalCompute, instances_client: Any
) -> None:
    insert(instances_client, compute, gpu_instance(compute, "gpu-1")).result(timeout=5)
    compute.hold_operations(1)
    compute.clear_calls()

    stopping = stop(instances_client, compute, "gpu-1")
    assert compute.operation(stopping.name)["status"] == "RUNNING"
    assert get(instances_client, compute, "gpu-1").status == "STOPPING"
    stopping.result(timeout=5, polling=FAST)
    assert get(instances_client, compute, "gpu-1").status == "TERMINATED"

    starting = start(instances_client, compute, "gpu-1")
    assert get(instances_client, compute, "gpu-1").status == "PROVISIONING"
    assert "lastStartTimestamp" in compute.instance("gpu-1")  # the insert's, still
    starting.result(timeout=5, polling=FAST)
    assert get(instances_client, compute, "gpu-1").status == "RUNNING"

    assert compute.call_names() == [
        "instances.stop",
        "instances.get",
        *["zoneOperations.get"] * 2,
        "instances.get",
        "instances.start",
        "instances.get",
        *["zoneOperations.get"] * 2,
        "instances.get",
    ]


def test_a_vm_still_provisioning_can_be_stopped_and_its_insert_does_not_run_it(
    compute: LocalCompute, instances_client: Any
) -> None:
    compute.hold_operations(1)
    inserting = insert(instances_client, compute, gpu_instance(compute, "gpu-1"))
    assert compute.instance("gpu-1")["status"] == "PROVISIONING"

    stopping = stop(instances_client, compute, "gpu-1")
    inserting.result(timeout=5, polling=FAST)
    assert compute.instance("gpu-1")["status"] == "STOPPING"
    stopping.result(timeout=5, polling=FAST)
    assert compute.instance("gpu-1")["status"] == "TERMINATED"


# --------------------------------------------------------------------------------------
# Nothing to do, nothing there, not now
# --------------------------------------------------------------------------------------


def test_starting_a_running_vm_or_stopping_a_stopped_one_is_done_at_once_and_changes_nothing(
    compute: LocalCompute, instances_client: Any
) -> None:
    insert(instances_client, compute, gpu_instance(compute, "up")).result(timeout=5)
    stopped_vm(instances_client, compute, gpu_instance(compute, "down"))
    up, down = compute.instance("up"), compute.instance("down")
    # Neither is held, nor takes capacity: there is nothing to do.
    compute.hold_operations(3)
    compute.limit_capacity("n1-standard-8")

    for operation in (
        start(instances_client, compute, "up"),
        stop(instances_client, compute, "down"),
    ):
        assert compute.operation(operation.name)["status"] == "DONE"
        assert "error" not in compute.operation(operation.name)
        assert operation.result(timeout=5) is None
    assert (compute.instance("up"), compute.instance("down")) == (up, down)
    assert compute.capacity_refusals() == []


def test_stopping_or_starting_an_unknown_vm_is_not_found(
    compute: LocalCompute, instances_client: Any
) -> None:
    for call in (stop, start):
        with pytest.raises(exceptions.NotFound) as missing:
            call(instances_client, compute, "ghost")
        assert missing.value.errors[0]["reason"] == "notFound"
        assert "'projects/local-project/zones/us-central1-a/instances/ghost' was not found" in (
            missing.value.message
        )
    assert compute.call_names() == ["instances.stop", "instances.start"]


def test_a_start_while_the_vm_is_still_stopping_is_refused(
    compute: LocalCompute, instances_client: Any
) -> None:
    insert(instances_client, compute, gpu_instance(compute, "gpu-1")).result(timeout=5)
    compute.hold_operations(1)
    stopping = stop(instances_client, compute, "gpu-1")

    with pytest.raises(exceptions.BadRequest) as refused:
        start(instances_client, compute, "gpu-1")
    assert refused.value.errors[0]["reason"] == "resourceNotReady"
    stopping.result(timeout=5, polling=FAST)
    assert compute.instance("gpu-1")["status"] == "TERMINATED"


def test_the_same_request_id_returns_the_same_stop_and_does_nothing_more(
    compute: LocalCompute, instances_client: Any
) -> None:
    insert(instances_client, compute, gpu_instance(compute, "gpu-1")).result(timeout=5)
    request_id = str(uuid.uuid4())
    first = stop(instances_client, compute, "gpu-1", request_id)
    first.result(timeout=5)
    start(instances_client, compute, "gpu-1").result(timeout=5)

    again = stop(instances_client, compute, "gpu-1", request_id)
    assert again.name == first.name
    assert compute.instance("gpu-1")["status"] == "RUNNING"


# --------------------------------------------------------------------------------------
# Capacity: a start draws on it as an insert does
# --------------------------------------------------------------------------------------


def test_a_start_past_a_capacity_limit_fails_its_operation_and_the_vm_stays_terminated(
    compute: LocalCompute, instances_client: Any
) -> None:
    stopped_vm(instances_client, compute, gpu_instance(compute, "gpu-1"))
    stopped_at = compute.instance("gpu-1")["lastStopTimestamp"]
    compute.limit_capacity("n1-standard-8", compute.zone)

    operation = start(instances_client, compute, "gpu-1")  # no raise here
    with pytest.raises(exceptions.ServiceUnavailable) as failed:
        operation.result(timeout=5)
    assert failed.value.code == 503
    assert [(e.code, e.message) for e in failed.value.errors] == [
        ("ZONE_RESOURCE_POOL_EXHAUSTED", stockout_message(compute, compute.zone))
    ]
    done = compute.operation(operation.name)
    assert (done["status"], done["operationType"], done["httpErrorStatusCode"]) == (
        "DONE",
        "start",
        503,
    )
    assert compute.instance("gpu-1")["status"] == "TERMINATED"
    assert compute.instance("gpu-1")["lastStopTimestamp"] == stopped_at
    assert compute.capacity_refusals() == [Offering("n1-standard-8", compute.zone, "STANDARD")]

    compute.clear_capacity_limits()
    start(instances_client, compute, "gpu-1").result(timeout=5)
    assert compute.instance("gpu-1")["status"] == "RUNNING"


def test_starts_take_capacity_in_their_offering_only(
    compute: LocalCompute, instances_client: Any
) -> None:
    for name in ("spot-1", "spot-2"):
        stopped_vm(instances_client, compute, vm(compute, name, provisioning="SPOT"))
    stopped_vm(instances_client, compute, vm(compute, "standard-1"))
    body = vm(compute, "spot-b", zone=OTHER_ZONE, provisioning="SPOT")
    stopped_vm(instances_client, compute, body, zone=OTHER_ZONE)
    compute.limit_capacity("n1-standard-8", compute.zone, "SPOT", count=1, kind="quota")

    start(instances_client, compute, "spot-1").result(timeout=5)
    with pytest.raises(exceptions.Forbidden) as failed:
        start(instances_client, compute, "spot-2").result(timeout=5)
    assert failed.value.errors[0].code == "QUOTA_EXCEEDED"
    assert "PREEMPTIBLE_NVIDIA_T4_GPUS" in failed.value.errors[0].message
    start(instances_client, compute, "standard-1").result(timeout=5)
    start(instances_client, compute, "spot-b", zone=OTHER_ZONE).result(timeout=5)

    statuses = {i["name"]: i["status"] for i in compute.instances()}
    assert statuses == {
        "spot-1": "RUNNING",
        "spot-2": "TERMINATED",
        "standard-1": "RUNNING",
        "spot-b": "RUNNING",
    }


def test_a_held_refused_start_shows_provisioning_until_it_fails(
    compute: LocalCompute, instances_client: Any
) -> None:
    stopped_vm(instances_client, compute, gpu_instance(compute, "gpu-1"))
    compute.limit_capacity("n1-standard-8", kind="stockout_with_details")
    compute.hold_operations(1)

    operation = start(instances_client, compute, "gpu-1")
    assert compute.instance("gpu-1")["status"] == "PROVISIONING"
    with pytest.raises(exceptions.ServiceUnavailable) as failed:
        operation.result(timeout=5, polling=FAST)
    assert failed.value.errors[0].code == "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS"
    assert compute.instance("gpu-1")["status"] == "TERMINATED"


# --------------------------------------------------------------------------------------
# Spot VMs whose termination action is STOP
# --------------------------------------------------------------------------------------


def spot(compute: LocalCompute, name: str, action: str) -> compute_v1.Instance:
    body = vm(compute, name, provisioning="SPOT")
    body.scheduling.instance_termination_action = action
    return body


def test_a_preempted_spot_vm_that_stops_can_be_started_again(
    compute: LocalCompute, instances_client: Any
) -> None:
    insert(instances_client, compute, spot(compute, "spot-1", "STOP")).result(timeout=5)
    insert(instances_client, compute, spot(compute, "spot-2", "DELETE")).result(timeout=5)

    assert compute.preempt("spot-1") is False
    assert compute.preempt("spot-2") is True
    preempted = get(instances_client, compute, "spot-1")
    assert preempted.status == "TERMINATED" and preempted.last_stop_timestamp

    start(instances_client, compute, "spot-1").result(timeout=5)
    assert get(instances_client, compute, "spot-1").status == "RUNNING"
    with pytest.raises(exceptions.NotFound):
        start(instances_client, compute, "spot-2")
