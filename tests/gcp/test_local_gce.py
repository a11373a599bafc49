"""The local Compute itself, driven through the real google-cloud-compute client over HTTP.

These tests pin the test double, not dynagent: each proves one behaviour of the Compute
Engine API that the GCP tests rely on the fake to reproduce (and how the real client
reacts to it), so a fake that drifts from the API fails here first.
"""

from __future__ import annotations

import json
import socket
import threading
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from google.api_core import exceptions
from google.api_core.future import polling
from google.auth.credentials import AnonymousCredentials
from google.cloud import compute_v1

from dynagent.testing.gcp.compute import DEFAULT_ZONE, ApiCall, LocalCompute

IMAGE = "projects/debian-cloud/global/images/family/debian-12"
# The client's default polling sleeps a second before its first poll: tests poll faster.
FAST = polling.DEFAULT_POLLING.with_delay(initial=0.01, maximum=0.05)


def gpu_instance(compute: LocalCompute, name: str, **labels: str) -> compute_v1.Instance:
    """A valid GPU VM: a T4 on n1, which cannot live-migrate, hence TERMINATE."""
    zone = compute.zone
    return compute_v1.Instance(
        name=name,
        machine_type=f"zones/{zone}/machineTypes/n1-standard-8",
        labels=labels,
        disks=[
            compute_v1.AttachedDisk(
                boot=True,
                auto_delete=True,
                initialize_params=compute_v1.AttachedDiskInitializeParams(
                    source_image=IMAGE, disk_size_gb=100
                ),
            )
        ],
        network_interfaces=[
            compute_v1.NetworkInterface(
                network="global/networks/default", access_configs=[compute_v1.AccessConfig()]
            )
        ],
        guest_accelerators=[
            compute_v1.AcceleratorConfig(
                accelerator_type=f"zones/{zone}/acceleratorTypes/nvidia-tesla-t4",
                accelerator_count=1,
            )
        ],
        scheduling=compute_v1.Scheduling(on_host_maintenance="TERMINATE"),
        metadata=compute_v1.Metadata(
            items=[compute_v1.Items(key="startup-script", value="#!/bin/sh\necho agent")]
        ),
    )


def insert(
    client: Any, compute: LocalCompute, body: compute_v1.Instance, request_id: str | None = None
) -> Any:
    request = compute_v1.InsertInstanceRequest(
        project=compute.project, zone=compute.zone, instance_resource=body
    )
    if request_id is not None:
        request.request_id = request_id
    return client.insert(request=request)


def names(client: Any, compute: LocalCompute, filter_text: str = "", page: int = 500) -> list[str]:
    request = compute_v1.ListInstancesRequest(
        project=compute.project, zone=compute.zone, filter=filter_text, max_results=page
    )
    return [instance.name for instance in client.list(request=request)]


def get(client: Any, compute: LocalCompute, name: str) -> Any:
    return client.get(project=compute.project, zone=compute.zone, instance=name)


