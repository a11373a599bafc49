"""A local AWS for the demo and the tests: moto's server on loopback, made faithful where we lean.

The demo and the AWS tests drive dynagent's real boto3 code paths over HTTP against
``LocalAws``: moto's server in a background thread, listening on 127.0.0.1 only, on a
port the OS picks. moto is a good EC2/SQS stand-in, but a few of its EC2 behaviours
differ from EC2 in ways our launch/reconcile logic depends on. This module fixes those in
the test double (never in dynagent's code) by wrapping single moto methods while a server
runs, and only for that server's own moto account:

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
"""

from __future__ import annotations

import copy
import io
import itertools
import json
import os
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http import HTTPStatus
from typing import Any, Final, NamedTuple, Self, cast
from urllib.parse import parse_qs

import boto3
from moto.core.base_backend import BackendDict, backend_lock
from moto.core.responses import ActionResult
from moto.core.utils import utcnow
from moto.ec2.exceptions import EC2ClientError, InvalidInstanceIdError
from moto.ec2.models import ec2_backends
from moto.ec2.models.instances import InstanceBackend, InstanceState
from moto.ec2.models.spot_requests import SpotInstanceRequest, SpotRequestBackend
from moto.ec2.responses.fleets import Fleets
from moto.ec2.responses.instances import InstanceResponse
from moto.ec2.responses.launch_templates import LaunchTemplates
from moto.ec2.responses.spot_instances import SpotInstances
from moto.moto_server.werkzeug_app import (
    DomainDispatcherApplication,
    MotoRequestHandler,
    create_backend_app,
)
from moto.sqs.exceptions import InvalidParameterValue
from moto.sqs.models import SQSBackend

from dynagent.testing.aws.account import AccountFacts, Quota
from dynagent.testing.aws.account import patches as account_patches
from dynagent.testing.aws.fleet import (
    ON_DEMAND,
    SPOT,
    Scarcity,
    ServerError,
    Site,
    check_fleet_request,
    check_purchase,
    create_instant_fleet,
    launch_error,
    zone_of,
)
from dynagent.testing.aws.iam import patches as iam_patches
from dynagent.testing.aws.iam import refuse_pass_role
from dynagent.testing.aws.stack import patches as stack_patches
from dynagent.testing.loopback import LOOPBACK, CallLog, LoopbackServer, QuietHandler, Service

DEFAULT_REGION: Final = "us-west-2"
DUMMY_ACCESS_KEY_ID: Final = "testing"
DUMMY_SECRET_ACCESS_KEY: Final = "testing"

# EC2: "A client token is a unique, case-sensitive string of up to 64 ASCII characters."
CLIENT_TOKEN_MAX_CHARS: Final = 64
# CreateLaunchTemplate(Version)'s own documented limit: "Maximum 128 ASCII characters."
LAUNCH_TEMPLATE_TOKEN_MAX_CHARS: Final = 128

# Each LocalAws gets its own moto account; these never collide with moto's default one.
_ACCOUNT_IDS = itertools.count(100_000_000_001)


# --------------------------------------------------------------------------------------
# Calls served, counted at the wire
# --------------------------------------------------------------------------------------


class ApiCall(NamedTuple):
    """One request the server handled: the signing service ('ec2', 'sqs') and action."""

    service: str
    action: str


def _signing_service(authorization: str) -> str:
    """The service of a SigV4 ``Credential=KEY/DATE/REGION/SERVICE/aws4_request`` scope."""
    _, _, credential = authorization.partition("Credential=")
    scope = credential.split(",", 1)[0].split("/")
    return scope[3] if len(scope) >= 5 else "unknown"


def _buffered_body(environ: dict[str, Any]) -> bytes:
    """Read the body once and put a fresh stream back, so moto can still read it."""
    length = int(environ.get("CONTENT_LENGTH") or 0)
    body: bytes = environ["wsgi.input"].read(length) if length > 0 else b""
    environ["wsgi.input"] = io.BytesIO(body)
    return body


def _action_of(environ: dict[str, Any]) -> str | None:
    """JSON protocol (SQS today) names the action in X-Amz-Target; query (EC2) in ``Action``."""
    target = environ.get("HTTP_X_AMZ_TARGET")
    if target:
        return str(target).rsplit(".", 1)[-1]
    query = parse_qs(str(environ.get("QUERY_STRING", "")))
    if "Action" in query:
        return query["Action"][0]
    if environ.get("CONTENT_TYPE", "").startswith("application/x-www-form-urlencoded"):
        form = parse_qs(_buffered_body(environ).decode("utf-8", "replace"))
        if "Action" in form:
            return form["Action"][0]
    return None


WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


