"""A local AWS for the demo and the tests: moto's server on loopback, made faithful where we lean.

The demo and the AWS tests drive dynagent's real boto3 code paths over HTTP against
``LocalAws``: moto's server in a background thread, listening on 127.0.0.1 only, on a
port the OS picks. moto is a good EC2/SQS stand-in, but a few of its EC2 behaviours
differ from EC2 in ways our launch/reconcile logic depends on. This module and those beside
it fix those in the test double (never in dynagent's code) by wrapping single moto methods
while a server runs, and only for that server's own moto account:

* RunInstances and RequestSpotInstances honour ``ClientToken`` (moto ignores it).
* RunInstances launches ``MaxCount`` instances, as EC2 does when it has the capacity
  (moto launches ``MinCount``), and refuses an unknown AMI (moto accepts any id).
* A cancelled spot request stays visible as ``cancelled`` with EC2's status code (moto
  deletes it); terminating a spot instance closes its request; a spot instance names its
  request (``SpotInstanceRequestId``); request times are real, not a fixed 2015 date;
  DescribeSpotInstanceRequests honours ``MaxResults``/``NextToken`` and the
  ``status-code`` filter.

* Capacity is scarce on demand (``limit_capacity``; moto always has capacity): RunInstances
  launches what is left if that is at least MinCount, else fails
  ``InsufficientInstanceCapacity`` with EC2's message and EC2's HTTP 500 (moto sends every
  error as 400; boto3 retries a 500, so tests turn retries off); a spot request without
  capacity stays ``open``/``capacity-not-available``. ``fail_next_launch`` injects one
  EC2 error (VcpuLimitExceeded, ...) into the next matching launch.
* CreateFleet ``Type: instant`` is served here (fleet.py), because moto's ignores
  ClientToken, never returns ``Errors``, ignores Priority and allocation strategies, answers
  an empty LaunchTemplateConfigs with a 500, launches nothing when the target is below the
  first override's WeightedCapacity, and drops the template's MetadataOptions and the
  call's instance tags. Here: overrides in the strategy's order (``prioritized`` and
  ``capacity-optimized-prioritized`` by Priority; the others by price per unit of weight
  from the double's price tables, unpriced last; ties in request order), weighted
  capacity (at least one instance), one ``Errors`` entry per override that could not
  launch (capacity, injected error, unknown type, subnet or AMI) and on to the next, HTTP
  200 even when all failed; instances get the template version's data, the override's
  type and subnet, the call's ``instance`` tags and ``aws:ec2:fleet-id``; spot ones have
  ``InstanceLifecycle: spot`` (without a spot request). ClientToken replays the first
  reply; an empty config list is EC2's ``MissingParameter`` (400). Not modelled: the
  instant fleet is not kept for DescribeFleets (nor are its ``fleet`` tags), MaxTotalPrice,
  capacity reservations. ``maintain``/``request`` fleets are moto's.
* Launch templates: CreateLaunchTemplate and CreateLaunchTemplateVersion honour
  ClientToken (moto answers a retry AlreadyExists, or adds a version per retry);
  CreateLaunchTemplateVersion honours ``SourceVersion`` (moto ignores it, so a version
  lost every parameter it did not repeat); the template's own ``launch-template`` tags
  stay off its LaunchTemplateData (moto copies them in). Checked and left alone:
  AlreadyExists for a taken name, ``tag:KEY`` filters and ``LaunchTemplateNames``
  (NotFound for an unknown one), ``$Latest``/``$Default`` versions, ModifyLaunchTemplate's
  DefaultVersion.
* DescribeSpotPriceHistory serves only prices set with ``set_spot_price`` (moto invents
  0.00001 for every offered type and zone, ignoring StartTime): filtered by InstanceTypes,
  AvailabilityZone, ProductDescriptions ("Linux/UNIX") and the matching filters, newest
  first, and with a StartTime including the price in effect then. With no price set it
  returns nothing, so code must fall back to the on-demand price.

* What ``dynagent doctor`` asks of an account, which moto lacks or answers for anyone:
  launches with ``DryRun`` check the image and the caller's ``iam:PassRole`` on the
  instance profile's role, and use no capacity or injected failure; SimulatePrincipalPolicy
  evaluates the principal's identity policies; EC2's service-linked roles get AWS's names
  (iam.py). Service Quotas values for ``ec2``, spot placement scores, instance
  types withheld from zones and the Lambda concurrency limit (GetAccountSettings, which
  moto lacks) are set by tests (account.py); a stack made from
  template.yaml stands for its deployment (stack.py). Each module's docstring says
  where it is simpler than AWS.

* SQS counts a message's size as SQS does: the body's UTF-8 bytes plus each message
  attribute's name, data type and value, against the queue's MaximumMessageSize (moto
  compares the body's length in characters only, so a message whose attributes push it
  past the limit, or a body of multi-byte characters, gets through moto and not SQS).
It also gives tests knobs EC2 has no API for: leave new spot requests open, set a spot
request's state and status, age an instance or hold it ``pending``, hide new instances
from the next few DescribeInstances calls (EC2's eventual consistency), and, for the
reliability suite, answer every Nth EC2 call with an error (throttling, 5xx) or late (a
client timeout on a call that took effect), counting the faults it served. And it counts
the API calls it serves, so tests and benchmarks can assert how many pages or writes a
code path costs.

Behaviours checked and left alone, because moto already matches EC2 closely enough:
spot requests are fulfilled at once and their instance does not inherit the request's
tags; DescribeInstances filters ``tag:KEY`` and ``instance-state-name``; its pagination
counts reservations, not instances (EC2 counts instances, so a moto page can hold more
instances than ``MaxResults``; code must just follow ``NextToken``), and without
``MaxResults`` moto still pages at 100 reservations.

Isolation: each server stamps every request it serves with moto's ``x-moto-account-id``
header, so each ``LocalAws`` owns a moto account of its own. Two servers in one process,
or a server and a ``moto.mock_aws`` test on moto's default account, never share state,
the fixes never touch other accounts, and ``reset()`` wipes only its own account.

This module holds ``LocalAws``, the server and its knobs, and the middleware in front of
moto's app; the double's parts are beside it: ``wire`` (a call as the middleware reads
it, the faults it serves), ``knobs`` (which accounts are owned, and their knobs),
``moto_patches`` (installs the wrappers), the wrappers themselves in ``instances``
(RunInstances, CreateFleet, DescribeInstances), ``spot`` (spot requests and prices),
``launch_templates``, ``sqs_messages`` and ``client_tokens`` (ClientToken), and the models
they consult in ``fleet``, ``account``, ``iam`` and ``stack``.
"""

