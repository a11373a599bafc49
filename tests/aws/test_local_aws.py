"""The local AWS itself: the server's life cycle, and each place it is made to behave like EC2.

These tests pin the test double, not dynagent: if moto changes under us, they say which
faithful behaviour the other AWS tests can no longer rely on.
"""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from botocore.config import Config as BotoConfig
from botocore.exceptions import ClientError, ReadTimeoutError

from dynagent.testing.aws.local_aws import LocalAws

TAGS = [{"ResourceType": "instance", "Tags": [{"Key": "pool", "Value": "a100"}]}]
SPOT_TAGS = [{"ResourceType": "spot-instances-request", "Tags": [{"Key": "pool", "Value": "a100"}]}]


@pytest.fixture
def image(aws: LocalAws) -> str:
    """An AMI moto knows: the local AWS refuses unknown ones, as EC2 does."""
    return aws.image_id()


def run(ec2: Any, image: str, count: int = 1, **params: Any) -> dict[str, Any]:
    response: dict[str, Any] = ec2.run_instances(
        ImageId=image, MinCount=1, MaxCount=count, InstanceType="p4d.24xlarge", **params
    )
    return response


def request_spot(ec2: Any, image: str, count: int = 1, **params: Any) -> list[dict[str, Any]]:
    response = ec2.request_spot_instances(
        InstanceCount=count,
        LaunchSpecification={"ImageId": image, "InstanceType": "p4d.24xlarge"},
        **params,
    )
    requests: list[dict[str, Any]] = response["SpotInstanceRequests"]
    return requests


def ids(items: list[dict[str, Any]], key: str) -> list[str]:
    return [str(item[key]) for item in items]


def all_instances(ec2: Any, *filters: dict[str, Any]) -> list[dict[str, Any]]:
    pages = ec2.get_paginator("describe_instances").paginate(Filters=list(filters))
    return [i for page in pages for r in page["Reservations"] for i in r["Instances"]]


def spot_requests(ec2: Any, *filters: dict[str, Any]) -> list[dict[str, Any]]:
    requests: list[dict[str, Any]] = ec2.describe_spot_instance_requests(Filters=list(filters))[
        "SpotInstanceRequests"
    ]
    return requests


def error_of(excinfo: pytest.ExceptionInfo[ClientError]) -> tuple[str, int]:
    response: Any = excinfo.value.response
    return response["Error"]["Code"], response["ResponseMetadata"]["HTTPStatusCode"]


def without_client_token(ec2: Any) -> None:
    """Send RunInstances with no ClientToken at all: boto3 would otherwise fill in a random
    one, and moto then defaults the missing token to "ABCDE"."""

    def strip(params: dict[str, Any], **_: Any) -> None:
        params["body"].pop("ClientToken", None)

    ec2.meta.events.register("before-call.ec2.RunInstances", strip)


# -- the server --------------------------------------------------------------------------


def test_listens_on_loopback_only_and_stops_for_good() -> None:
    server = LocalAws()
    with server:
        host, port = server.address
        assert host == "127.0.0.1" and port > 0
        assert server.endpoint_url == f"http://127.0.0.1:{port}"
        assert server.client("ec2").describe_regions()["Regions"]
    assert not server.running
    assert f"local-aws:{port}" not in [t.name for t in threading.enumerate()]  # joined
    with pytest.raises(ConnectionRefusedError), socket.create_connection(("127.0.0.1", port), 1):
        pass
    server.stop()  # stopping twice is harmless


def test_env_points_a_process_at_it_without_touching_ours(aws: LocalAws) -> None:
    before = dict(os.environ)
    env = aws.env()
    assert env["AWS_ENDPOINT_URL"] == aws.endpoint_url
    assert env["AWS_DEFAULT_REGION"] == "us-west-2"
    assert env["AWS_ACCESS_KEY_ID"] and env["AWS_SECRET_ACCESS_KEY"]
    assert env["AWS_EC2_METADATA_DISABLED"] == "true"
    assert dict(os.environ) == before


