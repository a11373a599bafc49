"""An AWS pool's network: its subnets and security group exist in its region, in one VPC."""

from __future__ import annotations

from dynagent.cli.doctor.findings import Finding, fail, ok
from dynagent.core.config import Pool

from . import shape
from .view import Ec2View


def network(pool: Pool, view: Ec2View) -> Finding:
    p = shape.provider(pool)
    subnet_ids = shape.subnet_ids(pool)
    group = p.network_interface.security_group_id
    group_ids = [group] if group else []
    named = ", ".join([*subnet_ids, *group_ids]) or "the default VPC"
    what = f"{shape.label(pool)}: network {named} in {p.region}"
    subnets = view.subnets(subnet_ids)
    groups = view.security_groups(group_ids)
    problems = [
        f"{i} is not in {p.region} (another region's, or mistyped)"
        for i, found in [*subnets.items(), *groups.items()]
        if found is None
    ]
    vpcs = {i: s["VpcId"] for i, s in subnets.items() if s is not None}
    if not subnet_ids and group_ids:
        default = view.default_vpc()
        vpcs = {"the default subnets": default} if default else {}
    problems += _vpc_problems(vpcs, groups)
    if problems:
        return fail(
            "aws.network",
            what,
            "; ".join(problems),
            f"name subnets and a security group of one VPC in {p.region} "
            "(network_interface, offerings.subnet_ids): EC2 refuses a launch that mixes them",
        )
    home = next(iter(vpcs.values()), None)
    return ok("aws.network", what, f"in {home}" if home else "")


def _vpc_problems(vpcs: dict[str, str], groups: dict[str, dict[str, str] | None]) -> list[str]:
    """The subnets (``vpcs``: subnet -> VPC) share one VPC, and the groups are in it."""
    if len(set(vpcs.values())) > 1:
        spread = ", ".join(f"{i} in {vpc}" for i, vpc in vpcs.items())
        return [f"the subnets span VPCs: {spread}"]
    home = next(iter(vpcs.values()), None)
    return [
        f"{group_id} is in {found['VpcId']}, the subnets in {home}"
        for group_id, found in groups.items()
        if found is not None and home and found["VpcId"] != home
    ]
