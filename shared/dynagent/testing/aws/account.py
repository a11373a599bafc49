"""What an account is allowed and offered, for LocalAws (see local_aws.py's docstring).

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
* Lambda's ``GetAccountSettings`` (moto has none) serves the account's concurrency limit
  in each region, set with ``LocalAws.set_lambda_concurrency`` (AWS's default of 1000
  when unset), and its unreserved part: the limit less the ``ReservedConcurrentExecutions``
  of the region's functions. A reservation (``PutFunctionConcurrency``, or a function
  CloudFormation makes with one) that would leave less unreserved than the minimum is
  refused with Lambda's ``InvalidParameterValueException`` and its message. Simpler than
  AWS: the minimum is taken as 100, or the whole limit below 100 (AWS documents 100 and
  has answered 10, 50 and 100 to different accounts; which it keeps when is not
  published); no code-size limits are enforced, and the usage counts only the functions.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final

from moto.awslambda.exceptions import InvalidParameterValueException
from moto.awslambda.models import LambdaBackend
from moto.awslambda.responses import LambdaResponse
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
# Lambda's concurrency limit for a new region of an established account, and the code
# sizes GetAccountSettings reports (Lambda quotas, "Function configuration").
LAMBDA_CONCURRENCY: Final = 1000
LAMBDA_CODE_LIMITS: Final = {
    "TotalCodeSize": 80_530_636_800, "CodeSizeUnzipped": 262_144_000, "CodeSizeZipped": 52_428_800
}  # fmt: skip
# The GetAccountSettings route moto's Lambda lacks (GET /2016-08-19/account-settings/).
_ACCOUNT_SETTINGS_PATH: Final = r"/(?P<api_version>[^/]+)/account-settings/?$"


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
    lambda_concurrency: dict[str, int] = field(default_factory=dict)  # region -> limit

    def clear(self) -> None:
        self.quotas.clear()
        self.scores.clear()
        self.withheld.clear()
        self.lambda_concurrency.clear()


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


def _reserved(backend: Any, leaving_out: str = "") -> int:
    """The concurrency the region's functions reserve (all but ``leaving_out``)."""
    return sum(
        int(f.reserved_concurrency or 0)
        for f in backend.list_functions()
        if f.function_name != leaving_out
    )


def _limit(facts: AccountFacts, region: str) -> int:
    return facts.lambda_concurrency.get(region, LAMBDA_CONCURRENCY)


def _check_reservation(facts: AccountFacts, backend: Any, name: str, wanted: Any) -> None:
    """Refuse ``wanted`` for function ``name`` as Lambda does when it leaves too little."""
    limit = _limit(facts, backend.region_name)
    minimum = min(100, limit)
    if limit - _reserved(backend, leaving_out=name) - int(wanted) < minimum:
        raise InvalidParameterValueException(
            "Specified ReservedConcurrentExecutions for function decreases account's "
            f"UnreservedConcurrentExecution below its minimum value of [{minimum}]."
        )


def _lambda_patches(lookup: Lookup) -> list[tuple[type, str, object]]:
    url_paths = LambdaBackend.url_paths
    create_function = LambdaBackend.create_function
    put_function_concurrency = LambdaBackend.put_function_concurrency

    def paths(self: Any) -> Any:
        return {**url_paths.__get__(self), _ACCOUNT_SETTINGS_PATH: LambdaResponse.dispatch}

    def account_settings(self: Any) -> str:
        facts = lookup(self.current_account)
        if facts is None:
            raise NotImplementedError("GetAccountSettings is LocalAws's only")
        backend = self.backend
        functions = list(backend.list_functions())
        limit = _limit(facts, self.region)
        limits = {**LAMBDA_CODE_LIMITS, "ConcurrentExecutions": limit,
                  "UnreservedConcurrentExecutions": limit - _reserved(backend)}  # fmt: skip
        usage = {"TotalCodeSize": sum(int(f.code_size) for f in functions),
                 "FunctionCount": len(functions)}  # fmt: skip
        return json.dumps({"AccountLimit": limits, "AccountUsage": usage})

    def create(self: Any, spec: dict[str, Any]) -> Any:
        facts = lookup(self.account_id)
        wanted = spec.get("ReservedConcurrentExecutions")
        if facts is not None and wanted is not None:
            _check_reservation(facts, self, str(spec.get("FunctionName")), wanted)
        return create_function(self, spec)

    def put(self: Any, function_name: str, reserved_concurrency: str) -> Any:
        facts = lookup(self.account_id)
        if facts is not None:
            name = self.get_function(function_name).function_name
            _check_reservation(facts, self, name, reserved_concurrency)
        return put_function_concurrency(self, function_name, reserved_concurrency)

    return [
        (LambdaBackend, "url_paths", property(paths)),
        (LambdaResponse, "get_account_settings", account_settings),
        (LambdaBackend, "create_function", create),
        (LambdaBackend, "put_function_concurrency", put),
    ]


def patches(lookup: Lookup) -> tuple[tuple[type, str, object], ...]:
    """(owner, attribute, replacement) for moto_patches.py to install while a LocalAws runs;
    ``lookup`` gives a LocalAws account's facts (None for any other account)."""
    return (*_service_quota_patches(lookup), *_offering_patches(lookup), *_lambda_patches(lookup))
