"""The local AWS's scarce capacity, instant EC2 Fleets, launch templates and spot prices.

Like test_local_aws.py, these pin the test double (real boto3 over HTTP against the
session's LocalAws), so a moto upgrade that breaks a faithful behaviour fails here.
"""

from __future__ import annotations

import base64
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

from dynagent.testing.aws.local_aws import LocalAws

GPU = "p4d.24xlarge"
SMALL_GPU = "g5.xlarge"
USER_DATA = "#!/bin/sh\necho from-template\n"
NO_RETRIES = Config(retries={"mode": "standard", "total_max_attempts": 1})


@pytest.fixture
def ec2(aws: LocalAws) -> Any:
    """No retries: EC2 answers InsufficientInstanceCapacity with HTTP 500, which boto3
    would otherwise retry with back-off."""
    return aws.client("ec2", config=NO_RETRIES)


@pytest.fixture
def image(aws: LocalAws) -> str:
    return aws.image_id()


@pytest.fixture
def subnets(ec2: Any) -> dict[str, str]:
    """One subnet per zone a and b: zone -> subnet id."""
    vpc = ec2.create_vpc(CidrBlock="10.9.0.0/16")["Vpc"]["VpcId"]
    made = {}
    for n, zone in enumerate(("us-west-2a", "us-west-2b")):
        subnet = ec2.create_subnet(VpcId=vpc, CidrBlock=f"10.9.{n}.0/24", AvailabilityZone=zone)
        made[zone] = subnet["Subnet"]["SubnetId"]
    return made


@pytest.fixture
def template(ec2: Any, image: str) -> str:
    response = ec2.create_launch_template(
        LaunchTemplateName="pool-a100",
        LaunchTemplateData={
            "ImageId": image,
            "InstanceType": GPU,
            "UserData": base64.b64encode(USER_DATA.encode()).decode(),
            "MetadataOptions": {"HttpTokens": "required", "HttpEndpoint": "enabled"},
            "TagSpecifications": [
                {"ResourceType": "instance", "Tags": [{"Key": "pool", "Value": "a100"}]},
                {"ResourceType": "volume", "Tags": [{"Key": "pool", "Value": "a100"}]},
            ],
        },
        TagSpecifications=[
            {"ResourceType": "launch-template", "Tags": [{"Key": "owner", "Value": "dynagent"}]}
        ],
    )
    return str(response["LaunchTemplate"]["LaunchTemplateId"])


def error_of(excinfo: pytest.ExceptionInfo[ClientError]) -> tuple[str, int, str]:
    response: Any = excinfo.value.response
    return (
        response["Error"]["Code"],
        response["ResponseMetadata"]["HTTPStatusCode"],
        response["Error"]["Message"],
    )


def instances(ec2: Any, *ids: str) -> list[dict[str, Any]]:
    reservations = ec2.describe_instances(InstanceIds=list(ids))["Reservations"]
    return [i for r in reservations for i in r["Instances"]]


def tags_of(item: dict[str, Any]) -> dict[str, str]:
    return {t["Key"]: t["Value"] for t in item.get("Tags", [])}


def fleet(
    ec2: Any,
    template_id: str,
    overrides: list[dict[str, Any]],
    target: int = 1,
    purchase: str = "on-demand",
    **params: Any,
) -> dict[str, Any]:
    params.setdefault("OnDemandOptions", {"AllocationStrategy": "prioritized"})
    response: dict[str, Any] = ec2.create_fleet(
        Type="instant",
        LaunchTemplateConfigs=[
            {
                "LaunchTemplateSpecification": {
                    "LaunchTemplateId": template_id,
                    "Version": "$Latest",
                },
                "Overrides": overrides,
            }
        ],
        TargetCapacitySpecification={
            "TotalTargetCapacity": target,
            "DefaultTargetCapacityType": purchase,
        },
        **params,
    )
    return response


def launched(response: dict[str, Any]) -> list[tuple[str, str, int]]:
    """(instance type, subnet or "", instance count) per Instances entry, in order."""
    return [
        (
            entry["InstanceType"],
            entry["LaunchTemplateAndOverrides"]["Overrides"].get("SubnetId", ""),
            len(entry["InstanceIds"]),
        )
        for entry in response.get("Instances", [])
    ]


