"""Scarce capacity, spot prices and instant EC2 Fleets for LocalAws (see local_aws.py's docstring).

This module holds the model; the wrappers that consult it are in instances.py and spot.py
(moto_patches.py installs them). Nothing here runs unless a LocalAws owns the account the
request landed in.

* ``Scarcity``: per-account capacity limits, one-time injected launch errors, and the
  price tables (spot prices by type and zone, on-demand prices by type).
* ``create_instant_fleet``: CreateFleet ``Type: instant``, served from the launch
  template's data and moto's ``run_instances``, as EC2 does it: overrides tried in the
  allocation strategy's order, weighted capacity, one ``Errors`` entry per override that
  could not launch, HTTP 200 even when nothing launched.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final, NamedTuple

from moto.core.types import Base64EncodedString
from moto.ec2.exceptions import EC2ClientError
from moto.ec2.models.instance_types import INSTANCE_TYPE_OFFERINGS
from moto.ec2.utils import (
    convert_tag_spec,
    filter_iam_instance_profiles,
    parse_user_data,
    random_fleet_id,
)

from dynagent.core.gpus import AWS_GPUS_PER_INSTANCE
from dynagent.testing.aws.iam import refuse_pass_role

SPOT: Final = "spot"
ON_DEMAND: Final = "on-demand"
PURCHASES: Final = (SPOT, ON_DEMAND)
LINUX_UNIX: Final = "Linux/UNIX"
INSUFFICIENT_CAPACITY: Final = "InsufficientInstanceCapacity"

# EC2 answers these with HTTP 500 (boto3 retries them); every other EC2 error is a 400.
SERVER_ERROR_CODES: Final = frozenset({INSUFFICIENT_CAPACITY, "InternalError", "Unavailable"})

# EC2's wording for the codes tests inject most; any other code gets a generic message.
_MESSAGES: Final = {
    "VcpuLimitExceeded": "You have requested more vCPU capacity than your current vCPU limit "
    "of 0 allows for the instance bucket that the specified instance type belongs to. Please "
    "visit http://aws.amazon.com/contact-us/ec2-request to request an adjustment to this limit.",
    "MaxSpotInstanceCountExceeded": "Max spot instance count exceeded",
    "SpotMaxPriceTooLow": "Your Spot request price is lower than the minimum required Spot "
    "request fulfillment price.",
    "Unsupported": "The requested configuration is currently not supported. Please check the "
    "documentation for supported configurations.",
}
_NO_SPOT_CAPACITY: Final = "There is no Spot capacity available that matches your request."

# Every instance type moto knows in any region: a name outside it is not an EC2 type.
# moto's offering data leaves out the P3 family, which EC2 still sells (and GPU pools
# use): the types of dynagent's GPU table count as known too.
_KNOWN_TYPES: Final = frozenset(
    offering["InstanceType"]
    for offerings in INSTANCE_TYPE_OFFERINGS["region"].values()
    for offering in offerings
) | frozenset(AWS_GPUS_PER_INSTANCE)


class Site(NamedTuple):
    """Where a launch lands, as capacity limits and injected errors see it."""

    instance_type: str
    zone: str
    purchase: str  # SPOT or ON_DEMAND


class ServerError(EC2ClientError):
    """An EC2 error that EC2 sends with HTTP 500 (instances.py serialises it so)."""


def launch_error(code: str, message: str | None = None) -> EC2ClientError:
    error_type = ServerError if code in SERVER_ERROR_CODES else EC2ClientError
    return error_type(code, message or _MESSAGES.get(code, f"{code} (LocalAws.fail_next_launch)"))


def zone_of(backend: Any, subnet_id: str | None, zone: str | None) -> str:
    """The Availability Zone of the subnet (an unknown subnet fails as in EC2), else the
    zone asked for, else the region's first zone (moto's default placement)."""
    if subnet_id:
        return str(backend.get_subnet(subnet_id).availability_zone)
    return zone or f"{backend.region_name}a"


def check_instance_type(instance_type: str) -> None:
    if instance_type not in _KNOWN_TYPES:
        raise EC2ClientError(
            "InvalidParameterValue",
            f"The instance type '{instance_type}' does not exist.",
        )


# --------------------------------------------------------------------------------------
# Scarcity: capacity limits, injected errors, prices
# --------------------------------------------------------------------------------------


def check_purchase(purchase: str | None) -> None:
    if purchase is not None and purchase not in PURCHASES:
        raise ValueError(f"purchase must be one of {PURCHASES} or None, got {purchase!r}")


def _matches(instance_type: str, zone: str | None, purchase: str | None, site: Site) -> bool:
    """Whether a limit or an injected error for (type, zone, purchase) applies to a launch
    at ``site``; None matches any zone or purchase."""
    return (
        instance_type == site.instance_type
        and zone in (None, site.zone)
        and purchase in (None, site.purchase)
    )


@dataclass
class _Limit:
    instance_type: str
    zone: str | None
    purchase: str | None
    left: int

    def matches(self, site: Site) -> bool:
        return _matches(self.instance_type, self.zone, self.purchase, site)


@dataclass(frozen=True)
class _Failure:
    instance_type: str
    zone: str | None
    purchase: str | None
    code: str

    def matches(self, site: Site) -> bool:
        return _matches(self.instance_type, self.zone, self.purchase, site)


@dataclass
class Scarcity:
    """One account's capacity limits, pending injected errors and price tables.
    Callers hold knobs.STATE_LOCK around check-then-consume."""

    limits: list[_Limit] = field(default_factory=list)
    failures: list[_Failure] = field(default_factory=list)
    # (type, zone) -> [(naive UTC time, price)] in the order set
    spot_prices: dict[tuple[str, str], list[tuple[datetime, float]]] = field(default_factory=dict)
    on_demand_prices: dict[str, float] = field(default_factory=dict)
    # Injected errors and capacity refusals served, so a test can tell its faults landed.
    refusals_served: int = 0
    # Where each capacity refusal was, in order: a test counts the calls per offering.
    refused_sites: list[Site] = field(default_factory=list)

    def clear(self) -> None:
        self.limits.clear()
        self.failures.clear()
        self.refusals_served = 0
        self.refused_sites.clear()
        self.spot_prices.clear()
        self.on_demand_prices.clear()

    def limit(self, instance_type: str, zone: str | None, purchase: str | None, count: int) -> None:
        self.limits.append(_Limit(instance_type, zone, purchase, count))

    def fail_next(
        self, instance_type: str, code: str, zone: str | None, purchase: str | None
    ) -> None:
        self.failures.append(_Failure(instance_type, zone, purchase, code))

    def available(self, site: Site) -> int | None:
        """How many more instances can launch at ``site``; None when no limit applies."""
        lefts = [limit.left for limit in self.limits if limit.matches(site)]
        return min(lefts) if lefts else None

    def consume(self, site: Site, count: int) -> None:
        for limit in self.limits:
            if limit.matches(site):
                limit.left = max(0, limit.left - count)

    def take_failure(self, site: Site) -> str | None:
        """The first injected error matching ``site``, used up by this call."""
        for failure in self.failures:
            if failure.matches(site):
                self.failures.remove(failure)
                self.refusals_served += 1
                return failure.code
        return None

    def spot_price(self, instance_type: str, zone: str) -> float | None:
        history = self.spot_prices.get((instance_type, zone))
        return max(history)[1] if history else None

    def insufficient_capacity(self, site: Site, zones: list[str]) -> ServerError:
        """EC2's InsufficientInstanceCapacity, naming the zones that still have capacity."""
        self.refusals_served += 1
        self.refused_sites.append(site)
        if site.purchase == SPOT:
            return ServerError(INSUFFICIENT_CAPACITY, _NO_SPOT_CAPACITY)
        others = [
            zone
            for zone in zones
            if zone != site.zone and self.available(site._replace(zone=zone)) != 0
        ]
        message = (
            f"We currently do not have sufficient {site.instance_type} capacity in the "
            f"Availability Zone you requested ({site.zone}). Our system will be working on "
            "provisioning additional capacity."
        )
        if others:
            message += (
                f" You can currently get {site.instance_type} capacity by not specifying an "
                f"Availability Zone in your request or choosing {', '.join(others)}."
            )
        return ServerError(INSUFFICIENT_CAPACITY, message)

    def price_history(
        self,
        instance_types: list[str],
        zones: list[str],
        products: list[str],
        start: datetime | None,
        end: datetime | None,
    ) -> list[dict[str, Any]]:
        """DescribeSpotPriceHistory as EC2 answers it: newest first, and with a StartTime
        also the price that was in effect at that time (set before it)."""
        if products and LINUX_UNIX not in products:
            return []
        entries: list[tuple[datetime, dict[str, Any]]] = []
        for (instance_type, zone), history in self.spot_prices.items():
            if (instance_types and instance_type not in instance_types) or (
                zones and zone not in zones
            ):
                continue
            changes = sorted(history)
            if end is not None:
                changes = [change for change in changes if change[0] <= end]
            if start is not None:
                before = [change for change in changes if change[0] < start]
                changes = before[-1:] + [change for change in changes if change[0] >= start]
            for when, price in changes:
                entry = {
                    "InstanceType": instance_type,
                    "ProductDescription": LINUX_UNIX,
                    "SpotPrice": f"{price:.6f}",
                    "AvailabilityZone": zone,
                    "Timestamp": when,
                }
                entries.append((when, entry))
        entries.sort(key=lambda item: item[0], reverse=True)
        return [entry for _, entry in entries]


