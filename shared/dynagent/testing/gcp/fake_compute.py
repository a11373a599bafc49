"""The fake Compute Engine: the instances and operations it holds (any project and zone),
and the API methods on them, without HTTP (http_api.py serves them)."""

from __future__ import annotations

import copy
import dataclasses
import ipaddress
import itertools
import re
import threading
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, NamedTuple

from dynagent.testing.gcp.capacity import CapacityLimit, Offering, offering_of
from dynagent.testing.gcp.catalog import METHODS as CATALOG_METHODS
from dynagent.testing.gcp.catalog import Catalog, Forbidden, Missing
from dynagent.testing.gcp.discovery import schemas
from dynagent.testing.gcp.errors import (
    ApiError,
    CallFault,
    JsonObject,
    already_exists,
    invalid,
    not_found,
    not_ready,
    unsupported,
)
from dynagent.testing.gcp.instance_shapes import (
    API_ROOT,
    attached_disk,
    fingerprint,
    global_url,
    instance_path,
    label_fingerprint,
    metadata_resource,
    scheduling_with_defaults,
    tags_resource,
    timestamp,
    utcnow,
    zone_url_of,
)
from dynagent.testing.gcp.listing import (
    aggregated_page,
    max_results,
    page_after,
    page_token,
    parse_filter,
)
from dynagent.testing.gcp.operations import Failure, Operation, operation_name
from dynagent.testing.gcp.reservations import ReservationBook, ReservationKey
from dynagent.testing.gcp.value_rules import (
    check_labels,
    check_name,
    check_new_instance,
    request_id_of,
    zonal_ref,
)

DEFAULT_PROJECT: Final = "local-project"
DEFAULT_ZONE: Final = "us-central1-a"


@dataclass(frozen=True)
class ApiRequest:
    """One API call, parsed: path parameters, query and JSON body."""

    project: str
    zone: str
    path: Mapping[str, str]
    query: Mapping[str, str]
    body: Any


@dataclass
class ComputeState:
    """All a LocalCompute holds and its knobs set; reset() starts a new one."""

    instances: dict[tuple[str, str, str], JsonObject] = field(default_factory=dict)
    label_versions: dict[str, int] = field(default_factory=dict)  # instance id -> version
    operations: dict[str, Operation] = field(default_factory=dict)
    request_ids: dict[tuple[str, str], str] = field(default_factory=dict)  # -> operation
    failures: deque[Failure] = field(default_factory=deque)
    hold_polls: int = 0
    limits: list[CapacityLimit] = field(default_factory=list)
    zones: set[str] = field(default_factory=set)  # addressed since reset: aggregated scopes
    call_faults: list[CallFault] = field(default_factory=list)
    faults_served: int = 0
    created: list[str] = field(default_factory=list)  # names, in the order inserts landed
    refused: list[Offering] = field(default_factory=list)  # capacity refusals, in order
    reservations: ReservationBook = field(default_factory=ReservationBook)
    # Images, machine and accelerator types, quotas, networks: catalog.py.
    catalog: Catalog = field(default_factory=Catalog)
    # Each VM's boot disk's image, as the Disk resource's sourceImage would say (the
    # disks API itself is not served: initializeParams is input only on an instance).
    boot_images: dict[str, str] = field(default_factory=dict)


class _Admission(NamedTuple):
    """How many of an insert's instances get capacity, and the error if too few do."""

    fit: int
    failure: Failure | None


