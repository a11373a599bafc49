"""The Compute Engine adapter: the Provider contract for one pool, with google-cloud-compute.

Only VMs carrying the managed label pair and the pool label are listed, and every VM
listed is checked for them again before anything is done to it.
"""

from __future__ import annotations

import contextlib
import json
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from google.api_core import exceptions as google_errors
from google.cloud import compute_v1
from google.protobuf.json_format import ParseError

from dynagent.core.boot import MasterAddress, MasterUrlError, master_address
from dynagent.core.boot.drift import read_boot_tag
from dynagent.core.config import Pool, Settings
from dynagent.core.fleet import Fleet, Instance, Mark, Reservation
from dynagent.core.offerings import Offering, Purchase
from dynagent.core.plan import Adoption, Cancellation, MarkWrite, Plan, Start, Stop, Termination
from dynagent.core.pools.gcp import GcpProvider
from dynagent.core.reservations import machines_in_each
from dynagent.run.fallback import Attempt, CapacityMemory, launch_with_fallback
from dynagent.run.provider import LaunchErrorKind, LaunchNotVisible, LaunchResult, StartResult

from . import labels as gce_labels
from .instance_body import instance_body, instance_names, offering_names, startup_script
from .refusals import refusal_kind
from .reservations import (
    RESERVATIONS_FOR,
    ReservationCache,
    read_named,
    reservation_from,
    reservation_of,
)

# The largest page instances.list returns.
MAX_PAGE = 500
# Operation errors that mean "not this machine in this zone now": try the next offering.
CAPACITY_ERRORS = frozenset(
    {
        "ZONE_RESOURCE_POOL_EXHAUSTED", "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS",
        "QUOTA_EXCEEDED", "RESOURCE_POOL_EXHAUSTED", "STOCKOUT",
    }
)  # fmt: skip
_REQUEST_IDS = uuid.UUID("6f1d3c52-3a5e-4b8e-9a61-1f4f3e2c9d10")
# Answers worth the same call again shortly: the API's rate quota and a front end briefly
# down. Every call retried is a read or carries a requestId, so a repeat does it once.
TRANSIENT = (google_errors.TooManyRequests, google_errors.ServiceUnavailable)
RETRIES = 4  # after the first try: 1 + 2 + 4 + 8 s of backoff at most


def request_id(name: str, action: str) -> str:
    """Compute Engine's idempotency id (a UUID) for one action on one VM."""
    return str(uuid.uuid5(_REQUEST_IDS, f"{action}:{name}"))


@dataclass
class _Seen:
    """What the last observe read of a VM: its labels must be written back whole."""

    labels: dict[str, str]
    fingerprint: str