def test_each_server_has_its_own_account(aws: LocalAws, ec2: Any, image: str) -> None:
    run(ec2, image)
    with LocalAws() as other:
        other_ec2 = other.client("ec2")
        assert all_instances(other_ec2) == []
        run(other_ec2, other.image_id(), ClientToken="t")
        other.reset()
        assert len(all_instances(ec2)) == 1  # the other's reset left ours alone
    # Stopping the other server kept the fixes for this one: tokens still count.
    first = run(ec2, image, ClientToken="t")
    assert run(ec2, image, ClientToken="t")["ReservationId"] == first["ReservationId"]


def test_reset_forgets_state_and_restores_knobs(aws: LocalAws, ec2: Any, image: str) -> None:
    run(ec2, image, ClientToken="t")
    aws.fulfil_spot_requests = False
    aws.hide_new_instances(describes=5)
    aws.reset()
    assert all_instances(ec2) == []
    assert aws.fulfil_spot_requests
    run(ec2, image, ClientToken="t")  # the token was forgotten too: this launches anew
    assert len(all_instances(ec2)) == 1


def test_fixes_leave_other_moto_accounts_alone(aws: LocalAws) -> None:
    from moto.ec2.models import ec2_backends

    stranger = "999999999999"
    backend = ec2_backends[stranger][aws.region]
    image = backend.describe_images(owners=["amazon"])[0].id
    try:
        (request,) = backend.request_spot_instances(
            price="1", image_id=image, count=1, spot_instance_type="one-time",
            valid_from=None, valid_until=None, launch_group=None,
            availability_zone_group=None, key_name="", security_groups=[],
            user_data=None, instance_type="m5.large", placement=None, kernel_id=None,
            ramdisk_id=None, monitoring_enabled=False, subnet_id="",
        )  # fmt: skip
        backend.cancel_spot_instance_requests([request.id])
        assert request.id not in backend.spot_instance_requests  # moto's own behaviour
    finally:
        for service in ec2_backends, *_other_backends():
            service.pop(stranger, None)


def _other_backends() -> list[Any]:
    from moto.core.base_backend import BackendDict

    in_use: list[Any] = vars(BackendDict)["_instances"]
    return list(in_use)


# -- ClientToken: RunInstances -----------------------------------------------------------


def test_run_instances_replays_the_reservation(aws: LocalAws, ec2: Any, image: str) -> None:
    first = run(ec2, image, count=2, ClientToken="launch-1", TagSpecifications=TAGS)
    again = run(ec2, image, count=2, ClientToken="launch-1", TagSpecifications=TAGS)

    assert again["ReservationId"] == first["ReservationId"]
    assert ids(again["Instances"], "InstanceId") == ids(first["Instances"], "InstanceId")
    assert sorted(ids(all_instances(ec2), "InstanceId")) == sorted(
        ids(first["Instances"], "InstanceId")
    )
    assert aws.calls("ec2").count("RunInstances") == 2


def test_run_instances_replay_shows_the_current_state(ec2: Any, image: str) -> None:
    first = run(ec2, image, ClientToken="launch-1")
    ec2.terminate_instances(InstanceIds=ids(first["Instances"], "InstanceId"))
    again = run(ec2, image, ClientToken="launch-1")
    assert again["Instances"][0]["State"]["Name"] in ("shutting-down", "terminated")
    assert len(all_instances(ec2)) == 1


def test_run_instances_same_token_other_parameters_is_a_mismatch(ec2: Any, image: str) -> None:
    run(ec2, image, count=2, ClientToken="launch-1")
    with pytest.raises(ClientError) as excinfo:
        run(ec2, image, count=3, ClientToken="launch-1")
    assert error_of(excinfo) == ("IdempotentParameterMismatch", 400)
    with pytest.raises(ClientError) as excinfo:
        run(ec2, image, count=2, ClientToken="launch-1", TagSpecifications=TAGS)
    assert error_of(excinfo) == ("IdempotentParameterMismatch", 400)
    assert len(all_instances(ec2)) == 2


