"""The machines of an AWS pool: its AMI, and its instance types in its subnets' zones."""

from __future__ import annotations

from typing import Any

from botocore.exceptions import ClientError

from dynagent.cli.doctor.findings import Finding, fail, ok
from dynagent.core.config import Pool

from . import shape
from .view import Ec2View


def image_parameter(pool: Pool, ssm: Any) -> tuple[Finding, Pool | None]:
    """The AMI an SSM parameter named by ``image_id: resolve:ssm:NAME`` holds now, and
    the pool with it (None: it could not be read), as the functions resolve it."""
    p = shape.provider(pool)
    parameter = p.image_parameter
    assert parameter is not None
    what = f"{shape.label(pool)}: SSM parameter {parameter} in {p.region}"
    try:
        value = str(ssm.get_parameter(Name=parameter)["Parameter"]["Value"])
    except ClientError as error:
        code = error.response.get("Error", {}).get("Code", "")
        if code in ("ParameterNotFound", "ParameterVersionNotFound"):
            return fail(
                "aws.image_parameter",
                what,
                "no such parameter in this region (parameters are regional)",
                f"create it (aws ssm put-parameter --region {p.region} --name {parameter} "
                "--type String --data-type aws:ec2:image --value ami-...), or set image_id "
                "to an AMI id",
            ), None
        raise
    if not value.startswith("ami-"):
        return fail(
            "aws.image_parameter",
            what,
            f"it holds {value[:80]!r}, not an AMI id",
            "put an AMI id (ami-...) in it, or point image_id at another parameter",
        ), None
    resolved = p.model_copy(update={"image_id": value})
    finding = ok(
        "aws.image_parameter",
        what,
        f"names {value}; the functions read it at most once a minute, and agents of an "
        "older AMI are replaced",
    )
    return finding, pool.model_copy(update={"provider": resolved})


def image(pool: Pool, view: Ec2View) -> Finding:
    """The AMI exists in the pool's region and its architecture runs every offered type."""
    p = shape.provider(pool)
    what = f"{shape.label(pool)}: AMI {p.image_id} in {p.region}"
    found = view.image(p.image_id)
    if found is None:
        return fail(
            "aws.image",
            what,
            "no such image in this region (AMIs are regional; a copy has another id)",
            f"set image_id to an AMI of {p.region} (aws ec2 describe-images --region "
            f"{p.region} --image-ids {p.image_id}), or copy it: aws ec2 copy-image",
        )
    architecture = str(found.get("Architecture", ""))
    misfits: dict[str, list[str]] = {}
    for name in shape.instance_types(pool):
        kind = view.instance_type(name)
        supported = (kind or {}).get("ProcessorInfo", {}).get("SupportedArchitectures", [])
        if kind is not None and architecture not in supported:
            misfits[name] = supported
    if misfits:
        needed = sorted({a for supported in misfits.values() for a in supported})
        return fail(
            "aws.image",
            what,
            f"the image is {architecture}, which {', '.join(misfits)} cannot run",
            f"use an image built for {'/'.join(needed)}, or instance types that run {architecture}",
        )
    root = str(found.get("RootDeviceType", "ebs"))
    if p.warm_pool.enabled and root != "ebs":
        return fail(
            "aws.image",
            what,
            f"the warm pool stops machines, and a machine of this image boots from its "
            f"{root} root device, which EC2 cannot stop",
            "use an EBS-backed AMI (RootDeviceType ebs), or set warm_pool.max_stopped to 0",
        )
    return ok("aws.image", what, f"{architecture}, {root} root, {found.get('State', 'available')}")


def offered(pool: Pool, view: Ec2View) -> list[Finding]:
    """Each type is an EC2 type of the region, offered in every subnet's zone."""
    p = shape.provider(pool)
    subnets = {i: s for i, s in view.subnets(shape.subnet_ids(pool)).items() if s is not None}
    return [
        _type_offered(pool, name, subnets, view, p.region) for name in shape.instance_types(pool)
    ]


def _type_offered(
    pool: Pool, name: str, subnets: dict[str, dict[str, str]], view: Ec2View, region: str
) -> Finding:
    where = ", ".join(f"{i} ({s['AvailabilityZone']})" for i, s in subnets.items())
    what = f"{shape.label(pool)}: {name} offered in " + (where or f"region {region}")
    if view.instance_type(name) is None:
        return fail(
            "aws.offered",
            what,
            f"{region} has no instance type {name}",
            "check the name (aws ec2 describe-instance-types), or use a region that has it",
        )
    zones = view.zones_offering(name)
    missing = [
        f"{i} ({s['AvailabilityZone']})"
        for i, s in subnets.items()
        if s["AvailabilityZone"] not in zones
    ]
    if not zones or missing:
        elsewhere = ", ".join(sorted(zones)) or "no zone"
        return fail(
            "aws.offered",
            what,
            f"not offered in {', '.join(missing) or region}; offered in {elsewhere}",
            f"give subnets in {elsewhere} (offerings.subnet_ids), or drop {name}",
        )
    return ok("aws.offered", what)