from __future__ import annotations

import itertools
import os
import threading
import time
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from typing import Any, Final, Self

import boto3
from moto.core.base_backend import BackendDict, backend_lock
from moto.core.utils import utcnow
from moto.ec2.models import ec2_backends
from moto.ec2.models.instances import InstanceState
from moto.moto_server.werkzeug_app import (
    DomainDispatcherApplication,
    MotoRequestHandler,
    create_backend_app,
)

from dynagent.testing.aws.account import Quota
from dynagent.testing.aws.capacity_reservations import CapacityReservation, new_id
from dynagent.testing.aws.fleet import Site, check_purchase
from dynagent.testing.aws.knobs import STATE_LOCK, Knobs, naive_utc
from dynagent.testing.aws.moto_patches import claim, release
from dynagent.testing.aws.spot import FULFILLED, moto_launch_instance, set_status
from dynagent.testing.aws.wire import (
    ApiCall,
    WireFault,
    WsgiApp,
    action_of,
    ec2_error,
    signing_service,
)
from dynagent.testing.loopback import LOOPBACK, CallLog, LoopbackServer, QuietHandler, Service

DEFAULT_REGION: Final = "us-west-2"
DUMMY_ACCESS_KEY_ID: Final = "testing"
DUMMY_SECRET_ACCESS_KEY: Final = "testing"

