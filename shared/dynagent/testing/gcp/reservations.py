"""Reservations of zonal capacity for the local Compute: held, consumed, listed, ended.

A test makes a reservation with ``LocalCompute.create_reservation()`` (the API's
``reservations.insert`` is not served); ``reservations.get``, ``list`` and
``aggregatedList`` show it in the API's shape, and ``instances.insert``, ``bulkInsert``
and ``start`` consume it by the VM's ``reservationAffinity``:

* ``SPECIFIC_RESERVATION`` with key ``compute.googleapis.com/reservation-name`` and one
  value, ``R`` (the VM's project) or ``projects/P/reservations/R`` (a reservation of P
  shared with the VM's project), consumes that reservation of the request's zone. A VM
  whose machine type or guest accelerators differ from the reservation's, or a
  reservation of that name only in another zone, is refused at once (400 ``invalid``,
  naming ``resource.reservationAffinity``). A Spot or preemptible VM cannot name one
  (400), as reservations hold standard capacity only.
* ``ANY_RESERVATION`` (also when the field is absent) consumes a matching reservation
  that does not require being named (``specificReservationRequired: false``) and has
  room, if there is one, else the VM takes on-demand capacity. ``NO_RESERVATION`` never
  consumes one. Spot VMs never consume one.

A VM that consumes a reservation does not draw on capacity limits (limit_capacity): the
capacity is held for it. While it is PROVISIONING, STAGING, RUNNING or STOPPING it counts
in ``specificReservation.inUseCount``; deleting or stopping it frees its place, starting
it again consumes again. When a named reservation cannot take the VM, the operation ends
DONE with no instance (a start: the VM TERMINATED again) and error code
``CONDITION_NOT_MET``, ``httpErrorStatusCode`` 412, and one of these messages:

* full: ``Specified reservation 'R' does not have available resources for the request.``
* not started yet: ``Cannot insert instance to a reservation with status: CREATING, as it
  requires reservation to be in READY state.``
* unknown (or not shared with the VM's project): ``Specified reservation 'R' does not
  exist.``

Those codes and messages are the ones the Kubernetes cluster autoscaler's GCE client
recognises in Compute Engine's errors (kubernetes/autoscaler,
cluster-autoscaler/cloudprovider/gce/autoscaling_gce_client_test.go, TestErrors, where
they map to RESERVATION_CAPACITY_EXCEEDED, RESERVATION_NOT_READY and
RESERVATION_NOT_FOUND); the 412 is PRECONDITION FAILED, which the same file shows for
CONDITION_NOT_MET. A bulkInsert takes as many places as the reservation has if that is at
least its ``minCount``, else none (then VM_MIN_COUNT_NOT_REACHED leads the error).

A reservation may have a window (``start``, ``end``), as a calendar-mode reservation
does. Before ``start`` its status is CREATING and nothing consumes it; at ``end`` its
consuming VMs are deleted and the reservation with them. Its JSON shows ``end`` as
``deleteAtTime``; the v1 Reservation has no field for a start. The window is judged
lazily, from the wall clock, at each API call and each test-side read.

Simpler than Compute Engine:

* Reservations are made by the test, never through the API; there is no ``CREATING``
  phase for one without a window, no resize, update or delete call, and no
  ``resourceStatus``, ``assuredCount`` or commitment.
* Matching looks at the machine type and guest accelerators only (no minimum CPU
  platform, local SSDs or instance templates); labels-keyed ANY affinities (a key with
  ANY_RESERVATION) are refused as not modelled.
* A mismatched named reservation is a 400 on the call, where Compute Engine may instead
  fail the operation (``No available resources in specified reservations``).
* A calendar-mode reservation is one resource with a window here; Compute Engine makes
  it from a future reservation at its start, so before then it is not a Reservation at
  all.
* Sharing is by project list (``shareSettings`` SPECIFIC_PROJECTS); no organisation-wide
  sharing and no Google-managed services (``reservationSharingPolicy``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final, NamedTuple

from dynagent.testing.gcp.errors import JsonObject, invalid, not_found, unsupported
from dynagent.testing.gcp.instance_shapes import API_ROOT, is_spot, timestamp, zone_url_of
from dynagent.testing.gcp.listing import aggregated_page, max_results, page_after, page_token
from dynagent.testing.gcp.operations import Failure

RESERVATION_NAME_KEY: Final = "compute.googleapis.com/reservation-name"
AFFINITY_FIELD: Final = "resource.reservationAffinity"
# A VM in these states holds its place in the reservation it consumes.
_CONSUMING: Final = frozenset({"PROVISIONING", "STAGING", "RUNNING", "STOPPING"})
_REFUSED: Final = "CONDITION_NOT_MET"
_REFUSED_STATUS: Final = 412

# (project, zone, name) of a reservation; an instance's key has the same shape.
ReservationKey = tuple[str, str, str]


@dataclass(frozen=True)
class Reservation:
    """Capacity for ``count`` VMs of one shape in one zone, owned by ``project``."""

    project: str
    zone: str
    name: str
    id: str
    created: datetime
    machine_type: str
    accelerators: tuple[tuple[str, int], ...]
    count: int
    specific: bool
    share_with: tuple[str, ...] = ()
    start: datetime | None = None
    end: datetime | None = None

    @property
    def key(self) -> ReservationKey:
        return (self.project, self.zone, self.name)

    @property
    def path(self) -> str:
        return f"projects/{self.project}/zones/{self.zone}/reservations/{self.name}"

    def ready(self, now: datetime) -> bool:
        return self.start is None or now >= self.start

    def ended(self, now: datetime) -> bool:
        return self.end is not None and now >= self.end

    def open_to(self, project: str) -> bool:
        return project == self.project or project in self.share_with

    def fits(self, body: Mapping[str, Any]) -> bool:
        """Same machine type and the same guest accelerators (type and count)."""
        return _bare(body.get("machineType")) == self.machine_type and _accelerators_of(
            body
        ) == dict(self.accelerators)

    def resource(self, in_use: int, now: datetime) -> JsonObject:
        """As ``reservations.get`` returns it."""
        zone_url = zone_url_of(self.project, self.zone)
        properties: JsonObject = {"machineType": self.machine_type}
        if self.accelerators:
            properties["guestAccelerators"] = [
                {"acceleratorType": name, "acceleratorCount": count}
                for name, count in self.accelerators
            ]
        out: JsonObject = {
            "kind": "compute#reservation",
            "id": self.id,
            "creationTimestamp": timestamp(self.created),
            "name": self.name,
            "zone": zone_url,
            "selfLink": f"{zone_url}/reservations/{self.name}",
            "specificReservation": {
                "count": str(self.count),
                "inUseCount": str(in_use),
                "instanceProperties": properties,
            },
            "specificReservationRequired": self.specific,
            "status": "READY" if self.ready(now) else "CREATING",
            "shareSettings": {"shareType": "LOCAL"},
        }
        if self.share_with:
            out["shareSettings"] = {
                "shareType": "SPECIFIC_PROJECTS",
                "projectMap": {p: {"projectId": p} for p in self.share_with},
            }
        if self.end is not None:
            out["deleteAtTime"] = timestamp(self.end)
        return out


class Placement(NamedTuple):
    """Which reservation each VM of a request consumes (None: none), for the leading
    ``len(reserved)`` VMs; ``failure`` if a named reservation cannot take enough."""

    reserved: list[ReservationKey]
    failure: Failure | None
    named: bool  # SPECIFIC_RESERVATION: the VMs that do not fit are not created at all


@dataclass
class ReservationBook:
    """The reservations held, and which instance (by id) consumes which."""

    reservations: dict[ReservationKey, Reservation] = field(default_factory=dict)
    consumers: dict[str, ReservationKey] = field(default_factory=dict)  # instance id ->

    # -- counting -------------------------------------------------------------------

    def in_use(self, instances: Mapping[Any, JsonObject]) -> dict[ReservationKey, int]:
        """How many consuming VMs each reservation has, counted from the instances as
        they stand (a stopped or deleted VM holds no place)."""
        counts: dict[ReservationKey, int] = {}
        for instance in instances.values():
            key = self.consumers.get(instance["id"])
            if key is not None and instance["status"] in _CONSUMING:
                counts[key] = counts.get(key, 0) + 1
        return counts

    def expire(self, now: datetime, instances: dict[Any, JsonObject]) -> None:
        """Delete the reservations whose end has passed, and the VMs consuming them."""
        ended = {key for key, held in self.reservations.items() if held.ended(now)}
        if not ended:
            return
        for instance_key, instance in list(instances.items()):
            if self.consumers.get(instance["id"]) in ended and instance["status"] in _CONSUMING:
                del instances[instance_key]
        for key in ended:
            del self.reservations[key]
        self.consumers = {i: key for i, key in self.consumers.items() if key not in ended}

    def forget(self, instance_id: str) -> None:
        self.consumers.pop(instance_id, None)

    def record(self, instance_id: str, key: ReservationKey) -> None:
        self.consumers[instance_id] = key

    # -- placing VMs ----------------------------------------------------------------

    def place(
        self,
        project: str,
        zone: str,
        bodies: Sequence[Mapping[str, Any]],
        min_count: int,
        instances: Mapping[Any, JsonObject],
        now: datetime,
    ) -> Placement:
        """Where VMs of one shape and affinity go. Raises ApiError(400) for an affinity
        the API refuses on the call."""
        affinity: Mapping[str, Any] = bodies[0].get("reservationAffinity") or {}
        kind = affinity.get("consumeReservationType") or "ANY_RESERVATION"
        if kind == "UNSPECIFIED":
            kind = "ANY_RESERVATION"
        if kind == "SPECIFIC_RESERVATION":
            return self._place_named(project, zone, bodies, min_count, instances, now)
        if affinity.get("key") or affinity.get("values"):
            raise unsupported(f"A reservationAffinity key or values with {kind}")
        if kind == "NO_RESERVATION" or is_spot(bodies[0].get("scheduling") or {}):
            return Placement([], None, named=False)
        used = self.in_use(instances)
        reserved: list[ReservationKey] = []
        for held in sorted(self.reservations.values(), key=lambda r: r.key):
            if held.zone != zone or held.specific or not held.open_to(project):
                continue
            if not held.ready(now) or not held.fits(bodies[0]):
                continue
            room = held.count - used.get(held.key, 0)
            take = max(0, min(room, len(bodies) - len(reserved)))
            reserved.extend([held.key] * take)
        return Placement(reserved, None, named=False)

    def _place_named(
        self,
        project: str,
        zone: str,
        bodies: Sequence[Mapping[str, Any]],
        min_count: int,
        instances: Mapping[Any, JsonObject],
        now: datetime,
    ) -> Placement:
        body = bodies[0]
        affinity: Mapping[str, Any] = body["reservationAffinity"]
        if affinity.get("key") != RESERVATION_NAME_KEY:
            raise invalid(
                f"{AFFINITY_FIELD}.key",
                affinity.get("key"),
                f"SPECIFIC_RESERVATION needs the key '{RESERVATION_NAME_KEY}'.",
            )
        values = list(affinity.get("values") or [])
        if len(values) != 1:
            raise invalid(
                f"{AFFINITY_FIELD}.values", ",".join(map(str, values)), "Name one reservation."
            )
        named = str(values[0])
        owner, name = _owner_and_name(named, project)
        if is_spot(body.get("scheduling") or {}):
            raise invalid(
                f"{AFFINITY_FIELD}.consumeReservationType",
                "SPECIFIC_RESERVATION",
                "Spot and preemptible VMs cannot consume reservations.",
            )
        held = self.reservations.get((owner, zone, name))
        if held is None or not held.open_to(project):
            elsewhere = [
                r for r in self.reservations.values() if (r.project, r.name) == (owner, name)
            ]
            if elsewhere and elsewhere[0].open_to(project):
                raise invalid(
                    AFFINITY_FIELD,
                    named,
                    f"The reservation is in zone '{elsewhere[0].zone}', not '{zone}'.",
                )
            message = f"Specified reservation '{named}' does not exist."
            return _refused(message, len(bodies), min_count)
        if not held.fits(body):
            shape = _shape(_bare(body.get("machineType")), _accelerators_of(body))
            wanted = _shape(held.machine_type, dict(held.accelerators))
            raise invalid(
                AFFINITY_FIELD,
                named,
                f"The instance ({shape}) does not match the reservation's properties ({wanted}).",
            )
        if not held.ready(now):
            message = (
                "Cannot insert instance to a reservation with status: CREATING, as it "
                "requires reservation to be in READY state."
            )
            return _refused(message, len(bodies), min_count)
        room = held.count - self.in_use(instances).get(held.key, 0)
        fit = min(room, len(bodies))
        if fit < min_count:
            message = (
                f"Specified reservation '{named}' does not have available resources for "
                "the request."
            )
            return _refused(message, len(bodies), min_count)
        return Placement([held.key] * fit, None, named=True)

    # -- the API's reads ------------------------------------------------------------

    def get(
        self, project: str, zone: str, name: str, instances: Mapping[Any, JsonObject], now: datetime
    ) -> JsonObject:
        held = self.reservations.get((project, zone, name))
        if held is None:
            raise not_found(f"projects/{project}/zones/{zone}/reservations/{name}")
        return held.resource(self.in_use(instances).get(held.key, 0), now)

    def list_page(
        self,
        project: str,
        zone: str,
        query: Mapping[str, str],
        instances: Mapping[Any, JsonObject],
        now: datetime,
    ) -> JsonObject:
        """``reservations.list``: by name, ``maxResults`` and page tokens."""
        limit, after = _page_query(query)
        used = self.in_use(instances)
        matching = [
            held
            for key, held in sorted(self.reservations.items())
            if key[:2] == (project, zone) and held.name > after
        ]
        collection = f"projects/{project}/zones/{zone}/reservations"
        page: JsonObject = {"kind": "compute#reservationList", "id": collection}
        page["selfLink"] = f"{API_ROOT}{collection}"
        if matching:  # an empty page has no "items", as the API's lists
            page["items"] = [held.resource(used.get(held.key, 0), now) for held in matching[:limit]]
        if len(matching) > limit:
            page["nextPageToken"] = page_token(matching[limit - 1].name, "")
        return page

    def aggregated_page(
        self,
        project: str,
        query: Mapping[str, str],
        scopes: set[str],
        instances: Mapping[Any, JsonObject],
        now: datetime,
    ) -> JsonObject:
        """``reservations.aggregatedList``: every zone's reservations, ``items`` keyed
        ``zones/Z``; a zone with none on the page has the API's NO_RESULTS_ON_PAGE
        warning instead."""
        if query.get("includeAllScopes", "false") not in ("true", "false"):
            raise invalid("includeAllScopes", query["includeAllScopes"], "Expected a boolean.")
        if query.get("includeAllScopes") == "true":
            raise unsupported("includeAllScopes=true (regional and global scopes)")
        if "serviceProjectNumber" in query:
            raise unsupported("serviceProjectNumber")
        limit, after = _page_query(query)
        cursor = tuple(after.split("/", 1)) if after else ("", "")
        used = self.in_use(instances)
        matching = [
            held
            for key, held in sorted(self.reservations.items())
            if key[0] == project and key[1:] > cursor
        ]
        on_page = matching[:limit]
        by_zone: dict[str, list[JsonObject]] = {}
        for held in on_page:
            by_zone.setdefault(held.zone, []).append(held.resource(used.get(held.key, 0), now))
        zones = scopes | {key[1] for key in self.reservations if key[0] == project}
        collection = f"projects/{project}/aggregated/reservations"
        page = aggregated_page(
            collection, "compute#reservationAggregatedList", "reservations", by_zone, zones
        )
        if len(matching) > limit:
            last = on_page[-1]
            page["nextPageToken"] = page_token(f"{last.zone}/{last.name}", "")
        return page


def _page_query(query: Mapping[str, str]) -> tuple[int, str]:
    """``maxResults`` and the name after which the page starts; filters and other
    orders are refused, not ignored."""
    if query.get("filter", "").strip():
        raise unsupported("A filter on reservations")
    if query.get("orderBy", "name") != "name":
        raise unsupported(f"orderBy={query['orderBy']!r}")
    return max_results(query.get("maxResults")), page_after(query.get("pageToken"), "")


def _refused(message: str, count: int, min_count: int) -> Placement:
    failure = Failure(_REFUSED, message, _REFUSED_STATUS)
    if count > 1 or min_count > 1:
        leading = {
            "code": "VM_MIN_COUNT_NOT_REACHED",
            "message": f"Requested minimum count of {min_count} VMs could not be created.",
        }
        failure = Failure(_REFUSED, message, _REFUSED_STATUS, leading=(leading,))
    return Placement([], failure, named=True)


def _owner_and_name(value: str, project: str) -> tuple[str, str]:
    """``R`` is the VM's project's; ``projects/P/reservations/R`` is P's."""
    parts = value.split("/")
    if len(parts) == 1 and parts[0]:
        return project, parts[0]
    if len(parts) == 4 and parts[0] == "projects" and parts[2] == "reservations":
        return parts[1], parts[3]
    raise invalid(
        f"{AFFINITY_FIELD}.values", value, "Expected NAME or projects/PROJECT/reservations/NAME."
    )


def _bare(url: object) -> str:
    return str(url or "").rsplit("/", 1)[-1]


def _accelerators_of(body: Mapping[str, Any]) -> dict[str, int]:
    found: dict[str, int] = {}
    for accelerator in body.get("guestAccelerators") or []:
        name = _bare(accelerator.get("acceleratorType"))
        found[name] = found.get(name, 0) + int(accelerator.get("acceleratorCount") or 0)
    return found


def _shape(machine_type: str, accelerators: Mapping[str, int]) -> str:
    gpus = "".join(f", {count} x {name}" for name, count in sorted(accelerators.items()))
    return f"{machine_type}{gpus}"