def raw(
    compute: LocalCompute, method: str, path: str, body: object = None
) -> tuple[int, dict[str, Any]]:
    """A request the typed client cannot express, e.g. a body with a made-up field."""
    url = f"{compute.endpoint}/compute/v1/projects/{compute.project}/zones/{compute.zone}/{path}"
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(
        url, data=data, method=method, headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, json.load(response)
    except urllib.error.HTTPError as error:
        with error:
            return error.code, json.load(error)


def raw_instance(name: str = "raw-1", **fields: Any) -> dict[str, Any]:
    return {
        "name": name,
        "machineType": f"zones/{DEFAULT_ZONE}/machineTypes/n1-standard-8",
        "disks": [{"boot": True, "initializeParams": {"sourceImage": IMAGE}}],
        **fields,
    }


# --------------------------------------------------------------------------------------
# insert, get, list
# --------------------------------------------------------------------------------------


def test_insert_returns_an_operation_and_get_shows_the_instance_as_the_api_does(
    compute: LocalCompute, instances_client: Any
) -> None:
    operation = insert(instances_client, compute, gpu_instance(compute, "gpu-1", pool="a100"))
    assert operation.result(timeout=5) is None
    assert operation.name.startswith("operation-")
    assert operation.operation_type == "insert"
    assert operation.target_link.endswith(f"/zones/{compute.zone}/instances/gpu-1")

    got = get(instances_client, compute, "gpu-1")
    assert got.id > 0 and compute.instance("gpu-1")["id"].isdigit()
    assert got.status == "RUNNING"
    assert got.self_link == (
        "https://www.googleapis.com/compute/v1/projects/local-project/zones/us-central1-a"
        "/instances/gpu-1"
    )
    assert got.zone.endswith("/projects/local-project/zones/us-central1-a")
    assert got.machine_type.startswith("https://www.googleapis.com/compute/v1/projects/")
    assert got.guest_accelerators[0].accelerator_type.endswith("/acceleratorTypes/nvidia-tesla-t4")
    assert datetime.fromisoformat(got.creation_timestamp).utcoffset() is not None
    assert dict(got.labels) == {"pool": "a100"} and got.label_fingerprint
    assert got.metadata.fingerprint and got.metadata.items[0].key == "startup-script"
    assert got.disks[0].boot and got.disks[0].source.endswith("/disks/gpu-1")
    assert "initializeParams" not in compute.instance("gpu-1")["disks"][0]  # input only
    assert got.network_interfaces[0].network_i_p.startswith("10.")
    assert got.network_interfaces[0].access_configs[0].nat_i_p
    assert got.scheduling.on_host_maintenance == "TERMINATE"
    assert got.scheduling.automatic_restart is True


def test_spot_scheduling_gets_the_api_defaults(
    compute: LocalCompute, instances_client: Any
) -> None:
    body = gpu_instance(compute, "spot-1")
    body.scheduling = compute_v1.Scheduling(provisioning_model="SPOT")
    insert(instances_client, compute, body).result(timeout=5)

    scheduling = get(instances_client, compute, "spot-1").scheduling
    assert (scheduling.preemptible, scheduling.automatic_restart) == (True, False)
    assert scheduling.on_host_maintenance == "TERMINATE"
    assert scheduling.instance_termination_action == "STOP"


def test_list_filters_by_label_and_pages_past_one_page(
    compute: LocalCompute, instances_client: Any
) -> None:
    for index in range(5):
        insert(instances_client, compute, gpu_instance(compute, f"a-{index}", pool="a"))
    for index in range(2):
        insert(instances_client, compute, gpu_instance(compute, f"b-{index}", pool="b"))
    compute.clear_calls()

    assert names(instances_client, compute, 'labels.pool = "a"', page=2) == [
        f"a-{index}" for index in range(5)
    ]
    assert compute.call_names() == ["instances.list"] * 3  # pages of 2, 2 and 1
    assert len(names(instances_client, compute)) == 7


@pytest.mark.parametrize(
    ("filter_text", "expected"),
    [
        ("labels.pool = a", ["a-1", "a-2"]),
        ('labels.pool = "a" AND labels.role = "worker"', ["a-1"]),
        ('(labels.pool = "a") (labels.role = "worker")', ["a-1"]),
        ("(labels.role = worker) AND (status = RUNNING)", ["a-1", "b-1"]),
        ("status = TERMINATED", ["a-2"]),
        ('name = "b-1"', ["b-1"]),
        ("labels.pool != a", ["b-1"]),
        ("labels.role:*", ["a-1", "b-1"]),
        ("scheduling.automaticRestart = true", ["a-1", "a-2", "b-1"]),
        ("labels.pool = c", []),
    ],
)
def test_filter_forms(
    compute: LocalCompute, instances_client: Any, filter_text: str, expected: list[str]
) -> None:
    insert(instances_client, compute, gpu_instance(compute, "a-1", pool="a", role="worker"))
    insert(instances_client, compute, gpu_instance(compute, "a-2", pool="a"))
    insert(instances_client, compute, gpu_instance(compute, "b-1", pool="b", role="worker"))
    compute.set_status("a-2", "TERMINATED")  # preempted

    assert names(instances_client, compute, filter_text) == expected


@pytest.mark.parametrize(
    ("filter_text", "said"),
    [
        ("labels.pool = a OR labels.pool = b", "OR in a list filter is not supported"),
        ("NOT labels.pool = a", "NOT in a list filter is not supported"),
        ('name eq "a-.*"', "regular-expression filter (eq/ne) is not supported"),
        ('labels.pool = "a*"', "wildcard in a filter value is not supported"),
        ('creationTimestamp < "2024-01-01"', "operator '<' is not supported"),
        ("networkInterfaces.network = x", "repeated field 'networkInterfaces'"),
        ("scheduling = x", "non-scalar field 'scheduling'"),
        ("colour = red", "Invalid field name 'colour'"),
        ("(labels.pool = a", "Invalid list filter expression"),
        ("labels.pool =", "Invalid list filter expression"),
        ("labels.pool = a AND", "Invalid list filter expression"),
        ("labels.pool = a and labels.role = worker", "Invalid field name 'and'"),
    ],
)
def test_a_filter_it_does_not_model_is_refused_not_ignored(
    compute: LocalCompute, instances_client: Any, filter_text: str, said: str
) -> None:
    with pytest.raises(exceptions.BadRequest) as refused:
        names(instances_client, compute, filter_text)
    assert said in refused.value.message


def test_max_results_and_page_tokens_are_checked(compute: LocalCompute) -> None:
    status, body = raw(compute, "GET", "instances?maxResults=501")
    assert status == 400 and "maxResults" in body["error"]["message"]
    status, body = raw(compute, "GET", "instances?pageToken=garbage")
    assert status == 400 and "pageToken" in body["error"]["message"]
    status, body = raw(compute, "GET", "instances?maxResults=0")
    assert (status, body["kind"], "items" in body) == (200, "compute#instanceList", False)


# --------------------------------------------------------------------------------------
# requestId, conflicts, delete, setLabels
# --------------------------------------------------------------------------------------


def test_the_same_request_id_returns_the_same_operation_and_creates_nothing_more(
    compute: LocalCompute, instances_client: Any
) -> None:
    request_id = str(uuid.uuid4())
    first = insert(instances_client, compute, gpu_instance(compute, "gpu-1"), request_id)
    again = insert(instances_client, compute, gpu_instance(compute, "gpu-1"), request_id)

    assert again.name == first.name
    assert again.client_operation_id == request_id
    again.result(timeout=5)
    assert [instance["name"] for instance in compute.instances()] == ["gpu-1"]
    assert compute.call_names() == ["instances.insert", "instances.insert"]


def test_a_new_request_for_a_taken_name_is_a_conflict(
    compute: LocalCompute, instances_client: Any
) -> None:
    insert(instances_client, compute, gpu_instance(compute, "gpu-1")).result(timeout=5)

    with pytest.raises(exceptions.Conflict) as conflict:
        insert(instances_client, compute, gpu_instance(compute, "gpu-1"), str(uuid.uuid4()))
    assert conflict.value.code == 409
    assert conflict.value.message.endswith(
        "The resource 'projects/local-project/zones/us-central1-a/instances/gpu-1' already exists"
    )
    assert conflict.value.errors[0]["reason"] == "alreadyExists"


def test_delete_removes_the_instance_and_a_missing_one_is_not_found(
    compute: LocalCompute, instances_client: Any
) -> None:
    insert(instances_client, compute, gpu_instance(compute, "gpu-1")).result(timeout=5)
    where = {"project": compute.project, "zone": compute.zone, "instance": "gpu-1"}

    operation = instances_client.delete(**where)
    operation.result(timeout=5)
    assert operation.operation_type == "delete"

    with pytest.raises(exceptions.NotFound):
        instances_client.get(**where)
    with pytest.raises(exceptions.NotFound) as missing:
        instances_client.delete(**where)
    assert missing.value.errors[0]["reason"] == "notFound"
    assert "'projects/local-project/zones/us-central1-a/instances/gpu-1' was not found" in (
        missing.value.message
    )


def set_labels(
    client: Any, compute: LocalCompute, name: str, labels: dict[str, str], fp: str
) -> Any:
    return client.set_labels(
        project=compute.project,
        zone=compute.zone,
        instance=name,
        instances_set_labels_request_resource=compute_v1.InstancesSetLabelsRequest(
            labels=labels, label_fingerprint=fp
        ),
    )


def test_set_labels_needs_the_current_fingerprint_and_changes_it(
    compute: LocalCompute, instances_client: Any
) -> None:
    insert(instances_client, compute, gpu_instance(compute, "gpu-1", pool="a")).result(timeout=5)
    stale = get(instances_client, compute, "gpu-1").label_fingerprint

    labels = {"pool": "a", "registered": "1700000000"}
    operation = set_labels(instances_client, compute, "gpu-1", labels, stale)
    operation.result(timeout=5)
    assert operation.operation_type == "setLabels"
    got = get(instances_client, compute, "gpu-1")
    assert dict(got.labels) == labels
    assert got.label_fingerprint != stale

    with pytest.raises(exceptions.PreconditionFailed) as refused:
        set_labels(instances_client, compute, "gpu-1", {"pool": "b"}, stale)
    assert refused.value.code == 412
    assert refused.value.errors[0]["reason"] == "conditionNotMet"
    assert dict(get(instances_client, compute, "gpu-1").labels) == labels

    # Even the same labels again make a new fingerprint ("changes after every request").
    current = got.label_fingerprint
    set_labels(instances_client, compute, "gpu-1", labels, current).result(timeout=5)
    assert get(instances_client, compute, "gpu-1").label_fingerprint != current


# --------------------------------------------------------------------------------------
# Operations: failures, held operations, polling
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("code", "raised"),
    [
        ("ZONE_RESOURCE_POOL_EXHAUSTED", exceptions.ServiceUnavailable),
        ("QUOTA_EXCEEDED", exceptions.Forbidden),
    ],
)
def test_a_failed_insert_raises_from_result_and_leaves_no_instance(
    compute: LocalCompute, instances_client: Any, code: str, raised: type[Exception]
) -> None:
    compute.fail_next_inserts(1, code)

    operation = insert(instances_client, compute, gpu_instance(compute, "gpu-1"))  # no raise
    with pytest.raises(raised) as failed:
        operation.result(timeout=5)
    assert failed.value.errors[0].code == code
    assert compute.instances() == []

    insert(instances_client, compute, gpu_instance(compute, "gpu-1")).result(timeout=5)
    assert compute.instance("gpu-1")["status"] == "RUNNING"  # only the next insert failed