# --------------------------------------------------------------------------------------
# CreateFleet, Type instant
# --------------------------------------------------------------------------------------

PRIORITIZED_STRATEGIES: Final = frozenset({"prioritized", "capacity-optimized-prioritized"})
DEFAULT_STRATEGY: Final = "lowest-price"  # EC2 Fleet's default for both purchase options


def missing_parameter(name: str) -> EC2ClientError:
    return EC2ClientError("MissingParameter", f"The request must contain the parameter {name}")


@dataclass
class _Pool:
    """One launch template config's override: a place the fleet can try to launch."""

    order: int  # position in the request, the tie-breaker
    described: dict[str, Any]  # LaunchTemplateAndOverrides, as the reply names the pool
    version: Any  # moto's LaunchTemplateVersion
    override: dict[str, Any]

    @property
    def data(self) -> dict[str, Any]:
        return dict(self.version.data)

    @property
    def instance_type(self) -> str | None:
        found = self.override.get("InstanceType") or self.data.get("InstanceType")
        return str(found) if found else None

    @property
    def weight(self) -> float:
        return float(self.override.get("WeightedCapacity") or 1.0)

    @property
    def priority(self) -> float | None:
        priority = self.override.get("Priority")
        return None if priority is None else float(priority)

    def subnet_id(self) -> str | None:
        nics = self.data.get("NetworkInterfaces") or [{}]
        found = self.override.get("SubnetId") or nics[0].get("SubnetId")
        return str(found) if found else None

    def site(self, backend: Any, purchase: str) -> Site:
        if self.instance_type is None:
            raise missing_parameter("InstanceType")
        placement = self.data.get("Placement") or {}
        zone = self.override.get("AvailabilityZone") or placement.get("AvailabilityZone")
        return Site(self.instance_type, zone_of(backend, self.subnet_id(), zone), purchase)