def errors(response: dict[str, Any]) -> list[tuple[str, str]]:
    return [
        (entry["LaunchTemplateAndOverrides"]["Overrides"]["InstanceType"], entry["ErrorCode"])
        for entry in response.get("Errors", [])
    ]


def instance_ids(response: dict[str, Any]) -> list[str]:
    return [i for entry in response.get("Instances", []) for i in entry["InstanceIds"]]


# -- capacity: RunInstances and RequestSpotInstances -------------------------------------


def test_run_instances_launches_what_is_left_when_at_least_min_count(
    aws: LocalAws, ec2: Any, image: str
) -> None:
    aws.limit_capacity(GPU, zone="us-west-2a", purchase="on-demand", count=2)
    response = ec2.run_instances(ImageId=image, InstanceType=GPU, MinCount=1, MaxCount=3)
    assert len(response["Instances"]) == 2
    with pytest.raises(ClientError) as excinfo:  # the limit is used up
        ec2.run_instances(ImageId=image, InstanceType=GPU, MinCount=1, MaxCount=1)
    code, status, message = error_of(excinfo)
    assert (code, status) == ("InsufficientInstanceCapacity", 500)
    assert (
        f"sufficient {GPU} capacity in the Availability Zone you requested (us-west-2a)" in message
    )
    assert "us-west-2b" in message  # the zones that still have capacity


def test_run_instances_fails_when_fewer_than_min_count_can_launch(
    aws: LocalAws, ec2: Any, image: str
) -> None:
    aws.limit_capacity(GPU, count=2)
    with pytest.raises(ClientError) as excinfo:
        ec2.run_instances(ImageId=image, InstanceType=GPU, MinCount=3, MaxCount=3)
    assert error_of(excinfo)[0] == "InsufficientInstanceCapacity"
    assert ec2.describe_instances()["Reservations"] == []
    # Other types, zones and purchase options are not limited.
    ec2.run_instances(ImageId=image, InstanceType=SMALL_GPU, MinCount=3, MaxCount=3)


def test_capacity_limit_follows_the_subnets_zone(
    aws: LocalAws, ec2: Any, image: str, subnets: dict[str, str]
) -> None:
    aws.limit_capacity(GPU, zone="us-west-2b", count=0)
    ec2.run_instances(
        ImageId=image, InstanceType=GPU, MinCount=1, MaxCount=1, SubnetId=subnets["us-west-2a"]
    )
    with pytest.raises(ClientError) as excinfo:
        ec2.run_instances(
            ImageId=image, InstanceType=GPU, MinCount=1, MaxCount=1, SubnetId=subnets["us-west-2b"]
        )
    assert error_of(excinfo)[0] == "InsufficientInstanceCapacity"
    assert aws.capacity_refusals() == [(GPU, "us-west-2b", "on-demand")]  # where it refused
    aws.clear_capacity_limits()
    ec2.run_instances(
        ImageId=image, InstanceType=GPU, MinCount=1, MaxCount=1, SubnetId=subnets["us-west-2b"]
    )


def test_spot_request_without_capacity_stays_open(aws: LocalAws, ec2: Any, image: str) -> None:
    aws.limit_capacity(GPU, purchase="spot", count=0)
    response = ec2.request_spot_instances(
        InstanceCount=1, LaunchSpecification={"ImageId": image, "InstanceType": GPU}
    )
    request_id = response["SpotInstanceRequests"][0]["SpotInstanceRequestId"]
    (request,) = ec2.describe_spot_instance_requests(SpotInstanceRequestIds=[request_id])[
        "SpotInstanceRequests"
    ]
    assert request["State"] == "open"
    assert request["Status"]["Code"] == "capacity-not-available"
    assert "InstanceId" not in request
    # On-demand capacity is a different pool.
    ec2.run_instances(ImageId=image, InstanceType=GPU, MinCount=1, MaxCount=1)


def test_injected_error_fails_run_instances_once(aws: LocalAws, ec2: Any, image: str) -> None:
    aws.fail_next_launch(GPU, "VcpuLimitExceeded", purchase="on-demand")
    with pytest.raises(ClientError) as excinfo:
        ec2.run_instances(ImageId=image, InstanceType=GPU, MinCount=1, MaxCount=1)
    assert error_of(excinfo)[:2] == ("VcpuLimitExceeded", 400)
    ec2.run_instances(ImageId=image, InstanceType=GPU, MinCount=1, MaxCount=1)