def test_a_held_operation_is_polled_with_get_until_done(
    compute: LocalCompute, instances_client: Any
) -> None:
    compute.hold_operations(2)

    operation = insert(instances_client, compute, gpu_instance(compute, "gpu-1"))
    assert compute.operation(operation.name)["status"] == "RUNNING"
    assert compute.instance("gpu-1")["status"] == "PROVISIONING"

    operation.result(timeout=5, polling=FAST)
    assert compute.call_names() == ["instances.insert"] + ["zoneOperations.get"] * 3
    assert compute.instance("gpu-1")["status"] == "RUNNING"


def test_a_held_failing_insert_shows_the_instance_until_it_fails(
    compute: LocalCompute, instances_client: Any
) -> None:
    compute.hold_operations(1)
    compute.fail_next_inserts(1, "ZONE_RESOURCE_POOL_EXHAUSTED")

    operation = insert(instances_client, compute, gpu_instance(compute, "gpu-1"))
    assert names(instances_client, compute) == ["gpu-1"]
    with pytest.raises(exceptions.ServiceUnavailable):
        operation.result(timeout=5, polling=FAST)
    assert names(instances_client, compute) == []


def test_wait_counts_as_a_poll_and_unknown_operations_are_not_found(
    compute: LocalCompute, instances_client: Any, operations_client: Any
) -> None:
    compute.hold_operations(1)
    operation = insert(instances_client, compute, gpu_instance(compute, "gpu-1"))
    where = {"project": compute.project, "zone": compute.zone, "operation": operation.name}

    assert operations_client.wait(**where).status == compute_v1.Operation.Status.RUNNING
    done = operations_client.wait(**where)
    assert done.status == compute_v1.Operation.Status.DONE and done.progress == 100
    assert operations_client.get(**where).end_time

    with pytest.raises(exceptions.NotFound):
        operations_client.get(**{**where, "operation": "operation-0-missing"})
    with pytest.raises(exceptions.NotFound):  # an operation belongs to its zone
        operations_client.get(**{**where, "zone": "us-central1-b"})


def test_finish_operations_completes_what_nobody_polls(
    compute: LocalCompute, instances_client: Any
) -> None:
    compute.hold_operations(5)
    operation = insert(instances_client, compute, gpu_instance(compute, "gpu-1"))

    compute.finish_operations()
    assert compute.operation(operation.name)["status"] == "DONE"
    assert compute.instance("gpu-1")["status"] == "RUNNING"


def test_a_plain_client_would_poll_operations_on_googleapis(compute: LocalCompute) -> None:
    """Why instances_client() re-points operation polling: the transport builds its
    operations client without the client_options. If this starts failing, the library
    fixed it and poll_operations_with() can go."""
    plain = compute_v1.InstancesClient(
        transport="rest",
        client_options=compute.client_options(),
        credentials=AnonymousCredentials(),
    )
    assert plain.api_endpoint == compute.endpoint
    assert plain.transport._zone_operations_client.api_endpoint == "compute.googleapis.com"
    wired = compute.instances_client()
    assert wired.transport._zone_operations_client.api_endpoint == compute.endpoint