def _pools(backend: Any, config: dict[str, Any], first: int) -> list[_Pool]:
    spec = dict(config.get("LaunchTemplateSpecification") or {})
    if "LaunchTemplateId" in spec:
        template = backend.get_launch_template(spec["LaunchTemplateId"])
    elif "LaunchTemplateName" in spec:
        template = backend.get_launch_template_by_name(spec["LaunchTemplateName"])
    else:
        raise missing_parameter("LaunchTemplateId or LaunchTemplateName")
    version = template.get_version(spec.get("Version") or template.default_version_number)
    spec.setdefault("LaunchTemplateId", template.id)  # EC2 names the id even when given a name
    pools = []
    for offset, override in enumerate(config.get("Overrides") or [{}]):
        described: dict[str, Any] = {"LaunchTemplateSpecification": spec}
        if override:
            described["Overrides"] = override
        pools.append(_Pool(first + offset, described, version, dict(override)))
    return pools


def _ordered(
    pools: list[_Pool], purchase: str, strategy: str, scarcity: Scarcity, backend: Any
) -> list[_Pool]:
    """*-prioritized: lowest Priority first, pools without one after, in request order.
    Any other strategy (lowest-price, price-capacity-optimized, ...): cheapest per unit of
    weight first, by the double's price tables; unpriced pools last; ties in request order."""
    if strategy in PRIORITIZED_STRATEGIES:
        return sorted(pools, key=lambda p: (p.priority is None, p.priority or 0.0, p.order))

    def unit_price(pool: _Pool) -> float:
        price: float | None = None
        if pool.instance_type is not None:
            if purchase == ON_DEMAND:
                price = scarcity.on_demand_prices.get(pool.instance_type)
            else:
                try:
                    price = scarcity.spot_price(pool.instance_type, pool.site(backend, SPOT).zone)
                except EC2ClientError:
                    price = None
        return math.inf if price is None else price / pool.weight

    return sorted(pools, key=lambda p: (unit_price(p), p.order))


