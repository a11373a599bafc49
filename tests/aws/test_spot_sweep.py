"""The sweep's spot rules over the wire: stale requests, stuck statuses, left-behind instances."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from dynagent.aws.ec2 import Ec2Provider
from dynagent.run.reconcile import sweep
from dynagent.testing.aws.local_aws import LocalAws

from .helpers import config, image_id, managed_instances, now, pool_document


def spot_pool(ec2: Any) -> Any:
    return config(pool_document(image_id(ec2), spot=True, max_agent_starting_period="20m"))


def request_spot(ec2: Any, tag_value: str = "dynagent-test") -> str:
    response = ec2.request_spot_instances(
        InstanceCount=1,
        LaunchSpecification={"ImageId": image_id(ec2), "InstanceType": "p4d.24xlarge"},
        TagSpecifications=[
            {
                "ResourceType": "spot-instances-request",
                "Tags": [
                    {"Key": "managed-by", "Value": tag_value},
                    {"Key": "dynagent:pool", "Value": "a100"},
                ],
            }
        ],
    )
    return str(response["SpotInstanceRequests"][0]["SpotInstanceRequestId"])


def request_state(ec2: Any, request_id: str) -> str:
    requests = ec2.describe_spot_instance_requests(SpotInstanceRequestIds=[request_id])
    return str(requests["SpotInstanceRequests"][0]["State"])


def run_sweep(aws: LocalAws, ec2: Any) -> list[str]:
    cfg = spot_pool(ec2)
    (outcome,) = sweep(cfg, lambda pool: Ec2Provider(pool, ec2, cfg.settings), now())
    assert outcome.error is None and outcome.plan is not None
    return outcome.plan.describe()


def test_a_request_open_too_long_is_cancelled(aws: LocalAws, ec2: Any) -> None:
    aws.fulfil_spot_requests = False
    old, fresh = request_spot(ec2), request_spot(ec2)
    aws.set_spot_request_create_time(old, now() - timedelta(minutes=21))

    actions = run_sweep(aws, ec2)
    assert any(old in line and "max_agent_starting_period" in line for line in actions)
    assert request_state(ec2, old) == "cancelled"
    assert request_state(ec2, fresh) == "open"


def test_a_request_stuck_unfulfillable_past_the_grace_is_cancelled(aws: LocalAws, ec2: Any) -> None:
    aws.fulfil_spot_requests = False
    stuck, new = request_spot(ec2), request_spot(ec2)
    aws.set_spot_request_status(
        stuck, "open", "capacity-not-available", now() - timedelta(minutes=3)
    )
    aws.set_spot_request_status(new, "open", "price-too-low", now() - timedelta(seconds=30))

    actions = run_sweep(aws, ec2)
    assert any(stuck in line and "capacity-not-available" in line for line in actions)
    assert request_state(ec2, stuck) == "cancelled"
    assert request_state(ec2, new) == "open"  # still within the grace


def test_the_instance_of_a_cancelled_request_is_adopted_then_terminated(
    aws: LocalAws, ec2: Any
) -> None:
    request_id = request_spot(ec2)
    ec2.cancel_spot_instance_requests(SpotInstanceRequestIds=[request_id])
    (request,) = ec2.describe_spot_instance_requests(SpotInstanceRequestIds=[request_id])[
        "SpotInstanceRequests"
    ]
    assert request["Status"]["Code"] == "request-canceled-and-instance-running"

    actions = run_sweep(aws, ec2)
    assert any("was cancelled" in line for line in actions)
    calls = aws.calls()
    assert calls.index("CreateTags") < calls.index("TerminateInstances")  # tags allow it
    state = ec2.describe_instances(InstanceIds=[request["InstanceId"]])["Reservations"][0]
    assert state["Instances"][0]["State"]["Name"] in ("shutting-down", "terminated")


def test_an_active_request_s_instance_is_adopted_into_the_pool(aws: LocalAws, ec2: Any) -> None:
    request_id = request_spot(ec2)
    assert managed_instances(ec2) == []  # EC2 leaves the request's tags off its instance
    run_sweep(aws, ec2)
    (instance,) = managed_instances(ec2)
    assert instance["SpotInstanceRequestId"] == request_id


def test_requests_without_the_managed_pair_are_never_touched(aws: LocalAws, ec2: Any) -> None:
    aws.fulfil_spot_requests = False
    theirs = request_spot(ec2, tag_value="someone-else")
    aws.set_spot_request_create_time(theirs, now() - timedelta(hours=5))
    aws.set_spot_request_status(theirs, "open", "bad-parameters", now() - timedelta(hours=5))

    assert run_sweep(aws, ec2) == []
    assert request_state(ec2, theirs) == "open"
    assert "CancelSpotInstanceRequests" not in aws.calls()