# --------------------------------------------------------------------------------------
# Strictness: fields, enums, values
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "unknown", "where"),
    [
        (raw_instance(machinType="x"), "machinType", "resource"),
        (raw_instance(scheduling={"provisioningMdoel": "SPOT"}), "provisioningMdoel", "scheduling"),
        (
            raw_instance(disks=[{"boot": True, "initializeParams": {"sourceImg": IMAGE}}]),
            "sourceImg",
            "resource.disks[0].initializeParams",
        ),
        (raw_instance(metadata={"items": [{"key": "a", "valeu": "b"}]}), "valeu", "items[0]"),
    ],
)
def test_a_body_field_the_api_does_not_have_is_rejected(
    compute: LocalCompute, body: dict[str, Any], unknown: str, where: str
) -> None:
    status, response = raw(compute, "POST", "instances", body)

    assert status == 400
    message = response["error"]["message"]
    assert f'Unknown name "{unknown}"' in message and where in message
    assert response["error"]["errors"][0]["reason"] == "invalid"
    assert compute.instances() == []


def test_a_well_formed_raw_body_is_accepted_and_query_parameters_are_checked(
    compute: LocalCompute,
) -> None:
    status, _ = raw(compute, "POST", "instances?requestID=x", raw_instance())
    assert status == 400  # requestId, not requestID

    status, operation = raw(compute, "POST", "instances", raw_instance())
    assert (status, operation["kind"], operation["status"]) == (200, "compute#operation", "DONE")
    status, body = raw(compute, "POST", "instances/raw-1/setLabels", {"labels": {"a": "b"}})
    assert status == 412  # no fingerprint is a stale fingerprint
    status, body = raw(compute, "POST", "instances/raw-1/setLabels", {"lables": {"a": "b"}})
    assert status == 400 and 'Unknown name "lables"' in body["error"]["message"]


def test_an_unknown_path_is_not_found_and_recorded(compute: LocalCompute) -> None:
    status, body = raw(compute, "GET", "disks")

    assert status == 404 and "not served by the local Compute fake" in body["error"]["message"]
    assert compute.calls() == [ApiCall("GET", "unknown")]


def _spot_that_restarts(body: compute_v1.Instance) -> None:
    body.scheduling = compute_v1.Scheduling(provisioning_model="SPOT", automatic_restart=True)


def _misspelt_provisioning_model(body: compute_v1.Instance) -> None:
    # The typed client cannot send an unknown field, but it sends any enum string.
    body.scheduling.provisioning_model = "SPOTT"


@pytest.mark.parametrize(
    ("change", "said"),
    [
        (lambda b: setattr(b, "name", "GPU_1"), "'resource.name': 'GPU_1'"),
        (lambda b: setattr(b, "name", "g" * 64), "'resource.name'"),
        (lambda b: setattr(b, "name", "1gpu"), "'resource.name'"),
        (lambda b: b.labels.update({"Pool": "a"}), "Label key 'Pool'"),
        (lambda b: b.labels.update({"pool": "A100"}), "Label value 'A100'"),
        (lambda b: b.labels.update({"pool": "x" * 64}), "Label value"),
        (lambda b: b.labels.update({f"k{i}": "v" for i in range(65)}), "At most 64 labels"),
        (lambda b: setattr(b, "machine_type", "n1-standard-8"), "'resource.machineType'"),
        (
            lambda b: setattr(b, "machine_type", "zones/us-east1-b/machineTypes/n1-standard-8"),
            "must be in zone 'us-central1-a'",
        ),
        (_misspelt_provisioning_model, "provisioningModel': 'SPOTT'"),
        (lambda b: setattr(b, "scheduling", compute_v1.Scheduling()), "live migration"),
        (_spot_that_restarts, "cannot be restarted automatically"),
        (lambda b: b.disks.pop(), "'resource.disks'"),
        (
            lambda b: b.metadata.items.append(compute_v1.Items(key="big", value="x" * 300_000)),
            "over 256 KB",
        ),
    ],
)
def test_invalid_values_are_rejected_naming_the_field(
    compute: LocalCompute,
    instances_client: Any,
    change: Callable[[compute_v1.Instance], object],
    said: str,
) -> None:
    body = gpu_instance(compute, "gpu-1")
    change(body)

    with pytest.raises(exceptions.BadRequest) as refused:
        insert(instances_client, compute, body)
    assert said in refused.value.message
    assert compute.instances() == []


@pytest.mark.parametrize("request_id", ["retry-1", "00000000-0000-0000-0000-000000000000"])
def test_a_request_id_must_be_a_uuid(
    compute: LocalCompute, instances_client: Any, request_id: str
) -> None:
    with pytest.raises(exceptions.BadRequest) as refused:
        insert(instances_client, compute, gpu_instance(compute, "gpu-1"), request_id)
    assert "'requestId'" in refused.value.message


# --------------------------------------------------------------------------------------
# bulkInsert
# --------------------------------------------------------------------------------------


def bulk(compute: LocalCompute, count: int, **fields: Any) -> compute_v1.BulkInsertInstanceRequest:
    properties = compute_v1.InstanceProperties(
        machine_type="n1-standard-8",  # a bare name here, unlike instances.insert
        labels={"pool": "t4"},
        disks=[
            compute_v1.AttachedDisk(
                boot=True,
                initialize_params=compute_v1.AttachedDiskInitializeParams(source_image=IMAGE),
            )
        ],
        guest_accelerators=[
            compute_v1.AcceleratorConfig(accelerator_type="nvidia-tesla-t4", accelerator_count=1)
        ],
        scheduling=compute_v1.Scheduling(provisioning_model="SPOT"),
    )
    return compute_v1.BulkInsertInstanceRequest(
        project=compute.project,
        zone=compute.zone,
        bulk_insert_instance_resource_resource=compute_v1.BulkInsertInstanceResource(
            count=count, instance_properties=properties, **fields
        ),
    )