class FakeCompute:
    """The fake Compute Engine. Every method expects ``lock`` to be held."""

    def __init__(self, zone: str = DEFAULT_ZONE) -> None:
        self.lock = threading.RLock()
        self.state = ComputeState()
        self.home_zone = zone  # always a scope of aggregatedList
        self._ids = itertools.count(7_100_000_000_000_000_001)  # 19 digits, like real ids
        self._addresses = itertools.count()

    def handle(self, api_method: str, request: ApiRequest) -> JsonObject:
        handlers: Mapping[str, Callable[[ApiRequest], JsonObject]] = {
            "instances.list": self.list_instances,
            "instances.aggregatedList": self.aggregated_list,
            "instances.get": self.get_instance,
            "instances.insert": self.insert_instance,
            "instances.bulkInsert": self.bulk_insert,
            "instances.delete": self.delete_instance,
            "instances.setLabels": self.set_labels,
            "instances.stop": self.stop_instance,
            "instances.start": self.start_instance,
            "zoneOperations.get": self.poll_operation,
            "zoneOperations.wait": self.poll_operation,
            "reservations.get": self.get_reservation,
            "reservations.list": self.list_reservations,
            "reservations.aggregatedList": self.aggregated_reservations,
        }
        self.expire_reservations()
        if request.zone:
            self.state.zones.add(request.zone)
        if api_method in CATALOG_METHODS:
            return self.read_catalog(api_method, request)
        return handlers[api_method](request)

    def read_catalog(self, api_method: str, request: ApiRequest) -> JsonObject:
        try:
            return self.state.catalog.read(
                api_method, request.project, request.zone, dict(request.path)
            )
        except Missing as missing:
            raise ApiError(404, "notFound", str(missing)) from None
        except Forbidden as forbidden:
            raise ApiError(403, "forbidden", str(forbidden)) from None

    def new_id(self) -> str:
        return str(next(self._ids))

    def call_fault(self, api_method: str) -> ApiError | None:
        """The error a fail_calls() knob answers this call with, if any (first knob wins;
        every knob matching the method counts the call)."""
        refused = None
        for fault in self.state.call_faults:
            if fault.applies(api_method) and refused is None:
                refused = fault.error()
        if refused is not None:
            self.state.faults_served += 1
        return refused

    # -- reservations (reservations.py) ---------------------------------------------------

    def expire_reservations(self) -> None:
        """Judged lazily: a reservation whose end has passed goes, with its VMs."""
        self.state.reservations.expire(utcnow(), self.state.instances)

    def get_reservation(self, request: ApiRequest) -> JsonObject:
        return self.state.reservations.get(
            request.project,
            request.zone,
            request.path["reservation"],
            self.state.instances,
            utcnow(),
        )

    def list_reservations(self, request: ApiRequest) -> JsonObject:
        return self.state.reservations.list_page(
            request.project, request.zone, request.query, self.state.instances, utcnow()
        )

    def aggregated_reservations(self, request: ApiRequest) -> JsonObject:
        scopes = self.state.zones | {self.home_zone}
        scopes |= {key[1] for key in self.state.instances if key[0] == request.project}
        return self.state.reservations.aggregated_page(
            request.project, request.query, scopes, self.state.instances, utcnow()
        )

    # -- reads --------------------------------------------------------------------------

    def list_instances(self, request: ApiRequest) -> JsonObject:
        query = request.query
        limit = max_results(query.get("maxResults"))
        if query.get("orderBy", "name") != "name":
            raise unsupported(f"orderBy={query['orderBy']!r}")
        filter_text = query.get("filter", "")
        terms = parse_filter(filter_text)
        after = page_after(query.get("pageToken"), filter_text)
        matching = [
            instance
            for instance in self.in_zone(request.project, request.zone)
            if instance["name"] > after and all(term.matches(instance) for term in terms)
        ]
        collection = f"projects/{request.project}/zones/{request.zone}/instances"
        page: JsonObject = {"kind": "compute#instanceList", "id": collection}
        page["selfLink"] = f"{API_ROOT}{collection}"
        if matching:  # like the API, an empty page has no "items" at all
            page["items"] = copy.deepcopy(matching[:limit])
        if len(matching) > limit:
            page["nextPageToken"] = page_token(matching[limit - 1]["name"], filter_text)
        return page

    def in_zone(self, project: str, zone: str) -> list[JsonObject]:
        """The zone's instances in name order, the API's default."""
        found = self.state.instances
        return [found[key] for key in sorted(found) if key[:2] == (project, zone)]

    def aggregated_list(self, request: ApiRequest) -> JsonObject:
        """Every zone's instances in one paged list: ``items`` maps ``zones/Z`` to the
        zone's instances on this page or, for a zone with none, the API's warning."""
        query = request.query
        limit = max_results(query.get("maxResults"))
        if query.get("orderBy", "name") != "name":
            raise unsupported(f"orderBy={query['orderBy']!r}")
        for flag in ("includeAllScopes", "returnPartialSuccess"):
            if query.get(flag, "false") not in ("true", "false"):
                raise invalid(flag, query[flag], "Expected a boolean.")
        if query.get("includeAllScopes") == "true":
            raise unsupported("includeAllScopes=true (regional and global scopes)")
        if "serviceProjectNumber" in query:
            raise unsupported("serviceProjectNumber")
        filter_text = query.get("filter", "")
        terms = parse_filter(filter_text)
        after = page_after(query.get("pageToken"), filter_text)
        cursor = tuple(after.split("/", 1)) if after else ("", "")
        found = self.state.instances
        matching = [
            found[key]
            for key in sorted(found)
            if key[0] == request.project
            and key[1:] > cursor
            and all(term.matches(found[key]) for term in terms)
        ]
        page_items = matching[:limit]
        by_zone: dict[str, list[JsonObject]] = {}
        for instance in page_items:
            by_zone.setdefault(instance["zone"].rsplit("/", 1)[-1], []).append(instance)
        scopes = self.state.zones | {self.home_zone}
        scopes |= {key[1] for key in found if key[0] == request.project}
        collection = f"projects/{request.project}/aggregated/instances"
        page = aggregated_page(
            collection,
            "compute#instanceAggregatedList",
            "instances",
            copy.deepcopy(by_zone),
            scopes,
        )
        if len(matching) > limit:
            last = page_items[-1]
            last_zone = last["zone"].rsplit("/", 1)[-1]
            page["nextPageToken"] = page_token(f"{last_zone}/{last['name']}", filter_text)
        return page

    def get_instance(self, request: ApiRequest) -> JsonObject:
        return copy.deepcopy(self.find(request.project, request.zone, request.path["instance"]))

    def find(self, project: str, zone: str, name: str) -> JsonObject:
        instance = self.state.instances.get((project, zone, name))
        if instance is None:
            raise not_found(instance_path(project, zone, name))
        return instance

    # -- mutations ----------------------------------------------------------------------

    def insert_instance(self, request: ApiRequest) -> JsonObject:
        for source in ("sourceInstanceTemplate", "sourceMachineImage"):
            if source in request.query:
                raise unsupported(f"instances.insert with {source}")
        request_id = request_id_of(request.query)
        replay = self._replay(request.project, request_id)
        if replay is not None:
            return replay
        body: JsonObject = request.body
        check_new_instance(body, request.project, request.zone)
        self._check_free(request.project, request.zone, [body])
        failure = self._next_failure()
        places: list[ReservationKey | None] = [None]
        if failure is None:
            places, failure = self._place(request.project, request.zone, [body], min_count=1)
        instance = self._create(request.project, request.zone, [body])[0]
        if failure is None:
            self._consume(instance, places[0])
        settle = self._settle(request, [instance], failure)
        return self._mutation(request, "insert", instance, request_id, settle, failure)

    def bulk_insert(self, request: ApiRequest) -> JsonObject:
        request_id = request_id_of(request.query)
        replay = self._replay(request.project, request_id)
        if replay is not None:
            return replay
        body: JsonObject = request.body
        if body.get("sourceInstanceTemplate"):
            raise unsupported("instances.bulkInsert with sourceInstanceTemplate")
        count, min_count = _bulk_count(body)
        template = _instance_from_properties(body.get("instanceProperties"), request.zone)
        names = self._bulk_names(body, count, request.project, request.zone)
        bodies = [{**template, "name": name} for name in names]
        for each in bodies:
            check_new_instance(each, request.project, request.zone)
        self._check_free(request.project, request.zone, bodies)
        failure = self._next_failure()
        fit = count
        places: list[ReservationKey | None] = [None] * count
        if failure is None:  # a queued failure fails the whole request, as before
            places, failure = self._place(request.project, request.zone, bodies, min_count)
            fit = len(places)
        # Those that got capacity start; on failure they are rolled back (deleted).
        created = self._create(request.project, request.zone, bodies[:fit])
        if failure is None:
            for instance, place in zip(created, places, strict=True):
                self._consume(instance, place)
        target = {"selfLink": f"{zone_url_of(request.project, request.zone)}/instances"}
        settle = self._settle(request, created, failure)
        status = {
            "status": "CREATING",
            "targetVmCount": count,
            "createdVmCount": fit,
            "failedToCreateVmCount": count - fit,
            "deletedVmCount": fit if failure is not None else 0,
        }
        metadata = {"perLocationStatus": {f"zones/{request.zone}": status}}
        return self._mutation(request, "bulkInsert", target, request_id, settle, failure, metadata)

    def delete_instance(self, request: ApiRequest) -> JsonObject:
        request_id = request_id_of(request.query)
        replay = self._replay(request.project, request_id)
        if replay is not None:
            return replay
        instance = self.find(request.project, request.zone, request.path["instance"])
        instance["status"] = "STOPPING"
        key = (request.project, request.zone, instance["name"])

        def remove() -> None:
            if self.state.instances.get(key) is instance:  # not already replaced or gone
                del self.state.instances[key]
                self.state.reservations.forget(instance["id"])

        return self._mutation(request, "delete", instance, request_id, remove)

    def set_labels(self, request: ApiRequest) -> JsonObject:
        request_id = request_id_of(request.query)
        replay = self._replay(request.project, request_id)
        if replay is not None:
            return replay
        instance = self.find(request.project, request.zone, request.path["instance"])
        body: JsonObject = request.body
        labels: dict[str, str] = dict(body.get("labels") or {})
        check_labels(labels, "labels")
        if body.get("labelFingerprint") != instance["labelFingerprint"]:
            raise ApiError(
                412,
                "conditionNotMet",
                "Labels fingerprint either invalid or resource labels have changed",
            )
        return self._mutation(
            request, "setLabels", instance, request_id, lambda: self._relabel(instance, labels)
        )

    # -- stop and start ------------------------------------------------------------------
    #
    # A stopped VM is TERMINATED, as the API reports it, and keeps its name, id, disks,
    # labels and metadata. Simpler than Compute Engine: a VM goes PROVISIONING then
    # RUNNING on start (no STAGING, as after an insert); its ephemeral external IP is
    # kept (the API releases it at stop and gives a new one at start); a stop does not
    # insist on discardLocalSsd (the fake has no local SSDs) nor models graceful
    # shutdown; and a start while a VM is STOPPING or SUSPENDED is refused with 400
    # resourceNotReady where the API would queue it or want a resume.

    def stop_instance(self, request: ApiRequest) -> JsonObject:
        """``instances.stop``: STOPPING now, TERMINATED with ``lastStopTimestamp`` when
        the operation completes (held like any other). Stopping a TERMINATED VM is an
        operation DONE at once that changes nothing."""
        request_id = request_id_of(request.query)
        replay = self._replay(request.project, request_id)
        if replay is not None:
            return replay
        instance = self.find(request.project, request.zone, request.path["instance"])
        if instance["status"] == "TERMINATED":
            return self._mutation(request, "stop", instance, request_id, _no_change, held=False)
        instance["status"] = "STOPPING"
        key = (request.project, request.zone, instance["name"])

        def land() -> None:
            # Not if deleted, replaced or moved on meanwhile (by a test, or another stop).
            if self.state.instances.get(key) is instance and instance["status"] == "STOPPING":
                instance.update(status="TERMINATED", lastStopTimestamp=timestamp(utcnow()))

        return self._mutation(request, "stop", instance, request_id, land)

    def start_instance(self, request: ApiRequest) -> JsonObject:
        """``instances.start`` of a TERMINATED VM: PROVISIONING now, RUNNING with
        ``lastStartTimestamp`` when the operation completes. It draws on capacity as an
        insert does (limit_capacity): refused, the operation ends with the limit's error
        (ZONE_RESOURCE_POOL_EXHAUSTED...) and the VM is TERMINATED again. Starting a VM
        that is PROVISIONING, STAGING or RUNNING is an operation DONE at once that
        changes nothing."""
        request_id = request_id_of(request.query)
        replay = self._replay(request.project, request_id)
        if replay is not None:
            return replay
        instance = self.find(request.project, request.zone, request.path["instance"])
        key = (request.project, request.zone, instance["name"])
        if instance["status"] in ("PROVISIONING", "STAGING", "RUNNING"):
            return self._mutation(request, "start", instance, request_id, _no_change, held=False)
        if instance["status"] != "TERMINATED":
            raise not_ready(instance_path(*key))
        places, failure = self._place(request.project, request.zone, [instance], min_count=1)
        if failure is None:
            self._consume(instance, places[0])
        else:
            self.state.reservations.forget(instance["id"])
        instance["status"] = "PROVISIONING"

        def land() -> None:
            if self.state.instances.get(key) is not instance:
                return  # deleted or replaced meanwhile
            if instance["status"] != "PROVISIONING":
                return  # stopped or moved on by a test meanwhile
            if failure is not None:
                instance["status"] = "TERMINATED"
            else:
                instance.update(status="RUNNING", lastStartTimestamp=timestamp(utcnow()))

        return self._mutation(request, "start", instance, request_id, land, failure)

    def _relabel(self, instance: JsonObject, labels: dict[str, str]) -> None:
        version = self.state.label_versions.get(instance["id"], 0) + 1
        self.state.label_versions[instance["id"]] = version
        instance["labels"] = labels
        instance["labelFingerprint"] = label_fingerprint(instance["id"], labels, version)
        instance["fingerprint"] = fingerprint([instance["id"], "instance", version])
        if not labels:
            del instance["labels"]  # the API leaves out an empty map

    # -- how inserts land -----------------------------------------------------------------

    def _check_free(self, project: str, zone: str, bodies: list[JsonObject]) -> None:
        """409 if any name is taken: then nothing is created."""
        for body in bodies:
            key = (project, zone, body["name"])
            if key in self.state.instances:
                raise already_exists(instance_path(*key))

    def _place(
        self, project: str, zone: str, bodies: list[JsonObject], min_count: int
    ) -> tuple[list[ReservationKey | None], Failure | None]:
        """Where the VMs of a request go: the reservation each consumes (None: on-demand
        capacity), one entry per VM that fits, and the error if too few do. VMs that
        consume a reservation take no capacity from the limits, as it is held for them."""
        placement = self.state.reservations.place(
            project, zone, bodies, min_count, self.state.instances, utcnow()
        )
        if placement.failure is not None:
            return [], placement.failure
        reserved: list[ReservationKey | None] = list(placement.reserved)
        rest = bodies[len(reserved) :]
        if placement.named or not rest:
            return reserved, None
        need = max(0, min_count - len(reserved))
        fit, failure = self._admit(project, zone, rest, min_count, need=need)
        return [*reserved, *([None] * fit)], failure

    def _consume(self, instance: JsonObject, place: ReservationKey | None) -> None:
        if place is None:
            self.state.reservations.forget(instance["id"])
        else:
            self.state.reservations.record(instance["id"], place)

    def _admit(
        self,
        project: str,
        zone: str,
        bodies: list[JsonObject],
        min_count: int,
        *,
        need: int | None = None,
    ) -> _Admission:
        """Take capacity for as many of ``bodies`` (one offering) as the limits allow. If
        fewer than ``need`` (by default ``min_count``; less when reservations take some
        of the request) fit, take none and return the error of the first limit that
        falls short; a bulkInsert's error then leads with VM_MIN_COUNT_NOT_REACHED."""
        need = min_count if need is None else need
        offering = offering_of(bodies[0], zone)
        matching = [limit for limit in self.state.limits if limit.matches(offering)]
        fit = min([len(bodies), *(limit.remaining for limit in matching)])
        if fit >= need:
            for limit in matching:
                limit.remaining -= fit
            return _Admission(fit, None)
        short = next(limit for limit in matching if limit.remaining < need)
        self.state.refused.append(offering)
        failure = short.failure(project, bodies[0], offering)
        if len(bodies) > 1 or min_count > 1:
            leading = {
                "code": "VM_MIN_COUNT_NOT_REACHED",
                "message": f"Requested minimum count of {min_count} VMs could not be created.",
            }
            failure = dataclasses.replace(failure, leading=(leading,))
        return _Admission(fit, failure)

    def _create(self, project: str, zone: str, bodies: list[JsonObject]) -> list[JsonObject]:
        """Store PROVISIONING instances, or create none if any name is taken."""
        self._check_free(project, zone, bodies)
        created = [self._materialise(project, zone, body) for body in bodies]
        for instance in created:
            self.state.instances[(project, zone, instance["name"])] = instance
        return created

    def _materialise(self, project: str, zone: str, body: JsonObject) -> JsonObject:
        """The stored instance: what was sent plus the output fields the API adds."""
        instance_id, name, zone_url = self.new_id(), body["name"], zone_url_of(project, zone)
        instance = copy.deepcopy(body)
        labels: dict[str, str] = dict(body.get("labels") or {})
        instance.update(
            kind="compute#instance",
            id=instance_id,
            creationTimestamp=timestamp(utcnow()),
            zone=zone_url,
            selfLink=f"{zone_url}/instances/{name}",
            status="PROVISIONING",
            machineType=zonal_ref(body["machineType"], "machineTypes", project, zone, ""),
            labelFingerprint=label_fingerprint(instance_id, labels, 0),
            fingerprint=fingerprint([instance_id, "instance", 0]),
            metadata=metadata_resource(body.get("metadata")),
            tags=tags_resource(body.get("tags")),
            scheduling=scheduling_with_defaults(body.get("scheduling") or {}),
            disks=[attached_disk(d, i, zone_url, name) for i, d in enumerate(body["disks"])],
            networkInterfaces=[
                self._nic(nic, i, project)
                for i, nic in enumerate(body.get("networkInterfaces") or [])
            ],
            cpuPlatform="Unknown CPU Platform",
            canIpForward=body.get("canIpForward", False),
            deletionProtection=body.get("deletionProtection", False),
            startRestricted=False,
        )
        params = (body["disks"][0].get("initializeParams") or {}) if body["disks"] else {}
        if params.get("sourceImage"):
            self.state.boot_images[name] = str(params["sourceImage"])
        if not labels:
            instance.pop("labels", None)  # the API leaves out an empty map
        for accelerator in instance.get("guestAccelerators") or []:
            accelerator["acceleratorType"] = zonal_ref(
                accelerator["acceleratorType"], "acceleratorTypes", project, zone, ""
            )
        return instance

    def _nic(self, nic: JsonObject, index: int, project: str) -> JsonObject:
        out = copy.deepcopy(nic)
        address = next(self._addresses)
        out.update(kind="compute#networkInterface", name=f"nic{index}")
        out["network"] = global_url(nic.get("network", "global/networks/default"), project)
        if "subnetwork" in nic:
            out["subnetwork"] = global_url(nic["subnetwork"], project)
        out.setdefault("networkIP", str(ipaddress.IPv4Address("10.128.0.2") + address))
        out.setdefault("stackType", "IPV4_ONLY")
        out["fingerprint"] = fingerprint([out["networkIP"]])
        for access in out.get("accessConfigs") or []:
            access.update(kind="compute#accessConfig")
            access.setdefault("type", "ONE_TO_ONE_NAT")
            access.setdefault("name", "External NAT")
            access.setdefault("networkTier", "PREMIUM")
            access.setdefault("natIP", str(ipaddress.IPv4Address("34.16.0.1") + address))
        return out

    def _settle(
        self, request: ApiRequest, created: list[JsonObject], failure: Failure | None
    ) -> Callable[[], None]:
        """What an insert's completion does: start the instances or, if it failed, remove
        them, so a failed insert leaves nothing behind."""
        keys = [(request.project, request.zone, instance["name"]) for instance in created]

        def finish() -> None:
            for key, instance in zip(keys, created, strict=True):
                if self.state.instances.get(key) is not instance:
                    continue  # deleted (or replaced) meanwhile
                if failure is not None:
                    del self.state.instances[key]
                    continue
                self.state.created.append(instance["name"])
                if instance["status"] == "PROVISIONING":  # a test may have moved it on
                    instance.update(status="RUNNING", lastStartTimestamp=timestamp(utcnow()))

        return finish

    def _next_failure(self) -> Failure | None:
        return self.state.failures.popleft() if self.state.failures else None

    def _bulk_names(self, body: JsonObject, count: int, project: str, zone: str) -> list[str]:
        named = list(body.get("perInstanceProperties") or {})
        for name in named:
            check_name(name, "resource.perInstanceProperties")
        if len(named) > count:
            raise invalid("resource.count", count, "Fewer than the perInstanceProperties names.")
        pattern = body.get("namePattern")
        if len(named) < count and not pattern:
            raise invalid("resource.namePattern", "", "Needed to name the instances to create.")
        # Generated numbers also continue after the names this request itself gives.
        taken = [instance["name"] for instance in self.in_zone(project, zone)] + named
        return named + _pattern_names(pattern or "", count - len(named), taken)

    # -- operations ---------------------------------------------------------------------

    def _replay(self, project: str, request_id: str | None) -> JsonObject | None:
        """The operation a request with this requestId already started, if any: the retry
        then does nothing else, whatever its body."""
        name = self.state.request_ids.get((project, request_id)) if request_id else None
        return copy.deepcopy(self.state.operations[name].resource) if name else None

    def _mutation(
        self,
        request: ApiRequest,
        operation_type: str,
        target: JsonObject,
        request_id: str | None,
        on_done: Callable[[], None],
        failure: Failure | None = None,
        bulk_metadata: JsonObject | None = None,
        *,
        held: bool = True,
    ) -> JsonObject:
        """Start the operation that reports a mutation; it completes now unless held
        (hold_operations), and ``held=False`` (a mutation with nothing to do) never is."""
        name, now = operation_name(), timestamp(utcnow())
        zone_url = zone_url_of(request.project, request.zone)
        resource: JsonObject = {
            "kind": "compute#operation",
            "id": self.new_id(),
            "name": name,
            "zone": zone_url,
            "operationType": operation_type,
            "targetLink": target["selfLink"],
            "status": "RUNNING",
            "user": "local-compute@localhost",
            "progress": 0,
            "insertTime": now,
            "startTime": now,
            "selfLink": f"{zone_url}/operations/{name}",
        }
        if "id" in target:
            resource["targetId"] = target["id"]
        if bulk_metadata is not None:
            resource["instancesBulkInsertOperationMetadata"] = bulk_metadata
        if request_id is not None:
            resource["clientOperationId"] = request_id
            self.state.request_ids[(request.project, request_id)] = name
        polls = self.state.hold_polls if held else 0
        operation = Operation(resource, polls, on_done, failure)
        self.state.operations[name] = operation
        return self._after_poll(operation, counts=False)

    def _after_poll(self, operation: Operation, *, counts: bool) -> JsonObject:
        """The operation as a response shows it. A held one uses up a poll (the response
        that started it is not a poll) and completes once it has none left."""
        if operation.polls_left > 0 and counts:
            operation.polls_left -= 1
        elif operation.polls_left == 0:
            operation.complete()
        return copy.deepcopy(operation.resource)

    def poll_operation(self, request: ApiRequest) -> JsonObject:
        """``get`` and ``wait`` alike: a held operation stays RUNNING for its polls (for
        ``wait``, as if its two-minute deadline passed), then completes."""
        name = request.path["operation"]
        operation = self.state.operations.get(name)
        if operation is None or operation.resource["zone"] != zone_url_of(
            request.project, request.zone
        ):
            raise not_found(f"projects/{request.project}/zones/{request.zone}/operations/{name}")
        return self._after_poll(operation, counts=True)


