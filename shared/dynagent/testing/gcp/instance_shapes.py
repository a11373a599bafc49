"""Resources as the Compute Engine API returns them: URLs, times, fingerprints, defaults.

The output fields and defaults the API adds to what an insert sent (disks, scheduling,
metadata, tags), written as the API writes them.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta, timezone
from typing import Any, Final

from dynagent.testing.gcp.errors import JsonObject

# The real API writes links under this root whatever endpoint was called; so do we.
API_ROOT: Final = "https://www.googleapis.com/compute/v1/"

# The real API stamps times in US Pacific time, with an offset: parsers must not assume Z.
_API_TZ: Final = timezone(timedelta(hours=-7))


def utcnow() -> datetime:
    return datetime.now(UTC)


def timestamp(when: datetime) -> str:
    """RFC 3339 with milliseconds and an offset, as the API writes them."""
    return when.astimezone(_API_TZ).isoformat(timespec="milliseconds")


def is_spot(scheduling: Mapping[str, Any]) -> bool:
    return scheduling.get("provisioningModel") == "SPOT" or scheduling.get("preemptible") is True


def zone_url_of(project: str, zone: str) -> str:
    return f"{API_ROOT}projects/{project}/zones/{zone}"


def instance_path(project: str, zone: str, name: str) -> str:
    return f"projects/{project}/zones/{zone}/instances/{name}"


def global_url(value: str, project: str) -> str:
    """``global/networks/default`` or ``projects/P/...`` as a full URL."""
    if value.startswith("https://"):
        return value
    return (
        f"{API_ROOT}{value}"
        if value.startswith("projects/")
        else f"{API_ROOT}projects/{project}/{value}"
    )


def fingerprint(value: object) -> str:
    """8 bytes, base64, like the API's fingerprints; opaque to clients."""
    digest = hashlib.sha256(json.dumps(value, sort_keys=True).encode()).digest()
    return base64.b64encode(digest[:8]).decode()


def attached_disk(disk: JsonObject, index: int, zone_url: str, instance: str) -> JsonObject:
    params: JsonObject = disk.get("initializeParams") or {}
    # initializeParams is input only: the API never returns it.
    out = {key: value for key, value in disk.items() if key != "initializeParams"}
    disk_name = params.get("diskName") or (instance if index == 0 else f"{instance}-{index}")
    out.setdefault("source", f"{zone_url}/disks/{disk_name}")
    out.setdefault("deviceName", f"persistent-disk-{index}")
    out.setdefault("diskSizeGb", str(params.get("diskSizeGb", "10")))
    out.setdefault("type", "PERSISTENT")
    out.setdefault("mode", "READ_WRITE")
    out.setdefault("interface", "SCSI")
    out.setdefault("autoDelete", False)
    out.update(kind="compute#attachedDisk", index=index, boot=index == 0)
    return out


def scheduling_with_defaults(scheduling: JsonObject) -> JsonObject:
    """The defaults the API fills in; Spot VMs default to no restart, TERMINATE, STOP."""
    out = dict(scheduling)
    spot = is_spot(scheduling)
    out.setdefault("provisioningModel", "STANDARD")
    out.setdefault("preemptible", spot)
    out.setdefault("automaticRestart", not spot)
    out.setdefault("onHostMaintenance", "TERMINATE" if spot else "MIGRATE")
    if out["provisioningModel"] == "SPOT":
        out.setdefault("instanceTerminationAction", "STOP")
    return out


def metadata_resource(metadata: JsonObject | None) -> JsonObject:
    items = list((metadata or {}).get("items") or [])
    out: JsonObject = {"kind": "compute#metadata", "fingerprint": fingerprint(items)}
    if items:
        out["items"] = items
    return out


def tags_resource(tags: JsonObject | None) -> JsonObject:
    items = list((tags or {}).get("items") or [])
    out: JsonObject = {"fingerprint": fingerprint(items)}
    if items:
        out["items"] = items
    return out


def label_fingerprint(instance_id: str, labels: Mapping[str, str], version: int) -> str:
    # The API's fingerprint "changes after every request to modify or update labels",
    # even one that sets the same labels: hence the version.
    return fingerprint([instance_id, dict(labels), version])