def test_bulk_insert_names_instances_after_the_biggest_existing_number(
    compute: LocalCompute, instances_client: Any
) -> None:
    insert(instances_client, compute, gpu_instance(compute, "gpu-0007")).result(timeout=5)

    operation = instances_client.bulk_insert(request=bulk(compute, 3, name_pattern="gpu-####"))
    operation.result(timeout=5)
    assert operation.operation_type == "bulkInsert"

    assert names(instances_client, compute, "labels.pool = t4") == [
        "gpu-0008",
        "gpu-0009",
        "gpu-0010",
    ]
    machine_type = compute.instance("gpu-0008")["machineType"]
    assert machine_type.endswith(f"/zones/{compute.zone}/machineTypes/n1-standard-8")


def test_bulk_insert_with_names_and_its_failure(
    compute: LocalCompute, instances_client: Any
) -> None:
    per_instance = {
        "w-a": compute_v1.BulkInsertInstanceResourcePerInstanceProperties(),
        "w-b": compute_v1.BulkInsertInstanceResourcePerInstanceProperties(),
    }
    request = bulk(compute, 2, per_instance_properties=per_instance)
    compute.fail_next_inserts(1, "ZONE_RESOURCE_POOL_EXHAUSTED")

    with pytest.raises(exceptions.ServiceUnavailable):
        instances_client.bulk_insert(request=request).result(timeout=5)
    assert compute.instances() == []  # all or nothing

    request.request_id = str(uuid.uuid4())
    first = instances_client.bulk_insert(request=request)
    assert instances_client.bulk_insert(request=request).name == first.name
    assert names(instances_client, compute) == ["w-a", "w-b"]


# --------------------------------------------------------------------------------------
# Test helpers, calls, life cycle
# --------------------------------------------------------------------------------------


def test_set_status_and_creation_time(compute: LocalCompute, instances_client: Any) -> None:
    insert(instances_client, compute, gpu_instance(compute, "gpu-1")).result(timeout=5)
    when = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)

    compute.set_status("gpu-1", "TERMINATED")
    compute.set_creation_time("gpu-1", when)

    got = get(instances_client, compute, "gpu-1")
    assert got.status == "TERMINATED"
    assert datetime.fromisoformat(got.creation_timestamp) == when
    assert datetime.fromisoformat(got.creation_timestamp).utcoffset() == timedelta(hours=-7)
    with pytest.raises(ValueError, match="not an instance status"):
        compute.set_status("gpu-1", "PREEMPTED")
    with pytest.raises(ValueError, match="timezone-aware"):
        compute.set_creation_time("gpu-1", datetime(2024, 5, 1))
    with pytest.raises(KeyError):
        compute.instance("gpu-2")


def test_calls_are_counted_at_the_wire(compute: LocalCompute, instances_client: Any) -> None:
    insert(instances_client, compute, gpu_instance(compute, "gpu-1"))
    get(instances_client, compute, "gpu-1")
    names(instances_client, compute)
    instances_client.delete(project=compute.project, zone=compute.zone, instance="gpu-1")

    assert compute.calls() == [
        ApiCall("POST", "instances.insert"),
        ApiCall("GET", "instances.get"),
        ApiCall("GET", "instances.list"),
        ApiCall("DELETE", "instances.delete"),
    ]
    compute.clear_calls()
    assert compute.calls() == []


def test_reset_forgets_instances_and_knobs(compute: LocalCompute, instances_client: Any) -> None:
    insert(instances_client, compute, gpu_instance(compute, "gpu-1"))
    compute.fail_next_inserts(3)
    compute.hold_operations(3)

    compute.reset()
    assert compute.instances() == []
    insert(instances_client, compute, gpu_instance(compute, "gpu-1")).result(timeout=5)


def test_the_server_listens_on_loopback_and_stop_closes_its_port() -> None:
    server = LocalCompute().start()
    host, port = server.address
    assert host == "127.0.0.1" and server.endpoint == f"http://127.0.0.1:{port}"
    with socket.create_connection((host, port), timeout=1):
        pass

    server.stop()
    assert not server.running
    assert not any(t.name == f"local-compute:{port}" for t in threading.enumerate())
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection((host, port), timeout=1).close()
    server.stop()  # a second stop is harmless
    with pytest.raises(RuntimeError, match="not running"):
        _ = server.endpoint


# --------------------------------------------------------------------------------------
# Capacity: stockouts and quotas, per machine type, zone and provisioning model
# --------------------------------------------------------------------------------------

OTHER_ZONE = "us-central1-b"


def vm(
    compute: LocalCompute,
    name: str,
    zone: str | None = None,
    machine_type: str = "n1-standard-8",
    provisioning: str | None = None,
    **labels: str,
) -> compute_v1.Instance:
    """gpu_instance in any zone, of any machine type and provisioning model."""
    zone = zone or compute.zone
    body = gpu_instance(compute, name, **labels)
    body.machine_type = f"zones/{zone}/machineTypes/{machine_type}"
    if machine_type.startswith("a2-"):  # its A100s come with the machine type
        del body.guest_accelerators[:]
    else:
        body.guest_accelerators[
            0
        ].accelerator_type = f"zones/{zone}/acceleratorTypes/nvidia-tesla-t4"
    if provisioning == "PREEMPTIBLE":  # the legacy form of Spot
        body.scheduling = compute_v1.Scheduling(preemptible=True, automatic_restart=False)
    elif provisioning is not None:
        body.scheduling.provisioning_model = provisioning
    return body


