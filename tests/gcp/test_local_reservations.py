"""The local Compute's reservations, through the real google-cloud-compute client.

These pin what the fake reproduces of Compute Engine reservations (their JSON, how VMs
consume them by reservationAffinity, the error of a full one, the end of a calendar-mode
window), so a fake that drifts from the API fails here first.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from google.api_core import exceptions
from google.cloud import compute_v1

from dynagent.testing.gcp.compute import LocalCompute
from dynagent.testing.gcp.discovery import check_body

from .test_local_gce import gpu_instance, insert
from .test_local_gce_stop_start import start, stop

OTHER_ZONE = "us-central1-b"
NAME_KEY = "compute.googleapis.com/reservation-name"


@pytest.fixture
def reservations_client(compute: LocalCompute) -> Iterator[Any]:
    client = compute.reservations_client()
    yield client
    client.transport.close()


def t4_vm(compute: LocalCompute, name: str, gpus: int = 1, **affinity: Any) -> compute_v1.Instance:
    """An n1-standard-8 with ``gpus`` T4s and the given reservationAffinity fields."""
    body = gpu_instance(compute, name)
    body.guest_accelerators[0].accelerator_count = gpus
    if affinity:
        body.reservation_affinity = compute_v1.ReservationAffinity(**affinity)
    return body


def naming(reservation: str) -> dict[str, Any]:
    return {
        "consume_reservation_type": "SPECIFIC_RESERVATION",
        "key": NAME_KEY,
        "values": [reservation],
    }


def error_of(operation: Any) -> tuple[str, str]:
    """The operation's error proper: code and message (error_code is the HTTP status)."""
    error = operation.error.errors[-1]
    return error.code, error.message


def in_use(client: Any, compute: LocalCompute, name: str) -> int:
    got = client.get(project=compute.project, zone=compute.zone, reservation=name)
    return int(got.specific_reservation.in_use_count)


# --------------------------------------------------------------------------------------
# get and list
# --------------------------------------------------------------------------------------


def test_get_shows_a_reservation_as_the_api_does(
    compute: LocalCompute, reservations_client: Any
) -> None:
    made = compute.create_reservation(
        "t4-pool", compute.zone, "n1-standard-8", 3, accelerators=[("nvidia-tesla-t4", 4)]
    )
    check_body("Reservation", made)  # every field is one the v1 document has

    got = reservations_client.get(project=compute.project, zone=compute.zone, reservation="t4-pool")
    assert got.name == "t4-pool"
    assert got.zone == (
        "https://www.googleapis.com/compute/v1/projects/local-project/zones/us-central1-a"
    )
    assert got.self_link == f"{got.zone}/reservations/t4-pool"
    assert got.status == "READY"
    assert got.specific_reservation_required is True
    assert got.specific_reservation.count == 3
    assert got.specific_reservation.in_use_count == 0
    properties = got.specific_reservation.instance_properties
    assert properties.machine_type == "n1-standard-8"
    assert [(a.accelerator_type, a.accelerator_count) for a in properties.guest_accelerators] == [
        ("nvidia-tesla-t4", 4)
    ]
    assert got.share_settings.share_type == "LOCAL"
    assert "delete_at_time" not in got


def test_get_of_a_missing_reservation_is_404(
    compute: LocalCompute, reservations_client: Any
) -> None:
    with pytest.raises(exceptions.NotFound) as raised:
        reservations_client.get(project=compute.project, zone=compute.zone, reservation="nope")
    assert "projects/local-project/zones/us-central1-a/reservations/nope" in raised.value.message


def test_list_is_per_zone_in_name_order_and_pages(
    compute: LocalCompute, reservations_client: Any
) -> None:
    for name in ("res-c", "res-a", "res-b"):
        compute.create_reservation(name, compute.zone, "n1-standard-8", 1)
    compute.create_reservation("res-elsewhere", OTHER_ZONE, "n1-standard-8", 1)

    request = compute_v1.ListReservationsRequest(
        project=compute.project, zone=compute.zone, max_results=2
    )
    pager = reservations_client.list(request=request)
    assert [r.name for r in pager] == ["res-a", "res-b", "res-c"]
    empty = reservations_client.list(project=compute.project, zone="europe-west4-a")
    assert list(empty) == []


