"""The EC2 adapter: the Provider contract for one pool, with boto3.

Every call selects or carries the managed tag pair, so nothing without it is touched;
the IAM policy in template.yaml enforces the same rule on AWS's side.
"""

from __future__ import annotations

import base64
import hashlib
import time
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from botocore.exceptions import ClientError

from dynagent.core.boot import MasterUrlError, agent_boot, machine_gpus, master_address, render
from dynagent.core.boot.drift import read_boot_tag
from dynagent.core.config import AwsProvider, Pool, Settings
from dynagent.core.fleet import (
    Fleet,
    Instance,
    InstanceState,
    RequestState,
    Reservation,
    SpotRequest,
)
from dynagent.core.offerings import Offering, Purchase
from dynagent.core.plan import (
    Adoption,
    Cancellation,
    MarkWrite,
    Plan,
    Start,
    Stop,
    Termination,
)
from dynagent.core.reservations import machines_in_each
from dynagent.run.fallback import Attempt, launch_with_fallback
from dynagent.run.provider import LaunchErrorKind, LaunchNotVisible, LaunchResult, StartResult

from . import tags
from .fleet_launch import (
    METADATA_OPTIONS,
    NO_RESERVATION,
    SPOT_PRICES_FOR,
    FleetLauncher,
    WarmState,
    lowest_spot_prices,
    template_data,
)
from .refusals import UNFULFILLABLE_SPOT_STATUSES, refusal_kind
from .reservations import (
    RESERVATIONS_FOR,
    ReservationCache,
    describe_named,
    pool_subnets,
    reservation_from,
    subnet_zones,
)

# EC2 takes at most this many ids in one TerminateInstances or CreateTags call.
MAX_IDS_PER_CALL = 1000
# Errors a launch reports as its result: retrying the same request will not help.
LAUNCH_REFUSALS = frozenset(
    {
        "InsufficientInstanceCapacity", "InstanceLimitExceeded", "VcpuLimitExceeded",
        "MaxSpotInstanceCountExceeded", "SpotMaxPriceTooLow", "Unsupported",
        "InvalidParameterValue", "InvalidParameterCombination", "InvalidAMIID.NotFound",
        "InvalidAMIID.Malformed", "InvalidSubnetID.NotFound", "InvalidGroup.NotFound",
        "InvalidKeyPair.NotFound", "UnauthorizedOperation",
    }
)  # fmt: skip
_NOT_FOUND = frozenset({"InvalidInstanceID.NotFound", "InvalidSpotInstanceRequestID.NotFound"})
# IMDSv2: a session token, then the instance id.
AGENT_ID_COMMAND = (
    'curl -sf -H "X-aws-ec2-metadata-token: $(curl -sf -X PUT '
    "http://169.254.169.254/latest/api/token "
    '-H "X-aws-ec2-metadata-token-ttl-seconds: 300")" '
    "http://169.254.169.254/latest/meta-data/instance-id"
)
MACHINE_TYPE_COMMAND = AGENT_ID_COMMAND.replace("instance-id", "instance-type")


# EC2 refuses user data over 16 KB (before base64).
USER_DATA_LIMIT = 16 * 1024
# How long a launch that describe calls did not show yet still counts as the pool's: far
# beyond EC2's usual lag of seconds, and within max_idle_agent_period, so an instance
# that never shows is forgotten before anything would have reaped it.
IN_FLIGHT_FOR = timedelta(minutes=10)


def client_token(launch_key: str, index: int = 0) -> str:
    """EC2's idempotency token (at most 64 ASCII characters) for a plan's launch call."""
    digest = hashlib.sha256(f"{launch_key}#{index}".encode()).hexdigest()
    return f"dynagent-{digest[:48]}"


def error_code(error: ClientError) -> str:
    return str(error.response.get("Error", {}).get("Code", ""))