def insert_in(client: Any, compute: LocalCompute, body: compute_v1.Instance, zone: str) -> Any:
    return client.insert(project=compute.project, zone=zone, instance_resource=body)


def stockout_message(compute: LocalCompute, zone: str) -> str:
    return (
        f"The zone 'projects/{compute.project}/zones/{zone}' does not have enough resources "
        "available to fulfill the request.  Try a different zone, or try again later."
    )


def test_a_capacity_limit_by_machine_type_fails_the_operation_not_the_call(
    compute: LocalCompute, instances_client: Any
) -> None:
    compute.limit_capacity("n1-standard-8")  # count 0: none at all

    operation = insert(instances_client, compute, vm(compute, "gpu-1"))  # no raise here
    with pytest.raises(exceptions.ServiceUnavailable) as failed:
        operation.result(timeout=5)
    assert failed.value.code == 503
    assert [(e.code, e.message) for e in failed.value.errors] == [
        ("ZONE_RESOURCE_POOL_EXHAUSTED", stockout_message(compute, compute.zone))
    ]
    done = compute.operation(operation.name)
    assert (done["status"], done["httpErrorStatusCode"]) == ("DONE", 503)
    assert compute.instances() == []

    insert(instances_client, compute, vm(compute, "gpu-2", machine_type="n1-standard-4")).result(
        timeout=5
    )
    assert [instance["name"] for instance in compute.instances()] == ["gpu-2"]


def test_a_capacity_limit_by_zone_leaves_other_zones_alone(
    compute: LocalCompute, instances_client: Any
) -> None:
    compute.limit_capacity("n1-standard-8", zone=compute.zone)

    with pytest.raises(exceptions.ServiceUnavailable) as failed:
        insert(instances_client, compute, vm(compute, "gpu-1")).result(timeout=5)
    assert failed.value.errors[0].message == stockout_message(compute, compute.zone)

    body = vm(compute, "gpu-1", zone=OTHER_ZONE)
    insert_in(instances_client, compute, body, OTHER_ZONE).result(timeout=5)
    assert compute.instance("gpu-1", zone=OTHER_ZONE)["status"] == "RUNNING"


@pytest.mark.parametrize(
    ("limited", "refused", "allowed"),
    [
        ("SPOT", ["SPOT", "PREEMPTIBLE"], ["STANDARD", None]),
        ("STANDARD", ["STANDARD", None], ["SPOT", "PREEMPTIBLE"]),
    ],
)
def test_a_capacity_limit_by_provisioning_model(
    compute: LocalCompute,
    instances_client: Any,
    limited: str,
    refused: list[str | None],
    allowed: list[str | None],
) -> None:
    compute.limit_capacity("n1-standard-8", provisioning=limited)

    for index, provisioning in enumerate(refused):
        operation = insert(
            instances_client, compute, vm(compute, f"no-{index}", provisioning=provisioning)
        )
        with pytest.raises(exceptions.ServiceUnavailable):
            operation.result(timeout=5)
    for index, provisioning in enumerate(allowed):
        body = vm(compute, f"yes-{index}", provisioning=provisioning)
        insert(instances_client, compute, body).result(timeout=5)
    assert [instance["name"] for instance in compute.instances()] == ["yes-0", "yes-1"]


def test_count_vms_fit_then_the_offering_is_exhausted_and_deleting_gives_none_back(
    compute: LocalCompute, instances_client: Any
) -> None:
    compute.limit_capacity("n1-standard-8", compute.zone, "SPOT", count=2)
    compute.fail_next_inserts(1, "INTERNAL_ERROR")  # fails first, takes no capacity

    with pytest.raises(exceptions.BadRequest):
        insert(instances_client, compute, vm(compute, "spot-0", provisioning="SPOT")).result(
            timeout=5
        )
    for name in ("spot-1", "spot-2"):
        insert(instances_client, compute, vm(compute, name, provisioning="SPOT")).result(timeout=5)
    with pytest.raises(exceptions.ServiceUnavailable):
        insert(instances_client, compute, vm(compute, "spot-3", provisioning="SPOT")).result(
            timeout=5
        )

    instances_client.delete(project=compute.project, zone=compute.zone, instance="spot-1").result(
        timeout=5
    )
    with pytest.raises(exceptions.ServiceUnavailable):
        insert(instances_client, compute, vm(compute, "spot-3", provisioning="SPOT")).result(
            timeout=5
        )
    assert [instance["name"] for instance in compute.instances()] == ["spot-2"]


@pytest.mark.parametrize(
    ("kind", "raised", "code", "status", "message"),
    [
        (
            "quota",
            exceptions.Forbidden,
            "QUOTA_EXCEEDED",
            403,
            "Quota 'NVIDIA_A100_GPUS' exceeded.  Limit: 0.0 in region us-central1.",
        ),
        (
            "stockout_with_details",
            exceptions.ServiceUnavailable,
            "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS",
            503,
            "The zone 'projects/local-project/zones/us-central1-a' does not have enough "
            "resources available to fulfill the request.  '(resource type:compute)'.",
        ),
        (
            "stockout",
            exceptions.ServiceUnavailable,
            "ZONE_RESOURCE_POOL_EXHAUSTED",
            503,
            "The zone 'projects/local-project/zones/us-central1-a' does not have enough "
            "resources available to fulfill the request.  Try a different zone, or try "
            "again later.",
        ),
    ],
)
def test_a_limit_can_be_a_quota_or_a_detailed_stockout(
    compute: LocalCompute,
    instances_client: Any,
    kind: str,
    raised: type[exceptions.GoogleAPICallError],
    code: str,
    status: int,
    message: str,
) -> None:
    compute.limit_capacity("a2-highgpu-1g", kind=kind)

    operation = insert(
        instances_client, compute, vm(compute, "a100-1", machine_type="a2-highgpu-1g")
    )
    with pytest.raises(raised) as failed:
        operation.result(timeout=5)
    assert failed.value.code == status
    assert [(e.code, e.message) for e in failed.value.errors] == [(code, message)]
    assert compute.operation(operation.name)["httpErrorStatusCode"] == status
    assert compute.instances() == []
    assert compute.capacity_refusals() == [("a2-highgpu-1g", compute.zone, "STANDARD")]
    details = compute.operation(operation.name)["error"]["errors"][0].get("errorDetails", [])
    if kind == "quota":
        assert details[0]["quotaInfo"]["dimensions"] == {"region": "us-central1"}
    elif kind == "stockout_with_details":
        info = details[-1]["errorInfo"]
        assert (info["reason"], info["metadatas"]["vmType"]) == ("stockout", "a2-highgpu-1g")
    else:
        assert details == []