def test_aggregated_list_keys_reservations_by_zone(
    compute: LocalCompute, reservations_client: Any
) -> None:
    compute.create_reservation("here", compute.zone, "n1-standard-8", 2)
    compute.create_reservation("there", OTHER_ZONE, "n1-standard-8", 1)
    scopes = dict(reservations_client.aggregated_list(project=compute.project))
    assert [r.name for r in scopes[f"zones/{compute.zone}"].reservations] == ["here"]
    assert [r.name for r in scopes[f"zones/{OTHER_ZONE}"].reservations] == ["there"]


def test_a_windowed_reservation_shows_its_end_and_waits_for_its_start(
    compute: LocalCompute, reservations_client: Any, instances_client: Any
) -> None:
    now = datetime.now(UTC)
    end = now + timedelta(days=2)
    made = compute.create_reservation(
        "calendar",
        compute.zone,
        "n1-standard-8",
        1,
        accelerators=[("nvidia-tesla-t4", 1)],
        start=now + timedelta(days=1),
        end=end,
    )
    check_body("Reservation", made)
    got = reservations_client.get(
        project=compute.project, zone=compute.zone, reservation="calendar"
    )
    assert got.status == "CREATING"
    assert datetime.fromisoformat(got.delete_at_time) == end.replace(
        microsecond=end.microsecond // 1000 * 1000
    )

    operation = insert(instances_client, compute, t4_vm(compute, "early", **naming("calendar")))
    with pytest.raises(exceptions.PreconditionFailed):
        operation.result(timeout=5)
    code, message = error_of(operation)
    assert (code, operation.error_code) == ("CONDITION_NOT_MET", 412)
    assert "READY state" in message
    assert compute.instances() == []


# --------------------------------------------------------------------------------------
# Consuming a reservation
# --------------------------------------------------------------------------------------


def test_a_vm_naming_a_specific_reservation_consumes_it_until_it_is_full(
    compute: LocalCompute, reservations_client: Any, instances_client: Any
) -> None:
    compute.create_reservation(
        "t4-pool", compute.zone, "n1-standard-8", 2, accelerators=[("nvidia-tesla-t4", 1)]
    )
    compute.limit_capacity("n1-standard-8", count=0)  # held capacity needs no stock

    for index, reference in enumerate(["t4-pool", "projects/local-project/reservations/t4-pool"]):
        name = f"gpu-{index}"
        insert(instances_client, compute, t4_vm(compute, name, **naming(reference))).result(
            timeout=5
        )
        assert compute.instance(name)["status"] == "RUNNING"
        assert compute.instance(name)["reservationAffinity"] == {
            "consumeReservationType": "SPECIFIC_RESERVATION",
            "key": NAME_KEY,
            "values": [reference],
        }
    assert in_use(reservations_client, compute, "t4-pool") == 2

    operation = insert(instances_client, compute, t4_vm(compute, "gpu-2", **naming("t4-pool")))
    with pytest.raises(exceptions.PreconditionFailed) as raised:
        operation.result(timeout=5)
    assert error_of(operation) == (
        "CONDITION_NOT_MET",
        "Specified reservation 't4-pool' does not have available resources for the request.",
    )
    assert raised.value.code == 412
    assert [i["name"] for i in compute.instances()] == ["gpu-0", "gpu-1"]
    assert in_use(reservations_client, compute, "t4-pool") == 2


def test_a_vm_of_another_shape_cannot_name_the_reservation(
    compute: LocalCompute, reservations_client: Any, instances_client: Any
) -> None:
    compute.create_reservation(
        "t4-pool", compute.zone, "n1-standard-8", 2, accelerators=[("nvidia-tesla-t4", 4)]
    )
    compute.create_reservation("west", OTHER_ZONE, "n1-standard-8", 2)

    with pytest.raises(exceptions.BadRequest) as raised:
        insert(instances_client, compute, t4_vm(compute, "two-gpus", 2, **naming("t4-pool")))
    assert "reservationAffinity" in raised.value.message
    assert "n1-standard-8, 2 x nvidia-tesla-t4" in raised.value.message

    other_type = t4_vm(compute, "n1-16", 4, **naming("t4-pool"))
    other_type.machine_type = f"zones/{compute.zone}/machineTypes/n1-standard-16"
    with pytest.raises(exceptions.BadRequest):
        insert(instances_client, compute, other_type)

    with pytest.raises(exceptions.BadRequest) as raised:
        insert(instances_client, compute, t4_vm(compute, "wrong-zone", **naming("west")))
    assert OTHER_ZONE in raised.value.message

    assert compute.instances() == []
    assert in_use(reservations_client, compute, "t4-pool") == 0