class Ec2Provider:
    """Observe and change one pool's EC2 fleet."""

    def __init__(
        self,
        pool: Pool,
        ec2: Any,
        settings: Settings | None = None,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        sleep: Callable[[float], None] = time.sleep,
        root_devices: dict[str, str] | None = None,
        warm: WarmState | None = None,
    ) -> None:
        if not isinstance(pool.provider, AwsProvider):
            raise TypeError(f"pool {pool.name!r} is not an AWS pool")
        self.pool = pool
        self.config: AwsProvider = pool.provider
        self.ec2 = ec2
        self.settings = settings or Settings()
        self.clock = clock
        self.sleep = sleep
        # What a warm function keeps across passes: each image's root device (an AMI
        # never changes, so it is described once), launch templates, the offerings EC2
        # recently had no capacity for, spot prices.
        self.warm = warm or WarmState(root_devices=root_devices if root_devices is not None else {})
        self.root_devices = self.warm.root_devices
        # EC2's largest page, so a 1,000-instance pool is one DescribeInstances call.
        self.page_size = 1000
        self.max_ids_per_call = MAX_IDS_PER_CALL
        # What this provider's launches started, by id, for the in-flight memory.
        self._launched: dict[str, Instance | SpotRequest] = {}

    # Observe

    def observe(self) -> Fleet:
        instances = tuple(self._instances(self._filters(_LIVE_STATES)))
        requests = tuple(self._spot_requests()) if self.config.spot else ()
        instances, requests = self._with_in_flight(instances, requests)
        reservations = self.reservations(instances)
        if self.config.offerings is None and not reservations:
            return Fleet(instances=instances, spot_requests=requests)
        return Fleet(
            instances=instances,
            spot_requests=requests,
            unavailable=self.warm.memory(self.pool.name).unavailable(self.clock()),
            spot_prices=self._spot_prices(),
            reservations=reservations,
        )

    def reservations(self, instances: tuple[Instance, ...]) -> tuple[Reservation, ...]:
        """The reservations the pool names, read at most once a minute by a warm function
        (``aws.reservations``), their free places counted against ``instances``."""
        if not self.config.reservations:
            return ()
        cache = self.warm.reservations.setdefault(self.pool.name, ReservationCache())
        now = self.clock()
        ours = machines_in_each(instances)
        if cache.read_at is None or now - cache.read_at >= RESERVATIONS_FOR:
            items = describe_named(self.ec2, self.config.reservations)
            cache.items = [(item, ours.get(item["CapacityReservationId"], 0)) for item in items]
            cache.read_at = now
        subnets = pool_subnets(self.config)
        zones = subnet_zones(self.ec2, subnets, cache.subnet_zones)
        return tuple(
            reservation_from(
                item, (then, ours.get(item["CapacityReservationId"], 0)), subnets, zones, now
            )
            for item, then in cache.items
        )

    def _with_in_flight(
        self, instances: tuple[Instance, ...], requests: tuple[SpotRequest, ...]
    ) -> tuple[tuple[Instance, ...], tuple[SpotRequest, ...]]:
        """Add the launches a wait gave up on that describe calls still do not show.

        EC2 is eventually consistent: without this, the next snapshot (the one that
        superseded the failed record) would see no new instance and launch again under
        its own key. Seen once, a launch is the cloud's to report from then on.
        """
        memory = self.warm.in_flight.get(self.pool.name)
        if not memory:
            return instances, requests
        seen = {i.id for i in instances} | {r.id for r in requests}
        seen |= {i.spot_request_id for i in instances if i.spot_request_id}
        now = self.clock()
        for launch_id, launched in list(memory.items()):
            at = launched.launched_at if isinstance(launched, Instance) else launched.created_at
            if launch_id in seen or now - at > IN_FLIGHT_FOR:
                del memory[launch_id]
        extra_instances = tuple(x for x in memory.values() if isinstance(x, Instance))
        extra_requests = tuple(x for x in memory.values() if isinstance(x, SpotRequest))
        return instances + extra_instances, requests + extra_requests

    def _spot_prices(self) -> dict[str, float]:
        """Spot prices of the pool's types, read at most once an hour by a warm function,
        and only for types whose spot price the config does not give."""
        spec = self.config.offerings
        if spec is None or Purchase.SPOT not in self.config.purchases:
            return {}
        wanted = tuple(t for t in spec.instance_types if f"{t}/spot" not in spec.prices)
        if not wanted:
            return {}
        key, now = (self.config.region, wanted), self.clock()
        cached = self.warm.spot_prices.get(key)
        if cached is None or now - cached[0] >= SPOT_PRICES_FOR:
            cached = (now, lowest_spot_prices(self.ec2, wanted, now))
            self.warm.spot_prices[key] = cached
        return cached[1]

    def _filters(self, states: list[str]) -> list[dict[str, object]]:
        return [
            *tags.managed_filters(self.config, self.pool.name),
            {"Name": "instance-state-name", "Values": states},
        ]

    def _instances(self, filters: list[dict[str, object]], **ids: Any) -> Iterator[Instance]:
        pages = self.ec2.get_paginator("describe_instances").paginate(
            Filters=filters,
            **ids,
            **({} if ids else {"PaginationConfig": {"PageSize": self.page_size}}),
        )
        for page in pages:
            for reservation in page["Reservations"]:
                for item in reservation["Instances"]:
                    state = tags.INSTANCE_STATES.get(item["State"]["Name"])
                    if state is not None:
                        found = item.get("Tags", [])
                        boot = read_boot_tag(tags.tag_value(found, tags.BOOT_CONFIG_TAG))
                        yield Instance(
                            id=item["InstanceId"],
                            state=state,
                            # EC2's LaunchTime is the last start's, so a machine started
                            # from the warm pool counts its starting period from then.
                            launched_at=item["LaunchTime"],
                            marks=tags.marks_from_tags(found),
                            boot_config=boot[0],
                            boot_parts=boot[1],
                            spot_request_id=item.get("SpotInstanceRequestId"),
                            instance_type=item.get("InstanceType", ""),
                            zone=item.get("SubnetId", ""),
                            spot=item.get("InstanceLifecycle") == "spot",
                            aliases=_hostnames(item.get("PrivateDnsName", "")),
                            reservation=item.get("CapacityReservationId", ""),
                        )

    def _spot_requests(self) -> Iterator[SpotRequest]:
        pages = self.ec2.get_paginator("describe_spot_instance_requests").paginate(
            Filters=[
                *tags.managed_filters(self.config, self.pool.name),
                {"Name": "state", "Values": ["open", "active", "cancelled"]},
            ],
            PaginationConfig={"PageSize": self.page_size},
        )
        for page in pages:
            for item in page["SpotInstanceRequests"]:
                request = _spot_request(item)
                if request is not None:
                    yield request

    # Launch

    def launch(self, plan: Plan) -> LaunchResult:
        if not plan.launches:
            return LaunchResult()
        try:
            user_data = self._user_data(plan)
        except MasterUrlError as error:
            return LaunchResult(error=f"master_url: {error}")
        if len(user_data.encode()) > USER_DATA_LIMIT:
            return LaunchResult(
                error=f"the boot script is {len(user_data.encode())} bytes and EC2 takes at most "
                f"{USER_DATA_LIMIT} of user data: shorten startup_script, "
                "container_startup_script or agent_config_file_contents"
            )
        if self.config.offerings is not None or any(la.reserved for la in plan.launches):
            return self._launch_fleet(plan, user_data)
        try:
            if self.config.spot:
                result = self._request_spot(plan, user_data)
            else:
                result = self._run_instances(
                    len(plan.launches), plan.launch_key, user_data, plan.boot_tag
                )
        except ClientError as error:
            code = error_code(error)
            if code == "IdempotentParameterMismatch":
                # An earlier try of this same snapshot launched already, with another count.
                return LaunchResult(replayed=True)
            if code in LAUNCH_REFUSALS:
                message = f"{code}: {error.response['Error'].get('Message', '')}"
                return LaunchResult(error=message, error_kind=refusal_kind(code))
            raise
        self._wait_visible(result.started, requests=self.config.spot)
        return result

    def _launch_fleet(self, plan: Plan, user_data: str) -> LaunchResult:
        """Each machine on its first offering EC2 has capacity for: into a reservation
        with RunInstances naming it, else via CreateFleet (a pool with ``offerings``) or
        RunInstances on the offering (a pool of one type with reservations)."""
        fleet = (
            self.fleet_launcher(user_data).call(plan.launch_key, plan.boot_tag)
            if self.config.offerings is not None
            else None
        )

        def call(offering: Offering, count: int) -> Attempt:
            if fleet is None or offering.reservation:
                return self._run_on(offering, count, plan, user_data)
            return fleet(offering, count)

        def remembered(offering: Offering, count: int) -> Attempt:
            attempt = call(offering, count)
            for instance_id in attempt.started:
                self._launched[instance_id] = Instance(
                    id=instance_id,
                    state=InstanceState.STARTING,
                    launched_at=self.clock(),
                    instance_type=offering.instance_type,
                    zone=offering.zone,
                    spot=offering.purchase is Purchase.SPOT,
                    reservation=offering.reservation,
                )
            return attempt

        memory = self.warm.memory(self.pool.name)
        result = launch_with_fallback(plan.launches, remembered, memory, self.clock())
        self._wait_visible(result.started, requests=False)
        return result

    def _run_on(self, offering: Offering, count: int, plan: Plan, user_data: str) -> Attempt:
        """RunInstances for ``count`` machines of one offering, as one fallback step: a
        reservation's places, or a pool of one type's machine beside its reservations.
        EC2 starts what the reservation still holds (MinCount 1); the rest fall back."""
        request = self.run_request(count, plan.launch_key, user_data, offering, plan.boot_tag)
        try:
            response = self.ec2.run_instances(**request)
        except ClientError as error:
            code = error_code(error)
            if code == "IdempotentParameterMismatch":
                return Attempt(replayed=True)
            if refusal_kind(code) is LaunchErrorKind.CAPACITY:
                return Attempt(out_of_capacity=True)
            if code in LAUNCH_REFUSALS or refusal_kind(code) is not LaunchErrorKind.OTHER:
                message = f"{code}: {error.response['Error'].get('Message', '')}"
                return Attempt(error=message, error_kind=refusal_kind(code))
            raise
        started = tuple(item["InstanceId"] for item in response["Instances"])
        return Attempt(started=started, out_of_capacity=len(started) < count)

    def fleet_launcher(self, user_data: str) -> FleetLauncher:
        """The CreateFleet side of launching this pool (``offerings``), with its template's
        data built from ``user_data``."""
        return FleetLauncher(
            self.pool.name,
            self.config,
            self.ec2,
            self.warm,
            data=lambda: template_data(
                self._launch_specification(),
                user_data,
                tags.instance_tags(self.config, self.pool.name),
            ),
            token=client_token,
        )

    def _run_instances(
        self, count: int, launch_key: str, user_data: str, boot_config: str
    ) -> LaunchResult:
        request = self.run_request(count, launch_key, user_data, boot_config=boot_config)
        response = self.ec2.run_instances(**request)
        for item in response["Instances"]:
            self._launched[item["InstanceId"]] = Instance(
                id=item["InstanceId"],
                state=InstanceState.STARTING,
                launched_at=item.get("LaunchTime") or self.clock(),
                instance_type=item.get("InstanceType", ""),
                zone=item.get("SubnetId", ""),
            )
        return LaunchResult(started=tuple(i["InstanceId"] for i in response["Instances"]))

    def _request_spot(self, plan: Plan, user_data: str) -> LaunchResult:
        request = self.spot_request(len(plan.launches), plan.launch_key, plan.launch_at, user_data)
        requests = self.ec2.request_spot_instances(**request)["SpotInstanceRequests"]
        for item in requests:
            self._launched[item["SpotInstanceRequestId"]] = SpotRequest(
                id=item["SpotInstanceRequestId"],
                state=RequestState.OPEN,
                created_at=item.get("CreateTime") or self.clock(),
            )
        return LaunchResult(started=tuple(r["SpotInstanceRequestId"] for r in requests))

    def run_request(
        self,
        count: int,
        launch_key: str,
        user_data: str,
        offering: Offering | None = None,
        boot_config: str = "",
    ) -> dict[str, Any]:
        """RunInstances' arguments for ``count`` machines, as a launch sends them. With an
        ``offering``, of that machine (its type, subnet and market) from the pool's
        ``offerings``: what CreateFleet launches for it, as one RunInstances call."""
        request = self._launch_specification()
        if offering is not None:
            self._place(request, offering)
        request["TagSpecifications"] = self._tag_specifications(
            launch_key, ["instance", "volume"], boot_config
        )
        request["MetadataOptions"] = dict(METADATA_OPTIONS)
        request["InstanceInitiatedShutdownBehavior"] = "terminate"
        request["UserData"] = user_data
        request.setdefault("CapacityReservationSpecification", dict(NO_RESERVATION))
        # One call per offering tried: its own token, so a fallback is not a replay.
        token = client_token(f"{launch_key}|{offering.key}" if offering else launch_key)
        return {"MinCount": 1, "MaxCount": count, "ClientToken": token, **request}

    def _place(self, request: dict[str, Any], offering: Offering) -> None:
        """Put a RunInstances request on one offering, as a fleet override does."""
        request["InstanceType"] = offering.instance_type
        if offering.zone and "NetworkInterfaces" in request:
            request["NetworkInterfaces"][0]["SubnetId"] = offering.zone
        elif offering.zone:
            request["SubnetId"] = offering.zone
        if offering.purchase is Purchase.SPOT:
            spot = {"MaxPrice": self.config.spot_max_price} if self.config.spot_max_price else {}
            request["InstanceMarketOptions"] = {"MarketType": "spot", "SpotOptions": spot}
        if offering.reservation:
            target = {"CapacityReservationId": offering.reservation}
            request["CapacityReservationSpecification"] = {"CapacityReservationTarget": target}
            if offering.capacity_block:
                request["InstanceMarketOptions"] = {"MarketType": "capacity-block"}
            place = self._reservation_zone(offering.reservation)
            if not offering.zone and place:
                # The default subnets: the reservation's zone says where.
                request["Placement"] = {"AvailabilityZone": place}

    def _reservation_zone(self, reservation_id: str) -> str:
        cache = self.warm.reservations.get(self.pool.name)
        for item, _ in cache.items if cache else ():
            if item["CapacityReservationId"] == reservation_id:
                return str(item.get("AvailabilityZone", ""))
        return ""

    def spot_request(
        self, count: int, launch_key: str, launch_at: datetime, user_data: str
    ) -> dict[str, Any]:
        """RequestSpotInstances' arguments for ``count`` machines, as a launch sends them."""
        specification = self._launch_specification()
        specification["UserData"] = base64.b64encode(user_data.encode()).decode()
        extra = {"SpotPrice": self.config.spot_max_price} if self.config.spot_max_price else {}
        return {
            "InstanceCount": count,
            "Type": "one-time",
            # From the plan, not the clock: a retry must send the very same request.
            "ValidUntil": launch_at + self.settings.spot_request_valid_for,
            "ClientToken": client_token(launch_key),
            "LaunchSpecification": specification,
            "TagSpecifications": self._tag_specifications(launch_key, ["spot-instances-request"]),
            **extra,
        }

    def _launch_specification(self) -> dict[str, Any]:
        """What RunInstances and a spot request's LaunchSpecification share."""
        config = self.config
        spec: dict[str, Any] = {
            "ImageId": config.image_id,
            "InstanceType": config.instance_type,
            "BlockDeviceMappings": [
                {
                    "DeviceName": self._root_device_name(),
                    "Ebs": {
                        "VolumeSize": config.root_volume_size,
                        "VolumeType": "gp3",
                        "DeleteOnTermination": True,
                    },
                }
            ],
        }
        if config.ssh_key_name:
            spec["KeyName"] = config.ssh_key_name
        if config.iam_instance_profile_arn:
            spec["IamInstanceProfile"] = {"Arn": config.iam_instance_profile_arn}
        network = config.network_interface
        if network.subnet_id or network.security_group_id:
            interface: dict[str, Any] = {
                "DeviceIndex": 0,
                "AssociatePublicIpAddress": network.public_ip,
                "DeleteOnTermination": True,
            }
            if network.subnet_id:
                interface["SubnetId"] = network.subnet_id
            if network.security_group_id:
                interface["Groups"] = [network.security_group_id]
            spec["NetworkInterfaces"] = [interface]
        return spec

    def _root_device_name(self) -> str:
        """The image's root device, so the size applies to the root volume itself."""
        image = self.config.image_id
        if image not in self.root_devices:
            try:
                images = self.ec2.describe_images(ImageIds=[image])["Images"]
            except ClientError as error:
                # EC2 answers a missing or malformed AMI with InvalidAMIID.*, not an
                # empty list: the launch itself then reports it, as a launch error.
                if not error_code(error).startswith("InvalidAMIID"):
                    raise
                images = []
            if not images:
                return "/dev/sda1"  # the launch itself will say the image is missing
            self.root_devices[image] = images[0].get("RootDeviceName", "/dev/sda1")
        return self.root_devices[image]

    def _tag_specifications(
        self, launch_key: str, kinds: Sequence[str], boot_config: str = ""
    ) -> list[dict[str, Any]]:
        pool = self.pool.name
        launch_tag = {"Key": tags.LAUNCH_KEY_TAG, "Value": launch_key}
        boot = tags.boot_config_tags(boot_config)
        specs = []
        for kind in kinds:
            base = (
                tags.instance_tags(self.config, pool)
                if kind != "spot-instances-request"
                else tags.identity_tags(self.config, pool)
            )
            extra = boot if kind == "instance" else []
            specs.append({"ResourceType": kind, "Tags": [*base, launch_tag, *extra]})
        return specs

    def _user_data(self, plan: Plan) -> str:
        return self.boot_script(dict(plan.master_addresses))

    def boot_script(self, master_addresses: dict[str, str]) -> str:
        """The boot script (``dynagent.core.boot``), with the master's address the snapshot
        resolved; MasterUrlError when an alias in master_url stays unresolved."""
        master = master_address(self.config.master_url).resolved(master_addresses)
        boot = agent_boot(self.config, self.pool.name, machine_gpus(self.config), master)
        return render(boot, AGENT_ID_COMMAND, MACHINE_TYPE_COMMAND)

    def _wait_visible(self, started: tuple[str, ...], requests: bool) -> None:
        """Poll until describe calls show every launch, so the next pass counts them."""
        if not started:
            return
        deadline = self.clock() + self.settings.launch_visibility_timeout
        delay = 0.25
        while True:
            missing = set(started) - self._visible(started, requests)
            if not missing:
                return
            if self.clock() >= deadline:
                # Counted as the pool's by the next passes of this warm function until
                # describe shows them; the record fails and is retried all the same.
                memory = self.warm.in_flight.setdefault(self.pool.name, {})
                memory.update({i: self._launched[i] for i in missing if i in self._launched})
                raise LaunchNotVisible(
                    f"pool {self.pool.name!r}: {len(missing)} launched resource(s) not visible "
                    f"after {self.settings.launch_visibility_timeout}: {sorted(missing)}"
                )
            self.sleep(delay)
            delay = min(delay * 2, 4.0)

    def _visible(self, ids: tuple[str, ...], requests: bool) -> set[str]:
        filters = tags.managed_filters(self.config, self.pool.name)
        try:
            if requests:
                response = self.ec2.describe_spot_instance_requests(
                    SpotInstanceRequestIds=list(ids), Filters=filters
                )
                return {r["SpotInstanceRequestId"] for r in response["SpotInstanceRequests"]}
            return {
                i.id for i in self._instances(self._filters(_ALL_STATES), InstanceIds=list(ids))
            }
        except ClientError as error:
            if error_code(error) in _NOT_FOUND:
                return set()
            raise

    # Change

    def _chunks(self, ids: list[str]) -> Iterator[list[str]]:
        size = self.max_ids_per_call
        for start in range(0, len(ids), size):
            yield ids[start : start + size]

    def terminate(self, terminations: tuple[Termination, ...]) -> None:
        self._each_chunk(self.ec2.terminate_instances, [t.instance_id for t in terminations])

    def stop(self, stops: tuple[Stop, ...]) -> None:
        """StopInstances: the machine keeps its EBS root, with its Docker images, and its
        tags."""
        self._each_chunk(self.ec2.stop_instances, [s.instance_id for s in stops])

    def _each_chunk(self, call: Callable[..., Any], ids: list[str]) -> None:
        """``call`` on the ids, a chunk at a time; not found is done."""
        for chunk in self._chunks(ids):
            try:
                call(InstanceIds=chunk)
            except ClientError as error:
                if error_code(error) not in _NOT_FOUND:
                    raise
                # One unknown id fails the call: retry with those that still exist.
                existing = self._existing(chunk)
                if existing:
                    call(InstanceIds=existing)

    def start(self, starts: tuple[Start, ...]) -> StartResult:
        """StartInstances, one call a machine: EC2 refuses a call as a whole, and a
        machine refused for capacity must not hold the others back."""
        started: list[str] = []
        refused: list[tuple[str, str, LaunchErrorKind]] = []
        for start in starts:
            try:
                self.ec2.start_instances(InstanceIds=[start.instance_id])
            except ClientError as error:
                code = error_code(error)
                kind = refusal_kind(code)
                if kind is LaunchErrorKind.THROTTLED:
                    raise  # the pass is retried; the others' starts are replayed harmlessly
                # Capacity, a machine gone or not stopped yet, anything else: the pass
                # covers its tasks with a new machine instead.
                message = f"{code}: {error.response['Error'].get('Message', '')}"
                refused.append((start.instance_id, message, kind))
                if kind is LaunchErrorKind.CAPACITY and start.offering:
                    self.warm.memory(self.pool.name).refused_key(start.offering, self.clock())
                continue
            started.append(start.instance_id)
        return StartResult(tuple(started), tuple(refused))

    def _existing(self, ids: list[str]) -> list[str]:
        """Those of ``ids`` that are still the pool's, for a retry after one was gone."""
        by_id: list[dict[str, object]] = [
            *tags.managed_filters(self.config, self.pool.name),
            {"Name": "instance-id", "Values": ids},
        ]
        return [i.id for i in self._instances(by_id)]

    def cancel(self, cancellations: tuple[Cancellation, ...]) -> None:
        for chunk in self._chunks([c.request_id for c in cancellations]):
            try:
                self.ec2.cancel_spot_instance_requests(SpotInstanceRequestIds=chunk)
            except ClientError as error:
                if error_code(error) not in _NOT_FOUND:
                    raise

    def adopt(self, adoptions: tuple[Adoption, ...]) -> None:
        """Tag what managed spot requests launched, then give it the metadata options
        every launch asks for: RequestSpotInstances takes none, so a spot instance gets
        its hop limit of 2 here, a pass after it starts, minutes before its agent
        registers and runs tasks."""
        ids = sorted({a.instance_id for a in adoptions})
        for chunk in self._chunks(ids):
            self.ec2.create_tags(
                Resources=chunk, Tags=tags.instance_tags(self.config, self.pool.name)
            )
        for instance_id in ids:
            self.ec2.modify_instance_metadata_options(InstanceId=instance_id, **METADATA_OPTIONS)

    def write_marks(self, marks: tuple[MarkWrite, ...]) -> None:
        for write in marks:
            key = tags.MARK_TAGS[write.mark]
            for chunk in self._chunks(list(write.instance_ids)):
                if write.value is None:
                    self.ec2.delete_tags(Resources=chunk, Tags=[{"Key": key}])
                else:
                    value = tags.format_time(write.value)
                    self.ec2.create_tags(Resources=chunk, Tags=[{"Key": key, "Value": value}])


_LIVE_STATES = ["pending", "running", "stopping", "stopped"]
_ALL_STATES = [*_LIVE_STATES, "shutting-down", "terminated"]


def _hostnames(private_dns_name: str) -> tuple[str, ...]:
    """``ip-10-0-0-5.us-west-2.compute.internal`` and ``ip-10-0-0-5``: what an agent
    started without DET_AGENT_ID registers as (its container's hostname)."""
    if not private_dns_name:
        return ()
    return (private_dns_name, private_dns_name.split(".", 1)[0])


def _spot_request(item: dict[str, Any]) -> SpotRequest | None:
    status = item.get("Status", {})
    code = status.get("Code", "")
    state = tags.SPOT_REQUEST_STATES.get(item["State"])
    if item["State"] == "cancelled" and code == tags.CANCELLED_INSTANCE_RUNNING:
        state = RequestState.CANCELLED_INSTANCE_RUNNING
    if state is None:
        return None
    return SpotRequest(
        id=item["SpotInstanceRequestId"],
        state=state,
        created_at=item["CreateTime"],
        status_code=code,
        status_updated_at=status.get("UpdateTime"),
        unfulfillable=code in UNFULFILLABLE_SPOT_STATUSES,
        instance_id=item.get("InstanceId"),
    )
