"""Launching and describing instances as EC2 does: RunInstances, CreateFleet and
DescribeInstances.

RunInstances honours ClientToken, launches ``MaxCount`` when there is the capacity (moto
launches ``MinCount``), draws on the double's scarce capacity (fleet.py) and refuses an
unknown AMI; with DryRun it checks the image and iam:PassRole and launches nothing.
CreateFleet ``Type: instant`` is served by fleet.py, once per ClientToken.
DescribeInstances can miss new instances for a while, as EC2's eventual consistency does.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any, Final, cast

from moto.core.responses import ActionResult
from moto.ec2.exceptions import InvalidInstanceIdError
from moto.ec2.responses.fleets import Fleets
from moto.ec2.responses.instances import InstanceResponse

from dynagent.testing.aws.capacity_reservations import (
    opted_out,
    placement,
    reclaim_before_describe,
    record,
)
from dynagent.testing.aws.client_tokens import idempotent, idempotent_reply
from dynagent.testing.aws.fleet import (
    ON_DEMAND,
    SPOT,
    ServerError,
    Site,
    check_fleet_request,
    create_instant_fleet,
    launch_error,
    zone_of,
)
from dynagent.testing.aws.iam import refuse_pass_role
from dynagent.testing.aws.knobs import STATE_LOCK, Knobs, knobs_for

# moto's originals, taken once at import: the wrappers always call through to these.
_moto_run_instances = InstanceResponse.run_instances
_moto_describe_instances = InstanceResponse.describe_instances
_moto_create_fleet = Fleets.create_fleet


def _reservation_ids(reservation: Any) -> tuple[str, ...]:
    return (str(reservation.id),)


_PREFERENCE: Final = "CapacityReservationSpecification.CapacityReservationPreference"
# moto's serializer reports every RunInstances instance as "pending".
_RUN_INSTANCES_STATE: Final = "RunInstances.Reservation.Instances.Instance.State"


def _replay_reservation(response: Any, ids: tuple[str, ...]) -> ActionResult:
    """The original reservation object, so the reply names the same instances; and, as
    EC2 documents, "the only information that might vary is the state of the instance":
    so this reply shows their current state, not moto's fixed "pending"."""
    transformers = dict(response.RESPONSE_KEY_PATH_TO_TRANSFORMER)
    transformers.pop(_RUN_INSTANCES_STATE, None)
    response.RESPONSE_KEY_PATH_TO_TRANSFORMER = transformers  # this response only
    return ActionResult(response.ec2_backend.reservations[ids[0]])


def refuse_unknown_image(backend: Any, image_id: str | None) -> None:
    """EC2 refuses a launch naming an AMI it doesn't have (InvalidAMIID.NotFound); moto
    only checks under a process-wide setting, which would reach every moto user in the
    process, so the check is made here, for our accounts only."""
    if image_id:
        backend.describe_images(ami_ids=[image_id])


# --------------------------------------------------------------------------------------
# Fix: eventual consistency on demand (new instances missing from a few describes)
# --------------------------------------------------------------------------------------


def _hidden_counters(backend: Any) -> dict[str, int]:
    counters: dict[str, int] | None = getattr(backend, "_dynagent_hidden", None)
    if counters is None:
        counters = {}
        backend._dynagent_hidden = counters
    return counters


def _hide_new(backend: Any, reservation: Any, describes: int) -> None:
    if describes > 0:
        counters = _hidden_counters(backend)
        for instance in reservation.instances:
            counters[instance.id] = describes


def _hidden_from_this_describe(backend: Any) -> frozenset[str]:
    """The instances this DescribeInstances call must not show; the call counts down."""
    with STATE_LOCK:
        counters = _hidden_counters(backend)
        hidden = frozenset(iid for iid, left in counters.items() if left > 0)
        for instance_id in hidden:
            counters[instance_id] -= 1
        return hidden


def _without(reservation: Any, hidden: frozenset[str]) -> Any:
    # A shallow copy: the real reservation keeps its instances for every later call.
    visible = copy.copy(reservation)
    visible.instances = [i for i in reservation.instances if i.id not in hidden]
    return visible


def as_server_error(response: Any, error: ServerError) -> Any:
    """moto sends every EC2 error as HTTP 400 (EC2's errors have no modelled status); EC2
    sends its server errors, InsufficientInstanceCapacity among them, as 500."""
    _, headers, body = response.serialized(ActionResult(error))
    headers["status"] = 500  # moto's dispatcher takes the status from here
    return body, headers