def test_run_instances_without_a_token_launches_every_time(ec2: Any, image: str) -> None:
    run(ec2, image)  # boto3 fills in a fresh random token for each call
    run(ec2, image)
    without_client_token(ec2)
    run(ec2, image)  # and none at all: moto's default "ABCDE" must not deduplicate
    run(ec2, image)
    assert len(all_instances(ec2)) == 4


def test_a_token_is_per_region(aws: LocalAws, ec2: Any, image: str) -> None:
    run(ec2, image, ClientToken="launch-1")
    east = aws.client("ec2", region="us-east-1")
    run(east, aws.image_id("us-east-1"), ClientToken="launch-1")
    assert len(all_instances(ec2)) == 1 and len(all_instances(east)) == 1


def test_a_token_over_64_characters_is_refused(ec2: Any, image: str) -> None:
    run(ec2, image, ClientToken="t" * 64)
    with pytest.raises(ClientError) as excinfo:
        run(ec2, image, ClientToken="t" * 65)
    assert error_of(excinfo) == ("InvalidParameterValue", 400)


def test_run_instances_launches_max_count(ec2: Any, image: str) -> None:
    # EC2 launches MaxCount when it has the capacity; moto alone launches MinCount.
    assert len(run(ec2, image, count=3)["Instances"]) == 3


@pytest.mark.parametrize("launch", [run, request_spot])
def test_an_unknown_image_is_refused(ec2: Any, launch: Any) -> None:
    with pytest.raises(ClientError) as excinfo:
        launch(ec2, "ami-00000000000000000")
    assert error_of(excinfo) == ("InvalidAMIID.NotFound", 400)
    assert all_instances(ec2) == []


# -- ClientToken: RequestSpotInstances ---------------------------------------------------


def test_spot_request_replays_the_original_requests(aws: LocalAws, ec2: Any, image: str) -> None:
    first = request_spot(ec2, image, count=2, ClientToken="spot-1", TagSpecifications=SPOT_TAGS)
    again = request_spot(ec2, image, count=2, ClientToken="spot-1", TagSpecifications=SPOT_TAGS)

    assert ids(again, "SpotInstanceRequestId") == ids(first, "SpotInstanceRequestId")
    assert ids(again, "InstanceId") == ids(first, "InstanceId")
    assert len(spot_requests(ec2)) == 2
    assert len(all_instances(ec2)) == 2
    assert aws.calls().count("RequestSpotInstances") == 2


def test_spot_request_same_token_other_parameters_is_a_mismatch(ec2: Any, image: str) -> None:
    request_spot(ec2, image, count=2, ClientToken="spot-1")
    with pytest.raises(ClientError) as excinfo:
        request_spot(ec2, image, count=1, ClientToken="spot-1")
    assert error_of(excinfo) == ("IdempotentParameterMismatch", 400)
    assert len(spot_requests(ec2)) == 2


def test_spot_request_without_a_token_requests_every_time(ec2: Any, image: str) -> None:
    request_spot(ec2, image)  # boto3 does not fill in a token for RequestSpotInstances
    request_spot(ec2, image)
    assert len(spot_requests(ec2)) == 2


# -- spot requests: life cycle -----------------------------------------------------------


def test_spot_instance_names_its_request_but_has_not_its_tags(ec2: Any, image: str) -> None:
    (request,) = request_spot(ec2, image, TagSpecifications=SPOT_TAGS)
    assert request["State"] == "active" and request["Status"]["Code"] == "fulfilled"
    (instance,) = all_instances(ec2)
    assert instance["InstanceId"] == request["InstanceId"]
    assert instance["SpotInstanceRequestId"] == request["SpotInstanceRequestId"]
    assert instance["InstanceLifecycle"] == "spot"
    assert "Tags" not in instance  # faithful: EC2 does not copy the request's tags


def test_spot_request_times_are_real(ec2: Any, image: str) -> None:
    (request,) = request_spot(ec2, image)
    for stamp in (request["CreateTime"], request["Status"]["UpdateTime"]):
        assert abs(stamp - datetime.now(UTC)) < timedelta(minutes=1)


