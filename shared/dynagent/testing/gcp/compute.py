"""A local Compute Engine for the demo and the tests: the real client, a fake server on loopback.

``LocalCompute`` serves the slice of the Compute Engine API v1 that dynagent uses, over
HTTP on 127.0.0.1 (an OS-chosen port), so the real ``google-cloud-compute`` client with
its REST transport talks to it exactly as it talks to compute.googleapis.com: same
paths, same JSON, same error shapes, hence the same ``google.api_core.exceptions``.

What it serves, with the real API's semantics:

* ``instances.list`` with ``filter`` (``labels.KEY = "VALUE"``, unquoted values, ``!=``,
  ``FIELD:*``, ``AND`` and parenthesised terms, which mean AND), ``maxResults`` (default
  and maximum 500) and ``pageToken``/``nextPageToken``. A filter it does not model (OR,
  NOT, regular expressions, wildcards, ``<``...) is refused with HTTP 400, never ignored:
  a silently unfiltered list would make a test lie.
* ``instances.aggregatedList`` (``projects/P/aggregated/instances``): the same filters,
  ``maxResults`` and page tokens over every zone's instances at once (ordered by zone,
  then name), ``items`` keyed ``zones/Z``. As the API does, every page has every zone:
  one with no results on the page has, instead of ``instances``, a ``NO_RESULTS_ON_PAGE``
  warning (``There are no results for scope 'zones/Z' on this page.``, ``data`` scope).
  The zones are the fake's default zone, every zone a request or a capacity limit named
  since reset(), and every zone with instances (the API lists all of the project's).
  ``returnPartialSuccess`` is accepted (the fake has no unreachable zone), though the
  shipped discovery document and client 1.57 no longer list it; ``includeAllScopes=true``
  and ``serviceProjectNumber`` are refused as not modelled.
* Any ``REGION-x`` zone (``us-central1-a``, ``northamerica-northeast1-c``...); a region or
  a malformed name is 400 ``Invalid value for field 'zone': 'Z'. Unknown zone.``
  Instances come back with full ``zone`` and ``machineType`` URLs and
  ``scheduling.provisioningModel`` SPOT or STANDARD (a legacy ``preemptible`` VM keeps
  STANDARD with ``preemptible: true``).
* ``instances.get``, ``insert``, ``bulkInsert``, ``delete``, ``setLabels``, ``stop`` and
  ``start``; every mutation returns a zonal Operation, and ``zoneOperations.get``/``wait``
  poll it.
  ``requestId`` (a UUID, as the API demands) makes a retried mutation return the first
  operation and do nothing else. Names already taken are 409 ``alreadyExists``, missing
  instances 404 ``notFound``, a stale ``labelFingerprint`` 412 ``conditionNotMet``.
* Strictness: every request body is checked recursively against its schema in the
  compute.v1 discovery document that google-api-python-client ships (unknown fields,
  types, enums), and every query parameter against the method's. On top, the value
  rules that matter to a GPU autoscaler: RFC 1035 names, label syntax and count, zonal
  machine/accelerator type URLs, a boot disk, metadata sizes, and the scheduling rules
  the API enforces for Spot and GPU VMs. A typo in our request fails here, not in prod.
* Stop and start as the API shows them: ``stop`` makes a VM STOPPING, then TERMINATED
  (GCE's name for stopped) with ``lastStopTimestamp`` when its operation completes;
  ``start`` makes a TERMINATED VM PROVISIONING, then RUNNING with ``lastStartTimestamp``.
  The VM keeps its name, id, disks, labels and metadata. Stopping a TERMINATED VM, or
  starting a RUNNING (or PROVISIONING, STAGING) one, is an operation DONE at once that
  changes nothing. Simpler than the API: no STAGING on the way up, the ephemeral
  external IP is kept, and a start of a STOPPING or SUSPENDED VM is refused (400
  ``resourceNotReady``) rather than queued or sent to ``resume``.

Reservations: ``create_reservation()`` holds capacity for VMs of one shape in a zone;
``reservations.get``, ``list`` and ``aggregatedList`` show it, and inserts, bulkInserts
and starts consume it by the VM's ``reservationAffinity`` (a full named reservation fails
the operation with ``CONDITION_NOT_MET``). reservations.py says how, and where it is
simpler than Compute Engine.

Read-only resources a project offers besides VMs (images, machine and accelerator types,
region and project quotas, networks and subnetworks) are served from ``catalog``, which
tests fill: catalog.py says how, and where it is simpler than Compute Engine.

Knobs the API has no call for: make the next inserts' operations fail (QUOTA_EXCEEDED,
ZONE_RESOURCE_POOL_EXHAUSTED, ...; a failed insert leaves no instance), hold operations
RUNNING for a number of polls (with a failing insert: an insert that fails late), set an
instance's status or creation time, preempt a Spot VM (``preempt``: deleted or TERMINATED
by its termination action, as the API shows it; a TERMINATED one can be started again),
and refuse every Nth call with 429 or 503 (``fail_calls``). It records the calls it
serves, as (HTTP method, API method) pairs, the instances inserts created, and the
offerings capacity refused.

Capacity: ``limit_capacity(machine_type, zone, provisioning, count)`` lets at most
``count`` more VMs of that offering (None matches any zone or model; a legacy
preemptible VM counts as SPOT) be created or started. Past it an insert still returns an
Operation, which ends DONE with no instance left and, by ``kind``:

* ``stockout`` (default): ``ZONE_RESOURCE_POOL_EXHAUSTED``, ``httpErrorStatusCode`` 503,
  ``The zone 'projects/P/zones/Z' does not have enough resources available to fulfill
  the request.  Try a different zone, or try again later.``
* ``stockout_with_details``: ``ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS``, 503, ``... to
  fulfill the request.  '(resource type:compute)'.`` with ``errorDetails`` (help link,
  localizedMessage, errorInfo reason ``stockout`` with vmType and zone).
* ``quota``: ``QUOTA_EXCEEDED``, 403, ``Quota 'NVIDIA_A100_GPUS' exceeded.  Limit: 0.0 in
  region R.`` (the regional GPU quota the VM draws on, PREEMPTIBLE_... for Spot, or the
  ``quota`` given), with a ``quotaInfo`` error detail.

A bulkInsert creates as many as fit if that is at least its ``minCount`` (its operation
then succeeds, ``instancesBulkInsertOperationMetadata.perLocationStatus`` counting
created and failed VMs), else none, its errors being ``VM_MIN_COUNT_NOT_REACHED``
(``Requested minimum count of N VMs could not be created.``) then the capacity error;
its status code is the capacity error's. A start past the limit ends the same way, its
VM TERMINATED again. Capacity is counted per creation or start (deleting or stopping a
VM gives none back, where Compute Engine would reuse it) and only a request that
succeeds takes any.

How the real client behaves against it (google-cloud-compute 1.57, api-core 2.44):

* ``ClientOptions(api_endpoint="http://127.0.0.1:PORT")`` is enough for plain HTTP: the
  REST transport keeps a scheme given in the host and only adds ``https://`` otherwise.
* ``InstancesClient.insert()`` returns an ``ExtendedOperation`` whose ``result()`` polls
  ``zoneOperations.get`` (not ``wait``), but through a ZoneOperationsClient the transport
  builds with the credentials alone: it ignores ``client_options`` and would poll
  compute.googleapis.com. ``instances_client()`` hands the transport a correctly pointed
  one; code of ours that waits on operations must do the same or poll a
  ZoneOperationsClient of its own. An operation that is DONE in the first response is
  never polled, which hides the problem unless operations are held RUNNING.
* A DONE operation with an error makes ``result()`` raise the exception for its
  ``httpErrorStatusCode`` (503 ServiceUnavailable for a stockout, 403 Forbidden for a
  quota), whose ``errors`` are the operation's ``error.errors`` (``code``, ``message``,
  ``error_details``) and whose ``message`` is ``httpErrorMessage`` (``SERVICE
  UNAVAILABLE``). ``insert()`` itself does not raise.
* ``aggregated_list()``'s pager yields (scope, InstancesScopedList) pairs, page by page;
  within a page the proto map does not keep the server's order.

This module holds ``LocalCompute``, the server and its knobs; the double's parts are
beside it: ``http_api`` (routes, request parsing, the calls served), ``fake_compute``
(the instances and operations held, and the API methods on them), ``discovery`` (the
schema and query checks), ``value_rules`` (the rules beyond the schema), ``listing``
(filters and pages), ``instance_shapes`` (resources as the API returns them),
``operations``, ``capacity``, ``reservations`` and ``errors``.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from datetime import datetime
from typing import Any, Self

from dynagent.testing.gcp.capacity import (
    CAPACITY_KINDS,
    PROVISIONING_MODELS,
    CapacityLimit,
    Offering,
)
from dynagent.testing.gcp.catalog import Catalog
from dynagent.testing.gcp.discovery import discovery_document, schemas
from dynagent.testing.gcp.errors import CALL_FAULTS, ApiError, CallFault, JsonObject
from dynagent.testing.gcp.fake_compute import (
    DEFAULT_PROJECT,
    DEFAULT_ZONE,
    ComputeState,
    FakeCompute,
)
from dynagent.testing.gcp.http_api import ApiCall, ComputeApp
from dynagent.testing.gcp.instance_shapes import instance_path, is_spot, timestamp, utcnow
from dynagent.testing.gcp.operations import DEFAULT_FAILURE_STATUS, Failure, default_failure_message
from dynagent.testing.gcp.reservations import Reservation
from dynagent.testing.gcp.value_rules import check_name, region_of
from dynagent.testing.loopback import LOOPBACK, CallLog, LoopbackServer, Service

__all__ = [
    "DEFAULT_PROJECT",
    "DEFAULT_ZONE",
    "ApiCall",
    "LocalCompute",
    "Offering",
    "poll_operations_with",
    "region_of",
]


def poll_operations_with(instances_client: Any, zone_operations_client: Any) -> None:
    """Make the ExtendedOperations of ``instances_client`` poll through
    ``zone_operations_client``. The transport otherwise builds its own operations client
    from the credentials alone, ignoring ``client_options``, and polls
    compute.googleapis.com whatever endpoint the instances client uses."""
    services = getattr(instances_client.transport, "_extended_operations_services", None)
    if not isinstance(services, dict):
        raise RuntimeError(
            "google-cloud-compute changed how operations are polled: cannot point them at "
            "the local Compute"
        )
    services["zone_operations"] = zone_operations_client


class LocalCompute(Service):
    """The fake Compute Engine API on 127.0.0.1, an OS-chosen port.

    Use it as a context manager, or call start() and stop(). It sets nothing in
    ``os.environ``; ``instances_client()`` and ``zone_operations_client()`` build the real
    clients pointed at it. ``project`` and ``zone`` are the defaults of the helpers below;
    the API itself serves any project and zone. See the module docstring for what it
    models and how the client behaves against it.
    """

    def __init__(self, project: str = DEFAULT_PROJECT, zone: str = DEFAULT_ZONE) -> None:
        self._project = project
        self._zone = zone
        region_of(zone)  # a zone name, not a region
        self._compute = FakeCompute(zone)
        self._calls = CallLog[ApiCall]()
        self._server: LoopbackServer | None = None

    # -- life cycle -----------------------------------------------------------------

    def start(self) -> Self:
        if self._server is not None:
            raise RuntimeError("this LocalCompute is already running")
        discovery_document()  # fail here, not on the first request, if the document is missing
        self._server = LoopbackServer(ComputeApp(self._compute, self._calls), "local-compute")
        return self

    def stop(self) -> None:
        """Stop serving, close the listening socket, join the thread. Safe to repeat."""
        server, self._server = self._server, None
        if server is not None:
            server.close()

    @property
    def running(self) -> bool:
        return self._server is not None

    # -- where it is ----------------------------------------------------------------

    @property
    def project(self) -> str:
        return self._project

    @property
    def zone(self) -> str:
        return self._zone

    @property
    def address(self) -> tuple[str, int]:
        """The (host, port) the listening socket is bound to, as the OS reports it."""
        if self._server is None:
            raise RuntimeError("LocalCompute is not running")
        return self._server.address

    @property
    def port(self) -> int:
        return self.address[1]

    @property
    def endpoint(self) -> str:
        return f"http://{LOOPBACK}:{self.port}"

    # -- clients --------------------------------------------------------------------

    def client_options(self) -> Any:
        """``ClientOptions`` for any compute_v1 client: the REST transport keeps the
        ``http://`` of the endpoint (it adds ``https://`` only to a bare host)."""
        from google.api_core.client_options import ClientOptions

        return ClientOptions(api_endpoint=self.endpoint)

    def zone_operations_client(self) -> Any:
        """A real ``compute_v1.ZoneOperationsClient`` (REST, anonymous) on this server."""
        return self._client("ZoneOperationsClient")

    def reservations_client(self) -> Any:
        """A real ``compute_v1.ReservationsClient`` (REST, anonymous) on this server."""
        return self._client("ReservationsClient")

    def images_client(self) -> Any:
        """A real ``compute_v1.ImagesClient`` (REST, anonymous) on this server."""
        return self._client("ImagesClient")

    def instances_client(self) -> Any:
        """A real ``compute_v1.InstancesClient`` (REST, anonymous) on this server, whose
        operations' ``result()`` polls this server too (see poll_operations_with)."""
        client = self._client("InstancesClient")
        poll_operations_with(client, self.zone_operations_client())
        return client

    def _client(self, class_name: str) -> Any:
        from google.auth.credentials import AnonymousCredentials
        from google.cloud import compute_v1

        # No credentials to find or refresh: the fake checks none, and tests need no account.
        credentials = AnonymousCredentials()  # type: ignore[no-untyped-call]
        client_class = getattr(compute_v1, class_name)
        return client_class(
            transport="rest", client_options=self.client_options(), credentials=credentials
        )

    # -- state ----------------------------------------------------------------------

    def reset(self) -> None:
        """Forget every instance and operation, and turn the knobs back off."""
        with self._compute.lock:
            self._compute.state = ComputeState()

    @property
    def catalog(self) -> Catalog:
        """Images, machine and accelerator types, quotas and networks, to arrange
        (catalog.py); reset() empties it."""
        return self._compute.state.catalog

    def instance(self, name: str, zone: str | None = None) -> JsonObject:
        """The instance as ``instances.get`` returns it (a copy); KeyError if there is none."""
        with self._compute.lock:
            self._compute.expire_reservations()
            return copy.deepcopy(self._stored(name, zone))

    def boot_image(self, name: str) -> str:
        """The image VM ``name``'s boot disk was created from, as given at insert (a
        Disk's sourceImage; the disks API is not served)."""
        with self._compute.lock:
            return self._compute.state.boot_images[name]

    def instances(self) -> list[JsonObject]:
        """Every instance, in every project and zone, ordered by project, zone and name."""
        with self._compute.lock:
            self._compute.expire_reservations()
            found = self._compute.state.instances
            return [copy.deepcopy(found[key]) for key in sorted(found)]

    def operation(self, name: str) -> JsonObject:
        """An operation as it stands, without counting as a poll; KeyError if unknown."""
        with self._compute.lock:
            return copy.deepcopy(self._compute.state.operations[name].resource)

    def set_status(self, name: str, status: str, zone: str | None = None) -> None:
        """Move an instance to any status the API has, e.g. TERMINATED for a preempted
        Spot VM, or STAGING for one still starting."""
        allowed: list[str] = schemas()["Instance"]["properties"]["status"]["enum"]
        if status not in allowed:
            raise ValueError(f"{status!r} is not an instance status; one of {allowed}")
        with self._compute.lock:
            self._stored(name, zone)["status"] = status

    def preempt(self, name: str, zone: str | None = None) -> bool:
        """Compute Engine takes a Spot or preemptible VM's capacity back, as the API then
        shows it: with ``scheduling.instanceTerminationAction`` DELETE the VM is gone (True
        is returned); otherwise (STOP, the default) it is TERMINATED with a
        ``lastStopTimestamp`` of now, as a stopped VM is, and ``instances.start`` starts
        it again. A standard VM is never preempted: ValueError. Simpler than the API: the
        VM is TERMINATED at once, without STOPPING and a preemption operation."""
        with self._compute.lock:
            instance = self._stored(name, zone)
            scheduling = instance.get("scheduling") or {}
            if not is_spot(scheduling):
                raise ValueError(f"{name} is neither Spot nor preemptible: it is never preempted")
            if scheduling.get("instanceTerminationAction") == "DELETE":
                del self._compute.state.instances[(self._project, zone or self._zone, name)]
                return True
            instance["status"] = "TERMINATED"
            instance["lastStopTimestamp"] = timestamp(utcnow())
            return False

    def set_creation_time(self, name: str, when: datetime, zone: str | None = None) -> None:
        """Age an instance: reconciles decide with an injected clock, so tests move the
        instance's ``creationTimestamp`` instead (``when`` timezone-aware)."""
        if when.tzinfo is None:
            raise ValueError("when must be timezone-aware")
        with self._compute.lock:
            self._stored(name, zone)["creationTimestamp"] = timestamp(when)

    # -- reservations (reservations.py) ------------------------------------------------

    def create_reservation(
        self,
        name: str,
        zone: str,
        machine_type: str,
        count: int,
        *,
        accelerators: Iterable[tuple[str, int]] | None = None,
        specific: bool = True,
        project: str | None = None,
        share_with: Iterable[str] | None = None,
        start: datetime | None = None,
        end: datetime | None = None,
    ) -> JsonObject:
        """Hold capacity for ``count`` VMs of ``machine_type`` (a bare name, e.g.
        ``n1-standard-8``) with ``accelerators`` (e.g. ``[("nvidia-tesla-t4", 4)]``) in
        ``zone`` of ``project`` (default: this server's), READY at once; returns it as
        ``reservations.get`` does.

        ``specific=True`` is ``specificReservationRequired``: only VMs naming it
        (SPECIFIC_RESERVATION) consume it; False lets any matching VM with
        ANY_RESERVATION affinity (the default) consume it. ``share_with`` names other
        projects whose VMs may consume it. ``start``/``end`` (timezone-aware) give it a
        window, as a calendar-mode reservation has: before ``start`` it is CREATING and
        nothing consumes it; once ``end`` has passed, at the next call, it is deleted with
        the VMs consuming it. reservations.py says how VMs consume reservations."""
        owner = project or self._project
        try:
            check_name(name, "name")
        except ApiError:
            raise ValueError(f"{name!r} is not a valid reservation name") from None
        region_of(zone)
        if not machine_type or "/" in machine_type:
            raise ValueError(f"machine_type must be a bare name, not {machine_type!r}")
        if count < 1:
            raise ValueError("count must be >= 1")
        gpus = tuple((str(kind), int(cards)) for kind, cards in accelerators or ())
        if any("/" in kind or cards < 1 for kind, cards in gpus):
            raise ValueError(f"accelerators must be (bare type name, count >= 1): {gpus}")
        for when in (start, end):
            if when is not None and when.tzinfo is None:
                raise ValueError("start and end must be timezone-aware")
        if start is not None and end is not None and end <= start:
            raise ValueError("end must be after start")
        with self._compute.lock:
            book = self._compute.state.reservations
            if (owner, zone, name) in book.reservations:
                raise ValueError(f"reservation {name} already exists in {owner}/{zone}")
            held = Reservation(
                project=owner,
                zone=zone,
                name=name,
                id=self._compute.new_id(),
                created=utcnow(),
                machine_type=machine_type,
                accelerators=gpus,
                count=count,
                specific=specific,
                share_with=tuple(p for p in share_with or () if p != owner),
                start=start,
                end=end,
            )
            book.reservations[held.key] = held
            self._compute.state.zones.add(zone)
            return held.resource(0, utcnow())

    def reservation(
        self, name: str, zone: str | None = None, project: str | None = None
    ) -> JsonObject:
        """The reservation as ``reservations.get`` returns it, now; KeyError if none
        (never made, or ended)."""
        with self._compute.lock:
            self._compute.expire_reservations()
            try:
                return self._compute.state.reservations.get(
                    project or self._project,
                    zone or self._zone,
                    name,
                    self._compute.state.instances,
                    utcnow(),
                )
            except ApiError as missing:
                raise KeyError(missing.message) from None

    def _stored(self, name: str, zone: str | None) -> JsonObject:
        key = (self._project, zone or self._zone, name)
        instance = self._compute.state.instances.get(key)
        if instance is None:
            raise KeyError(f"no instance {instance_path(*key)} in the local Compute")
        return instance

    # -- knobs ----------------------------------------------------------------------

    def fail_next_inserts(
        self,
        count: int = 1,
        code: str = "ZONE_RESOURCE_POOL_EXHAUSTED",
        message: str | None = None,
        http_status: int | None = None,
    ) -> None:
        """The operations of the next ``count`` inserts (a bulkInsert counts as one) end
        DONE with ``error.errors[0].code == code`` and create nothing. ``http_status``
        defaults to the API's: 503 for a stockout, 403 for a quota, 400 otherwise."""
        if count < 0:
            raise ValueError("count must be >= 0")
        status = http_status or DEFAULT_FAILURE_STATUS.get(code, 400)
        text = message or default_failure_message(code, self._project, self._zone)
        with self._compute.lock:
            self._compute.state.failures.extend([Failure(code, text, status)] * count)

    def limit_capacity(
        self,
        machine_type: str,
        zone: str | None = None,
        provisioning: str | None = None,
        count: int = 0,
        *,
        kind: str = "stockout",
        quota: str | None = None,
        message: str | None = None,
    ) -> None:
        """From now on at most ``count`` more VMs of ``machine_type`` (a bare name, e.g.
        ``a2-highgpu-1g``) in ``zone`` with ``provisioning`` model ``"SPOT"`` (a legacy
        preemptible VM counts as SPOT) or ``"STANDARD"`` can be created; None matches any.

        An insert past the limit still returns an operation, which ends DONE with the
        error of ``kind`` and leaves no instance: ``"stockout"`` is
        ZONE_RESOURCE_POOL_EXHAUSTED (503), ``"stockout_with_details"``
        ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS (503, with ``errorDetails``),
        ``"quota"`` QUOTA_EXCEEDED (403) naming ``quota`` (by default the regional GPU
        quota the VM draws on, e.g. NVIDIA_A100_GPUS). ``message`` overrides the wording.
        A bulkInsert creates as many as fit if that is at least its ``minCount``, else
        none. A start of a stopped VM draws on the same limits: past one its operation
        ends with the same error and the VM stays TERMINATED. Capacity is counted per
        creation or start: deleting or stopping a VM does not give it back.
        Limits add up (an insert must fit them all) until clear_capacity_limits() or
        reset(); fail_next_inserts() failures come first and take no capacity."""
        if count < 0:
            raise ValueError("count must be >= 0")
        if kind not in CAPACITY_KINDS:
            raise ValueError(f"kind must be one of {sorted(CAPACITY_KINDS)}, not {kind!r}")
        if provisioning not in (None, *PROVISIONING_MODELS):
            raise ValueError(f"provisioning must be SPOT, STANDARD or None, not {provisioning!r}")
        if not machine_type or "/" in machine_type:
            raise ValueError(f"machine_type must be a bare name, not {machine_type!r}")
        if zone is not None:
            region_of(zone)
        limit = CapacityLimit(
            machine_type, zone, provisioning, count, kind, count, quota=quota, message=message
        )
        with self._compute.lock:
            self._compute.state.limits.append(limit)
            if zone is not None:
                self._compute.state.zones.add(zone)

    def fail_calls(
        self,
        status: int,
        every: int = 1,
        methods: Iterable[str] | None = None,
        count: int | None = None,
    ) -> None:
        """Refuse every ``every``-th call of ``methods`` (API methods such as
        ``instances.insert``; None is any) with HTTP ``status``: 429 ``rateLimitExceeded``
        (the project's API rate quota) or 503 ``backendError`` (the API's front end
        briefly down), ``count`` times (None: until reset()). A refused call does
        nothing, as the real front end's refusals do; ``faults_served()`` counts them.

        The API has no call for this; reliability tests need it because both answers
        come from the real API on any method, and the client retries only some of them
        (503 on reads), so the code above must cope with the rest."""
        if status not in CALL_FAULTS:
            raise ValueError(f"status must be one of {sorted(CALL_FAULTS)}, not {status}")
        if every < 1:
            raise ValueError("every must be >= 1")
        if count is not None and count < 0:
            raise ValueError("count must be >= 0 or None")
        chosen = None if methods is None else frozenset(methods)
        with self._compute.lock:
            self._compute.state.call_faults.append(CallFault(status, every, chosen, count))

    def faults_served(self) -> int:
        """How many calls fail_calls() knobs refused since reset()."""
        with self._compute.lock:
            return self._compute.state.faults_served

    def created(self) -> list[str]:
        """Names of the instances inserts created (their operation succeeded) since
        reset(), in order; one deleted before its insert completed is not counted. Tests
        count launches by it: the calls log also holds refused and replayed inserts."""
        with self._compute.lock:
            return list(self._compute.state.created)

    def capacity_refusals(self) -> list[Offering]:
        """The offering of each insert, bulkInsert or start a capacity limit refused
        since reset(), in order: a test counts the calls per offering by it."""
        with self._compute.lock:
            return list(self._compute.state.refused)

    def clear_capacity_limits(self) -> None:
        """Forget every capacity limit: VMs of any offering can be created again."""
        with self._compute.lock:
            self._compute.state.limits.clear()

    def hold_operations(self, polls: int) -> None:
        """Operations started from now on stay RUNNING (their effect not yet landed, a new
        instance PROVISIONING) for their next ``polls`` get/wait calls, then complete.
        0 turns it off; reset() too."""
        if polls < 0:
            raise ValueError("polls must be >= 0")
        with self._compute.lock:
            self._compute.state.hold_polls = polls

    def finish_operations(self) -> None:
        """Complete every operation still RUNNING, as the cloud would without being polled."""
        with self._compute.lock:
            for operation in self._compute.state.operations.values():
                operation.complete()

    # -- calls served -----------------------------------------------------------------

    def calls(self) -> list[ApiCall]:
        """(HTTP method, API method) of each request served since clear_calls(), in order."""
        return self._calls.snapshot()

    def call_names(self) -> list[str]:
        """Just the API methods, e.g. ``["instances.insert", "zoneOperations.get"]``."""
        return [call.operation for call in self._calls.snapshot()]

    def clear_calls(self) -> None:
        self._calls.clear()
