"""Value rules the Compute Engine API enforces beyond the schema.

The rules that matter to a GPU autoscaler: RFC 1035 names, label syntax and count, zone
names, zonal machine/accelerator type URLs, a boot disk, metadata sizes, request ids, and
the scheduling rules the API enforces for Spot and GPU VMs.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Final

from dynagent.testing.gcp.errors import JsonObject, invalid
from dynagent.testing.gcp.instance_shapes import API_ROOT, is_spot

MAX_LABELS: Final = 64
MAX_METADATA_VALUE_BYTES: Final = 256 * 1024
MAX_METADATA_TOTAL_BYTES: Final = 512 * 1024

_NAME = re.compile(r"[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?")
_NAME_RULE: Final = "Must be a match of regex '(?:[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?)'"
# ASCII only: the API also allows international lowercase letters, dynagent never uses them.
_LABEL_KEY = re.compile(r"[a-z][a-z0-9_-]{0,62}")
_LABEL_VALUE = re.compile(r"[a-z0-9_-]{0,63}")
_METADATA_KEY = re.compile(r"[a-zA-Z0-9_-]{1,128}")
_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", re.IGNORECASE)
_ZERO_UUID: Final = "00000000-0000-0000-0000-000000000000"
# REGION-x: any region (us-central1, northamerica-northeast1, ...) and any zone letter(s).
_ZONE = re.compile(r"(?P<region>[a-z]+-[a-z]+[0-9]+)-[a-z][a-z0-9]*")
_ZONAL_REF = re.compile(
    r"(?:https://(?:www|compute)\.googleapis\.com/compute/v1/)?"
    r"(?:projects/(?P<project>[^/]+)/)?zones/(?P<zone>[^/]+)/(?P<collection>\w+)/(?P<name>[^/]+)"
)
# Machine families whose GPUs come with the machine type, not guestAccelerators.
_GPU_FAMILIES: Final = ("a2-", "a3-", "a4-", "g2-", "g4-")


def check_name(name: object, field_name: str) -> str:
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise invalid(field_name, name, _NAME_RULE)
    return name


def check_labels(labels: Mapping[str, object], field_name: str) -> None:
    if len(labels) > MAX_LABELS:
        raise invalid(field_name, "", f"At most {MAX_LABELS} labels are allowed.")
    for key, value in labels.items():
        if not _LABEL_KEY.fullmatch(key):
            raise invalid(
                field_name,
                "",
                f"Label key '{key}' violates format constraints. The key must start with a "
                "lowercase character, can only contain lowercase letters, numeric characters, "
                "underscores and dashes. The key can be at most 63 characters long.",
            )
        if not isinstance(value, str) or not _LABEL_VALUE.fullmatch(value):
            raise invalid(
                field_name,
                "",
                f"Label value '{value}' violates format constraints. The value can only contain "
                "lowercase letters, numeric characters, underscores and dashes. The value can "
                "be at most 63 characters long.",
            )


def request_id_of(query: Mapping[str, str]) -> str | None:
    request_id = query.get("requestId")
    if request_id is None:
        return None
    if not _UUID.fullmatch(request_id) or request_id == _ZERO_UUID:
        raise invalid("requestId", request_id, "The request ID must be a valid non-zero UUID.")
    return request_id.lower()


def zonal_ref(value: object, collection: str, project: str, zone: str, field_name: str) -> str:
    """A full or partial URL of a zonal resource (``zones/Z/machineTypes/T``) in the
    request's zone, as the full URL the API returns."""
    match = _ZONAL_REF.fullmatch(value) if isinstance(value, str) else None
    if match is None or match["collection"] != collection:
        raise invalid(
            field_name, value, f"Expected a URL of the form zones/ZONE/{collection}/NAME."
        )
    if match["zone"] != zone:
        raise invalid(field_name, value, f"The {collection} must be in zone '{zone}'.")
    owner = match["project"] or project
    return f"{API_ROOT}projects/{owner}/zones/{zone}/{collection}/{match['name']}"