def test_cancelled_request_stays_visible_with_its_instance_running(ec2: Any, image: str) -> None:
    (request,) = request_spot(ec2, image)
    rid = request["SpotInstanceRequestId"]
    cancelled = ec2.cancel_spot_instance_requests(SpotInstanceRequestIds=[rid])
    assert cancelled["CancelledSpotInstanceRequests"] == [
        {"SpotInstanceRequestId": rid, "State": "cancelled"}
    ]

    (seen,) = spot_requests(ec2, {"Name": "state", "Values": ["cancelled"]})
    assert seen["SpotInstanceRequestId"] == rid
    assert seen["Status"]["Code"] == "request-canceled-and-instance-running"
    assert seen["InstanceId"] == request["InstanceId"]
    assert [i["State"]["Name"] for i in all_instances(ec2)] == ["running"]

    ec2.terminate_instances(InstanceIds=[request["InstanceId"]])
    (seen,) = spot_requests(ec2, {"Name": "state", "Values": ["cancelled"]})
    assert seen["Status"]["Code"] == "instance-terminated-by-user"


def test_cancelling_an_open_request(aws: LocalAws, ec2: Any, image: str) -> None:
    aws.fulfil_spot_requests = False
    (request,) = request_spot(ec2, image)
    ec2.cancel_spot_instance_requests(SpotInstanceRequestIds=[request["SpotInstanceRequestId"]])
    (seen,) = spot_requests(ec2)
    assert (seen["State"], seen["Status"]["Code"]) == ("cancelled", "canceled-before-fulfillment")


def test_terminating_a_spot_instance_closes_its_request(ec2: Any, image: str) -> None:
    (request,) = request_spot(ec2, image)
    ec2.terminate_instances(InstanceIds=[request["InstanceId"]])
    (seen,) = spot_requests(ec2)
    assert (seen["State"], seen["Status"]["Code"]) == ("closed", "instance-terminated-by-user")


def test_cancelling_an_unknown_request_is_not_found(ec2: Any) -> None:
    with pytest.raises(ClientError) as excinfo:
        ec2.cancel_spot_instance_requests(SpotInstanceRequestIds=["sir-00000000"])
    assert error_of(excinfo) == ("InvalidSpotInstanceRequestID.NotFound", 400)


def test_open_requests_wait_without_an_instance(aws: LocalAws, ec2: Any, image: str) -> None:
    aws.fulfil_spot_requests = False
    (request,) = request_spot(ec2, image, TagSpecifications=SPOT_TAGS)
    assert (request["State"], request["Status"]["Code"]) == ("open", "pending-fulfillment")
    assert "InstanceId" not in request
    assert all_instances(ec2) == []
    assert spot_requests(ec2, {"Name": "instance-id", "Values": ["*"]}) == []

    instance_id = aws.fulfil_spot_request(request["SpotInstanceRequestId"])
    (seen,) = spot_requests(ec2)
    assert (seen["State"], seen["Status"]["Code"]) == ("active", "fulfilled")
    assert seen["InstanceId"] == instance_id
    assert ids(all_instances(ec2), "InstanceId") == [instance_id]


def test_a_spot_request_can_be_put_in_any_status(aws: LocalAws, ec2: Any, image: str) -> None:
    aws.fulfil_spot_requests = False
    (request,) = request_spot(ec2, image)
    rid = request["SpotInstanceRequestId"]
    an_hour_ago = datetime.now(UTC).replace(microsecond=0) - timedelta(hours=1)
    aws.set_spot_request_status(rid, "open", "capacity-not-available", an_hour_ago)
    aws.set_spot_request_create_time(rid, an_hour_ago - timedelta(minutes=5))

    (seen,) = spot_requests(ec2, {"Name": "status-code", "Values": ["capacity-not-available"]})
    assert seen["State"] == "open"
    assert seen["Status"]["UpdateTime"] == an_hour_ago
    assert seen["CreateTime"] == an_hour_ago - timedelta(minutes=5)
    with pytest.raises(ValueError):
        aws.set_spot_request_status(rid, "open", "x", datetime(2030, 1, 1))
    with pytest.raises(KeyError):
        aws.set_spot_request_status("sir-nope", "open", "x", an_hour_ago)