def test_reset_lifts_capacity_limits(aws: LocalAws, ec2: Any, image: str) -> None:
    aws.limit_capacity(GPU, count=0)
    aws.reset()
    ec2.run_instances(ImageId=image, InstanceType=GPU, MinCount=1, MaxCount=1)


# -- CreateFleet, instant -------------------------------------------------------------


def test_fleet_tries_overrides_in_priority_order(ec2: Any, template: str) -> None:
    response = fleet(
        ec2,
        template,
        [{"InstanceType": GPU, "Priority": 2.0}, {"InstanceType": SMALL_GPU, "Priority": 1.0}],
        target=2,
    )
    assert launched(response) == [(SMALL_GPU, "", 2)]
    assert response["Errors"] == []
    assert response["FleetId"].startswith("fleet-")


def test_fleet_falls_back_to_the_next_override_with_an_error_for_the_first(
    aws: LocalAws, ec2: Any, template: str, subnets: dict[str, str]
) -> None:
    aws.limit_capacity(GPU, zone="us-west-2a", count=1)
    response = fleet(
        ec2,
        template,
        [
            {"InstanceType": GPU, "SubnetId": subnets["us-west-2a"], "Priority": 1.0},
            {"InstanceType": GPU, "SubnetId": subnets["us-west-2b"], "Priority": 2.0},
        ],
        target=3,
    )
    assert launched(response) == [
        (GPU, subnets["us-west-2a"], 1),
        (GPU, subnets["us-west-2b"], 2),
    ]
    assert errors(response) == [(GPU, "InsufficientInstanceCapacity")]
    entry = response["Errors"][0]
    assert entry["Lifecycle"] == "on-demand"
    assert entry["LaunchTemplateAndOverrides"]["Overrides"]["SubnetId"] == subnets["us-west-2a"]
    assert entry["LaunchTemplateAndOverrides"]["LaunchTemplateSpecification"][
        "LaunchTemplateId"
    ] == (template)
    zones = {i["Placement"]["AvailabilityZone"] for i in instances(ec2, *instance_ids(response))}
    assert zones == {"us-west-2a", "us-west-2b"}


def test_fleet_with_no_capacity_anywhere_answers_200_with_only_errors(
    aws: LocalAws, ec2: Any, template: str
) -> None:
    aws.limit_capacity(GPU, count=0)
    aws.limit_capacity(SMALL_GPU, count=0)
    response = fleet(ec2, template, [{"InstanceType": GPU}, {"InstanceType": SMALL_GPU}])
    assert response["ResponseMetadata"]["HTTPStatusCode"] == 200
    assert response.get("Instances", []) == []
    assert errors(response) == [
        (GPU, "InsufficientInstanceCapacity"),
        (SMALL_GPU, "InsufficientInstanceCapacity"),
    ]
    assert ec2.describe_instances()["Reservations"] == []


def test_fleet_unknown_instance_type_is_an_error_entry(ec2: Any, template: str) -> None:
    response = fleet(ec2, template, [{"InstanceType": "p9.mega"}, {"InstanceType": GPU}])
    assert errors(response) == [("p9.mega", "InvalidParameterValue")]
    assert launched(response) == [(GPU, "", 1)]


def test_fleet_weights_count_capacity_units(ec2: Any, template: str) -> None:
    # 8 units from 4-unit instances: 2 instances; 1 unit from an 8-unit instance: still 1.
    response = fleet(ec2, template, [{"InstanceType": GPU, "WeightedCapacity": 4.0}], target=8)
    assert launched(response) == [(GPU, "", 2)]
    response = fleet(ec2, template, [{"InstanceType": GPU, "WeightedCapacity": 8.0}], target=1)
    assert launched(response) == [(GPU, "", 1)]


def test_fleet_spot_instances_have_the_spot_lifecycle(
    ec2: Any, template: str, aws: LocalAws
) -> None:
    response = fleet(ec2, template, [{"InstanceType": GPU}], purchase="spot")
    assert [entry["Lifecycle"] for entry in response["Instances"]] == ["spot"]
    (instance,) = instances(ec2, *instance_ids(response))
    assert instance["InstanceLifecycle"] == "spot"
    on_demand = fleet(ec2, template, [{"InstanceType": GPU}])
    (instance,) = instances(ec2, *instance_ids(on_demand))
    assert "InstanceLifecycle" not in instance


