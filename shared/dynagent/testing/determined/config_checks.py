"""The rules ``check.Validate`` runs over a master.yaml (``master/pkg/check/validate.go``),
each one's message as the master writes it, and ``MasterConfigError``, which a config the
master refuses raises."""

from __future__ import annotations

from typing import Any

# Determined's tables, which dynagent mirrors once: the EC2 slot table, gcp_config.go's
# machine families and the GPU counts each GCE accelerator allows.
from dynagent.core.gpus import DETERMINED_EC2_SLOTS
from dynagent.core.gpus import DETERMINED_GCE_GPU_COUNTS as _GCE_GPU_TYPES
from dynagent.core.gpus import DETERMINED_GCE_MACHINE_FAMILIES as _GCE_MACHINE_TYPES
from dynagent.testing.determined.config_defaults import JsonObject
from dynagent.testing.determined.durations import parse_go_duration


class MasterConfigError(ValueError):
    """A master.yaml the master refuses to start with; the message is the master's."""


def error_at(path: str, message: str) -> str:
    return f"error found at {path}: {message}"


def check_duration(value: Any, where: str) -> int:
    if not isinstance(value, str):
        raise MasterConfigError(f"{where}: invalid duration: {value!r} (write it as 20m or 30s)")
    try:
        return parse_go_duration(value)
    except ValueError as exc:
        raise MasterConfigError(f"{where}: error parsing duration: {exc}") from None


def _greater(actual: int, bound: int, message: str) -> str | None:
    return None if actual > bound else f"{message}: {actual} is not greater than {bound}"


def _at_least(actual: int, bound: int, message: str) -> str | None:
    if actual >= bound:
        return None
    return f"{message}: {actual} is not greater than or equal to {bound}"


def provider_errors(fields: JsonObject, path: str, where: str) -> list[str]:
    """provconfig.Config.Validate."""
    idle = check_duration(fields["max_idle_agent_period"], f"{where}.max_idle_agent_period")
    starting = check_duration(
        fields["max_agent_starting_period"], f"{where}.max_agent_starting_period"
    )
    minimum, maximum = fields["min_instances"], fields["max_instances"]
    found: list[str | None] = []
    url = fields["master_url"]
    if url:
        scheme, _, rest = url.partition("://")
        if "/" in rest:
            found.append(
                "invalid master url (expecting scheme://host:port): expected true, got false"
            )
        if scheme not in ("http", "https"):
            found.append(
                "master url scheme must be within [http, https]: "
                f"{scheme} is not in {{http, https}}"
            )
    found += [
        None
        if fields["agent_docker_image"]
        else "must configure an agent docker image:  must be non-empty",
        _greater(idle, 0, "max idle agent period must be greater than 0"),
        _greater(starting, 0, "max agent starting period must be greater than 0"),
        _at_least(minimum, 0, "min instance must be greater than or equal to 0"),
        _greater(maximum, 0, "max instance must be greater than 0"),
        _at_least(maximum, minimum, "max instance must be greater than or equal to min instance"),
    ]
    return [error_at(path, message) for message in found if message]


def aws_errors(cloud: JsonObject, path: str) -> list[str]:
    """AWSClusterConfig.Validate and validateInstanceTypeSlots."""
    found = [
        _greater(len(cloud["ssh_key_name"]), 0, "ec2 key name must be non-empty"),
        _at_least(cloud["root_volume_size"], 100, "ec2 root volume size must be >= 100"),
    ]
    price = cloud["spot_max_price"]
    if cloud["spot"] and price != "OnDemand":
        points = price.count(".")
        if points not in (0, 1):
            found.append(
                "spot max price should have either 0 or 1 decimal points. "
                f"Received {price}, which has {points} decimal points"
            )
        else:
            bad = next((c for c in price.replace(".", "") if not c.isdigit()), None)
            if bad is not None:
                found.append(
                    "spot max price should only contain digits and, optionally, one decimal "
                    f"point. Received {price}, which has the non-digit character {bad}"
                )
    slots = cloud.get("instance_slots")
    if cloud["instance_type"] not in DETERMINED_EC2_SLOTS:
        if slots is None:
            # Go lists the table in map order; sorted here so the message is stable.
            types = ", ".join(sorted(DETERMINED_EC2_SLOTS))
            found.append(
                "Either ec2 'instance_type' and 'instance_slots' must be specified or the ec2 "
                f"'instance_type' must be one of types: {types}"
            )
        elif slots < 0:
            found.append("ec2 'instance_slots' must be greater than or equal to 0")
    return [error_at(path, message) for message in found if message]


def gcp_errors(cloud: JsonObject, path: str) -> list[str]:
    """GCPClusterConfig.Validate and gceInstanceType.Validate."""
    found = [_at_least(cloud["boot_disk_size"], 100, "gce VM boot disk size must be >= 100")]
    kind = cloud["instance_type"]
    machine = kind["machine_type"]
    machine_ok = len(machine.split("-")) == 3 and machine.startswith(_GCE_MACHINE_TYPES)
    type_found = []
    if not machine_ok:
        type_found.append(f"gce VM machine type must be within: {', '.join(_GCE_MACHINE_TYPES)}")
    allowed = _GCE_GPU_TYPES.get(kind["gpu_type"])
    if allowed is None:
        # Go lists the map's keys in map order; sorted here.
        type_found.append(f"gce VM gpu type must be within: {', '.join(sorted(_GCE_GPU_TYPES))}")
    elif kind["gpu_num"] not in allowed:
        nums = " ".join(str(n) for n in sorted(allowed))
        type_found.append(f"gce VM gpu type {kind['gpu_type']} num must be within: [{nums}]")
    return [error_at(path, m) for m in found if m] + [
        error_at(f"{path}.InstanceType", m) for m in type_found
    ]


def resource_config_errors(names: list[str]) -> list[str]:
    """ResourceConfig.Validate, which the embedding Config inherits: each error twice."""
    found = []
    if not names:
        found.append(
            "for additional_resource_managers, you must specify at least one resource pool"
        )
    seen: set[str] = set()
    for name in names:
        if name in seen:
            found.append(f"resource pool has a duplicate name: {name}")
        seen.add(name)
    return [error_at(path, m) for m in found for path in ("root", "root.ResourceConfig")]