# Each LocalAws gets its own moto account; these never collide with moto's default one.
_ACCOUNT_IDS = itertools.count(100_000_000_001)


class _AccountStampingRecorder:
    """WSGI middleware: pins every request to this server's moto account and records it;
    and serves the wire faults a test asked for (``LocalAws.inject_errors``,
    ``LocalAws.answer_late``)."""

    def __init__(
        self, app: WsgiApp, account_id: str, log: CallLog[ApiCall], knobs: Knobs | None = None
    ) -> None:
        self._app = app
        self._account_id = account_id
        self._log = log
        self._knobs = knobs

    def __call__(
        self, environ: dict[str, Any], start_response: Callable[..., Any]
    ) -> Iterable[bytes]:
        # Overwrite, never trust: a client must not reach another server's account.
        environ["HTTP_X_MOTO_ACCOUNT_ID"] = self._account_id
        action = action_of(environ)
        if action is None:
            return self._app(environ, start_response)
        call = ApiCall(signing_service(environ.get("HTTP_AUTHORIZATION", "")), action)
        self._log.record(call)
        knobs = self._knobs
        fault = knobs.wire_fault(call) if knobs is not None else None
        if knobs is None or fault is None:
            return self._app(environ, start_response)
        if fault.code:
            knobs.count("error")
            return ec2_error(start_response, fault.status, fault.code)
        # Late: the call is carried out, then its answer waits, as when EC2 acts on a
        # request whose response the network loses (the client times out and retries).
        body = list(self._app(environ, start_response))
        knobs.count("late")
        time.sleep(fault.delay)
        return body


class _QuietHandler(MotoRequestHandler, QuietHandler):
    """moto's request handler without werkzeug's access log line per request on stderr:
    it would drown the demo's output, and ``LocalAws.calls()`` records the requests."""