def test_a_quota_names_the_spot_quota_or_the_one_given(
    compute: LocalCompute, instances_client: Any
) -> None:
    compute.limit_capacity("n1-standard-8", provisioning="SPOT", kind="quota")
    compute.limit_capacity("n1-standard-8", provisioning="STANDARD", kind="quota", quota="GPUS_X")

    spot = insert(instances_client, compute, vm(compute, "spot-1", provisioning="SPOT"))
    with pytest.raises(exceptions.Forbidden) as failed:
        spot.result(timeout=5)
    assert failed.value.errors[0].message.startswith("Quota 'PREEMPTIBLE_NVIDIA_T4_GPUS' exceeded.")
    with pytest.raises(exceptions.Forbidden) as failed:
        insert(instances_client, compute, vm(compute, "std-1")).result(timeout=5)
    assert failed.value.errors[0].message.startswith("Quota 'GPUS_X' exceeded.")


def test_bulk_insert_creates_what_fits_down_to_min_count_and_otherwise_none(
    compute: LocalCompute, instances_client: Any
) -> None:
    compute.limit_capacity("n1-standard-8", provisioning="SPOT", count=2)

    partial = instances_client.bulk_insert(
        request=bulk(compute, 3, name_pattern="w-##", min_count=1)
    )
    partial.result(timeout=5)
    assert names(instances_client, compute) == ["w-01", "w-02"]
    status = partial.instances_bulk_insert_operation_metadata.per_location_status
    counts = status[f"zones/{compute.zone}"]
    assert (counts.target_vm_count, counts.created_vm_count, counts.failed_to_create_vm_count) == (
        3,
        2,
        1,
    )
    assert counts.status == "DONE"

    compute.clear_capacity_limits()
    compute.limit_capacity("n1-standard-8", count=1)
    short = instances_client.bulk_insert(request=bulk(compute, 2, name_pattern="w-##"))
    with pytest.raises(exceptions.ServiceUnavailable) as failed:
        short.result(timeout=5)
    assert [e.code for e in failed.value.errors] == [
        "VM_MIN_COUNT_NOT_REACHED",
        "ZONE_RESOURCE_POOL_EXHAUSTED",
    ]
    assert (
        failed.value.errors[0].message == "Requested minimum count of 2 VMs could not be created."
    )
    assert names(instances_client, compute) == ["w-01", "w-02"]  # nothing new stays
    # The rolled-back request took no capacity: the one VM left still fits.
    insert(instances_client, compute, vm(compute, "gpu-1")).result(timeout=5)


def test_clear_capacity_limits_and_reset_lift_every_limit(
    compute: LocalCompute, instances_client: Any
) -> None:
    compute.limit_capacity("n1-standard-8")
    compute.limit_capacity("n1-standard-8", zone=compute.zone, kind="quota")
    with pytest.raises(exceptions.ServiceUnavailable):  # the first limit declared speaks
        insert(instances_client, compute, vm(compute, "gpu-1")).result(timeout=5)

    compute.clear_capacity_limits()
    insert(instances_client, compute, vm(compute, "gpu-1")).result(timeout=5)

    compute.limit_capacity("n1-standard-8")
    compute.reset()
    insert(instances_client, compute, vm(compute, "gpu-1")).result(timeout=5)
    assert [instance["name"] for instance in compute.instances()] == ["gpu-1"]


@pytest.mark.parametrize(
    ("arguments", "said"),
    [
        ({"machine_type": "n1-standard-8", "count": -1}, "count"),
        ({"machine_type": "n1-standard-8", "kind": "QUOTA"}, "kind"),
        ({"machine_type": "n1-standard-8", "provisioning": "PREEMPTIBLE"}, "provisioning"),
        ({"machine_type": "zones/us-central1-a/machineTypes/n1-standard-8"}, "bare name"),
        ({"machine_type": "n1-standard-8", "zone": "us-central1"}, "not a zone"),
    ],
)
def test_limit_capacity_checks_its_arguments(
    compute: LocalCompute, arguments: dict[str, Any], said: str
) -> None:
    with pytest.raises(ValueError, match=said):
        compute.limit_capacity(**arguments)


# --------------------------------------------------------------------------------------
# Several zones: any REGION-x zone, instances.aggregatedList
# --------------------------------------------------------------------------------------


def aggregated_pages(
    client: Any, compute: LocalCompute, filter_text: str = "", page: int = 500
) -> list[dict[str, Any]]:
    """Each page's ``items`` (scope -> InstancesScopedList); the client's map keeps no order."""
    request = compute_v1.AggregatedListInstancesRequest(
        project=compute.project, filter=filter_text, max_results=page
    )
    return [dict(response.items) for response in client.aggregated_list(request=request).pages]


def page_names(page: dict[str, Any]) -> list[tuple[str, str]]:
    return sorted((scope, i.name) for scope, scoped in page.items() for i in scoped.instances)


def raw_project(compute: LocalCompute, path: str) -> tuple[int, dict[str, Any]]:
    url = f"{compute.endpoint}/compute/v1/projects/{compute.project}/{path}"
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, json.load(response)
    except urllib.error.HTTPError as error:
        with error:
            return error.code, json.load(error)