def _user_data(value: Any) -> Base64EncodedString | None:
    if value is None or isinstance(value, Base64EncodedString):
        return value
    return parse_user_data(value)


def _launch(
    backend: Any, pool: _Pool, site: Site, count: int, fleet_id: str, instance_tags: dict[str, str]
) -> list[str]:
    """Launch ``count`` instances from the pool's template version, as EC2 Fleet does."""
    data = pool.data
    image_id = pool.override.get("ImageId") or data.get("ImageId")
    if not image_id:
        raise missing_parameter("ImageId")
    backend.describe_images(ami_ids=[image_id])  # InvalidAMIID.NotFound, as in EC2
    profile = data.get("IamInstanceProfile") or {}
    if profile:
        filter_iam_instance_profiles(
            backend.account_id,
            partition=backend.partition,
            iam_instance_profile_arn=profile.get("Arn"),
            iam_instance_profile_name=profile.get("Name"),
        )
    tags = convert_tag_spec(copy.deepcopy(data.get("TagSpecifications") or []))
    tags["instance"] = {**tags.get("instance", {}), **instance_tags, "aws:ec2:fleet-id": fleet_id}
    nics = copy.deepcopy(data.get("NetworkInterfaces") or [])
    subnet_id = pool.override.get("SubnetId")
    if nics and subnet_id:
        nics[0]["SubnetId"] = subnet_id  # the override's subnet replaces the template's
        subnet_id = None
    in_subnet = bool(subnet_id) or any("SubnetId" in nic for nic in nics)
    kwargs: dict[str, Any] = {
        "instance_type": site.instance_type,
        "is_instance_type_default": False,
        "region_name": backend.region_name,
        "subnet_id": subnet_id,
        "placement": None if in_subnet else site.zone,
        "nics": nics,
        "key_name": data.get("KeyName"),
        "security_group_ids": list(data.get("SecurityGroupIds") or []),
        "tags": tags,
        "ebs_optimized": bool(data.get("EbsOptimized")),
        "monitoring_state": "enabled"
        if (data.get("Monitoring") or {}).get("Enabled")
        else "disabled",
        "metadata_options": dict(data.get("MetadataOptions") or {}),
        "instance_initiated_shutdown_behavior": data.get("InstanceInitiatedShutdownBehavior"),
        # moto applies the template's instance tags, block devices and its own
        # aws:ec2launchtemplate:* tags when it is told the template.
        "launch_template": {
            "LaunchTemplateId": pool.version.template.id,
            "Version": pool.version.number,
        },
        # No "fleet_id": moto's terminate then looks for a fleet it does not hold (an
        # instant fleet is ours); the aws:ec2:fleet-id tag names it, as in EC2.
        "instance_market_options": SPOT if site.purchase == SPOT else {},
    }
    reservation = backend.run_instances(
        image_id,
        count,
        _user_data(data.get("UserData")),
        list(data.get("SecurityGroups") or []),
        **kwargs,
    )
    ids = [str(instance.id) for instance in reservation.instances]
    if profile:
        for instance_id in ids:
            backend.associate_iam_instance_profile(
                instance_id=instance_id,
                iam_instance_profile_name=profile.get("Name"),
                iam_instance_profile_arn=profile.get("Arn"),
            )
    return ids


