"""A dry run of each launch an AWS pool can make: the very request the functions send.

EC2 checks a ``DryRun`` request as it would the launch (the caller's permissions, among
them ``iam:PassRole`` for the instance profile, the KMS key of encrypted volumes, the
parameters) and answers ``DryRunOperation`` instead of launching. The requests come from
the EC2 adapter itself: RunInstances or RequestSpotInstances for a pool of one type;
for a pool with ``offerings``, CreateFleet from the pool's launch template once a launch
has made it, else RunInstances of the same machine.

When the pool's image check failed, the dry runs EC2 refuses for that image say nothing
more: they are one line, not checked, instead of a failure each.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from botocore.exceptions import ClientError

from dynagent.aws.ec2 import Ec2Provider, error_code
from dynagent.aws.fleet_launch import FleetLauncher
from dynagent.cli.doctor.findings import Finding, fail, ok, unknown
from dynagent.core.boot.master import ALIASES
from dynagent.core.config import Pool, Settings
from dynagent.core.offerings import Offering

from . import shape

# Stands for the master's address where master_url names an alias the bridge resolves:
# a dry run launches nothing, so nothing dials it.
_PLACEHOLDER = "192.0.2.1"
_KEY = "doctor-dry-run"
# The error codes of EC2's refusals for the AMI itself (InvalidAMIID.NotFound, .Malformed,
# .Unavailable): the image check has said it already.
_IMAGE_ERRORS = "InvalidAMIID."

# A dry run's finding, and EC2's error code when it refused ("" when it passed).
Attempt = tuple[Finding, str]


def dry_runs(pool: Pool, ec2: Any, settings: Settings, image_failed: bool = False) -> list[Finding]:
    """A finding per launch the pool can make; when ``image_failed``, the refusals for
    the image fold into one finding, not checked."""
    attempts = _attempts(pool, ec2, settings)
    if not image_failed:
        return [finding for finding, _ in attempts]
    kept = [finding for finding, code in attempts if not code.startswith(_IMAGE_ERRORS)]
    codes = sorted({code for _, code in attempts if code.startswith(_IMAGE_ERRORS)})
    folded = len(attempts) - len(kept)
    if not folded:
        return kept
    what = f"{shape.label(pool)}: dry runs of its {folded} launches"
    if folded == 1:
        (what,) = [f.what for f, code in attempts if code.startswith(_IMAGE_ERRORS)]
    why = f"not checked: EC2 refuses the AMI above ({', '.join(codes)})"
    fix = "correct image_id as above, then run doctor again"
    return [*kept, unknown("aws.dry_run", what, why, fix)]


def _attempts(pool: Pool, ec2: Any, settings: Settings) -> list[Attempt]:
    provider = Ec2Provider(pool, ec2, settings)
    user_data = provider.boot_script(dict.fromkeys(ALIASES, _PLACEHOLDER))
    p = shape.provider(pool)
    if p.offerings is None:
        return [_single(pool, provider, user_data)]
    launcher = provider.fleet_launcher(user_data)
    try:
        template = launcher.existing_template()
    except ClientError:
        template = None  # its data could not be built: each dry run below says why
    return [
        _offering(pool, provider, launcher, template, user_data, offering)
        for offering in p.catalog().offerings
    ]


def _offering(
    pool: Pool,
    provider: Ec2Provider,
    launcher: FleetLauncher,
    template: tuple[str, str] | None,
    user_data: str,
    offering: Offering,
) -> Attempt:
    where = f" in {offering.zone}" if offering.zone else ""
    bought = f"{offering.instance_type} {offering.purchase.value}{where}"
    what = f"{shape.label(pool)}: dry run of launching {bought}"
    if template is not None:
        return _verdict(
            what + " (CreateFleet)",
            provider.ec2.create_fleet,
            lambda: launcher.fleet_request(template, _KEY, offering, 1),
        )
    return _verdict(
        what + " (RunInstances)",
        provider.ec2.run_instances,
        lambda: provider.run_request(1, _KEY, user_data, offering),
    )


def _single(pool: Pool, provider: Ec2Provider, user_data: str) -> Attempt:
    p = shape.provider(pool)
    where = f" in {p.network_interface.subnet_id}" if p.network_interface.subnet_id else ""
    what = f"{shape.label(pool)}: dry run of launching {p.instance_type}{where}"
    if p.spot:
        return _verdict(
            what + " (RequestSpotInstances)",
            provider.ec2.request_spot_instances,
            lambda: provider.spot_request(1, _KEY, datetime.now(UTC), user_data),
        )
    return _verdict(
        what + " (RunInstances)",
        provider.ec2.run_instances,
        lambda: provider.run_request(1, _KEY, user_data),
    )


def _verdict(what: str, call: Any, request: Callable[[], dict[str, Any]]) -> Attempt:
    """EC2's answer to the request built by ``request`` (building it reads the image)."""
    try:
        call(DryRun=True, **request())
    except ClientError as error:
        code = error_code(error)
        if code == "DryRunOperation":
            return ok("aws.dry_run", what), ""
        message = str(error.response.get("Error", {}).get("Message", ""))
        return fail("aws.dry_run", what, f"{code}: {message}", _fix(code, message)), code
    # EC2 never answers a dry run with success; a double that launched would land here.
    return fail("aws.dry_run", what, "EC2 accepted a dry run as a launch", "report this"), ""


def _fix(code: str, message: str) -> str:
    if "iam:PassRole" in message:
        return (
            "allow iam:PassRole on the profile's role to EC2 (iam:PassedToService "
            "ec2.amazonaws.com) for whoever launches; the stack's functions get it from its "
            "AgentInstanceProfileRoleArn parameter"
        )
    if "kms:" in message.lower():
        return "let the launcher use the volumes' KMS key (the key policy, or a grant)"
    if code == "UnauthorizedOperation":
        return "allow the action named above to whoever launches"
    return "fix what the message names: the functions' launches would fail the same way"