class LocalAws(Service):
    """moto's server on 127.0.0.1 (an OS-chosen port) with EC2's behaviours we depend on.

    Use it as a context manager, or call start() and stop(). It sets nothing in
    ``os.environ``: ``env()`` gives the variables a subprocess or handler needs, and
    ``client()`` builds boto3 clients pointed at it. See the module docstring for what
    differs from plain moto and why.
    """

    def __init__(self, region: str = DEFAULT_REGION, *, fulfil_spot_requests: bool = True):
        self._region = region
        self._account_id = f"{next(_ACCOUNT_IDS):012d}"
        self._defaults = Knobs(fulfil_spot_requests=fulfil_spot_requests)
        self._knobs = Knobs(fulfil_spot_requests=fulfil_spot_requests)
        self._calls = CallLog[ApiCall]()
        self._server: LoopbackServer | None = None
        self._session: boto3.session.Session | None = None
        self._session_lock = threading.Lock()

    # -- life cycle -----------------------------------------------------------------

    def start(self) -> Self:
        if self._server is not None:
            raise RuntimeError("this LocalAws is already running")
        forced = os.environ.get("MOTO_ACCOUNT_ID")
        if forced is not None:
            # moto lets this variable override every request's account, which would
            # merge all servers' state into one account: refuse rather than share.
            raise RuntimeError(f"MOTO_ACCOUNT_ID={forced} is set; LocalAws needs it unset")
        claim(self._account_id, self._knobs)
        try:
            app = DomainDispatcherApplication(create_backend_app)
            wrapped = _AccountStampingRecorder(app, self._account_id, self._calls, self._knobs)
            self._server = LoopbackServer(wrapped, "local-aws", handler=_QuietHandler)
        except BaseException:
            release(self._account_id)
            raise
        return self

    def stop(self) -> None:
        """Stop serving, close the listening socket, join the thread. Safe to repeat."""
        server, self._server = self._server, None
        if server is None:
            return
        try:
            server.close()
        finally:
            release(self._account_id)

    @property
    def running(self) -> bool:
        return self._server is not None

    # -- where it is ----------------------------------------------------------------

    @property
    def region(self) -> str:
        return self._region

    @property
    def account_id(self) -> str:
        """The moto account every request to this server lands in."""
        return self._account_id

    @property
    def port(self) -> int:
        return self.address[1]

    @property
    def address(self) -> tuple[str, int]:
        """The (host, port) the listening socket is bound to, as the OS reports it."""
        if self._server is None:
            raise RuntimeError("LocalAws is not running")
        return self._server.address

    @property
    def endpoint_url(self) -> str:
        return f"http://{LOOPBACK}:{self.port}"

    def env(self) -> dict[str, str]:
        """Environment for a subprocess or handler to use this server and nothing else."""
        return {
            "AWS_ENDPOINT_URL": self.endpoint_url,
            "AWS_DEFAULT_REGION": self._region,
            "AWS_REGION": self._region,  # what Lambda sets, and Powertools reads
            "AWS_ACCESS_KEY_ID": DUMMY_ACCESS_KEY_ID,
            "AWS_SECRET_ACCESS_KEY": DUMMY_SECRET_ACCESS_KEY,
            "AWS_EC2_METADATA_DISABLED": "true",  # never wait on an instance-metadata lookup
        }

    def client(self, service: str, region: str | None = None, config: Any = None) -> Any:
        """A new boto3 client for ``service`` on this server, with dummy credentials;
        ``config`` is a ``botocore.config.Config`` (say, to turn off retries of 500s)."""
        with self._session_lock:
            # One session for all clients: it caches the service models, which makes a
            # client per test cheap. Sessions are not thread-safe, hence the lock.
            if self._session is None:
                self._session = boto3.session.Session(
                    aws_access_key_id=DUMMY_ACCESS_KEY_ID,
                    aws_secret_access_key=DUMMY_SECRET_ACCESS_KEY,
                    region_name=self._region,
                )
            return self._session.client(
                service,
                endpoint_url=self.endpoint_url,
                region_name=region or self._region,
                config=config,
            )

    # -- state --------------------------------------------------------------------

    def ec2_backend(self) -> Any:
        """moto's in-process EC2 backend for this account and region, to arrange fake-cloud
        state the API cannot (prefer the helpers below, which keep it consistent)."""
        return ec2_backends[self._account_id][self._region]

    def image_id(self, region: str | None = None) -> str:
        """An AMI id the region knows (moto ships copies of Amazon's public AMIs). Asking
        the API instead lists every one of them, which costs most of a second."""
        backend = ec2_backends[self._account_id][region or self._region]
        return str(backend.describe_images(owners=["amazon"])[0].id)

    def reset(self) -> None:
        """Forget everything this account holds in every service, and restore the knobs."""
        with backend_lock:
            # BackendDict._instances is moto's own list of the services in use, the same
            # one its global reset walks; dropping our account leaves other accounts alone.
            in_use: list[Any] = vars(BackendDict)["_instances"]
            for service in list(in_use):
                service.pop(self._account_id, None)
        self._knobs.fulfil_spot_requests = self._defaults.fulfil_spot_requests
        self._knobs.hide_new_instances_for = self._defaults.hide_new_instances_for
        with STATE_LOCK:
            self._knobs.scarcity.clear()
            self._knobs.wire_faults.clear()
            self._knobs.served.clear()
            self._knobs.facts.clear()
            self._knobs.reservations.clear()

    # -- knobs ----------------------------------------------------------------------

    @property
    def fulfil_spot_requests(self) -> bool:
        """When False, new spot requests stay ``open``/``pending-fulfillment`` without an
        instance (until fulfil_spot_request()); when True, moto fulfils them at once."""
        return self._knobs.fulfil_spot_requests

    @fulfil_spot_requests.setter
    def fulfil_spot_requests(self, value: bool) -> None:
        self._knobs.fulfil_spot_requests = value

    def hide_new_instances(self, describes: int) -> None:
        """EC2 is eventually consistent: a just-launched instance can be missing from
        DescribeInstances for a while (and describing its id fails NotFound). Instances
        launched by RunInstances from now on are hidden from the next ``describes``
        DescribeInstances calls. 0 turns it off. reset() turns it off too."""
        if describes < 0:
            raise ValueError("describes must be >= 0")
        self._knobs.hide_new_instances_for = describes

    def limit_capacity(
        self,
        instance_type: str,
        zone: str | None = None,
        purchase: str | None = None,
        count: int = 0,
    ) -> None:
        """From now on at most ``count`` more instances of ``instance_type`` can launch in
        ``zone`` as ``purchase`` ("spot" or "on-demand"); None matches any zone or
        purchase option. Every launched instance uses one unit of each limit it matches;
        limits add up (the smallest one left wins). RunInstances then launches what is
        left if that is at least MinCount, else fails InsufficientInstanceCapacity (HTTP
        500, which boto3 retries); a new spot request stays open, capacity-not-available;
        CreateFleet reports the pool in Errors and moves on. The zone of a launch is its
        subnet's, else the one asked for, else the region's first (us-west-2a)."""
        check_purchase(purchase)
        if count < 0:
            raise ValueError("count must be >= 0")
        with STATE_LOCK:
            self._knobs.scarcity.limit(instance_type, zone, purchase, count)

    def clear_capacity_limits(self) -> None:
        """Unlimited capacity again (also what reset() does)."""
        with STATE_LOCK:
            self._knobs.scarcity.limits.clear()

    def fail_next_launch(
        self,
        instance_type: str,
        code: str,
        zone: str | None = None,
        purchase: str | None = None,
    ) -> None:
        """The next launch matching (type, zone, purchase; None = any) fails once with EC2
        error ``code`` (e.g. VcpuLimitExceeded, MaxSpotInstanceCountExceeded,
        SpotMaxPriceTooLow, Unsupported): as the API error of RunInstances or
        RequestSpotInstances, as an Errors entry of CreateFleet. InsufficientInstanceCapacity
        and the other server errors come as HTTP 500, the rest as 400."""
        check_purchase(purchase)
        with STATE_LOCK:
            self._knobs.scarcity.fail_next(instance_type, code, zone, purchase)

    def set_spot_price(
        self, instance_type: str, zone: str, price: float, *, at: datetime | None = None
    ) -> None:
        """Record a spot price change for (type, zone) at ``at`` (timezone-aware; default
        now). DescribeSpotPriceHistory serves only these; CreateFleet's price-ordered spot
        strategies rank pools by the latest one per unit of weight."""
        when = naive_utc(at) if at is not None else utcnow()
        with STATE_LOCK:
            self._knobs.scarcity.spot_prices.setdefault((instance_type, zone), []).append(
                (when, float(price))
            )

    def set_on_demand_price(self, instance_type: str, price: float) -> None:
        """An on-demand price (per hour), for CreateFleet's on-demand ``lowest-price``
        order; EC2 has no API for it here (it is the Pricing API's), so no action serves it."""
        with STATE_LOCK:
            self._knobs.scarcity.on_demand_prices[instance_type] = float(price)

    def inject_errors(
        self,
        code: str = "RequestLimitExceeded",
        *,
        every: int,
        status: int = 503,
        service: str = "ec2",
        action: str | None = None,
    ) -> None:
        """Answer every ``every``-th call of ``service`` (and ``action``; None = any) with
        EC2 error ``code`` and HTTP ``status``, without carrying it out: EC2 throttles with
        RequestLimitExceeded (503) and fails with InternalError (500) or Unavailable (503),
        and moto never does. Only EC2's query protocol is spoken, so only service "ec2".
        Rules add up; the first that strikes answers. reset() removes them."""
        if service != "ec2":
            raise ValueError("errors are injected into EC2 calls only")
        if every < 1:
            raise ValueError("every must be >= 1")
        with STATE_LOCK:
            self._knobs.wire_faults.append(WireFault(service, action, every, code, status))

    def answer_late(
        self, seconds: float, *, every: int, service: str = "ec2", action: str | None = None
    ) -> None:
        """Carry out every ``every``-th matching call, then hold its answer ``seconds``
        (real time): a client whose read timeout is shorter sees a timeout for a call that
        took effect, as when the network loses EC2's answer, and must retry safely."""
        if every < 1 or seconds < 0:
            raise ValueError("every must be >= 1 and seconds >= 0")
        with STATE_LOCK:
            self._knobs.wire_faults.append(WireFault(service, action, every, delay=seconds))

    def clear_wire_faults(self) -> None:
        with STATE_LOCK:
            self._knobs.wire_faults.clear()

    def faults_served(self) -> dict[str, int]:
        """Faults this server actually served since reset(), by kind: "error" (injected
        error answers), "late" (late answers), "hidden" (DescribeInstances calls that hid a
        new instance), "refused" (fail_next_launch errors and capacity refusals). A test
        whose injection never struck proves nothing, so it can check these."""
        with STATE_LOCK:
            served = dict(self._knobs.served)
            refused = self._knobs.scarcity.refusals_served
        if refused:
            served["refused"] = refused
        return served

    def capacity_refusals(self) -> list[Site]:
        """Where a capacity limit refused a launch since reset(), in order: one entry per
        refused RunInstances call, and per CreateFleet override that found no capacity
        (also one that started some of its instances, then ran out)."""
        with STATE_LOCK:
            return list(self._knobs.scarcity.refused_sites)

    def set_service_quota(
        self,
        code: str,
        value: float,
        *,
        region: str | None = None,
        applied: bool = True,
        name: str = "",
    ) -> None:
        """The value of EC2 Service Quota ``code`` (L-...) in ``region`` (default: the
        server's): served by GetServiceQuota when ``applied``, else only by
        GetAWSDefaultServiceQuota, as for an account that never changed it."""
        quota = Quota(float(value), applied, name)
        with STATE_LOCK:
            self._knobs.facts.quotas[(region or self._region, code)] = quota

    def set_spot_placement_score(self, instance_type: str, zone: str, score: int) -> None:
        """GetSpotPlacementScores' score (1 to 10) for ``instance_type`` in ``zone``."""
        if not 1 <= score <= 10:
            raise ValueError("a spot placement score is 1 to 10")
        with STATE_LOCK:
            self._knobs.facts.scores[(instance_type, zone)] = score

    def set_lambda_concurrency(self, limit: int, *, region: str | None = None) -> None:
        """The account's Lambda *Concurrent executions* in ``region`` (default: the
        server's), as GetAccountSettings reports it and reservations are held to."""
        with STATE_LOCK:
            self._knobs.facts.lambda_concurrency[region or self._region] = limit

    def create_capacity_reservation(
        self,
        instance_type: str,
        availability_zone: str,
        count: int,
        *,
        match: str = "targeted",
        tags: dict[str, str] | None = None,
        start: datetime | None = None,
        end: datetime | None = None,
    ) -> str:
        """An On-Demand Capacity Reservation of ``count`` machines (``match`` "targeted" or
        "open"), active from ``start`` (default: now) until ``end`` (default: none);
        its id. capacity_reservations.py says how launches use it."""
        return self._reserve(
            instance_type, availability_zone, count, match, False, tags, start, end
        )

    def create_capacity_block(
        self,
        instance_type: str,
        availability_zone: str,
        count: int,
        start: datetime,
        end: datetime,
        *,
        tags: dict[str, str] | None = None,
    ) -> str:
        """A Capacity Block for ML of ``count`` machines from ``start`` to ``end``; its id."""
        return self._reserve(
            instance_type, availability_zone, count, "targeted", True, tags, start, end
        )

    def set_capacity_reservation_end(self, reservation_id: str, end: datetime) -> None:
        """Move a reservation's end, as the passing of time would bring it near: tests
        move the cloud's state, not the clock (a block within 30 minutes of its end loses
        its instances at the next describe)."""
        with STATE_LOCK:
            self._knobs.reservations[reservation_id].end = end

    def _reserve(
        self,
        instance_type: str,
        zone: str,
        count: int,
        match: str,
        block: bool,
        tags: dict[str, str] | None,
        start: datetime | None,
        end: datetime | None,
    ) -> str:
        if count < 1 or match not in ("targeted", "open"):
            raise ValueError(
                f"a reservation holds 1 or more machines, targeted or open: {count}, {match}"
            )
        if start and end and end <= start:
            raise ValueError(f"the reservation ends ({end}) before it starts ({start})")
        reservation = CapacityReservation(
            id=new_id(),
            instance_type=instance_type,
            zone=zone,
            total=count,
            match=match,
            block=block,
            created=datetime.now(UTC),
            start=start,
            end=end,
            tags=dict(tags or {}),
        )
        with STATE_LOCK:
            self._knobs.reservations[reservation.id] = reservation
        return reservation.id

    def withhold_instance_type(self, instance_type: str, zone: str) -> None:
        """DescribeInstanceTypeOfferings no longer lists ``instance_type`` in ``zone``."""
        with STATE_LOCK:
            self._knobs.facts.withheld.add((instance_type, zone))

    def set_instance_state(self, instance_id: str, state: str) -> None:
        """Put an instance into an EC2 state (say "pending": moto starts every instance
        "running" at once, so an instance stuck booting needs this)."""
        codes = {"pending": 0, "running": 16, "stopping": 64, "stopped": 80}
        instance = self.ec2_backend().get_instance(instance_id)
        instance._state = InstanceState(state, codes[state])

    def fulfil_spot_request(self, request_id: str) -> str:
        """Fulfil an open spot request now, as EC2 eventually would; returns the instance id."""
        request = self._spot_request(request_id)
        if request.instance is not None:
            raise ValueError(f"{request_id} already has instance {request.instance.id}")
        with STATE_LOCK:
            request.instance = moto_launch_instance(request)
            request.instance.spot_instance_request_id = request.id
            set_status(request, "active", FULFILLED, "Your Spot request is fulfilled.", utcnow())
        return str(request.instance.id)

    def set_spot_request_status(
        self,
        request_id: str,
        state: str,
        code: str,
        updated_at: datetime,
        message: str = "",
    ) -> None:
        """Put a spot request into any state and status code, updated at ``updated_at``
        (timezone-aware), e.g. ``("open", "capacity-not-available", an hour ago)``."""
        request = self._spot_request(request_id)
        with STATE_LOCK:
            set_status(request, state, code, message, naive_utc(updated_at))

    def set_spot_request_create_time(self, request_id: str, created_at: datetime) -> None:
        """Age a spot request: its CreateTime becomes ``created_at`` (timezone-aware)."""
        self._spot_request(request_id)._dynagent_create_time = naive_utc(created_at)

    def set_launch_time(self, instance_id: str, when: datetime) -> None:
        """Age an instance: moto stamps the real launch time, a reconcile decides with an
        injected clock, so tests move the instance instead (``when`` timezone-aware)."""
        self.ec2_backend().get_instance(instance_id).launch_time = naive_utc(when)

    def _spot_request(self, request_id: str) -> Any:
        requests = self.ec2_backend().spot_instance_requests
        if request_id not in requests:
            raise KeyError(f"no spot request {request_id} in the local AWS")
        return requests[request_id]

    # -- calls served -----------------------------------------------------------------

    def calls(self, service: str | None = None) -> list[str]:
        """Action names of the requests served since the last clear_calls(), in order;
        only ``service``'s ('ec2', 'sqs') if given."""
        return [c.action for c in self._calls.snapshot() if service in (None, c.service)]

    def api_calls(self) -> list[ApiCall]:
        """The same, as (service, action) pairs."""
        return self._calls.snapshot()

    def clear_calls(self) -> None:
        self._calls.clear()