def test_fleet_spot_lowest_price_orders_by_price_per_unit(
    aws: LocalAws, ec2: Any, template: str
) -> None:
    aws.set_spot_price(GPU, "us-west-2a", 8.0)  # 8.0 per 4 units: 2.0 a unit
    aws.set_spot_price(SMALL_GPU, "us-west-2a", 3.0)  # 3.0 a unit
    response = fleet(
        ec2,
        template,
        [{"InstanceType": SMALL_GPU}, {"InstanceType": GPU, "WeightedCapacity": 4.0}],
        target=4,
        purchase="spot",
        SpotOptions={"AllocationStrategy": "price-capacity-optimized"},
    )
    assert launched(response) == [(GPU, "", 1)]


def test_fleet_instances_get_the_template_data_and_the_calls_tags(ec2: Any, template: str) -> None:
    response = fleet(
        ec2,
        template,
        [{"InstanceType": SMALL_GPU}],
        TagSpecifications=[
            {"ResourceType": "instance", "Tags": [{"Key": "dynagent:pool", "Value": "a100"}]}
        ],
    )
    (instance,) = instances(ec2, *instance_ids(response))
    assert instance["InstanceType"] == SMALL_GPU  # the override's, not the template's
    assert instance["MetadataOptions"]["HttpTokens"] == "required"
    tags = tags_of(instance)
    assert tags["pool"] == "a100"  # from the template
    assert tags["dynagent:pool"] == "a100"  # from the CreateFleet call
    assert tags["aws:ec2:fleet-id"] == response["FleetId"]
    user_data = ec2.describe_instance_attribute(
        InstanceId=instance["InstanceId"], Attribute="userData"
    )["UserData"]["Value"]
    assert base64.b64decode(user_data).decode() == USER_DATA


def test_fleet_client_token_replays_and_refuses_a_mismatch(ec2: Any, template: str) -> None:
    first = fleet(ec2, template, [{"InstanceType": GPU}], ClientToken="scale-up-7")
    again = fleet(ec2, template, [{"InstanceType": GPU}], ClientToken="scale-up-7")
    assert again["FleetId"] == first["FleetId"]
    assert instance_ids(again) == instance_ids(first)
    reservations = ec2.describe_instances()["Reservations"]
    assert sum(len(r["Instances"]) for r in reservations) == 1
    with pytest.raises(ClientError) as excinfo:
        fleet(ec2, template, [{"InstanceType": GPU}], target=2, ClientToken="scale-up-7")
    assert error_of(excinfo)[:2] == ("IdempotentParameterMismatch", 400)


def test_fleet_without_launch_template_configs_is_a_400(ec2: Any) -> None:
    with pytest.raises(ClientError) as excinfo:
        ec2.create_fleet(
            Type="instant",
            LaunchTemplateConfigs=[],
            TargetCapacitySpecification={"TotalTargetCapacity": 1},
        )
    assert error_of(excinfo)[:2] == ("MissingParameter", 400)


@pytest.mark.parametrize(
    "code",
    ["VcpuLimitExceeded", "MaxSpotInstanceCountExceeded", "SpotMaxPriceTooLow", "Unsupported"],
)
def test_fleet_reports_an_injected_error_and_moves_on(
    aws: LocalAws, ec2: Any, template: str, code: str
) -> None:
    aws.fail_next_launch(GPU, code, purchase="spot")
    overrides = [{"InstanceType": GPU}, {"InstanceType": SMALL_GPU}]
    response = fleet(ec2, template, overrides, purchase="spot")
    assert errors(response) == [(GPU, code)]
    assert launched(response) == [(SMALL_GPU, "", 1)]
    # Once only: the next fleet launches the first override.
    assert launched(fleet(ec2, template, overrides, purchase="spot")) == [(GPU, "", 1)]


def test_fleet_is_counted_in_the_call_log(aws: LocalAws, ec2: Any, template: str) -> None:
    aws.clear_calls()
    fleet(ec2, template, [{"InstanceType": GPU}])
    assert aws.calls("ec2") == ["CreateFleet"]


# -- launch templates -----------------------------------------------------------------


