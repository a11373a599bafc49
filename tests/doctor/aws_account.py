"""A well-formed AWS account for three pools, in the local AWS: what doctor must pass.

Three pools, three shapes, three zones: ``train`` buys g5.xlarge or g5.12xlarge, spot or
on-demand, in two subnets (CreateFleet, from the launch template a launch made); ``big``
buys p4d.24xlarge on-demand in a third (RunInstances); ``cheap`` asks for g4dn.xlarge
spot instances (RequestSpotInstances). One VPC and security group, an instance profile
for the agents, quotas for max_instances of each, spot scores, the spot service-linked
role, and the stack deployed from template.yaml with the pools' tag pair and agent role.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from dynagent.aws.ec2 import Ec2Provider
from dynagent.core.config import Config, config_from_document
from dynagent.testing.aws.local_aws import LocalAws
from dynagent.testing.aws.stack import deploy_stack

REGION = "us-west-2"
STACK = "dyn"
TAG_KEY, TAG_VALUE = "managed-by", "dynagent-doctor"
ZONES = ("us-west-2a", "us-west-2b", "us-west-2c")
# Running On-Demand / All Spot vCPU quotas, G and VT and P: max_instances of each pool's
# largest type (train: 4 x g5.12xlarge, 48 vCPUs; big: 2 x p4d.24xlarge, 96).
QUOTAS = {"L-DB2E81BA": 192, "L-3819A6DF": 192, "L-417A185B": 192}
SCORES = {("g5.xlarge", "us-west-2a"): 8, ("g5.12xlarge", "us-west-2b"): 7,
          ("g4dn.xlarge", "us-west-2c"): 6}  # fmt: skip
TRUST = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "sts:AssumeRole",
         "Principal": {"Service": "ec2.amazonaws.com"}}]}  # fmt: skip


@dataclass
class Account:
    aws: LocalAws
    image: str
    vpc: str
    subnets: dict[str, str]  # zone -> subnet id
    group: str
    profile: str  # the agents' instance profile ARN
    agent_role: str

    def pools(self) -> list[dict[str, Any]]:
        common = {
            "type": "aws",
            "region": REGION,
            "image_id": self.image,
            "tag_key": TAG_KEY,
            "tag_value": TAG_VALUE,
            "master_url": "http://10.0.0.5:8080",
            "ssh_key_name": "agents",
            "iam_instance_profile_arn": self.profile,
        }
        a, b, c = (self.subnets[zone] for zone in ZONES)
        return [
            {"pool_name": "train", "provider": {
                **common, "instance_type": "g5.12xlarge", "max_instances": 4,
                "network_interface": {"security_group_id": self.group},
                "offerings": {"instance_types": ["g5.xlarge", "g5.12xlarge"],
                              "subnet_ids": [a, b], "purchase": ["spot", "on-demand"]}}},
            {"pool_name": "big", "provider": {
                **common, "instance_type": "p4d.24xlarge", "max_instances": 2,
                "network_interface": {"subnet_id": b, "security_group_id": self.group}}},
            {"pool_name": "cheap", "provider": {
                **common, "instance_type": "g4dn.xlarge", "max_instances": 3, "spot": True,
                "network_interface": {"subnet_id": c, "security_group_id": self.group}}},
        ]  # fmt: skip

    def config(self, *pools: dict[str, Any]) -> Config:
        return config_from_document({"resource_pools": list(pools or self.pools())})

    def pool(self, name: str) -> dict[str, Any]:
        return next(p for p in self.pools() if p["pool_name"] == name)


def well_formed(aws: LocalAws, quotas: dict[str, int] = QUOTAS, *, stack: bool = True) -> Account:
    """The account, with the stack deployed unless ``stack`` is False."""
    ec2, iam = aws.client("ec2"), aws.client("iam")
    vpc = ec2.create_vpc(CidrBlock="10.8.0.0/16")["Vpc"]["VpcId"]
    subnets = {
        zone: ec2.create_subnet(VpcId=vpc, CidrBlock=f"10.8.{n}.0/24", AvailabilityZone=zone)[
            "Subnet"
        ]["SubnetId"]
        for n, zone in enumerate(ZONES)
    }
    group = ec2.create_security_group(GroupName="agents", Description="agents", VpcId=vpc)
    role = iam.create_role(RoleName="agent", AssumeRolePolicyDocument=json.dumps(TRUST))
    iam.create_instance_profile(InstanceProfileName="agent")
    iam.add_role_to_instance_profile(InstanceProfileName="agent", RoleName="agent")
    profile = iam.get_instance_profile(InstanceProfileName="agent")["InstanceProfile"]["Arn"]
    account = Account(
        aws, aws.image_id(), vpc, subnets, group["GroupId"], profile, role["Role"]["Arn"]
    )
    for code, value in quotas.items():
        aws.set_service_quota(code, value)
    for (kind, zone), score in SCORES.items():
        aws.set_spot_placement_score(kind, zone, score)
    iam.create_service_linked_role(AWSServiceName="spot.amazonaws.com")
    if stack:
        deploy_stack(aws.client("cloudformation"), STACK, stack_parameters(account))
    launched_once(account, "train")
    return account


def stack_parameters(account: Account) -> dict[str, str]:
    return {"ManagedTagKey": TAG_KEY, "ManagedTagValue": TAG_VALUE,
            "AgentInstanceProfileRoleArn": account.agent_role}  # fmt: skip


def launched_once(account: Account, name: str) -> None:
    """The launch template a first launch of the pool made, as the function makes it."""
    config = account.config()
    provider = Ec2Provider(config.pool(name), account.aws.client("ec2"), config.settings)
    provider.fleet_launcher(provider.boot_script({})).template()
