"""Spot requests as EC2 keeps them, and spot price history.

A cancelled request stays visible as ``cancelled`` with EC2's status code (moto deletes
it); terminating a spot instance closes its request; a spot instance names its request;
request times are real; a request without capacity stays ``open``; ClientToken is
honoured; DescribeSpotInstanceRequests pages and filters by ``status-code``.
DescribeSpotPriceHistory serves only the prices set with ``LocalAws.set_spot_price``.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, Final, cast

from moto.core.responses import ActionResult
from moto.core.utils import utcnow
from moto.ec2.exceptions import EC2ClientError
from moto.ec2.models.instances import InstanceBackend
from moto.ec2.models.spot_requests import SpotInstanceRequest, SpotRequestBackend
from moto.ec2.responses.spot_instances import SpotInstances

from dynagent.testing.aws.client_tokens import idempotent
from dynagent.testing.aws.fleet import SPOT, ServerError, Site, launch_error, zone_of
from dynagent.testing.aws.instances import as_server_error, dry_run, refuse_unknown_image
from dynagent.testing.aws.knobs import STATE_LOCK, knobs_for, naive_utc

# moto's originals, taken once at import: the wrappers always call through to these.
_moto_request_spot_instances = SpotInstances.request_spot_instances
_moto_describe_spot_instance_requests = SpotInstances.describe_spot_instance_requests
_moto_cancel_spot_instance_requests = SpotRequestBackend.cancel_spot_instance_requests
_moto_terminate_instances = InstanceBackend.terminate_instances
_moto_spot_request_init = SpotInstanceRequest.__init__
moto_launch_instance = SpotInstanceRequest.launch_instance  # LocalAws.fulfil_spot_request's too
_moto_spot_status: Any = SpotInstanceRequest.__dict__["status"]
_moto_spot_create_time: Any = SpotInstanceRequest.__dict__["create_time"]
_moto_spot_get_filter_value = SpotInstanceRequest.get_filter_value
_moto_describe_spot_price_history = SpotInstances.describe_spot_price_history


# --------------------------------------------------------------------------------------
# Fix: spot request life cycle (EC2's states and status codes)
# --------------------------------------------------------------------------------------

# Spot request status codes, from EC2's "Spot request status" documentation.
PENDING_FULFILLMENT: Final = "pending-fulfillment"
CAPACITY_NOT_AVAILABLE: Final = "capacity-not-available"
FULFILLED: Final = "fulfilled"
# The docs' state table spells this one "canceled-", their list of codes "cancelled-".
CANCELED_BEFORE_FULFILLMENT: Final = "canceled-before-fulfillment"
REQUEST_CANCELED_AND_INSTANCE_RUNNING: Final = "request-canceled-and-instance-running"
INSTANCE_TERMINATED_BY_USER: Final = "instance-terminated-by-user"


def set_status(request: Any, state: str, code: str, message: str, when: datetime) -> None:
    request.state = state
    request._status_code = code
    request.status_message = message
    request._dynagent_update_time = when


def _instance_gone(instance: Any) -> bool:
    return instance.state in ("shutting-down", "terminated")


def _cancel(request: Any, now: datetime) -> None:
    """EC2 keeps a cancelled request, and its code tells what became of its instance."""
    if request.state not in ("open", "active", "disabled"):
        return  # EC2 cancels only these; a closed or cancelled request stays as it is
    if request.instance is None:
        code = CANCELED_BEFORE_FULFILLMENT
        message = "You canceled the Spot request before it was fulfilled."
    elif _instance_gone(request.instance):
        code = INSTANCE_TERMINATED_BY_USER
        message = "The Spot Instance was terminated by the user."
    else:
        code = REQUEST_CANCELED_AND_INSTANCE_RUNNING
        message = "You canceled the Spot request while the Spot Instance is still running."
    set_status(request, "cancelled", code, message, now)


def _close_requests_of(backend: Any, instance_ids: set[str], now: datetime) -> None:
    """Terminating a spot instance closes its one-time request (a cancelled one stays
    cancelled), both with code instance-terminated-by-user. Persistent requests would
    re-open and relaunch in EC2; that is not modelled (dynagent asks for one-time)."""
    for request in backend.spot_instance_requests.values():
        if request.instance is None or request.instance.id not in instance_ids:
            continue
        message = "The Spot Instance was terminated by the user."
        if request.state == "active":
            set_status(request, "closed", INSTANCE_TERMINATED_BY_USER, message, now)
        elif request._status_code == REQUEST_CANCELED_AND_INSTANCE_RUNNING:
            set_status(request, "cancelled", INSTANCE_TERMINATED_BY_USER, message, now)


def _spot_request_ids(result: Any) -> tuple[str, ...]:
    return tuple(str(request.id) for request in result["SpotInstanceRequests"])


def _replay_spot_requests(response: Any, ids: tuple[str, ...]) -> ActionResult:
    requests = [response.ec2_backend.spot_instance_requests[request_id] for request_id in ids]
    return ActionResult({"SpotInstanceRequests": requests})


def _spot_site(backend: Any, instance_type: str, subnet_id: str | None, zone: str | None) -> Site:
    return Site(instance_type, zone_of(backend, subnet_id, zone), SPOT)


def request_spot_instances(self: Any) -> Any:
    knobs = knobs_for(self.current_account)
    if knobs is None:
        return _moto_request_spot_instances(self)
    if self._get_param("DryRun"):
        return dry_run(self, "LaunchSpecification.", lambda: _moto_request_spot_instances(self))

    def launch() -> ActionResult:
        image_id = self._get_param("LaunchSpecification.ImageId")
        refuse_unknown_image(self.ec2_backend, image_id)
        site = _spot_site(
            self.ec2_backend,
            self._get_param("LaunchSpecification.InstanceType") or "m1.small",
            self._get_param("LaunchSpecification.SubnetId"),
            self._get_param("LaunchSpecification.Placement.AvailabilityZone"),
        )
        with STATE_LOCK:
            code = knobs.scarcity.take_failure(site)
        if code is not None:
            raise launch_error(code)
        return _moto_request_spot_instances(self)

    try:
        return idempotent(
            self, "RequestSpotInstances", launch, _spot_request_ids, _replay_spot_requests
        )
    except ServerError as error:
        return as_server_error(self, error)


def describe_spot_instance_requests(self: Any) -> ActionResult:
    """moto ignores MaxResults and NextToken here and answers in one page; EC2 pages."""
    result = _moto_describe_spot_instance_requests(self)
    max_results = self._get_param("MaxResults")
    if knobs_for(self.current_account) is None or max_results is None:
        return result
    requests = cast(dict[str, Any], result.result)["SpotInstanceRequests"]
    after = _after_token(requests, self._get_param("NextToken"), self.ec2_backend)
    page = after[: int(max_results)]
    next_token = page[-1].id if len(after) > len(page) else None
    return ActionResult({"SpotInstanceRequests": page, "NextToken": next_token})


def _after_token(requests: list[Any], token: str | None, backend: Any) -> list[Any]:
    """The token is the last id served. Order is creation order, which is stable because
    requests are no longer deleted, so a request that stops matching the filter between
    pages cannot derail the next page."""
    if not token:
        return requests
    order = {request_id: n for n, request_id in enumerate(backend.spot_instance_requests)}
    if token not in order:
        raise EC2ClientError("InvalidParameterValue", f"The NextToken {token!r} is not valid.")
    return [request for request in requests if order[request.id] > order[token]]


def cancel_spot_instance_requests(self: Any, request_ids: list[str]) -> list[Any]:
    """moto pops cancelled requests, so they vanish; EC2 keeps them, state ``cancelled``."""
    if knobs_for(self.account_id) is None:
        return _moto_cancel_spot_instance_requests(self, request_ids)
    missing = [rid for rid in request_ids if rid not in self.spot_instance_requests]
    if missing:
        # EC2's answer; moto's pop raised a KeyError, which its server turns into a 500.
        raise EC2ClientError(
            "InvalidSpotInstanceRequestID.NotFound",
            f"The spot instance request ID '{missing[0]}' does not exist",
        )
    requests = [self.spot_instance_requests[rid] for rid in request_ids]
    now = utcnow()
    with STATE_LOCK:
        for request in requests:
            _cancel(request, now)
    return requests


def terminate_instances(self: Any, instance_ids: list[str]) -> list[Any]:
    terminated = _moto_terminate_instances(self, instance_ids)
    if knobs_for(self.account_id) is not None:
        with STATE_LOCK:
            _close_requests_of(self, {instance.id for instance, _ in terminated}, utcnow())
    return terminated


def spot_request_init(self: Any, ec2_backend: Any, *args: Any, **kwargs: Any) -> None:
    _moto_spot_request_init(self, ec2_backend, *args, **kwargs)
    if knobs_for(ec2_backend.account_id) is None:
        return
    now = utcnow()
    self._dynagent_create_time = now
    self._dynagent_update_time = now
    if getattr(self, "_dynagent_no_capacity", False):  # a capacity limit ran out
        message = "There is not enough capacity available for the instances that you requested."
        set_status(self, "open", CAPACITY_NOT_AVAILABLE, message, now)
    elif self.instance is None:  # fulfilment is switched off: EC2's "still waiting"
        message = "Your Spot request is pending fulfillment."
        set_status(self, "open", PENDING_FULFILLMENT, message, now)
    else:
        # EC2 names the request on its instance; moto leaves SpotInstanceRequestId empty.
        self.instance.spot_instance_request_id = self.id


def spot_launch_instance(self: Any) -> Any:
    knobs = knobs_for(self.ec2_backend.account_id)
    if knobs is None:
        return moto_launch_instance(self)
    if not knobs.fulfil_spot_requests:
        return None
    spec = self.launch_specification
    site = _spot_site(self.ec2_backend, spec.instance_type, spec.subnet_id, spec.availability_zone)
    with STATE_LOCK:
        if knobs.scarcity.available(site) == 0:
            self._dynagent_no_capacity = True
            return None
        instance = moto_launch_instance(self)
        knobs.scarcity.consume(site, 1)
    return instance


def spot_status(self: Any) -> dict[str, Any]:
    # moto reports every update as 2015-01-01; real times let a clock-driven reconcile
    # tell a fresh request from a stale one.
    status = dict(_moto_spot_status.fget(self))
    update_time = getattr(self, "_dynagent_update_time", None)
    if update_time is not None:
        status["UpdateTime"] = update_time
    return status


def spot_create_time(self: Any) -> Any:
    created = getattr(self, "_dynagent_create_time", None)
    return created if created is not None else _moto_spot_create_time.fget(self)


def spot_instance_id(self: Any) -> str | None:
    # An open request has no instance; moto's property would fail on None.
    return None if self.instance is None else str(self.instance.id)


def spot_get_filter_value(self: Any, filter_name: str, method_name: str | None = None) -> Any:
    if filter_name == "status-code":  # an EC2 filter moto does not implement
        return self._status_code
    if filter_name == "instance-id":  # None matches nothing, as for EC2's open requests
        return spot_instance_id(self)
    return _moto_spot_get_filter_value(self, filter_name, method_name)


def describe_spot_price_history(self: Any) -> ActionResult:
    """Prices come only from LocalAws.set_spot_price: moto invents 0.00001 for every type
    offered in a zone (for any filter it does not know, or StartTime, it ignores them)."""
    knobs = knobs_for(self.current_account)
    if knobs is None:
        return _moto_describe_spot_price_history(self)
    filters = self._filters_from_querystring() or {}
    zone = self._get_param("AvailabilityZone")
    history = knobs.scarcity.price_history(
        instance_types=list(self._get_param("InstanceTypes") or [])
        + list(filters.get("instance-type", [])),
        zones=([zone] if zone else []) + list(filters.get("availability-zone", [])),
        products=list(self._get_param("ProductDescriptions") or [])
        + list(filters.get("product-description", [])),
        start=_param_time(self._get_param("StartTime")),
        end=_param_time(self._get_param("EndTime")),
    )
    return ActionResult({"SpotPriceHistory": history})


def _param_time(value: Any) -> datetime | None:
    if value is None or value == "":
        return None
    when = value if isinstance(value, datetime) else datetime.fromisoformat(str(value))
    return naive_utc(when if when.tzinfo else when.replace(tzinfo=UTC))