def _run_site(response: Any) -> Site:
    """The instance type, zone and purchase option a RunInstances request launches into."""
    backend = response.ec2_backend
    instance_type = response._get_param("InstanceType")
    template = response._get_param("LaunchTemplate")
    if not instance_type and template:
        instance_type = backend._get_template_from_args(template).instance_type
    nics = response._get_param("NetworkInterfaces") or [{}]
    subnet_id = response._get_param("SubnetId") or nics[0].get("SubnetId")
    zone = zone_of(backend, subnet_id, response._get_param("Placement.AvailabilityZone"))
    market = response._get_param("InstanceMarketOptions.MarketType")
    return Site(instance_type or "m1.small", zone, SPOT if market == SPOT else ON_DEMAND)


def dry_run(response: Any, specification: str, run: Callable[[], Any]) -> Any:
    """A launch with DryRun: EC2's checks of the image and of the caller's iam:PassRole
    (iam.py), then moto's DryRunOperation; no capacity or injected failure is used."""
    refuse_unknown_image(response.ec2_backend, response._get_param(f"{specification}ImageId"))
    refuse_pass_role(
        response,
        response._get_param(f"{specification}IamInstanceProfile.Arn"),
        response._get_param(f"{specification}IamInstanceProfile.Name"),
    )
    return run()


def run_instances(self: Any) -> Any:
    knobs = knobs_for(self.current_account)
    if knobs is None:
        return _moto_run_instances(self)
    if self._get_param("DryRun"):
        return dry_run(self, "", lambda: _moto_run_instances(self))
    scarcity = knobs.scarcity

    def launch() -> ActionResult:
        refuse_unknown_image(self.ec2_backend, self._get_param("ImageId"))
        site = _run_site(self)
        with STATE_LOCK:
            code = scarcity.take_failure(site)
            if code is not None:
                raise launch_error(code)
            # EC2 launches MaxCount when it has the capacity, as many as it has when that
            # is at least MinCount, and none otherwise; moto always launches MinCount.
            min_count = int(self._get_param("MinCount") or 1)
            count = int(self._get_param("MaxCount") or min_count)
            reservation, reserved = placement(self, knobs, site, min_count, count)
            targeted = reservation is not None and bool(
                self._get_param("CapacityReservationSpecification.CapacityReservationTarget")
            )
            if targeted:
                # A reservation's places are its own: no draw on the scarce capacity.
                self.params["MinCount"] = reserved
                # moto takes any market for spot: a block's instances are its own kind.
                block = self._get_param("InstanceMarketOptions.MarketType") == "capacity-block"
                if block:
                    self.params.pop("InstanceMarketOptions", None)
                result = _moto_run_instances(self)
                if block:
                    for instance in cast(Any, result.result).instances:
                        instance.lifecycle = "capacity-block"
            else:
                available = scarcity.available(site)
                if available is not None and available < min_count:
                    zones = [zone.name for zone in self.ec2_backend.describe_availability_zones()]
                    raise scarcity.insufficient_capacity(site, zones)
                self.params["MinCount"] = count if available is None else min(count, available)
                result = _moto_run_instances(self)
                scarcity.consume(site, len(cast(Any, result.result).instances))
            launched = list(cast(Any, result.result).instances)
            if reservation is not None:
                record(reservation, launched, targeted, reserved)
            opted_out(launched, self._get_param(_PREFERENCE))
        _hide_new(self.ec2_backend, result.result, knobs.hide_new_instances_for)
        return result

    try:
        return idempotent(self, "RunInstances", launch, _reservation_ids, _replay_reservation)
    except ServerError as error:
        return as_server_error(self, error)


def describe_instances(self: Any) -> ActionResult:
    if knobs_for(self.current_account) is None:
        return _moto_describe_instances(self)
    reclaim_before_describe(self)
    hidden = _hidden_from_this_describe(self.ec2_backend)
    if hidden:
        cast(Knobs, knobs_for(self.current_account)).count("hidden")
    asked_for_hidden = sorted(hidden.intersection(self._get_param("InstanceIds", [])))
    if asked_for_hidden:
        # What EC2 says about an id it has not propagated yet.
        raise InvalidInstanceIdError(asked_for_hidden)
    result = _moto_describe_instances(self)
    if hidden:
        page = cast(dict[str, Any], result.result)
        visible = (_without(r, hidden) for r in page["Reservations"])
        page["Reservations"] = [r for r in visible if r.instances]
    return result


def create_fleet(self: Any) -> Any:
    """Instant fleets are served by fleet.create_instant_fleet, once per ClientToken;
    other fleet types go to moto, after EC2's own checks of the request."""
    knobs = knobs_for(self.current_account)
    if knobs is None:
        return _moto_create_fleet(self)
    check_fleet_request(self)
    if self._get_param("Type") != "instant":
        return _moto_create_fleet(self)

    def launch() -> dict[str, Any]:
        with STATE_LOCK:
            return create_instant_fleet(self, knobs.scarcity)

    return idempotent_reply(self, "CreateFleet", launch)