@pytest.mark.parametrize("zone", ["europe-west4-b", "northamerica-northeast1-c", "us-east5-a"])
def test_any_region_x_zone_is_served_and_instances_say_what_they_are(
    compute: LocalCompute, instances_client: Any, zone: str
) -> None:
    insert_in(instances_client, compute, vm(compute, "spot-1", zone, provisioning="SPOT"), zone)
    insert_in(instances_client, compute, vm(compute, "std-1", zone), zone).result(timeout=5)

    for name, model in (("spot-1", "SPOT"), ("std-1", "STANDARD")):
        got = instances_client.get(project=compute.project, zone=zone, instance=name)
        assert got.scheduling.provisioning_model == model
        assert (
            got.zone == f"https://www.googleapis.com/compute/v1/projects/local-project/zones/{zone}"
        )
        assert got.machine_type == f"{got.zone}/machineTypes/n1-standard-8"


@pytest.mark.parametrize("zone", ["us-central1", "uscentral1-a", "us-central-a"])
def test_a_region_or_malformed_zone_is_refused(compute: LocalCompute, zone: str) -> None:
    status, body = raw_project(compute, f"zones/{zone}/instances")

    assert status == 400
    assert body["error"]["message"] == f"Invalid value for field 'zone': '{zone}'. Unknown zone."


def test_aggregated_list_spans_zones_filters_and_pages(
    compute: LocalCompute, instances_client: Any
) -> None:
    for zone in (compute.zone, OTHER_ZONE):
        for index in range(2):
            body = vm(compute, f"a-{index}", zone, provisioning="SPOT", pool="a")
            insert_in(instances_client, compute, body, zone)
        insert_in(instances_client, compute, vm(compute, "b-0", zone, pool="b"), zone)
    compute.limit_capacity("n1-standard-8", zone="us-central1-c")  # a zone with none
    compute.clear_calls()

    pages = aggregated_pages(instances_client, compute, 'labels.pool = "a"', page=3)
    assert [page_names(page) for page in pages] == [
        [
            ("zones/us-central1-a", "a-0"),
            ("zones/us-central1-a", "a-1"),
            ("zones/us-central1-b", "a-0"),
        ],
        [("zones/us-central1-b", "a-1")],
    ]
    assert compute.calls() == [ApiCall("GET", "instances.aggregatedList")] * 2
    # Every page has every zone: one without results on the page says so instead.
    assert [sorted(page) for page in pages] == [[f"zones/us-central1-{z}" for z in "abc"]] * 2
    empty = [(scope, scoped) for page in pages for scope, scoped in sorted(page.items())]
    empty = [(scope, scoped.warning) for scope, scoped in empty if not scoped.instances]
    assert [scope for scope, _ in empty] == [
        "zones/us-central1-c",
        "zones/us-central1-a",
        "zones/us-central1-c",
    ]
    warning = empty[0][1]
    assert warning.code == "NO_RESULTS_ON_PAGE"
    assert warning.message == "There are no results for scope 'zones/us-central1-c' on this page."
    assert [(d.key, d.value) for d in warning.data] == [("scope", "zones/us-central1-c")]

    (everything,) = aggregated_pages(instances_client, compute)
    models = sorted(
        (scope, i.name, i.scheduling.provisioning_model)
        for scope, scoped in everything.items()
        for i in scoped.instances
    )
    assert models == [
        (f"zones/{zone}", name, model)
        for zone in ("us-central1-a", "us-central1-b")
        for name, model in (("a-0", "SPOT"), ("a-1", "SPOT"), ("b-0", "STANDARD"))
    ]


def test_aggregated_list_is_as_strict_as_list(compute: LocalCompute) -> None:
    status, body = raw_project(compute, "aggregated/instances?returnPartialSuccess=true")
    assert (status, body["kind"]) == (200, "compute#instanceAggregatedList")
    assert body["items"] == {
        f"zones/{compute.zone}": {
            "warning": {
                "code": "NO_RESULTS_ON_PAGE",
                "message": f"There are no results for scope 'zones/{compute.zone}' on this page.",
                "data": [{"key": "scope", "value": f"zones/{compute.zone}"}],
            }
        }
    }
    for query, said in [
        ("filter=labels.pool%20%3D%20a%20OR%20labels.pool%20%3D%20b", "OR in a list filter"),
        ("maxResults=501", "maxResults"),
        ("pageToken=garbage", "pageToken"),
        ("includeAllScopes=true", "includeAllScopes"),
        ("returnPartialSuccess=yes", "returnPartialSuccess"),
        ("zone=us-central1-a", 'Unknown name "zone"'),
    ]:
        status, body = raw_project(compute, f"aggregated/instances?{query}")
        assert status == 400 and said in body["error"]["message"], query


# Refused calls: the reliability suite's 429s and 503s.


def test_every_nth_call_is_refused_and_does_nothing(
    compute: LocalCompute, instances_client: Any
) -> None:
    compute.fail_calls(429, every=2, methods=["instances.insert"], count=1)
    insert(instances_client, compute, gpu_instance(compute, "vm-1"))
    with pytest.raises(exceptions.TooManyRequests):
        insert(instances_client, compute, gpu_instance(compute, "vm-2"))
    insert(instances_client, compute, gpu_instance(compute, "vm-3"))
    assert [vm["name"] for vm in compute.instances()] == ["vm-1", "vm-3"]
    assert compute.created() == ["vm-1", "vm-3"]
    assert compute.faults_served() == 1


def test_a_503_on_a_read_is_retried_by_the_client(
    compute: LocalCompute, instances_client: Any
) -> None:
    compute.fail_calls(503, methods=["instances.list"], count=1)
    assert names(instances_client, compute) == []
    assert compute.call_names() == ["instances.list", "instances.list"]
    assert compute.faults_served() == 1
