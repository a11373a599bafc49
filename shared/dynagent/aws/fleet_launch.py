"""Launching a pool with ``offerings`` through EC2 Fleet (CreateFleet, type ``instant``).

One CreateFleet call per offering tried (its type, subnet and purchase option), from a
launch template the function creates and versions itself: the template holds what every
machine of the pool shares (image, user data, disks, profile, IMDSv2 required, tags), the
call's override says which machine. ``dynagent.run.fallback`` moves what EC2 had no capacity
for to the next offering in the same pass.

Idempotency: a template version is found by its description, a fingerprint of its data,
and created with a ClientToken derived from it; a fleet call's ClientToken derives from
the plan's launch key and the offering, so a retried record launches nothing twice
(same count: EC2 answers with the first call's instances; another count:
IdempotentParameterMismatch, which means an earlier try launched already).
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from botocore.exceptions import ClientError

from dynagent.core.config import AwsProvider
from dynagent.core.fleet import Instance, SpotRequest
from dynagent.core.offerings import Offering, Purchase
from dynagent.run.fallback import Attempt, CapacityMemory

from . import tags
from .refusals import refusal_kind
from .reservations import ReservationCache

# Fleet errors that mean "not this offering now": try the next one, remember this one.
CAPACITY_ERRORS = frozenset(
    {
        "InsufficientInstanceCapacity", "InsufficientCapacity", "InsufficientHostCapacity",
        "Unsupported", "VcpuLimitExceeded", "InstanceLimitExceeded",
        "MaxSpotInstanceCountExceeded", "SpotMaxPriceTooLow", "UnfulfillableCapacity",
        "ReservationCapacityExceeded",
    }
)  # fmt: skip
# Every launch not into a reservation the pool names opts out of open ones: another
# pool's reservation is not this pool's to fill, and a pool uses one by naming it.
NO_RESERVATION = {"CapacityReservationPreference": "none"}
# Every launch: IMDSv2 only, and a hop limit of 2 so that task containers, one hop
# further on a bridge network, reach the instance profile's credentials (Determined's
# provisioner/aws/aws.go sets 2 for this reason).
METADATA_OPTIONS = {
    "HttpTokens": "required",
    "HttpEndpoint": "enabled",
    "HttpPutResponseHopLimit": 2,
}
# How long a warm function trusts the spot prices it read.
SPOT_PRICES_FOR = timedelta(hours=1)
_TEMPLATE_NOT_FOUND = frozenset(
    {"InvalidLaunchTemplateName.NotFoundException", "InvalidLaunchTemplateId.NotFound"}
)
_TEMPLATE_NAME_CHARS = re.compile(r"[^A-Za-z0-9().\-/_]")


@dataclass
class WarmState:
    """What a warm function keeps between passes; a cold start begins empty.

    The capacity memory lives here and only here: after a cold start the first launch
    for an offering still out of capacity fails once more, costing one call, and is
    remembered again.
    """

    root_devices: dict[str, str] = field(default_factory=dict)
    # (template name, data fingerprint) -> (template id, version number)
    templates: dict[tuple[str, str], tuple[str, str]] = field(default_factory=dict)
    capacity: dict[str, CapacityMemory] = field(default_factory=dict)
    # (region, types) -> (read at, lowest spot price per type over zones)
    spot_prices: dict[tuple[str, tuple[str, ...]], tuple[datetime, dict[str, float]]] = field(
        default_factory=dict
    )

    # Per pool, launches EC2 accepted but did not yet show in describe calls when the
    # wait for them ended: id -> what was launched. Observe counts them until it sees them.
    in_flight: dict[str, dict[str, Instance | SpotRequest]] = field(default_factory=dict)
    # Per pool, the reservations it names as last read (``aws.reservations``).
    reservations: dict[str, ReservationCache] = field(default_factory=dict)

    def memory(self, pool: str) -> CapacityMemory:
        return self.capacity.setdefault(pool, CapacityMemory())


def template_name(config: AwsProvider, pool: str) -> str:
    """One launch template per pool and deployment (the managed tag value)."""
    return _TEMPLATE_NAME_CHARS.sub("-", f"dynagent-{config.tag_value}-{pool}")[:128]


def template_data(
    specification: dict[str, Any], user_data: str, instance_tags: list[dict[str, str]]
) -> dict[str, Any]:
    """A launch template's data from a RunInstances-style specification, less the type
    and subnet (the fleet's overrides say those)."""
    data = {k: v for k, v in specification.items() if k not in ("InstanceType",)}
    if "NetworkInterfaces" in data:
        data["NetworkInterfaces"] = [
            {k: v for k, v in interface.items() if k != "SubnetId"}
            for interface in data["NetworkInterfaces"]
        ]
    data["UserData"] = base64.b64encode(user_data.encode()).decode()
    data["MetadataOptions"] = dict(METADATA_OPTIONS)
    data["CapacityReservationSpecification"] = dict(NO_RESERVATION)
    data["TagSpecifications"] = [
        {"ResourceType": kind, "Tags": instance_tags} for kind in ("instance", "volume")
    ]
    return data


def fingerprint(data: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:40]


class FleetLauncher:
    """Launch template upkeep and one CreateFleet call per offering, for one pool."""

    def __init__(
        self,
        pool: str,
        config: AwsProvider,
        ec2: Any,
        warm: WarmState,
        data: Callable[[], dict[str, Any]],
        token: Callable[[str], str],
    ) -> None:
        self.pool = pool
        self.config = config
        self.ec2 = ec2
        self.warm = warm
        self.data = data
        self.token = token  # the fleet call's ClientToken, from the offering's key

    def call(self, launch_key: str, boot_config: str = "") -> Callable[[Offering, int], Attempt]:
        """The launch call ``launch_with_fallback`` makes for one plan; its machines carry
        the plan's ``boot_config`` (``core.boot.drift``)."""
        template: tuple[str, str] | None = None

        def launch(offering: Offering, count: int) -> Attempt:
            nonlocal template
            template = template or self.template()
            return self._create_fleet(template, launch_key, offering, count, boot_config)

        return launch

    # The launch template

    def template(self) -> tuple[str, str]:
        """The pool's template version for today's config: found, or made once."""
        name = template_name(self.config, self.pool)
        data = self.data()
        key = (name, fingerprint(data))
        if key not in self.warm.templates:
            self.warm.templates[key] = self._find_version(name, key[1]) or self._create(
                name, key[1], data
            )
        return self.warm.templates[key]

    def existing_template(self) -> tuple[str, str] | None:
        """The pool's template version for today's config if a launch made it already;
        reads only."""
        return self._find_version(template_name(self.config, self.pool), fingerprint(self.data()))

    def _find_version(self, name: str, print_: str) -> tuple[str, str] | None:
        try:
            pages = self.ec2.get_paginator("describe_launch_template_versions").paginate(
                LaunchTemplateName=name
            )
            for page in pages:
                for version in page["LaunchTemplateVersions"]:
                    if version.get("VersionDescription") == print_:
                        return version["LaunchTemplateId"], str(version["VersionNumber"])
        except ClientError as error:
            if _code(error) not in _TEMPLATE_NOT_FOUND:
                raise
        return None

    def _create(self, name: str, print_: str, data: dict[str, Any]) -> tuple[str, str]:
        token = f"dynagent-lt-{print_}"[:64]
        try:
            response = self.ec2.create_launch_template(
                LaunchTemplateName=name,
                VersionDescription=print_,
                LaunchTemplateData=data,
                ClientToken=token,
                TagSpecifications=[
                    {
                        "ResourceType": "launch-template",
                        "Tags": tags.identity_tags(self.config, self.pool),
                    }
                ],
            )
            version = response["LaunchTemplate"]
            return version["LaunchTemplateId"], str(version["LatestVersionNumber"])
        except ClientError as error:
            if _code(error) != "InvalidLaunchTemplateName.AlreadyExistsException":
                raise
        # The template exists with other data: add a version for ours.
        response = self.ec2.create_launch_template_version(
            LaunchTemplateName=name,
            VersionDescription=print_,
            LaunchTemplateData=data,
            ClientToken=f"{token}-v"[:64],
        )
        version = response["LaunchTemplateVersion"]
        return version["LaunchTemplateId"], str(version["VersionNumber"])

    # The fleet

    def _create_fleet(
        self,
        template: tuple[str, str],
        launch_key: str,
        offering: Offering,
        count: int,
        boot_config: str,
    ) -> Attempt:
        try:
            response = self.ec2.create_fleet(
                **self.fleet_request(template, launch_key, offering, count, boot_config)
            )
        except ClientError as error:
            code = _code(error)
            if code == "IdempotentParameterMismatch":
                return Attempt(replayed=True)
            if code in CAPACITY_ERRORS:
                return Attempt(out_of_capacity=True)
            message = error.response.get("Error", {}).get("Message", "")
            error_text = self._explain(code, f"{code}: {message}", offering)
            return Attempt(error=error_text, error_kind=refusal_kind(code))
        attempt, code = _attempt(response, count)
        if attempt.error is not None:
            error_text = self._explain(code, attempt.error, offering)
            return Attempt(attempt.started, error=error_text, error_kind=refusal_kind(code))
        return attempt

    def fleet_request(
        self,
        template: tuple[str, str],
        launch_key: str,
        offering: Offering,
        count: int,
        boot_config: str = "",
    ) -> dict[str, Any]:
        """CreateFleet's arguments for ``count`` machines of one offering, from the
        template version ``template`` (id, number)."""
        spot = offering.purchase is Purchase.SPOT
        override: dict[str, Any] = {"InstanceType": offering.instance_type}
        if offering.zone:
            override["SubnetId"] = offering.zone
        if spot and self.config.spot_max_price:
            override["MaxPrice"] = self.config.spot_max_price
        capacity = "spot" if spot else "on-demand"
        request: dict[str, Any] = {
            "Type": "instant",
            "ClientToken": self.token(f"{launch_key}|{offering.key}"),
            "LaunchTemplateConfigs": [
                {
                    "LaunchTemplateSpecification": {
                        "LaunchTemplateId": template[0],
                        "Version": template[1],
                    },
                    "Overrides": [override],
                }
            ],
            "TargetCapacitySpecification": {
                "TotalTargetCapacity": count,
                "DefaultTargetCapacityType": capacity,
                ("SpotTargetCapacity" if spot else "OnDemandTargetCapacity"): count,
            },
            "TagSpecifications": [
                {
                    "ResourceType": "instance",
                    "Tags": [
                        *tags.instance_tags(self.config, self.pool),
                        {"Key": tags.LAUNCH_KEY_TAG, "Value": launch_key},
                        *tags.boot_config_tags(boot_config),
                    ],
                },
                {"ResourceType": "fleet", "Tags": tags.identity_tags(self.config, self.pool)},
            ],
        }
        if spot:
            request["SpotOptions"] = {"AllocationStrategy": "price-capacity-optimized"}
        else:
            request["OnDemandOptions"] = {"AllocationStrategy": "prioritized"}
        return request

    def _explain(self, code: str, error: str, offering: Offering) -> str:
        """Name the config field behind an error the config can cause: a subnet EC2 does
        not know in this region is a mistake in offerings.subnet_ids, not a capacity
        problem (the config cannot tell a subnet's region when it loads)."""
        if code.startswith("InvalidSubnetID"):
            return (
                f"pool {self.pool!r}: offerings.subnet_ids: {offering.zone!r} is not a subnet "
                f"of region {self.config.region} ({error})"
            )
        return error


def _attempt(response: dict[str, Any], count: int) -> tuple[Attempt, str]:
    """What an instant fleet's answer says: instances started, and why not more (with
    the code of the error that stops the launch, or "")."""
    started = tuple(
        instance_id
        for item in response.get("Instances", [])
        for instance_id in item.get("InstanceIds", [])
    )
    if len(started) >= count:
        return Attempt(started=started), ""
    errors = response.get("Errors", [])
    codes = [str(e.get("ErrorCode", "")) for e in errors]
    if not codes or any(code in CAPACITY_ERRORS for code in codes):
        return Attempt(started=started, out_of_capacity=True), ""
    first = errors[0]
    error = f"{first.get('ErrorCode')}: {first.get('ErrorMessage', '')}"
    return Attempt(started=started, error=error), codes[0]


def _code(error: ClientError) -> str:
    return str(error.response.get("Error", {}).get("Code", ""))


def lowest_spot_prices(
    ec2: Any, instance_types: tuple[str, ...], now: datetime
) -> dict[str, float]:
    """The lowest current Linux spot price of each type over the region's zones."""
    prices: dict[str, float] = {}
    pages = ec2.get_paginator("describe_spot_price_history").paginate(
        InstanceTypes=list(instance_types),
        ProductDescriptions=["Linux/UNIX"],
        StartTime=now,
    )
    for page in pages:
        for entry in page.get("SpotPriceHistory", []):
            kind, price = entry["InstanceType"], float(entry["SpotPrice"])
            prices[kind] = min(price, prices.get(kind, price))
    return prices
