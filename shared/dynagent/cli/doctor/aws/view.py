"""What the AWS checks read from EC2 in one region, each thing described once."""

from __future__ import annotations

from typing import Any

from botocore.exceptions import ClientError

from dynagent.aws.ec2 import error_code

_NOT_FOUND = frozenset({"InvalidAMIID.NotFound", "InvalidAMIID.Malformed", "InvalidInstanceType"})


class Ec2View:
    """Read-through memo of the describes the checks share (boto3 EC2 client)."""

    def __init__(self, ec2: Any, region: str) -> None:
        self.ec2 = ec2
        self.region = region
        self._images: dict[str, dict[str, Any] | None] = {}
        self._types: dict[str, dict[str, Any] | None] = {}
        self._zones_of_type: dict[str, set[str]] = {}
        self._subnets: dict[str, dict[str, Any] | None] = {}
        self._groups: dict[str, dict[str, Any] | None] = {}

    def image(self, image_id: str) -> dict[str, Any] | None:
        """The AMI, or None when the region has none of that id."""
        if image_id not in self._images:
            self._images[image_id] = _first(
                lambda: self.ec2.describe_images(ImageIds=[image_id])["Images"]
            )
        return self._images[image_id]

    def instance_type(self, name: str) -> dict[str, Any] | None:
        """DescribeInstanceTypes' entry, or None when the region has no such type."""
        if name not in self._types:
            self._types[name] = _first(
                lambda: self.ec2.describe_instance_types(InstanceTypes=[name])["InstanceTypes"]
            )
        return self._types[name]

    def zones_offering(self, name: str) -> set[str]:
        """The zones where ``name`` is offered (DescribeInstanceTypeOfferings)."""
        if name not in self._zones_of_type:
            pages = self.ec2.get_paginator("describe_instance_type_offerings").paginate(
                LocationType="availability-zone",
                Filters=[{"Name": "instance-type", "Values": [name]}],
            )
            self._zones_of_type[name] = {
                offer["Location"] for page in pages for offer in page["InstanceTypeOfferings"]
            }
        return self._zones_of_type[name]

    def subnets(self, ids: list[str]) -> dict[str, dict[str, Any] | None]:
        """Each subnet by id, None for ids the region does not know."""
        wanted = [i for i in ids if i not in self._subnets]
        if wanted:
            found = self.ec2.describe_subnets(Filters=[{"Name": "subnet-id", "Values": wanted}])
            self._subnets.update(dict.fromkeys(wanted))
            self._subnets.update({s["SubnetId"]: s for s in found["Subnets"]})
        return {i: self._subnets[i] for i in ids}

    def security_groups(self, ids: list[str]) -> dict[str, dict[str, Any] | None]:
        """Each security group by id, None for ids the region does not know."""
        wanted = [i for i in ids if i not in self._groups]
        if wanted:
            found = self.ec2.describe_security_groups(
                Filters=[{"Name": "group-id", "Values": wanted}]
            )
            self._groups.update(dict.fromkeys(wanted))
            self._groups.update({g["GroupId"]: g for g in found["SecurityGroups"]})
        return {i: self._groups[i] for i in ids}

    def default_vpc(self) -> str | None:
        vpcs = self.ec2.describe_vpcs(Filters=[{"Name": "is-default", "Values": ["true"]}])
        return next((str(v["VpcId"]) for v in vpcs["Vpcs"]), None)

    def zone_names(self) -> dict[str, str]:
        """Zone id (usw2-az1) -> zone name (us-west-2a)."""
        zones = self.ec2.describe_availability_zones()["AvailabilityZones"]
        return {z["ZoneId"]: z["ZoneName"] for z in zones}


def _first(describe: Any) -> dict[str, Any] | None:
    try:
        items = describe()
    except ClientError as error:
        if error_code(error) in _NOT_FOUND:
            return None
        raise
    return items[0] if items else None
