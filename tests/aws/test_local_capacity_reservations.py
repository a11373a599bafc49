"""The local AWS's capacity reservations, through boto3 as EC2 answers: described with
their free places, launched into by target, used by open matching launches unless they
opt out, refused when full or before a block's start, and a block's instances taken back
before its end."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from botocore.exceptions import ClientError

from dynagent.testing.aws.local_aws import LocalAws

TYPE = "p4d.24xlarge"


def zone(aws: LocalAws) -> str:
    return f"{aws.region}a"


def run(aws: LocalAws, ec2: Any, count: int = 1, **extra: Any) -> list[dict[str, Any]]:
    response = ec2.run_instances(
        ImageId=aws.image_id(),
        InstanceType=TYPE,
        MinCount=1,
        MaxCount=count,
        Placement={"AvailabilityZone": zone(aws)},
        **extra,
    )
    return list(response["Instances"])


def target(reservation_id: str) -> dict[str, Any]:
    return {
        "CapacityReservationSpecification": {
            "CapacityReservationTarget": {"CapacityReservationId": reservation_id}
        }
    }


def described(ec2: Any, reservation_id: str) -> dict[str, Any]:
    (found,) = ec2.describe_capacity_reservations(CapacityReservationIds=[reservation_id])[
        "CapacityReservations"
    ]
    return dict(found)


def instance(ec2: Any, instance_id: str) -> dict[str, Any]:
    return dict(
        ec2.describe_instances(InstanceIds=[instance_id])["Reservations"][0]["Instances"][0]
    )


def test_a_targeted_reservation_is_described_and_launched_into_until_full(
    aws: LocalAws, ec2: Any
) -> None:
    reservation = aws.create_capacity_reservation(TYPE, zone(aws), 4, tags={"team": "ml"})
    found = described(ec2, reservation)
    assert (found["TotalInstanceCount"], found["AvailableInstanceCount"]) == (4, 4)
    assert (found["InstanceMatchCriteria"], found["State"], found["ReservationType"]) == (
        "targeted",
        "active",
        "default",
    )

    launched = run(aws, ec2, 6, **target(reservation))

    assert len(launched) == 4  # what it holds, of MaxCount 6
    assert described(ec2, reservation)["AvailableInstanceCount"] == 0
    shown = instance(ec2, launched[0]["InstanceId"])
    assert shown["CapacityReservationId"] == reservation
    with pytest.raises(ClientError, match="ReservationCapacityExceeded"):
        run(aws, ec2, 1, **target(reservation))
    ec2.terminate_instances(InstanceIds=[launched[0]["InstanceId"]])
    assert described(ec2, reservation)["AvailableInstanceCount"] == 1


def test_filters_by_tag_and_state_and_an_unknown_id(aws: LocalAws, ec2: Any) -> None:
    ours = aws.create_capacity_reservation(TYPE, zone(aws), 2, tags={"team": "ml"})
    aws.create_capacity_reservation(TYPE, zone(aws), 2, tags={"team": "other"})
    tagged = ec2.describe_capacity_reservations(
        Filters=[{"Name": "tag:team", "Values": ["ml"]}, {"Name": "state", "Values": ["active"]}]
    )["CapacityReservations"]
    assert [r["CapacityReservationId"] for r in tagged] == [ours]
    with pytest.raises(ClientError, match=r"InvalidCapacityReservationId\.NotFound"):
        ec2.describe_capacity_reservations(CapacityReservationIds=["cr-00000000000000000"])


def test_an_open_reservation_is_used_by_a_matching_launch_unless_it_opts_out(
    aws: LocalAws, ec2: Any
) -> None:
    reservation = aws.create_capacity_reservation(TYPE, zone(aws), 2, match="open")
    opted_out = run(
        aws, ec2, 1, CapacityReservationSpecification={"CapacityReservationPreference": "none"}
    )
    assert described(ec2, reservation)["AvailableInstanceCount"] == 2
    assert "CapacityReservationId" not in instance(ec2, opted_out[0]["InstanceId"])

    matching = run(aws, ec2, 1)

    assert instance(ec2, matching[0]["InstanceId"])["CapacityReservationId"] == reservation
    assert described(ec2, reservation)["AvailableInstanceCount"] == 1


def test_a_launch_must_match_the_reservation_s_type_and_zone(aws: LocalAws, ec2: Any) -> None:
    reservation = aws.create_capacity_reservation(TYPE, f"{aws.region}b", 2)
    with pytest.raises(ClientError, match="InvalidParameterValue"):
        run(aws, ec2, 1, **target(reservation))


def test_a_capacity_block_before_its_start_in_its_market_and_at_its_end(
    aws: LocalAws, ec2: Any
) -> None:
    now = datetime.now(UTC)
    later = aws.create_capacity_block(
        TYPE, zone(aws), 2, now + timedelta(hours=1), now + timedelta(days=1)
    )
    assert described(ec2, later)["State"] == "scheduled"
    assert described(ec2, later)["ReservationType"] == "capacity-block"
    market = {"InstanceMarketOptions": {"MarketType": "capacity-block"}}
    with pytest.raises(ClientError, match="InsufficientInstanceCapacity"):
        run(aws, ec2, 1, **target(later), **market)

    # Started an hour ago: launched into in its own market only.
    ending = aws.create_capacity_block(
        TYPE, zone(aws), 2, now - timedelta(hours=1), now + timedelta(hours=1)
    )
    with pytest.raises(ClientError, match="InvalidParameterCombination"):
        run(aws, ec2, 1, **target(ending))
    (launched,) = run(aws, ec2, 1, **target(ending), **market)
    shown = instance(ec2, launched["InstanceId"])
    assert shown["State"]["Name"] in ("pending", "running")
    assert shown["InstanceLifecycle"] == "capacity-block"  # not spot, as moto would say
    # One ending in 20 minutes: EC2 is taking its instances back already.
    soon = aws.create_capacity_block(
        TYPE, zone(aws), 1, now - timedelta(hours=1), now + timedelta(minutes=20)
    )
    (doomed,) = run(aws, ec2, 1, **target(soon), **market)
    assert instance(ec2, doomed["InstanceId"])["State"]["Name"] in ("shutting-down", "terminated")