def test_naming_a_reservation_that_does_not_exist_fails_the_operation(
    compute: LocalCompute, instances_client: Any
) -> None:
    operation = insert(instances_client, compute, t4_vm(compute, "lost", **naming("ghost")))
    with pytest.raises(exceptions.PreconditionFailed):
        operation.result(timeout=5)
    assert error_of(operation)[1] == "Specified reservation 'ghost' does not exist."


def test_any_reservation_consumes_an_automatic_one_and_no_reservation_does_not(
    compute: LocalCompute, reservations_client: Any, instances_client: Any
) -> None:
    compute.create_reservation(
        "auto",
        compute.zone,
        "n1-standard-8",
        2,
        specific=False,
        accelerators=[("nvidia-tesla-t4", 1)],
    )
    compute.create_reservation(
        "named-only", compute.zone, "n1-standard-8", 2, accelerators=[("nvidia-tesla-t4", 1)]
    )

    insert(instances_client, compute, t4_vm(compute, "default")).result(timeout=5)
    any_vm = t4_vm(compute, "any", consume_reservation_type="ANY_RESERVATION")
    insert(instances_client, compute, any_vm).result(timeout=5)
    assert in_use(reservations_client, compute, "auto") == 2
    assert in_use(reservations_client, compute, "named-only") == 0  # never taken by ANY

    # Full: the next ANY VM takes on-demand capacity, and so does a NO_RESERVATION one.
    insert(instances_client, compute, t4_vm(compute, "overflow")).result(timeout=5)
    no_vm = t4_vm(compute, "none", consume_reservation_type="NO_RESERVATION")
    insert(instances_client, compute, no_vm).result(timeout=5)
    assert in_use(reservations_client, compute, "auto") == 2
    assert in_use(reservations_client, compute, "named-only") == 0
    assert compute.instance("none")["reservationAffinity"] == {
        "consumeReservationType": "NO_RESERVATION"
    }

    # With room again, NO_RESERVATION still leaves it alone.
    instances_client.delete(project=compute.project, zone=compute.zone, instance="any").result(
        timeout=5
    )
    insert(
        instances_client,
        compute,
        t4_vm(compute, "none-2", consume_reservation_type="NO_RESERVATION"),
    ).result(timeout=5)
    assert in_use(reservations_client, compute, "auto") == 1


def test_any_reservation_skips_an_automatic_one_of_another_shape(
    compute: LocalCompute, reservations_client: Any, instances_client: Any
) -> None:
    compute.create_reservation("bare", compute.zone, "n1-standard-8", 2, specific=False)
    insert(instances_client, compute, t4_vm(compute, "gpu-1")).result(timeout=5)
    assert in_use(reservations_client, compute, "bare") == 0


def test_delete_and_stop_free_a_place_and_start_takes_it_again(
    compute: LocalCompute, reservations_client: Any, instances_client: Any
) -> None:
    compute.create_reservation(
        "one", compute.zone, "n1-standard-8", 1, accelerators=[("nvidia-tesla-t4", 1)]
    )
    insert(instances_client, compute, t4_vm(compute, "first", **naming("one"))).result(timeout=5)
    assert in_use(reservations_client, compute, "one") == 1

    stop(instances_client, compute, "first").result(timeout=5)
    assert in_use(reservations_client, compute, "one") == 0
    insert(instances_client, compute, t4_vm(compute, "second", **naming("one"))).result(timeout=5)
    assert in_use(reservations_client, compute, "one") == 1

    # The place is taken: starting the stopped VM fails, and it stays TERMINATED.
    operation = start(instances_client, compute, "first")
    with pytest.raises(exceptions.PreconditionFailed):
        operation.result(timeout=5)
    assert "does not have available resources" in error_of(operation)[1]
    assert compute.instance("first")["status"] == "TERMINATED"

    instances_client.delete(project=compute.project, zone=compute.zone, instance="second").result(
        timeout=5
    )
    assert in_use(reservations_client, compute, "one") == 0
    start(instances_client, compute, "first").result(timeout=5)
    assert compute.instance("first")["status"] == "RUNNING"
    assert in_use(reservations_client, compute, "one") == 1