class _AccountStampingRecorder:
    """WSGI middleware: pins every request to this server's moto account and records it;
    and serves the wire faults a test asked for (``LocalAws.inject_errors``,
    ``LocalAws.answer_late``)."""

    def __init__(
        self, app: WsgiApp, account_id: str, log: CallLog[ApiCall], knobs: _Knobs | None = None
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
        action = _action_of(environ)
        if action is None:
            return self._app(environ, start_response)
        call = ApiCall(_signing_service(environ.get("HTTP_AUTHORIZATION", "")), action)
        self._log.record(call)
        knobs = self._knobs
        fault = knobs.wire_fault(call) if knobs is not None else None
        if knobs is None or fault is None:
            return self._app(environ, start_response)
        if fault.code:
            knobs.count("error")
            return _ec2_error(start_response, fault.status, fault.code)
        # Late: the call is carried out, then its answer waits, as when EC2 acts on a
        # request whose response the network loses (the client times out and retries).
        body = list(self._app(environ, start_response))
        knobs.count("late")
        time.sleep(fault.delay)
        return body


def _ec2_error(start_response: Callable[..., Any], status: int, code: str) -> list[bytes]:
    """An EC2 (query protocol) error response, as EC2 sends throttling and server errors."""
    body = (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        f"<Response><Errors><Error><Code>{code}</Code><Message>{code} (injected by the "
        "local AWS)</Message></Error></Errors><RequestID>injected</RequestID></Response>"
    ).encode()
    reason = HTTPStatus(status).phrase
    start_response(
        f"{status} {reason}",
        [("Content-Type", "text/xml"), ("Content-Length", str(len(body)))],
    )
    return [body]


class _QuietHandler(MotoRequestHandler, QuietHandler):
    """moto's request handler without werkzeug's access log line per request on stderr:
    it would drown the demo's output, and ``LocalAws.calls()`` records the requests."""


# --------------------------------------------------------------------------------------
# Knobs and ownership: which moto accounts the fixes apply to
# --------------------------------------------------------------------------------------


@dataclass
class _WireFault:
    """Every ``every``-th call of ``service`` (and ``action``, if set) is answered with an
    error, or answered ``delay`` seconds late; ``seen`` counts the matching calls."""

    service: str
    action: str | None
    every: int
    code: str = ""
    status: int = 0
    delay: float = 0.0
    seen: int = 0

    def strikes(self, call: ApiCall) -> bool:
        if call.service != self.service or self.action not in (None, call.action):
            return False
        self.seen += 1
        return self.seen % self.every == 0


@dataclass
class _Knobs:
    """Per-account settings the fixes read; tests turn them, reset() restores them."""

    fulfil_spot_requests: bool = True
    hide_new_instances_for: int = 0  # DescribeInstances calls a new instance is missing from
    scarcity: Scarcity = field(default_factory=Scarcity)  # capacity, injected errors, prices
    wire_faults: list[_WireFault] = field(default_factory=list)  # errors and late answers
    # Faults served so far, by kind ("error", "late", "hidden"); see LocalAws.faults_served.
    served: dict[str, int] = field(default_factory=dict)
    # Service quotas, spot placement scores, types withheld from zones (account.py).
    facts: AccountFacts = field(default_factory=AccountFacts)

    def count(self, kind: str, n: int = 1) -> None:
        with _STATE_LOCK:
            self.served[kind] = self.served.get(kind, 0) + n

    def wire_fault(self, call: ApiCall) -> _WireFault | None:
        with _STATE_LOCK:
            for fault in self.wire_faults:
                if fault.strikes(call):
                    return fault
        return None


_OWNED: dict[str, _Knobs] = {}  # account id -> knobs, for every running LocalAws
_OWNED_LOCK = threading.Lock()
# Serialises the fixes' read-modify-write of fake-cloud state across server threads
# (above all the client-token check-then-launch, which must not launch twice).
_STATE_LOCK = threading.RLock()


def _knobs_for(account_id: str) -> _Knobs | None:
    return _OWNED.get(account_id)


def _facts_for(account_id: str) -> AccountFacts | None:
    knobs = _OWNED.get(account_id)
    return None if knobs is None else knobs.facts


def _owned(account_id: str) -> bool:
    return account_id in _OWNED


def _naive_utc(when: datetime) -> datetime:
    """moto keeps naive UTC datetimes; accept only aware ones so a local time never slips in."""
    if when.tzinfo is None:
        raise ValueError(f"use a timezone-aware datetime, got {when!r}")
    return when.astimezone(UTC).replace(tzinfo=None)


# --------------------------------------------------------------------------------------
# Fix: ClientToken idempotency of RunInstances and RequestSpotInstances
# --------------------------------------------------------------------------------------


class _IdempotentParameterMismatch(EC2ClientError):
    def __init__(self) -> None:
        super().__init__(
            "IdempotentParameterMismatch",
            "Arguments on this idempotent request are inconsistent with arguments used in "
            "previous request(s).",
        )


@dataclass(frozen=True)
class _TokenUse:
    """What a client token launched: its request's fingerprint and the ids to replay."""

    fingerprint: str
    ids: tuple[str, ...]


def _token_ledger(backend: Any) -> dict[tuple[str, str], _TokenUse]:
    """Tokens live on moto's per-account, per-region backend object: reset() drops them with
    everything else, and a token reused in another region launches anew, as in EC2."""
    ledger: dict[tuple[str, str], _TokenUse] | None = getattr(
        backend, "_dynagent_client_tokens", None
    )
    if ledger is None:
        ledger = {}
        backend._dynagent_client_tokens = ledger
    return ledger


def _fingerprint(params: Mapping[str, Any]) -> str:
    """Every request parameter but the token itself.

    EC2 documents that changing *another request parameter* under the same token fails,
    without listing which parameters count. Judging only the ones that obviously matter
    (image, type, counts, tags, user data) would let through retries that EC2 may refuse;
    judging all of them is the strict reading, so code that replays cleanly here replays
    cleanly on EC2. The price is that a retry must rebuild its request exactly: a value
    computed from the clock at call time (a spot request's ValidUntil, say) makes a retry a
    mismatch here, as it may in EC2. DryRun never reaches here (see _idempotent)."""
    relevant = {name: value for name, value in params.items() if name != "ClientToken"}
    return json.dumps(relevant, sort_keys=True, default=str)


def _check_token(token: str, max_chars: int) -> None:
    # EC2's limit. The error code for breaking it is not documented; InvalidParameterValue
    # is EC2's generic 400, and what matters is that the double refuses what EC2 refuses.
    if len(token) > max_chars or not token.isascii():
        raise EC2ClientError(
            "InvalidParameterValue",
            f"Value ({token}) for parameter clientToken is invalid: "
            f"up to {max_chars} ASCII characters.",
        )


def _idempotent(
    response: Any,
    action: str,
    launch: Callable[[], ActionResult],
    ids_of: Callable[[Any], tuple[str, ...]],
    replay: Callable[[Any, tuple[str, ...]], ActionResult],  # (response, ids)
    max_token_chars: int = CLIENT_TOKEN_MAX_CHARS,
) -> ActionResult:
    """Run ``launch`` once per client token; answer a retry with what the first call made.

    Why this exists: moto ignores ``ClientToken``, so every retry launches again, while EC2
    makes RunInstances and RequestSpotInstances idempotent by it (see "Ensuring idempotency
    in Amazon EC2 API requests"): the same token with the same parameters returns the
    original reservation or requests, with current state, and launches nothing; the same
    token with other parameters fails with ``IdempotentParameterMismatch`` (HTTP 400).
    Tokens are up to 64 ASCII characters and stay valid for at least 24 hours after the
    instance terminates; here they last until reset(). dynagent's launches are idempotent
    *because* of this (a re-delivered snapshot retries with the same token), so a double
    that ignored tokens would hide double launches instead of proving there are none.

    A request without a token is never deduplicated (moto would default it to "ABCDE").
    boto3 fills a random token into RunInstances when the caller gives none, as the EC2
    model marks it an idempotency token; RequestSpotInstances gets none unless given.
    """
    token = response._get_param("ClientToken")
    if not token or response._get_param("DryRun"):
        return launch()
    _check_token(token, max_token_chars)
    fingerprint = _fingerprint(response.params)
    ledger = _token_ledger(response.ec2_backend)
    with _STATE_LOCK:
        earlier = ledger.get((action, token))
        if earlier is None:
            result = launch()
            ledger[(action, token)] = _TokenUse(fingerprint, ids_of(result.result))
            return result
    if earlier.fingerprint != fingerprint:
        raise _IdempotentParameterMismatch()
    return replay(response, earlier.ids)


def _idempotent_reply(
    response: Any,
    action: str,
    make: Callable[[], dict[str, Any]],
    max_token_chars: int = CLIENT_TOKEN_MAX_CHARS,
) -> ActionResult:
    """``_idempotent`` for actions whose whole first reply is what a retry gets back
    (CreateFleet, CreateLaunchTemplate, CreateLaunchTemplateVersion): the reply is kept
    on the backend, next to the token ledger, and replayed as it was."""
    replies = _stored_replies(response.ec2_backend)

    def ids_of(reply: Any) -> tuple[str, ...]:
        key = str(len(replies))
        replies[key] = copy.deepcopy(reply)
        return (key,)

    def replay(_: Any, ids: tuple[str, ...]) -> ActionResult:
        return ActionResult(copy.deepcopy(replies[ids[0]]))

    return _idempotent(
        response, action, lambda: ActionResult(make()), ids_of, replay, max_token_chars
    )


def _stored_replies(backend: Any) -> dict[str, Any]:
    replies: dict[str, Any] | None = getattr(backend, "_dynagent_replies", None)
    if replies is None:
        replies = {}
        backend._dynagent_replies = replies
    return replies


def _reservation_ids(reservation: Any) -> tuple[str, ...]:
    return (str(reservation.id),)


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


def _spot_request_ids(result: Any) -> tuple[str, ...]:
    return tuple(str(request.id) for request in result["SpotInstanceRequests"])


def _replay_spot_requests(response: Any, ids: tuple[str, ...]) -> ActionResult:
    requests = [response.ec2_backend.spot_instance_requests[request_id] for request_id in ids]
    return ActionResult({"SpotInstanceRequests": requests})


def _refuse_unknown_image(backend: Any, image_id: str | None) -> None:
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
    with _STATE_LOCK:
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


def _set_status(request: Any, state: str, code: str, message: str, when: datetime) -> None:
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
    _set_status(request, "cancelled", code, message, now)


def _close_requests_of(backend: Any, instance_ids: set[str], now: datetime) -> None:
    """Terminating a spot instance closes its one-time request (a cancelled one stays
    cancelled), both with code instance-terminated-by-user. Persistent requests would
    re-open and relaunch in EC2; that is not modelled (dynagent asks for one-time)."""
    for request in backend.spot_instance_requests.values():
        if request.instance is None or request.instance.id not in instance_ids:
            continue
        message = "The Spot Instance was terminated by the user."
        if request.state == "active":
            _set_status(request, "closed", INSTANCE_TERMINATED_BY_USER, message, now)
        elif request._status_code == REQUEST_CANCELED_AND_INSTANCE_RUNNING:
            _set_status(request, "cancelled", INSTANCE_TERMINATED_BY_USER, message, now)


# --------------------------------------------------------------------------------------
# The wrappers installed over moto while a LocalAws runs
# --------------------------------------------------------------------------------------

# moto's originals, taken once at import: the wrappers always call through to these.
_moto_run_instances = InstanceResponse.run_instances
_moto_describe_instances = InstanceResponse.describe_instances
_moto_request_spot_instances = SpotInstances.request_spot_instances
_moto_describe_spot_instance_requests = SpotInstances.describe_spot_instance_requests
_moto_cancel_spot_instance_requests = SpotRequestBackend.cancel_spot_instance_requests
_moto_terminate_instances = InstanceBackend.terminate_instances
_moto_spot_request_init = SpotInstanceRequest.__init__
_moto_launch_instance = SpotInstanceRequest.launch_instance
_moto_spot_status: Any = SpotInstanceRequest.__dict__["status"]
_moto_spot_create_time: Any = SpotInstanceRequest.__dict__["create_time"]
_moto_sqs_send_message = SQSBackend.send_message
_moto_spot_get_filter_value = SpotInstanceRequest.get_filter_value
_moto_create_fleet = Fleets.create_fleet
_moto_describe_spot_price_history = SpotInstances.describe_spot_price_history
_moto_create_launch_template = LaunchTemplates.create_launch_template
_moto_create_launch_template_version = LaunchTemplates.create_launch_template_version


def _as_server_error(response: Any, error: ServerError) -> Any:
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


def _dry_run(response: Any, specification: str, run: Callable[[], Any]) -> Any:
    """A launch with DryRun: EC2's checks of the image and of the caller's iam:PassRole
    (iam.py), then moto's DryRunOperation; no capacity or injected failure is used."""
    _refuse_unknown_image(response.ec2_backend, response._get_param(f"{specification}ImageId"))
    refuse_pass_role(
        response,
        response._get_param(f"{specification}IamInstanceProfile.Arn"),
        response._get_param(f"{specification}IamInstanceProfile.Name"),
    )
    return run()


def _run_instances(self: Any) -> Any:
    knobs = _knobs_for(self.current_account)
    if knobs is None:
        return _moto_run_instances(self)
    if self._get_param("DryRun"):
        return _dry_run(self, "", lambda: _moto_run_instances(self))
    scarcity = knobs.scarcity

    def launch() -> ActionResult:
        _refuse_unknown_image(self.ec2_backend, self._get_param("ImageId"))
        site = _run_site(self)
        with _STATE_LOCK:
            code = scarcity.take_failure(site)
            if code is not None:
                raise launch_error(code)
            # EC2 launches MaxCount when it has the capacity, as many as it has when that
            # is at least MinCount, and none otherwise; moto always launches MinCount.
            min_count = int(self._get_param("MinCount") or 1)
            count = int(self._get_param("MaxCount") or min_count)
            available = scarcity.available(site)
            if available is not None and available < min_count:
                zones = [zone.name for zone in self.ec2_backend.describe_availability_zones()]
                raise scarcity.insufficient_capacity(site, zones)
            self.params["MinCount"] = count if available is None else min(count, available)
            result = _moto_run_instances(self)
            scarcity.consume(site, len(cast(Any, result.result).instances))
        _hide_new(self.ec2_backend, result.result, knobs.hide_new_instances_for)
        return result

    try:
        return _idempotent(self, "RunInstances", launch, _reservation_ids, _replay_reservation)
    except ServerError as error:
        return _as_server_error(self, error)


def _describe_instances(self: Any) -> ActionResult:
    if _knobs_for(self.current_account) is None:
        return _moto_describe_instances(self)
    hidden = _hidden_from_this_describe(self.ec2_backend)
    if hidden:
        cast(_Knobs, _knobs_for(self.current_account)).count("hidden")
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


def _spot_site(backend: Any, instance_type: str, subnet_id: str | None, zone: str | None) -> Site:
    return Site(instance_type, zone_of(backend, subnet_id, zone), SPOT)


def _request_spot_instances(self: Any) -> Any:
    knobs = _knobs_for(self.current_account)
    if knobs is None:
        return _moto_request_spot_instances(self)
    if self._get_param("DryRun"):
        return _dry_run(self, "LaunchSpecification.", lambda: _moto_request_spot_instances(self))

    def launch() -> ActionResult:
        image_id = self._get_param("LaunchSpecification.ImageId")
        _refuse_unknown_image(self.ec2_backend, image_id)
        site = _spot_site(
            self.ec2_backend,
            self._get_param("LaunchSpecification.InstanceType") or "m1.small",
            self._get_param("LaunchSpecification.SubnetId"),
            self._get_param("LaunchSpecification.Placement.AvailabilityZone"),
        )
        with _STATE_LOCK:
            code = knobs.scarcity.take_failure(site)
        if code is not None:
            raise launch_error(code)
        return _moto_request_spot_instances(self)

    try:
        return _idempotent(
            self, "RequestSpotInstances", launch, _spot_request_ids, _replay_spot_requests
        )
    except ServerError as error:
        return _as_server_error(self, error)


def _describe_spot_instance_requests(self: Any) -> ActionResult:
    """moto ignores MaxResults and NextToken here and answers in one page; EC2 pages."""
    result = _moto_describe_spot_instance_requests(self)
    max_results = self._get_param("MaxResults")
    if _knobs_for(self.current_account) is None or max_results is None:
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


def _cancel_spot_instance_requests(self: Any, request_ids: list[str]) -> list[Any]:
    """moto pops cancelled requests, so they vanish; EC2 keeps them, state ``cancelled``."""
    if _knobs_for(self.account_id) is None:
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
    with _STATE_LOCK:
        for request in requests:
            _cancel(request, now)
    return requests


def _terminate_instances(self: Any, instance_ids: list[str]) -> list[Any]:
    terminated = _moto_terminate_instances(self, instance_ids)
    if _knobs_for(self.account_id) is not None:
        with _STATE_LOCK:
            _close_requests_of(self, {instance.id for instance, _ in terminated}, utcnow())
    return terminated


def _spot_request_init(self: Any, ec2_backend: Any, *args: Any, **kwargs: Any) -> None:
    _moto_spot_request_init(self, ec2_backend, *args, **kwargs)
    if _knobs_for(ec2_backend.account_id) is None:
        return
    now = utcnow()
    self._dynagent_create_time = now
    self._dynagent_update_time = now
    if getattr(self, "_dynagent_no_capacity", False):  # a capacity limit ran out
        message = "There is not enough capacity available for the instances that you requested."
        _set_status(self, "open", CAPACITY_NOT_AVAILABLE, message, now)
    elif self.instance is None:  # fulfilment is switched off: EC2's "still waiting"
        message = "Your Spot request is pending fulfillment."
        _set_status(self, "open", PENDING_FULFILLMENT, message, now)
    else:
        # EC2 names the request on its instance; moto leaves SpotInstanceRequestId empty.
        self.instance.spot_instance_request_id = self.id


def _spot_launch_instance(self: Any) -> Any:
    knobs = _knobs_for(self.ec2_backend.account_id)
    if knobs is None:
        return _moto_launch_instance(self)
    if not knobs.fulfil_spot_requests:
        return None
    spec = self.launch_specification
    site = _spot_site(self.ec2_backend, spec.instance_type, spec.subnet_id, spec.availability_zone)
    with _STATE_LOCK:
        if knobs.scarcity.available(site) == 0:
            self._dynagent_no_capacity = True
            return None
        instance = _moto_launch_instance(self)
        knobs.scarcity.consume(site, 1)
    return instance


def _spot_status(self: Any) -> dict[str, Any]:
    # moto reports every update as 2015-01-01; real times let a clock-driven reconcile
    # tell a fresh request from a stale one.
    status = dict(_moto_spot_status.fget(self))
    update_time = getattr(self, "_dynagent_update_time", None)
    if update_time is not None:
        status["UpdateTime"] = update_time
    return status


def _spot_create_time(self: Any) -> Any:
    created = getattr(self, "_dynagent_create_time", None)
    return created if created is not None else _moto_spot_create_time.fget(self)


def _spot_instance_id(self: Any) -> str | None:
    # An open request has no instance; moto's property would fail on None.
    return None if self.instance is None else str(self.instance.id)


def _spot_get_filter_value(self: Any, filter_name: str, method_name: str | None = None) -> Any:
    if filter_name == "status-code":  # an EC2 filter moto does not implement
        return self._status_code
    if filter_name == "instance-id":  # None matches nothing, as for EC2's open requests
        return _spot_instance_id(self)
    return _moto_spot_get_filter_value(self, filter_name, method_name)


def _create_fleet(self: Any) -> Any:
    """Instant fleets are served by aws_fleet.create_instant_fleet, once per ClientToken;
    other fleet types go to moto, after EC2's own checks of the request."""
    knobs = _knobs_for(self.current_account)
    if knobs is None:
        return _moto_create_fleet(self)
    check_fleet_request(self)
    if self._get_param("Type") != "instant":
        return _moto_create_fleet(self)

    def launch() -> dict[str, Any]:
        with _STATE_LOCK:
            return create_instant_fleet(self, knobs.scarcity)

    return _idempotent_reply(self, "CreateFleet", launch)


def _describe_spot_price_history(self: Any) -> ActionResult:
    """Prices come only from LocalAws.set_spot_price: moto invents 0.00001 for every type
    offered in a zone (for any filter it does not know, or StartTime, it ignores them)."""
    knobs = _knobs_for(self.current_account)
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
    return _naive_utc(when if when.tzinfo else when.replace(tzinfo=UTC))


def _create_launch_template(self: Any) -> Any:
    """Idempotent by ClientToken, as in EC2 (moto answers a retry AlreadyExists, and a
    token reused for another name creates that template); and the template's own tags
    (resource type launch-template) stay off its version's LaunchTemplateData, where
    moto copies them and EC2 does not."""
    if _knobs_for(self.current_account) is None:
        return _moto_create_launch_template(self)

    def create() -> dict[str, Any]:
        result = cast(dict[str, Any], _moto_create_launch_template(self).result)
        template = self.ec2_backend.get_launch_template(
            result["LaunchTemplate"]["LaunchTemplateId"]
        )
        data = template.default_version().data
        specs = [
            spec
            for spec in data.get("TagSpecifications", [])
            if spec.get("ResourceType") != "launch-template"
        ]
        if specs:
            data["TagSpecifications"] = specs
        else:
            data.pop("TagSpecifications", None)
        return result

    return _idempotent_reply(self, "CreateLaunchTemplate", create, LAUNCH_TEMPLATE_TOKEN_MAX_CHARS)


def _create_launch_template_version(self: Any) -> Any:
    """Idempotent by ClientToken (moto adds a version per retry), and ``SourceVersion``
    honoured: the new version inherits every parameter of the source version it does not
    set itself (moto ignores SourceVersion and keeps only the parameters given)."""
    if _knobs_for(self.current_account) is None:
        return _moto_create_launch_template_version(self)

    def create() -> dict[str, Any]:
        backend = self.ec2_backend
        source_number = self._get_param("SourceVersion")
        source: dict[str, Any] = {}
        if source_number:
            name, template_id = (
                self._get_param("LaunchTemplateName"),
                self._get_param("LaunchTemplateId"),
            )
            template = (
                backend.get_launch_template(template_id)
                if template_id
                else backend.get_launch_template_by_name(name)
            )
            source = copy.deepcopy(template.get_version(source_number).data)
        result = cast(dict[str, Any], _moto_create_launch_template_version(self).result)
        created = result["LaunchTemplateVersion"]
        if source:
            template = backend.get_launch_template(created["LaunchTemplateId"])
            version = template.get_version(created["VersionNumber"])
            version.data = {**source, **version.data}
            created["LaunchTemplateData"] = version.data
        return result

    return _idempotent_reply(
        self, "CreateLaunchTemplateVersion", create, LAUNCH_TEMPLATE_TOKEN_MAX_CHARS
    )


# --------------------------------------------------------------------------------------
# Fix: SQS message size (body bytes and attributes, as SQS counts them)
# --------------------------------------------------------------------------------------


def sqs_message_size(body: str, attributes: Mapping[str, Mapping[str, Any]] | None) -> int:
    """A message's size as SQS limits it: the body and every attribute's name, type and
    value, in bytes."""
    size = len(body.encode())
    for name, value in (attributes or {}).items():
        data_type = str(value.get("DataType") or value.get("data_type") or "")
        text = value.get("StringValue") or value.get("string_value") or ""
        binary = value.get("BinaryValue") or value.get("binary_value") or b""
        size += len(name.encode()) + len(data_type.encode()) + len(str(text).encode())
        size += len(binary)
    return size


def _sqs_send_message(self: Any, queue_name: str, message_body: str, *args: Any, **kw: Any) -> Any:
    if _knobs_for(self.account_id) is not None:
        attributes = kw.get("message_attributes", args[0] if args else None)
        limit = int(self.get_queue(queue_name).maximum_message_size)
        size = sqs_message_size(message_body, attributes)
        if size > limit:
            raise InvalidParameterValue(
                "One or more parameters are invalid. Reason: Message must be shorter than "
                f"{limit} bytes."
            )
    return _moto_sqs_send_message(self, queue_name, message_body, *args, **kw)


# (owner, attribute, replacement): each replaces an attribute the owner defines itself,
# or adds one it lacks (Lambda's GetAccountSettings), removed again when the last stops.
# The method wrappers check that the account is a LocalAws's and otherwise call moto's
# original. The SpotInstanceRequest properties and filter need no check: they differ
# from moto only on state the fixes create, or where moto would fail (status-code filter).
_PATCHES: Final[tuple[tuple[type, str, object], ...]] = (
    (InstanceResponse, "run_instances", _run_instances),
    (InstanceResponse, "describe_instances", _describe_instances),
    (SpotInstances, "request_spot_instances", _request_spot_instances),
    (SpotInstances, "describe_spot_instance_requests", _describe_spot_instance_requests),
    (SpotRequestBackend, "cancel_spot_instance_requests", _cancel_spot_instance_requests),
    (InstanceBackend, "terminate_instances", _terminate_instances),
    (SpotInstanceRequest, "__init__", _spot_request_init),
    (SpotInstanceRequest, "launch_instance", _spot_launch_instance),
    (SpotInstanceRequest, "status", property(_spot_status)),
    (SpotInstanceRequest, "create_time", property(_spot_create_time)),
    (SpotInstanceRequest, "instance_id", property(_spot_instance_id)),
    (SpotInstanceRequest, "get_filter_value", _spot_get_filter_value),
    (Fleets, "create_fleet", _create_fleet),
    (SpotInstances, "describe_spot_price_history", _describe_spot_price_history),
    (LaunchTemplates, "create_launch_template", _create_launch_template),
    (LaunchTemplates, "create_launch_template_version", _create_launch_template_version),
    (SQSBackend, "send_message", _sqs_send_message),
    *iam_patches(_owned),
    *account_patches(_facts_for),
    *stack_patches(_owned),
)
_MISSING: Final = object()
_saved: list[tuple[type, str, object]] = []


def _install_patches() -> None:
    for owner, name, replacement in _PATCHES:
        _saved.append((owner, name, owner.__dict__.get(name, _MISSING)))
        setattr(owner, name, replacement)


def _remove_patches() -> None:
    while _saved:
        owner, name, original = _saved.pop()
        if original is _MISSING:
            delattr(owner, name)
        else:
            setattr(owner, name, original)


def _claim(account_id: str, knobs: _Knobs) -> None:
    """The patches are installed while any LocalAws runs and act only on owned accounts."""
    with _OWNED_LOCK:
        if not _OWNED:
            _install_patches()
        _OWNED[account_id] = knobs


def _release(account_id: str) -> None:
    with _OWNED_LOCK:
        _OWNED.pop(account_id, None)
        if not _OWNED:
            _remove_patches()


# --------------------------------------------------------------------------------------
# LocalAws
# --------------------------------------------------------------------------------------


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
        self._defaults = _Knobs(fulfil_spot_requests=fulfil_spot_requests)
        self._knobs = _Knobs(fulfil_spot_requests=fulfil_spot_requests)
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
        _claim(self._account_id, self._knobs)
        try:
            app = DomainDispatcherApplication(create_backend_app)
            wrapped = _AccountStampingRecorder(app, self._account_id, self._calls, self._knobs)
            self._server = LoopbackServer(wrapped, "local-aws", handler=_QuietHandler)
        except BaseException:
            _release(self._account_id)
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
            _release(self._account_id)

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
        with _STATE_LOCK:
            self._knobs.scarcity.clear()
            self._knobs.wire_faults.clear()
            self._knobs.served.clear()
            self._knobs.facts.clear()

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
        with _STATE_LOCK:
            self._knobs.scarcity.limit(instance_type, zone, purchase, count)

    def clear_capacity_limits(self) -> None:
        """Unlimited capacity again (also what reset() does)."""
        with _STATE_LOCK:
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
        with _STATE_LOCK:
            self._knobs.scarcity.fail_next(instance_type, code, zone, purchase)

    def set_spot_price(
        self, instance_type: str, zone: str, price: float, *, at: datetime | None = None
    ) -> None:
        """Record a spot price change for (type, zone) at ``at`` (timezone-aware; default
        now). DescribeSpotPriceHistory serves only these; CreateFleet's price-ordered spot
        strategies rank pools by the latest one per unit of weight."""
        when = _naive_utc(at) if at is not None else utcnow()
        with _STATE_LOCK:
            self._knobs.scarcity.spot_prices.setdefault((instance_type, zone), []).append(
                (when, float(price))
            )

    def set_on_demand_price(self, instance_type: str, price: float) -> None:
        """An on-demand price (per hour), for CreateFleet's on-demand ``lowest-price``
        order; EC2 has no API for it here (it is the Pricing API's), so no action serves it."""
        with _STATE_LOCK:
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
        with _STATE_LOCK:
            self._knobs.wire_faults.append(_WireFault(service, action, every, code, status))

    def answer_late(
        self, seconds: float, *, every: int, service: str = "ec2", action: str | None = None
    ) -> None:
        """Carry out every ``every``-th matching call, then hold its answer ``seconds``
        (real time): a client whose read timeout is shorter sees a timeout for a call that
        took effect, as when the network loses EC2's answer, and must retry safely."""
        if every < 1 or seconds < 0:
            raise ValueError("every must be >= 1 and seconds >= 0")
        with _STATE_LOCK:
            self._knobs.wire_faults.append(_WireFault(service, action, every, delay=seconds))

    def clear_wire_faults(self) -> None:
        with _STATE_LOCK:
            self._knobs.wire_faults.clear()

    def faults_served(self) -> dict[str, int]:
        """Faults this server actually served since reset(), by kind: "error" (injected
        error answers), "late" (late answers), "hidden" (DescribeInstances calls that hid a
        new instance), "refused" (fail_next_launch errors and capacity refusals). A test
        whose injection never struck proves nothing, so it can check these."""
        with _STATE_LOCK:
            served = dict(self._knobs.served)
            refused = self._knobs.scarcity.refusals_served
        if refused:
            served["refused"] = refused
        return served

    def capacity_refusals(self) -> list[Site]:
        """Where a capacity limit refused a launch since reset(), in order: one entry per
        refused RunInstances call, and per CreateFleet override that found no capacity
        (also one that started some of its instances, then ran out)."""
        with _STATE_LOCK:
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
        with _STATE_LOCK:
            self._knobs.facts.quotas[(region or self._region, code)] = quota

    def set_spot_placement_score(self, instance_type: str, zone: str, score: int) -> None:
        """GetSpotPlacementScores' score (1 to 10) for ``instance_type`` in ``zone``."""
        if not 1 <= score <= 10:
            raise ValueError("a spot placement score is 1 to 10")
        with _STATE_LOCK:
            self._knobs.facts.scores[(instance_type, zone)] = score

    def set_lambda_concurrency(self, limit: int, *, region: str | None = None) -> None:
        """The account's Lambda *Concurrent executions* in ``region`` (default: the
        server's), as GetAccountSettings reports it and reservations are held to."""
        with _STATE_LOCK:
            self._knobs.facts.lambda_concurrency[region or self._region] = limit

    def withhold_instance_type(self, instance_type: str, zone: str) -> None:
        """DescribeInstanceTypeOfferings no longer lists ``instance_type`` in ``zone``."""
        with _STATE_LOCK:
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
        with _STATE_LOCK:
            request.instance = _moto_launch_instance(request)
            request.instance.spot_instance_request_id = request.id
            _set_status(request, "active", FULFILLED, "Your Spot request is fulfilled.", utcnow())
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
        with _STATE_LOCK:
            _set_status(request, state, code, message, _naive_utc(updated_at))

    def set_spot_request_create_time(self, request_id: str, created_at: datetime) -> None:
        """Age a spot request: its CreateTime becomes ``created_at`` (timezone-aware)."""
        self._spot_request(request_id)._dynagent_create_time = _naive_utc(created_at)

    def set_launch_time(self, instance_id: str, when: datetime) -> None:
        """Age an instance: moto stamps the real launch time, a reconcile decides with an
        injected clock, so tests move the instance instead (``when`` timezone-aware)."""
        self.ec2_backend().get_instance(instance_id).launch_time = _naive_utc(when)

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