class GceProvider:
    """Observe and change one pool's Compute Engine VMs."""

    def __init__(
        self,
        pool: Pool,
        instances: Any,
        operations: Any,
        settings: Settings | None = None,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        sleep: Callable[[float], None] = time.sleep,
        memory: CapacityMemory | None = None,
        reservations: Any = None,
        reservation_cache: ReservationCache | None = None,
    ) -> None:
        if not isinstance(pool.provider, GcpProvider):
            raise TypeError(f"pool {pool.name!r} is not a GCP pool")
        self.pool = pool
        self.config: GcpProvider = pool.provider
        self.instances = instances
        # Zone operations are waited on with this client, not ExtendedOperation.result():
        # that polls through a client of its own, which ignores a custom endpoint.
        self.operations = operations
        self.settings = settings or Settings()
        self.clock = clock
        self.sleep = sleep
        self.page_size = MAX_PAGE
        # Offerings Compute Engine recently had no capacity for; a warm function keeps it.
        self.memory = memory if memory is not None else CapacityMemory()
        # The reservations client (built on first use) and what a warm function last
        # read of the pool's reservations (``gcp.reservations``).
        self.reservations_client = reservations
        self.reservation_cache = reservation_cache or ReservationCache()
        self._seen: dict[str, _Seen] = {}
        # Each VM's zone, from the last listing or the insert that made it.
        self._zones: dict[str, str] = {}
        offerings = self.config.offerings
        self.zones = (
            tuple(offerings.zones) if offerings and offerings.zones else (self.config.zone,)
        )

    def _where(self, name: str | None = None) -> dict[str, str]:
        """Project and zone of a VM (the pool's zone for one not listed yet)."""
        zone = self._zones.get(name, self.config.zone) if name else self.config.zone
        return {"project": self.config.project, "zone": zone}

    # Observe

    def observe(self) -> Fleet:
        self._seen, self._zones = {}, {}
        instances = tuple(self._list())
        reservations = self.reservations(instances)
        if self.config.offerings is None and not reservations:
            return Fleet(instances=instances)
        return Fleet(
            instances=instances,
            unavailable=self.memory.unavailable(self.clock()),
            reservations=reservations,
        )

    def reservations(self, instances: tuple[Instance, ...]) -> tuple[Reservation, ...]:
        """The reservations the pool names, read at most once a minute by a warm function
        (``gcp.reservations``), their free places counted against ``instances``."""
        if not self.config.reservations:
            return ()
        cache, now = self.reservation_cache, self.clock()
        ours = machines_in_each(instances)
        if cache.read_at is None or now - cache.read_at >= RESERVATIONS_FOR:
            if self.reservations_client is None:
                from .clients import reservations_client

                self.reservations_client = reservations_client()
            found = read_named(
                self.reservations_client, self.config.reservations, self.config.project, self.zones
            )
            cache.items = [(entry, zone, item, ours.get(entry, 0)) for entry, zone, item in found]
            cache.read_at = now
        return tuple(
            reservation_from(entry, zone, item, (then, ours.get(entry, 0)))
            for entry, zone, item, then in cache.items
        )

    def _list(self) -> Iterator[Instance]:
        """Every managed VM of the pool: one paged list for one zone, one paged aggregated
        list however many zones (the calls do not grow with the offerings)."""
        where = gce_labels.managed_filter(self.config, self.pool.name)
        if len(self.zones) == 1:
            request = compute_v1.ListInstancesRequest(
                project=self.config.project,
                zone=self.zones[0],
                filter=where,
                max_results=self.page_size,
            )
            for item in self._retry(self.instances.list, request=request):
                yield from self._instance(item, self.zones[0])
            return
        aggregated = compute_v1.AggregatedListInstancesRequest(
            project=self.config.project, filter=where, max_results=self.page_size
        )
        for scope, listed in self._retry(self.instances.aggregated_list, request=aggregated):
            zone = scope.rsplit("/", 1)[-1]
            if zone in self.zones:
                for item in listed.instances:
                    yield from self._instance(item, zone)

    def _instance(self, item: Any, zone: str) -> Iterator[Instance]:
        labels = dict(item.labels)
        state = gce_labels.INSTANCE_STATES.get(item.status)
        if state is None or not gce_labels.is_managed(labels, self.config, self.pool.name):
            return
        self._seen[item.name] = _Seen(labels, item.label_fingerprint)
        self._zones[item.name] = zone
        scheduling = item.scheduling
        spot = scheduling.provisioning_model == "SPOT" or bool(scheduling.preemptible)
        marks = gce_labels.marks_from_labels(labels)
        boot = read_boot_tag(labels.get(gce_labels.BOOT_CONFIG_LABEL, ""))
        # A VM stopped before and started again (the warm pool's) counts its starting
        # period from its last start; creationTimestamp stays the first boot's.
        restarted = item.last_stop_timestamp and item.last_start_timestamp
        started = item.last_start_timestamp if restarted else item.creation_timestamp
        yield Instance(
            id=item.name,
            state=state,
            launched_at=datetime.fromisoformat(started),
            marks=marks,
            boot_config=boot[0],
            boot_parts=boot[1],
            instance_type=item.machine_type.rsplit("/", 1)[-1],
            zone=zone,
            spot=spot,
            reservation=reservation_of(item),
            # Preempted, and stopped rather than deleted (a legacy preemptible VM; our Spot
            # VMs are created with termination action DELETE and just vanish).
            preempted=spot
            and item.status == "TERMINATED"
            and _stopped_by_the_cloud(item.last_stop_timestamp, marks.get(Mark.STOPPED_AT)),
        )

    def _retry(self, call: Callable[..., Any], **arguments: Any) -> Any:
        """``call``, again after 1, 2, 4 and 8 s while the API answers 429 or 503; then
        the error propagates (and Pub/Sub delivers the message again later)."""
        delay = 1.0
        for _ in range(RETRIES):
            try:
                return call(**arguments)
            except TRANSIENT:
                self.sleep(delay)
                delay *= 2
        return call(**arguments)

    # Launch

    def launch(self, plan: Plan) -> LaunchResult:
        if not plan.launches:
            return LaunchResult()
        try:
            master = master_address(self.config.master_url).resolved(dict(plan.master_addresses))
        except MasterUrlError as error:
            return LaunchResult(error=f"master_url: {error}")
        if self.config.offerings is not None or any(la.reserved for la in plan.launches):
            return self._launch_offerings(plan, master)
        names = instance_names(self.config, plan.launch_key, len(plan.launches))
        operations, existing, errors = self._insert(
            names, plan.launch_key, master, boot_config=plan.boot_tag
        )
        failed = self._wait(operations)
        kind = _kind(errors, failed)
        errors += [f"{name}: {problem}" for name, problem in failed.items()]
        started = tuple(n for n in names if n in operations or n in existing)
        self._wait_visible(started)
        if not errors:
            return LaunchResult(started=started)
        return LaunchResult(started=started, error="; ".join(errors), error_kind=kind)

    def _launch_offerings(self, plan: Plan, master: MasterAddress) -> LaunchResult:
        """Each VM on its first offering Compute Engine has capacity for."""

        def call(offering: Offering, count: int) -> Attempt:
            names = offering_names(self.config, plan.launch_key, offering.key, count)
            operations, existing, errors = self._insert(
                names, plan.launch_key, master, offering, plan.boot_tag
            )
            failed = self._wait(operations)
            started = tuple(n for n in names if n in operations or n in existing)
            codes = {code for problem in failed.values() for code in _codes(problem)}
            # A reservation full or not READY fails its insert CONDITION_NOT_MET: for
            # that offering, no capacity now.
            out = CAPACITY_ERRORS | ({"CONDITION_NOT_MET"} if offering.reservation else set())
            if errors or (failed and not codes <= out):
                problems = errors + [f"{n}: {p}" for n, p in failed.items()]
                kind = _kind(errors, {n: p for n, p in failed.items() if _codes(p) - out})
                return Attempt(started=started, error="; ".join(problems), error_kind=kind)
            return Attempt(started=started, out_of_capacity=bool(failed))

        result = launch_with_fallback(plan.launches, call, self.memory, self.clock())
        self._wait_visible(result.started)
        return result

    def _insert(
        self,
        names: list[str],
        launch_key: str,
        master: MasterAddress,
        offering: Offering | None = None,
        boot_config: str = "",
    ) -> tuple[dict[str, Any], set[str], list[str]]:
        """Send every insert before waiting on any: the VMs boot side by side.

        Returns the operations started, the names that existed already (an earlier try
        of this snapshot made them), and the errors.
        """
        operations: dict[str, Any] = {}
        existing: set[str] = set()
        errors: list[str] = []
        zone = offering.zone if offering and offering.zone else self.config.zone
        machine = self.config.machine(offering.instance_type) if offering else None
        spot = offering.purchase is Purchase.SPOT if offering else None
        if offering is not None and offering.reservation:
            spot = False  # a reservation holds standard VMs
        # One machine type, one boot script: rendered once for all the names.
        script = startup_script(self.config, self.pool.name, master, machine)
        for name in names:
            try:
                body = instance_body(
                    self.config,
                    self.pool.name,
                    name,
                    launch_key,
                    script,
                    machine,
                    zone,
                    spot,
                    boot_config,
                    offering.reservation if offering else "",
                )
                resource = compute_v1.Instance.from_json(json.dumps(body))
            except ParseError as error:  # a field base_config names that the API lacks
                return {}, set(), [f"base_config: {error}"]
            self._zones[name] = zone
            request = compute_v1.InsertInstanceRequest(
                project=self.config.project,
                zone=zone,
                instance_resource=resource,
                request_id=request_id(f"{name}@{zone}" if offering else name, "insert"),
            )
            try:
                operations[name] = self._retry(self.instances.insert, request=request)
            except google_errors.Conflict:
                existing.add(name)
            except (google_errors.BadRequest, google_errors.Forbidden) as error:
                errors.append(f"{name}: {error.message}")
        return operations, existing, errors

    def _wait(self, operations: dict[str, Any]) -> dict[str, str]:
        """Wait on each insert; an operation that ends in error is a launch error, by VM.

        The quota or capacity answer often arrives only here, in the finished operation.
        """
        errors = {}
        deadline = self.clock() + self.config.operation_timeout_period
        for name, operation in list(operations.items()):
            problem = self._finish(operation.name, deadline, self._where(name))
            if problem:
                errors[name] = problem
                del operations[name]
                self._zones.pop(name, None)
        return errors

    def _finish(self, operation: str, deadline: datetime, where: dict[str, str]) -> str | None:
        """Wait for a zone operation; its error as text, or None when it succeeded."""
        while True:
            # zoneOperations.wait returns when the operation is done or after a while.
            result = self._retry(self.operations.wait, **where, operation=operation)
            if result.status == compute_v1.Operation.Status.DONE:
                errors = result.error.errors if result.error else []
                return "; ".join(f"{e.code}: {e.message}" for e in errors) or None
            if self.clock() >= deadline:
                return (
                    f"operation {operation} not done after "
                    f"{self.config.operation_timeout_period} (operation_timeout_period)"
                )
            self.sleep(1.0)

    def _wait_visible(self, names: tuple[str, ...]) -> None:
        if not names:
            return
        deadline = self.clock() + self.settings.launch_visibility_timeout
        delay = 0.25
        while True:
            missing = set(names) - {instance.id for instance in self._list()}
            if not missing:
                return
            if self.clock() >= deadline:
                raise LaunchNotVisible(
                    f"pool {self.pool.name!r}: {sorted(missing)} not listed after "
                    f"{self.settings.launch_visibility_timeout}"
                )
            self.sleep(delay)
            delay = min(delay * 2, 4.0)

    # Change

    def terminate(self, terminations: tuple[Termination, ...]) -> None:
        for termination in terminations:
            name = termination.instance_id
            request = compute_v1.DeleteInstanceRequest(
                **self._where(name), instance=name, request_id=request_id(name, "delete")
            )
            with contextlib.suppress(google_errors.NotFound):  # gone already: done
                self._retry(self.instances.delete, request=request)

    def stop(self, stops: tuple[Stop, ...]) -> None:
        """instances.stop: the VM keeps its disks (with its Docker images), labels and
        metadata. Sent for every VM before waiting on any; gone already is done."""
        operations = {}
        for stop in stops:
            name = stop.instance_id
            request = compute_v1.StopInstanceRequest(
                **self._where(name), instance=name, request_id=self._action_id(name, "stop")
            )
            with contextlib.suppress(google_errors.NotFound):
                operations[name] = self._retry(self.instances.stop, request=request)
        self._wait(operations)

    def start(self, starts: tuple[Start, ...]) -> StartResult:
        """instances.start for each VM, then wait on each: a zone out of the machine says
        so only in the finished operation (ZONE_RESOURCE_POOL_EXHAUSTED)."""
        operations: dict[str, Any] = {}
        refused: list[tuple[str, str, LaunchErrorKind]] = []
        for start in starts:
            name = start.instance_id
            request = compute_v1.StartInstanceRequest(
                **self._where(name), instance=name, request_id=self._action_id(name, "start")
            )
            try:
                operations[name] = self._retry(self.instances.start, request=request)
            except (google_errors.NotFound, google_errors.BadRequest) as error:
                refused.append((name, str(error.message), LaunchErrorKind.OTHER))
        failed = self._wait(operations)
        offerings = {start.instance_id: start.offering for start in starts}
        for name, problem in failed.items():
            kind = refusal_kind(_codes(problem))
            refused.append((name, problem, kind))
            if kind is LaunchErrorKind.CAPACITY and offerings[name]:
                self.memory.refused_key(offerings[name], self.clock())
        return StartResult(tuple(operations), tuple(refused))

    def _action_id(self, name: str, action: str) -> str:
        """A stop's or start's idempotency id: the same on a retry within the minute, and
        another for the next stop or start of the VM, which the API would take for a
        repeat of the first and skip."""
        return request_id(name, f"{action}@{self.clock():%Y%m%dT%H%M}")

    def cancel(self, cancellations: tuple[Cancellation, ...]) -> None:
        """Compute Engine has no spot requests: a Spot VM is an instance from the start."""

    def adopt(self, adoptions: tuple[Adoption, ...]) -> None:
        """Nothing to adopt: Compute Engine labels a VM at creation."""

    def write_marks(self, marks: tuple[MarkWrite, ...]) -> None:
        """setLabels replaces a VM's whole label set, so it is one call per VM."""
        changes: dict[str, dict[str, str | None]] = {}
        for write in marks:
            label = gce_labels.MARK_LABELS[write.mark]
            value = gce_labels.format_time(write.value) if write.value else None
            for name in write.instance_ids:
                changes.setdefault(name, {})[label] = value
        for name, change in changes.items():
            self._set_labels(name, change)

    def _set_labels(self, name: str, change: dict[str, str | None]) -> None:
        seen = self._seen.get(name) or self._read(name)
        for attempt in range(2):
            labels = {k: v for k, v in seen.labels.items() if change.get(k, v) is not None}
            labels.update({k: v for k, v in change.items() if v is not None})
            body = compute_v1.InstancesSetLabelsRequest(
                labels=labels, label_fingerprint=seen.fingerprint
            )
            try:
                operation = self.instances.set_labels(
                    **self._where(name), instance=name, instances_set_labels_request_resource=body
                )
                deadline = self.clock() + self.config.operation_timeout_period
                problem = self._finish(operation.name, deadline, self._where(name))
                if problem:
                    raise RuntimeError(f"setLabels on {name}: {problem}")
                return
            except google_errors.PreconditionFailed:
                if attempt:
                    raise
                seen = self._read(name)  # labels changed since we read them: read again
            except google_errors.NotFound:
                return  # deleted meanwhile: nothing to mark

    def _read(self, name: str) -> _Seen:
        where = self._where(name)
        item = self.instances.get(**where, instance=name)
        return _Seen(dict(item.labels), item.label_fingerprint)


# How long after the warm pool stops a Spot VM its stop may still be ending: a stop
# later than that was the cloud's, a preemption (the VM was started again meanwhile).
_OUR_STOP = timedelta(minutes=15)


def _stopped_by_the_cloud(last_stop: str, ours: datetime | None) -> bool:
    """A stopped Spot VM was preempted unless the warm pool stopped it (its mark)."""
    if not last_stop:
        return False
    return ours is None or datetime.fromisoformat(last_stop) - ours > _OUR_STOP


def _kind(refused: list[str], failed: dict[str, str]) -> LaunchErrorKind:
    """What a launch's errors come to: an insert the API refused outright (a bad request,
    a permission) is ``OTHER``; else the failed operations' codes say."""
    if refused:
        return LaunchErrorKind.OTHER
    return refusal_kind(code for problem in failed.values() for code in _codes(problem))


def _codes(problem: str) -> set[str]:
    """The error codes in an operation's error text ("CODE: message; CODE: message")."""
    return {part.split(":", 1)[0].strip() for part in problem.split("; ")}