def _check_disks(disks: list[JsonObject]) -> None:
    if not disks:
        raise invalid("resource.disks", "", "At least one disk, the boot disk, is required.")
    boot = disks[0]
    params = boot.get("initializeParams") or {}
    if not (boot.get("source") or params.get("sourceImage") or params.get("sourceSnapshot")):
        raise invalid(
            "resource.disks[0]",
            "",
            "The boot disk needs a source or initializeParams.sourceImage/sourceSnapshot.",
        )
    if any(disk.get("boot") for disk in disks[1:]):
        raise invalid("resource.disks", "", "Only the first disk can be the boot disk.")


def _check_accelerators(body: JsonObject, project: str, zone: str) -> None:
    for index, accelerator in enumerate(body.get("guestAccelerators") or []):
        where = f"resource.guestAccelerators[{index}]"
        zonal_ref(accelerator.get("acceleratorType"), "acceleratorTypes", project, zone, where)
        if int(accelerator.get("acceleratorCount") or 0) < 1:
            count = accelerator.get("acceleratorCount")
            raise invalid(f"{where}.acceleratorCount", count, "Must be at least 1.")


def _has_gpus(body: JsonObject) -> bool:
    machine_type = str(body.get("machineType", "")).rsplit("/", 1)[-1]
    return bool(body.get("guestAccelerators")) or machine_type.startswith(_GPU_FAMILIES)


def _check_scheduling(body: JsonObject) -> None:
    """Spot/preemptible VMs cannot restart automatically or live-migrate, nor can GPU VMs
    live-migrate: the API refuses such requests, so must we."""
    scheduling: JsonObject = body.get("scheduling") or {}
    field_name = "resource.scheduling"
    maintenance = scheduling.get("onHostMaintenance")
    if is_spot(scheduling):
        if scheduling.get("automaticRestart") is True:
            raise invalid(
                f"{field_name}.automaticRestart",
                "true",
                "Spot VMs cannot be restarted automatically.",
            )
        if maintenance == "MIGRATE":
            raise invalid(
                f"{field_name}.onHostMaintenance",
                maintenance,
                "Scheduling must have preemptible be false when OnHostMaintenance isn't TERMINATE.",
            )
    elif _has_gpus(body) and (maintenance or "MIGRATE") == "MIGRATE":
        raise invalid(
            f"{field_name}.onHostMaintenance",
            maintenance or "MIGRATE",
            "Instances with guest accelerators do not support live migration.",
        )


def _check_metadata(metadata: JsonObject | None) -> None:
    seen: set[str] = set()
    total = 0
    for index, item in enumerate((metadata or {}).get("items") or []):
        where = f"resource.metadata.items[{index}]"
        key, value = str(item.get("key", "")), str(item.get("value") or "")
        if not _METADATA_KEY.fullmatch(key):
            raise invalid(f"{where}.key", key, "Must be a match of regex '[a-zA-Z0-9-_]{1,128}'.")
        if key in seen:
            raise invalid(f"{where}.key", key, "Duplicate metadata key.")
        seen.add(key)
        size = len(value.encode("utf-8"))
        if size > MAX_METADATA_VALUE_BYTES:
            raise invalid(f"{where}.value", "...", f"Value is {size} bytes, over 256 KB.")
        total += len(key) + size
    if total > MAX_METADATA_TOTAL_BYTES:
        raise invalid("resource.metadata", "...", f"Metadata is {total} bytes, over 512 KB.")


def check_new_instance(body: JsonObject, project: str, zone: str) -> None:
    """The rules a valid Instance body must meet on insert, beyond its schema."""
    check_name(body.get("name"), "resource.name")
    zonal_ref(body.get("machineType"), "machineTypes", project, zone, "resource.machineType")
    check_labels(body.get("labels") or {}, "resource.labels")
    _check_disks(body.get("disks") or [])
    _check_accelerators(body, project, zone)
    _check_scheduling(body)
    _check_metadata(body.get("metadata"))


def check_zone(zone: str) -> str:
    """Any ``REGION-x`` zone is served; a region or a typo is refused as the API does."""
    if not _ZONE.fullmatch(zone):
        raise invalid("zone", zone, "Unknown zone.")
    return zone


def region_of(zone: str) -> str:
    """``us-central1`` for ``us-central1-a``."""
    match = _ZONE.fullmatch(zone)
    if match is None:
        raise ValueError(f"{zone!r} is not a zone name (REGION-x, e.g. us-central1-a)")
    return match["region"]