def test_bulk_insert_takes_the_places_left_or_none_below_min_count(
    compute: LocalCompute, reservations_client: Any, instances_client: Any
) -> None:
    compute.create_reservation(
        "three", compute.zone, "n1-standard-8", 3, accelerators=[("nvidia-tesla-t4", 1)]
    )
    properties = compute_v1.InstanceProperties(
        machine_type="n1-standard-8",
        disks=gpu_instance(compute, "x").disks,
        guest_accelerators=[
            compute_v1.AcceleratorConfig(accelerator_type="nvidia-tesla-t4", accelerator_count=1)
        ],
        scheduling=compute_v1.Scheduling(on_host_maintenance="TERMINATE"),
        reservation_affinity=compute_v1.ReservationAffinity(**naming("three")),
    )

    def bulk(count: int, min_count: int) -> Any:
        resource = compute_v1.BulkInsertInstanceResource(
            count=count, min_count=min_count, name_pattern="node-##", instance_properties=properties
        )
        return instances_client.bulk_insert(
            project=compute.project,
            zone=compute.zone,
            bulk_insert_instance_resource_resource=resource,
        )

    bulk(2, 2).result(timeout=5)
    assert in_use(reservations_client, compute, "three") == 2

    refused = bulk(2, 2)
    with pytest.raises(exceptions.PreconditionFailed):
        refused.result(timeout=5)
    assert [e.code for e in refused.error.errors] == [
        "VM_MIN_COUNT_NOT_REACHED",
        "CONDITION_NOT_MET",
    ]
    assert in_use(reservations_client, compute, "three") == 2

    bulk(2, 1).result(timeout=5)
    assert len(compute.instances()) == 3
    assert in_use(reservations_client, compute, "three") == 3


def test_a_shared_reservation_is_consumed_from_the_project_it_is_shared_with(
    compute: LocalCompute, instances_client: Any
) -> None:
    compute.create_reservation(
        "shared",
        compute.zone,
        "n1-standard-8",
        1,
        accelerators=[("nvidia-tesla-t4", 1)],
        project="capacity-owner",
        share_with=[compute.project],
    )
    compute.create_reservation(
        "private", compute.zone, "n1-standard-8", 1, project="capacity-owner"
    )
    reference = "projects/capacity-owner/reservations/shared"
    insert(instances_client, compute, t4_vm(compute, "guest", **naming(reference))).result(
        timeout=5
    )
    held = compute.reservation("shared", project="capacity-owner")
    assert held["specificReservation"]["inUseCount"] == "1"
    assert held["shareSettings"] == {
        "shareType": "SPECIFIC_PROJECTS",
        "projectMap": {compute.project: {"projectId": compute.project}},
    }

    private = "projects/capacity-owner/reservations/private"
    operation = insert(instances_client, compute, t4_vm(compute, "intruder", **naming(private)))
    with pytest.raises(exceptions.PreconditionFailed):
        operation.result(timeout=5)
    assert "does not exist" in error_of(operation)[1]


# --------------------------------------------------------------------------------------
# The end of a window
# --------------------------------------------------------------------------------------


def test_at_its_end_a_reservation_goes_with_the_vms_consuming_it(
    compute: LocalCompute, reservations_client: Any, instances_client: Any
) -> None:
    end = datetime.now(UTC) + timedelta(seconds=0.5)
    compute.create_reservation(
        "short", compute.zone, "n1-standard-8", 2, accelerators=[("nvidia-tesla-t4", 1)], end=end
    )
    insert(instances_client, compute, t4_vm(compute, "reserved", **naming("short"))).result(
        timeout=5
    )
    insert(instances_client, compute, t4_vm(compute, "on-demand")).result(timeout=5)
    assert in_use(reservations_client, compute, "short") == 1

    time.sleep(max(0.0, (end - datetime.now(UTC)).total_seconds()) + 0.05)

    listed = instances_client.list(project=compute.project, zone=compute.zone)
    assert [i.name for i in listed] == ["on-demand"]
    with pytest.raises(exceptions.NotFound):
        reservations_client.get(project=compute.project, zone=compute.zone, reservation="short")
    with pytest.raises(KeyError):
        compute.reservation("short")