def test_spot_requests_filter_by_tag_and_state_and_page(ec2: Any, image: str) -> None:
    request_spot(ec2, image, count=3, TagSpecifications=SPOT_TAGS)
    (other,) = request_spot(ec2, image)
    ec2.cancel_spot_instance_requests(SpotInstanceRequestIds=[other["SpotInstanceRequestId"]])

    assert len(spot_requests(ec2, {"Name": "tag:pool", "Values": ["a100"]})) == 3
    assert len(spot_requests(ec2, {"Name": "state", "Values": ["active"]})) == 3
    assert len(spot_requests(ec2, {"Name": "state", "Values": ["open", "cancelled"]})) == 1

    # moto alone answers in one page whatever MaxResults says; EC2 pages.
    page = ec2.describe_spot_instance_requests(MaxResults=3)
    assert len(page["SpotInstanceRequests"]) == 3 and page["NextToken"]
    rest = ec2.describe_spot_instance_requests(MaxResults=3, NextToken=page["NextToken"])
    assert len(rest["SpotInstanceRequests"]) == 1 and "NextToken" not in rest
    pages = ec2.get_paginator("describe_spot_instance_requests").paginate(
        Filters=[{"Name": "tag:pool", "Values": ["a100"]}], PaginationConfig={"PageSize": 2}
    )
    assert [len(p["SpotInstanceRequests"]) for p in pages] == [2, 1]


# -- instances: describing and aging -----------------------------------------------------


def test_describe_instances_filters_by_tag_and_state(ec2: Any, image: str) -> None:
    tagged = ids(run(ec2, image, count=2, TagSpecifications=TAGS)["Instances"], "InstanceId")
    run(ec2, image)
    ec2.stop_instances(InstanceIds=tagged[:1])
    by_tag = all_instances(ec2, {"Name": "tag:pool", "Values": ["a100"]})
    assert sorted(ids(by_tag, "InstanceId")) == sorted(tagged)
    running = all_instances(
        ec2,
        {"Name": "tag:pool", "Values": ["a100"]},
        {"Name": "instance-state-name", "Values": ["pending", "running"]},
    )
    assert ids(running, "InstanceId") == tagged[1:]


def test_describe_instances_pages_by_reservation(aws: LocalAws, ec2: Any, image: str) -> None:
    for _ in range(6):
        run(ec2, image)
    run(ec2, image, count=3)
    aws.clear_calls()
    pages = list(ec2.get_paginator("describe_instances").paginate(MaxResults=5))
    # moto counts reservations, EC2 counts instances: 5 + 2 reservations, 5 + 4 instances.
    assert [len(p["Reservations"]) for p in pages] == [5, 2]
    assert sum(len(r["Instances"]) for p in pages for r in p["Reservations"]) == 9
    assert aws.calls() == ["DescribeInstances", "DescribeInstances"]


def test_new_instances_can_hide_from_a_few_describes(aws: LocalAws, ec2: Any, image: str) -> None:
    old = ids(run(ec2, image)["Instances"], "InstanceId")
    aws.hide_new_instances(describes=2)
    (new,) = ids(run(ec2, image)["Instances"], "InstanceId")

    assert ids(all_instances(ec2), "InstanceId") == old  # describe 1
    with pytest.raises(ClientError) as excinfo:  # describe 2, by id
        ec2.describe_instances(InstanceIds=[new])
    assert error_of(excinfo) == ("InvalidInstanceID.NotFound", 400)
    assert sorted(ids(all_instances(ec2), "InstanceId")) == sorted([*old, new])


def test_an_instance_can_be_aged(aws: LocalAws, ec2: Any, image: str) -> None:
    (instance_id,) = ids(run(ec2, image)["Instances"], "InstanceId")
    when = datetime(2030, 1, 2, 3, 4, 5, tzinfo=UTC)
    aws.set_launch_time(instance_id, when)
    (instance,) = all_instances(ec2)
    assert instance["LaunchTime"] == when
    with pytest.raises(ValueError):
        aws.set_launch_time(instance_id, datetime(2030, 1, 2))


