"""What an account is allowed and offered, for LocalAws (see aws.py's docstring).

moto serves Service Quotas for ``vpc`` only and has no GetSpotPlacementScores; its
instance types are offered in every zone its data lists. Here, for LocalAws's own
accounts, tests set what the real account would report:

* ``GetServiceQuota`` and ``GetAWSDefaultServiceQuota`` for ``ec2`` serve the values set
  with ``LocalAws.set_service_quota``, per region: an *applied* value answers both, a
  default-only one (an account that never changed it) only the default call, as AWS
  answers GetServiceQuota ``NoSuchResourceException`` for quotas it has no applied value
  for. Unset codes answer ``NoSuchResourceException`` on both. Simpler than AWS: no
  usage metrics, no quota names beyond the one given.
* ``GetSpotPlacementScores`` serves the scores set per (instance type, zone) with
  ``LocalAws.set_spot_placement_score``: with ``SingleAvailabilityZone`` one entry per
  zone of the region holding a score for any type asked (the best of them), by zone id;
  otherwise one per region (its best zone's). Nothing set, no entries. Simpler than AWS:
  ``TargetCapacity`` and its unit do not change a score, ``InstanceRequirements`` are
  refused.
* ``DescribeInstanceTypeOfferings`` leaves out what ``LocalAws.withhold_instance_type``
  took away from a zone (availability-zone and availability-zone-id listings; the
  region listing keeps a type offered in any zone). Launches are not refused for it.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final

from moto.core.exceptions import JsonRESTError
from moto.core.responses import ActionResult
from moto.ec2.exceptions import EC2ClientError
from moto.ec2.models.instance_types import InstanceTypeOfferingBackend
from moto.ec2.responses.spot_instances import SpotInstances
from moto.servicequotas.exceptions import NoSuchResource
from moto.servicequotas.models import ServiceQuotasBackend
from moto.servicequotas.responses import ServiceQuotasResponse

EC2_SERVICE: Final = "ec2"
EC2_SERVICE_NAME: Final = "Amazon Elastic Compute Cloud (Amazon EC2)"


@dataclass(frozen=True)
class Quota:
    value: float
    applied: bool
    name: str


@dataclass
class AccountFacts:
    """Per-account settings; LocalAws.reset() clears them."""

    quotas: dict[tuple[str, str], Quota] = field(default_factory=dict)  # (region, code)
    scores: dict[tuple[str, str], int] = field(default_factory=dict)  # (type, zone)
    withheld: set[tuple[str, str]] = field(default_factory=set)  # (type, zone)

    def clear(self) -> None:
        self.quotas.clear()
        self.scores.clear()
        self.withheld.clear()


Lookup = Callable[[str], AccountFacts | None]


class _NoSuchQuota(JsonRESTError):
    def __init__(self, code: str) -> None:
        super().__init__(
            "NoSuchResourceException", f"The request failed because the quota {code} was not found."
        )


def _quota(facts: AccountFacts, region: str, account: str, code: str, default: bool) -> Any:
    quota = facts.quotas.get((region, code))
    if quota is None or not (quota.applied or default):
        raise _NoSuchQuota(code)
    return {
        "ServiceCode": EC2_SERVICE,
        "ServiceName": EC2_SERVICE_NAME,
        "QuotaArn": f"arn:aws:servicequotas:{region}:{'' if default else account}:ec2/{code}",
        "QuotaCode": code,
        "QuotaName": quota.name or code,
        "Value": quota.value,
        "Unit": "None",
        "Adjustable": True,
        "GlobalQuota": False,
    }


def _service_quota_patches(lookup: Lookup) -> list[tuple[type, str, object]]:
    original = ServiceQuotasBackend.get_service_quota

    def get_service_quota(self: Any, service_code: str, quota_code: str) -> Any:
        facts = lookup(self.account_id)
        if facts is None or service_code != EC2_SERVICE:
            return original(self, service_code, quota_code)
        return _quota(facts, self.region_name, self.account_id, quota_code, default=False)

    def get_aws_default_service_quota(self: Any) -> str:
        params = json.loads(self.body)
        facts = lookup(self.current_account)
        if facts is None or params.get("ServiceCode") != EC2_SERVICE:
            raise NoSuchResource()
        code = str(params.get("QuotaCode"))
        quota = _quota(facts, self.region, self.current_account, code, default=True)
        return json.dumps({"Quota": quota})

    return [
        (ServiceQuotasBackend, "get_service_quota", get_service_quota),
        (ServiceQuotasResponse, "get_aws_default_service_quota", get_aws_default_service_quota),
    ]


def _placement_scores(self: Any, facts: AccountFacts) -> ActionResult:
    if self._get_param("InstanceRequirementsWithMetadata"):
        raise EC2ClientError("InvalidParameterValue", "InstanceRequirements are not modelled")
    types = set(self._get_param("InstanceTypes", []))
    best: dict[Any, int] = {}
    for zone in self.ec2_backend.describe_availability_zones():
        scores = [s for (kind, at), s in facts.scores.items() if at == zone.name and kind in types]
        if scores:
            best[zone] = max(scores)
    region = self.ec2_backend.region_name
    if self._get_param("SingleAvailabilityZone"):
        entries = [
            {"Region": region, "AvailabilityZoneId": zone.zone_id, "Score": score}
            for zone, score in best.items()
        ]
    else:
        entries = [{"Region": region, "Score": max(best.values())}] if best else []
    return ActionResult({"SpotPlacementScores": entries})


def _offering_patches(lookup: Lookup) -> list[tuple[type, str, object]]:
    original = InstanceTypeOfferingBackend.describe_instance_type_offerings

    def describe(self: Any, location_type: str | None = None, filters: Any = None) -> Any:
        offerings = original(self, location_type, filters)
        facts = lookup(self.account_id)
        if facts is None or not facts.withheld or location_type in (None, "region"):
            return offerings
        names = {z.zone_id: z.name for z in self.describe_availability_zones()}
        return [
            o
            for o in offerings
            if (o["InstanceType"], names.get(o["Location"], o["Location"])) not in facts.withheld
        ]

    def scores(self: Any) -> ActionResult:
        facts = lookup(self.current_account)
        if facts is None:
            raise NotImplementedError("GetSpotPlacementScores is LocalAws's only")
        return _placement_scores(self, facts)

    return [
        (InstanceTypeOfferingBackend, "describe_instance_type_offerings", describe),
        (SpotInstances, "get_spot_placement_scores", scores),
    ]


def patches(lookup: Lookup) -> tuple[tuple[type, str, object], ...]:
    """(owner, attribute, replacement) for aws.py to install while a LocalAws runs;
    ``lookup`` gives a LocalAws account's facts (None for any other account)."""
    return (*_service_quota_patches(lookup), *_offering_patches(lookup))
