"""Capacity: how many more VMs of an offering the local Compute will create.

``LocalCompute.limit_capacity()`` sets the limits; an insert past one ends with the error
of its kind (a stockout, with or without details, or a regional quota), worded as the
API words it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, NamedTuple

from dynagent.testing.gcp.errors import JsonObject
from dynagent.testing.gcp.instance_shapes import is_spot
from dynagent.testing.gcp.operations import Failure, default_failure_message
from dynagent.testing.gcp.value_rules import region_of

CAPACITY_KINDS: Final = {
    "stockout": "ZONE_RESOURCE_POOL_EXHAUSTED",
    "stockout_with_details": "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS",
    "quota": "QUOTA_EXCEEDED",
}
PROVISIONING_MODELS: Final = ("SPOT", "STANDARD")

# The GPUs that come with a machine type, as the accelerator type that names them.
_FAMILY_GPUS: Final = (
    ("a2-ultragpu-", "nvidia-a100-80gb"),
    ("a2-", "nvidia-tesla-a100"),
    ("a3-megagpu-", "nvidia-h100-mega-80gb"),
    ("a3-", "nvidia-h100-80gb"),
    ("g2-", "nvidia-l4"),
)
# Accelerator types whose regional quota name does not follow NVIDIA_<TYPE>_GPUS.
_QUOTA_NAMES: Final = {
    "nvidia-h100-80gb": "NVIDIA_H100_GPUS",
    "nvidia-h100-mega-80gb": "NVIDIA_H100_MEGA_GPUS",
}


class Offering(NamedTuple):
    """What capacity is counted by: machine type name, zone, SPOT or STANDARD."""

    machine_type: str
    zone: str
    provisioning: str


def offering_of(body: Mapping[str, Any], zone: str) -> Offering:
    """The offering an Instance body asks for; a legacy preemptible VM counts as SPOT."""
    machine_type = str(body.get("machineType", "")).rsplit("/", 1)[-1]
    spot = is_spot(body.get("scheduling") or {})
    return Offering(machine_type, zone, "SPOT" if spot else "STANDARD")


@dataclass
class CapacityLimit:
    """At most ``remaining`` more VMs matching (machine type, zone, provisioning model;
    None is any) can be created; past that, inserts fail with ``kind``'s error."""

    machine_type: str
    zone: str | None
    provisioning: str | None
    remaining: int
    kind: str
    declared: int
    quota: str | None = None
    message: str | None = None

    def matches(self, offering: Offering) -> bool:
        return (
            self.machine_type == offering.machine_type
            and self.zone in (None, offering.zone)
            and self.provisioning in (None, offering.provisioning)
        )

    def failure(self, project: str, body: Mapping[str, Any], offering: Offering) -> Failure:
        """The error an insert the limit refuses ends with, worded as the API words it."""
        code = CAPACITY_KINDS[self.kind]
        zone = offering.zone
        if self.kind == "quota":
            region = region_of(zone)
            name = self.quota or _quota_name(body, offering)
            text = self.message or (
                f"Quota '{name}' exceeded.  Limit: {float(self.declared)} in region {region}."
            )
            quota_info = {
                "metricName": f"compute.googleapis.com/{name.lower()}",
                "limitName": f"{name.replace('_', '-')}-per-project-region",
                "dimensions": {"region": region},
                "limit": float(self.declared),
            }
            return Failure(code, text, 403, ({"quotaInfo": quota_info},))
        text = self.message or default_failure_message(code, project, zone)
        if self.kind == "stockout":
            return Failure(code, text, 503)
        unavailable = (
            f"A {offering.machine_type} VM instance is currently unavailable in the {zone} "
            "zone. Try requesting the VM in another zone. For more information, view the "
            "troubleshooting documentation."
        )
        details: tuple[JsonObject, ...] = (
            {
                "help": {
                    "links": [
                        {
                            "description": "Troubleshooting documentation",
                            "url": "https://cloud.google.com/compute/docs/resource-error",
                        }
                    ]
                }
            },
            {"localizedMessage": {"locale": "en-US", "message": unavailable}},
            {
                "errorInfo": {
                    "domain": "compute.googleapis.com",
                    "reason": "stockout",
                    "metadatas": {
                        "attachment": "",
                        "vmType": offering.machine_type,
                        "zone": zone,
                        "zonesAvailable": "",
                    },
                }
            },
        )
        return Failure(code, text, 503, details)


def _quota_name(body: Mapping[str, Any], offering: Offering) -> str:
    """The regional quota a GPU VM draws on, e.g. NVIDIA_T4_GPUS or, for Spot,
    PREEMPTIBLE_NVIDIA_T4_GPUS; CPUS for a VM without GPUs."""
    accelerators = body.get("guestAccelerators") or []
    gpu = str(accelerators[0].get("acceleratorType", "")).rsplit("/", 1)[-1] if accelerators else ""
    for prefix, family_gpu in _FAMILY_GPUS:
        if not gpu and offering.machine_type.startswith(prefix):
            gpu = family_gpu
    if gpu:
        short = gpu.removeprefix("nvidia-tesla-").removeprefix("nvidia-")
        name = _QUOTA_NAMES.get(gpu, f"NVIDIA_{short.upper().replace('-', '_')}_GPUS")
    else:
        name = "CPUS"
    return f"PREEMPTIBLE_{name}" if offering.provisioning == "SPOT" else name
