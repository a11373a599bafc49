"""What spot launches need beyond a launch request: EC2's service-linked role for spot,
and capacity worth asking for (spot placement scores)."""

from __future__ import annotations

from typing import Any

from botocore.exceptions import ClientError

from dynagent.cli.doctor.findings import Finding, fail, ok, unknown, warn
from dynagent.core.config import Pool

from . import shape
from .view import Ec2View

SPOT_ROLE = "AWSServiceRoleForEC2Spot"
# A score this low means a spot request for the pool is unlikely to be fulfilled (AWS
# scores 1 to 10).
LOW_SCORE = 3


def service_linked_role(iam: Any) -> Finding:
    """EC2 launches spot instances through this role; the functions' roles may not create
    it (iam:CreateServiceLinkedRole), so it must exist before the first spot launch."""
    what = f"spot service-linked role {SPOT_ROLE}"
    try:
        iam.get_role(RoleName=SPOT_ROLE)
    except ClientError as error:
        if error.response.get("Error", {}).get("Code") != "NoSuchEntity":
            raise
        return fail(
            "aws.spot_role",
            what,
            "the account has none, so every spot launch is refused",
            "aws iam create-service-linked-role --aws-service-name spot.amazonaws.com",
        )
    return ok("aws.spot_role", what)


def placement_scores(pool: Pool, view: Ec2View) -> Finding:
    """How likely EC2 is to fill max_instances of the pool's types as spot, per zone."""
    p = shape.provider(pool)
    types = list(shape.instance_types(pool))
    what = f"{shape.label(pool)}: spot placement scores of {', '.join(types)} in {p.region}"
    scores = _scores(pool, view, types)
    if not scores:
        return unknown("aws.spot_score", what, "EC2 gave no score for these types and zones")
    said = ", ".join(f"{score} in {zone}" for zone, score in sorted(scores.items()))
    if max(scores.values()) <= LOW_SCORE:
        return warn(
            "aws.spot_score",
            what,
            f"{said} (of 10): spot requests for {p.max_instances} machines are unlikely to "
            "be filled",
            "offer more instance types or subnets in more zones (offerings), or on-demand",
        )
    return ok("aws.spot_score", what, f"{said} (of 10)")


def _scores(pool: Pool, view: Ec2View, types: list[str]) -> dict[str, int]:
    """Score by zone name, for the pool's subnets' zones (any zone without subnets)."""
    p = shape.provider(pool)
    answer = view.ec2.get_spot_placement_scores(
        InstanceTypes=types,
        TargetCapacity=max(1, p.max_instances),
        SingleAvailabilityZone=True,
        RegionNames=[p.region],
    )
    names = view.zone_names()
    subnets = view.subnets(shape.subnet_ids(pool)).values()
    zones = {s["AvailabilityZone"] for s in subnets if s is not None}
    scores = {}
    for entry in answer.get("SpotPlacementScores", []):
        zone = names.get(entry.get("AvailabilityZoneId", ""), "")
        if zone and (not zones or zone in zones):
            scores[zone] = int(entry["Score"])
    return scores