def test_launch_template_create_is_idempotent_by_client_token(ec2: Any, image: str) -> None:
    data = {"ImageId": image, "InstanceType": GPU}
    first = ec2.create_launch_template(
        LaunchTemplateName="t", LaunchTemplateData=data, ClientToken="a"
    )
    again = ec2.create_launch_template(
        LaunchTemplateName="t", LaunchTemplateData=data, ClientToken="a"
    )
    assert (
        again["LaunchTemplate"]["LaunchTemplateId"] == first["LaunchTemplate"]["LaunchTemplateId"]
    )
    with pytest.raises(ClientError) as excinfo:  # another token: the name is taken
        ec2.create_launch_template(LaunchTemplateName="t", LaunchTemplateData=data, ClientToken="b")
    assert error_of(excinfo)[0] == "InvalidLaunchTemplateName.AlreadyExistsException"
    with pytest.raises(ClientError) as excinfo:  # the same token for another template
        ec2.create_launch_template(LaunchTemplateName="u", LaunchTemplateData=data, ClientToken="a")
    assert error_of(excinfo)[0] == "IdempotentParameterMismatch"


def test_launch_template_versions(ec2: Any, template: str) -> None:
    (found,) = ec2.describe_launch_templates(
        Filters=[{"Name": "tag:owner", "Values": ["dynagent"]}]
    )["LaunchTemplates"]
    assert found["LaunchTemplateId"] == template
    made = ec2.create_launch_template_version(
        LaunchTemplateId=template,
        SourceVersion="1",
        LaunchTemplateData={"InstanceType": SMALL_GPU},
        ClientToken="v2",
    )["LaunchTemplateVersion"]
    again = ec2.create_launch_template_version(
        LaunchTemplateId=template,
        SourceVersion="1",
        LaunchTemplateData={"InstanceType": SMALL_GPU},
        ClientToken="v2",
    )["LaunchTemplateVersion"]
    assert made["VersionNumber"] == again["VersionNumber"] == 2
    ec2.modify_launch_template(LaunchTemplateId=template, DefaultVersion="2")
    (version,) = ec2.describe_launch_template_versions(
        LaunchTemplateId=template, Versions=["$Default"]
    )["LaunchTemplateVersions"]
    data = version["LaunchTemplateData"]
    assert version["VersionNumber"] == 2
    assert data["InstanceType"] == SMALL_GPU
    assert data["MetadataOptions"]["HttpTokens"] == "required"  # inherited from version 1
    resource_types = {spec["ResourceType"] for spec in data["TagSpecifications"]}
    assert resource_types == {"instance", "volume"}  # the template's own tags stay off it
    (listed,) = ec2.describe_launch_templates(LaunchTemplateNames=["pool-a100"])["LaunchTemplates"]
    assert (listed["DefaultVersionNumber"], listed["LatestVersionNumber"]) == (2, 2)


# -- spot prices ----------------------------------------------------------------------


def test_spot_price_history_serves_the_prices_set(aws: LocalAws, ec2: Any) -> None:
    assert ec2.describe_spot_price_history(InstanceTypes=[GPU])["SpotPriceHistory"] == []
    now = datetime.now(UTC).replace(microsecond=0)
    aws.set_spot_price(GPU, "us-west-2a", 10.0, at=now - timedelta(hours=5))
    aws.set_spot_price(GPU, "us-west-2a", 12.5, at=now - timedelta(hours=1))
    aws.set_spot_price(GPU, "us-west-2b", 11.0, at=now - timedelta(hours=1))
    aws.set_spot_price(SMALL_GPU, "us-west-2a", 0.4, at=now - timedelta(hours=1))

    history = ec2.describe_spot_price_history(
        InstanceTypes=[GPU],
        AvailabilityZone="us-west-2a",
        ProductDescriptions=["Linux/UNIX"],
        StartTime=now - timedelta(hours=2),
    )["SpotPriceHistory"]
    # Newest first, and the price in effect at StartTime (set before it) too.
    assert [(h["SpotPrice"], h["Timestamp"]) for h in history] == [
        ("12.500000", now - timedelta(hours=1)),
        ("10.000000", now - timedelta(hours=5)),
    ]
    assert {h["InstanceType"] for h in history} == {GPU}
    assert {h["ProductDescription"] for h in history} == {"Linux/UNIX"}
    zones = ec2.describe_spot_price_history(
        Filters=[{"Name": "instance-type", "Values": [GPU]}], StartTime=now - timedelta(minutes=30)
    )["SpotPriceHistory"]
    assert sorted(h["AvailabilityZone"] for h in zones) == ["us-west-2a", "us-west-2b"]
    windows = ec2.describe_spot_price_history(ProductDescriptions=["Windows"])["SpotPriceHistory"]
    assert windows == []