def test_an_instance_can_be_held_pending(aws: LocalAws, ec2: Any, image: str) -> None:
    (instance_id,) = ids(run(ec2, image)["Instances"], "InstanceId")
    aws.set_instance_state(instance_id, "pending")
    (instance,) = all_instances(ec2)
    assert instance["State"] == {"Code": 0, "Name": "pending"}


# -- faults served -------------------------------------------------------------------------

NO_RETRIES = BotoConfig(retries={"total_max_attempts": 1})


def test_every_nth_call_can_be_answered_with_an_error(aws: LocalAws, image: str) -> None:
    ec2 = aws.client("ec2", config=NO_RETRIES)
    aws.inject_errors("RequestLimitExceeded", every=2, status=503, action="DescribeInstances")
    ec2.describe_instances()
    with pytest.raises(ClientError) as excinfo:
        ec2.describe_instances()
    assert error_of(excinfo) == ("RequestLimitExceeded", 503)
    run(ec2, image)  # another action: not counted by the rule
    ec2.describe_instances()
    assert aws.faults_served() == {"error": 1}
    aws.reset()
    ec2.describe_instances()
    ec2.describe_instances()
    assert aws.faults_served() == {}


def test_a_late_answer_times_the_client_out_after_the_call_took_effect(
    aws: LocalAws, image: str
) -> None:
    impatient = aws.client("ec2", config=NO_RETRIES.merge(BotoConfig(read_timeout=0.2)))
    aws.answer_late(0.6, every=1, action="RunInstances")
    with pytest.raises(ReadTimeoutError):
        run(impatient, image)
    assert len(all_instances(aws.client("ec2"))) == 1
    assert aws.faults_served() == {"late": 1}


def test_hidden_describes_and_refused_launches_are_counted(
    aws: LocalAws, ec2: Any, image: str
) -> None:
    aws.hide_new_instances(describes=2)
    run(ec2, image)
    all_instances(ec2)
    all_instances(ec2)
    all_instances(ec2)  # visible now: not a fault
    aws.fail_next_launch("p4d.24xlarge", "VcpuLimitExceeded")
    with pytest.raises(ClientError):
        run(ec2, image)
    assert aws.faults_served() == {"hidden": 2, "refused": 1}


# -- calls served ------------------------------------------------------------------------


def test_calls_are_counted_at_the_wire(aws: LocalAws, ec2: Any, sqs: Any, image: str) -> None:
    aws.clear_calls()
    run(ec2, image)
    url = sqs.create_queue(QueueName="snapshots")["QueueUrl"]  # SQS speaks JSON protocol
    sqs.send_message(QueueUrl=url, MessageBody="{}")
    ec2.describe_instances()

    assert aws.calls() == ["RunInstances", "CreateQueue", "SendMessage", "DescribeInstances"]
    assert aws.calls("sqs") == ["CreateQueue", "SendMessage"]
    assert [(c.service, c.action) for c in aws.api_calls()][:2] == [
        ("ec2", "RunInstances"),
        ("sqs", "CreateQueue"),
    ]
    aws.clear_calls()
    assert aws.calls() == []


def test_failed_calls_count_too(aws: LocalAws, ec2: Any) -> None:
    with pytest.raises(ClientError):
        ec2.cancel_spot_instance_requests(SpotInstanceRequestIds=["sir-00000000"])
    assert aws.calls() == ["CancelSpotInstanceRequests"]


@pytest.fixture
def second_server() -> Iterator[LocalAws]:
    with LocalAws(fulfil_spot_requests=False) as server:
        yield server


def test_open_request_mode_can_be_the_default(second_server: LocalAws) -> None:
    (request,) = request_spot(second_server.client("ec2"), second_server.image_id())
    assert request["State"] == "open"
    second_server.fulfil_spot_requests = True
    second_server.reset()
    assert not second_server.fulfil_spot_requests  # reset restores the constructor's choice