@dataclass
class _Fleet:
    backend: Any
    scarcity: Scarcity
    zones: list[str]
    fleet_id: str
    instance_tags: dict[str, str]
    instances: list[dict[str, Any]] = field(default_factory=list)
    errors: list[dict[str, Any]] = field(default_factory=list)

    def error(self, pool: _Pool, purchase: str, error: EC2ClientError) -> None:
        self.errors.append(
            {
                "LaunchTemplateAndOverrides": pool.described,
                "Lifecycle": purchase,
                "ErrorCode": error.code,
                "ErrorMessage": error.message,
            }
        )

    def fill(self, pools: list[_Pool], purchase: str, units: float) -> None:
        """Launch until ``units`` of weighted capacity are met, pool by pool. EC2 launches at
        least one instance even when a pool's weight exceeds what is left."""
        remaining = units
        for pool in pools:
            if remaining <= 0:
                return
            wanted = max(1, math.ceil(remaining / pool.weight))
            try:
                site = pool.site(self.backend, purchase)
                check_instance_type(site.instance_type)
                code = self.scarcity.take_failure(site)
                if code is not None:
                    raise launch_error(code)
                max_price = pool.override.get("MaxPrice")
                price = self.scarcity.spot_price(site.instance_type, site.zone)
                if purchase == SPOT and max_price and price and float(max_price) < price:
                    raise launch_error("SpotMaxPriceTooLow")
                available = self.scarcity.available(site)
                count = wanted if available is None else min(wanted, available)
                if count == 0:
                    raise self.scarcity.insufficient_capacity(site, self.zones)
                ids = _launch(self.backend, pool, site, count, self.fleet_id, self.instance_tags)
            except EC2ClientError as error:
                self.error(pool, purchase, error)
                continue
            self.scarcity.consume(site, count)
            self.instances.append(
                {
                    "LaunchTemplateAndOverrides": pool.described,
                    "Lifecycle": purchase,
                    "InstanceIds": ids,
                    "InstanceType": site.instance_type,
                }
            )
            remaining -= count * pool.weight
            if count < wanted:  # this pool ran out part way: EC2 says so, and moves on
                self.error(pool, purchase, self.scarcity.insufficient_capacity(site, self.zones))


def check_fleet_request(response: Any) -> None:
    """What EC2 refuses before launching anything (moto answers an empty config list 500)."""
    if not response._get_param("LaunchTemplateConfigs"):
        raise missing_parameter("LaunchTemplateConfigs")
    target = response._get_param("TargetCapacitySpecification") or {}
    if target.get("TotalTargetCapacity") is None:
        raise missing_parameter("TargetCapacitySpecification.TotalTargetCapacity")


def create_instant_fleet(response: Any, scarcity: Scarcity) -> dict[str, Any]:
    """Serve CreateFleet ``Type: instant``; returns the reply (FleetId, Errors, Instances)."""
    backend = response.ec2_backend
    check_fleet_request(response)
    configs: list[dict[str, Any]] = response._get_param("LaunchTemplateConfigs")
    pools: list[_Pool] = []
    for config in configs:
        pools.extend(_pools(backend, config, len(pools)))
    if response._get_param("DryRun"):
        for pool in pools:
            profile = pool.version.data.get("IamInstanceProfile") or {}
            refuse_pass_role(response, profile.get("Arn"), profile.get("Name"))
    response.error_on_dryrun()

    target = response._get_param("TargetCapacitySpecification")
    total = float(target["TotalTargetCapacity"])
    units = {
        ON_DEMAND: float(target.get("OnDemandTargetCapacity") or 0),
        SPOT: float(target.get("SpotTargetCapacity") or 0),
    }
    default = target.get("DefaultTargetCapacityType") or ON_DEMAND
    if default not in PURCHASES:
        raise EC2ClientError(
            "InvalidParameterValue", f"Invalid DefaultTargetCapacityType: {default}"
        )
    units[default] += max(0.0, total - units[ON_DEMAND] - units[SPOT])
    strategies = {
        ON_DEMAND: (response._get_param("OnDemandOptions") or {}).get("AllocationStrategy"),
        SPOT: (response._get_param("SpotOptions") or {}).get("AllocationStrategy"),
    }
    call_tags = convert_tag_spec(response._get_param("TagSpecifications") or [])
    fleet = _Fleet(
        backend=backend,
        scarcity=scarcity,
        zones=[zone.name for zone in backend.describe_availability_zones()],
        fleet_id=random_fleet_id(),
        instance_tags=call_tags.get("instance", {}),
    )
    for purchase in (ON_DEMAND, SPOT):
        if units[purchase] > 0:
            strategy = strategies[purchase] or DEFAULT_STRATEGY
            fleet.fill(
                _ordered(pools, purchase, strategy, scarcity, backend), purchase, units[purchase]
            )
    return {"FleetId": fleet.fleet_id, "Errors": fleet.errors, "Instances": fleet.instances}