def _no_change() -> None:
    """The effect of a stop of a stopped VM, or a start of a running one."""


def _bulk_count(body: JsonObject) -> tuple[int, int]:
    """``count`` and ``minCount`` (which defaults to count)."""
    count = int(body.get("count") or 0)
    if count < 1:
        raise invalid("resource.count", body.get("count"), "Must be at least 1.")
    min_count = int(body.get("minCount") or count)
    if not 1 <= min_count <= count:
        raise invalid("resource.minCount", body.get("minCount"), "Must be between 1 and count.")
    return count, min_count


def _instance_from_properties(properties: JsonObject | None, zone: str) -> JsonObject:
    """bulkInsert's InstanceProperties as an Instance body (without a name)."""
    if not properties:
        raise invalid("resource.instanceProperties", "", "Required.")
    instance_fields = schemas()["Instance"]["properties"]
    body = {k: copy.deepcopy(v) for k, v in properties.items() if k in instance_fields}
    # Here the API takes bare type names, and fails on URLs (INTERNAL_ERROR, says the doc).
    machine_type = str(properties.get("machineType", ""))
    if not machine_type or "/" in machine_type:
        raise invalid("resource.instanceProperties.machineType", machine_type, "Expected a name.")
    body["machineType"] = f"zones/{zone}/machineTypes/{machine_type}"
    for accelerator in body.get("guestAccelerators") or []:
        accelerator_type = str(accelerator.get("acceleratorType", ""))
        accelerator["acceleratorType"] = f"zones/{zone}/acceleratorTypes/{accelerator_type}"
    return body


def _pattern_names(pattern: str, count: int, taken: Iterable[str]) -> list[str]:
    """``inst-####``: numbers continue after the biggest one an existing name uses."""
    if count == 0:
        return []
    match = re.fullmatch(r"([^#]*)(#{1,18})([^#]*)", pattern)
    if match is None:
        raise invalid("resource.namePattern", pattern, "Needs one run of 1 to 18 '#'.")
    prefix, hashes, suffix = match.groups()
    width = len(hashes)
    existing = re.compile(re.escape(prefix) + rf"(\d{{{width}}})" + re.escape(suffix))
    used = [int(m[1]) for name in taken if (m := existing.fullmatch(name))]
    start = max(used, default=0) + 1
    if start + count - 1 >= 10**width:
        raise invalid("resource.namePattern", pattern, "Not enough numbers left.")
    return [f"{prefix}{number:0{width}d}{suffix}" for number in range(start, start + count)]
