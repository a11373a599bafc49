"""A pool's ``provider`` as the master holds it once its provisioner started
(``ProviderConfig``), its slots per instance (``provconfig``), and the provider
``LocalDetermined.add_pool`` makes from its arguments (``provider_for_pool``)."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

# Determined's tables, which dynagent mirrors once: the EC2 slot table and aws_config.go
# defaultAWSImageID (the image an EC2 pool boots when it names none).
from dynagent.core.gpus import DETERMINED_EC2_SLOTS
from dynagent.core.pools.aws import DEFAULT_IMAGE_IDS
from dynagent.testing.determined.config_defaults import (
    AWS_DEFAULTS,
    DETERMINED_IDENTIFIER,
    GCP_DEFAULTS,
    PROVIDER_DEFAULTS,
    JsonObject,
)

Cloud = Literal["aws", "gcp"]


def aws_slots_per_instance(
    instance_type: str, instance_slots: int | None, cpu_slots_allowed: bool
) -> int:
    """``AWSClusterConfig.SlotsPerInstance`` after ``validateInstanceTypeSlots``: a type in
    Determined's table (``ec2InstanceSlots``, mirrored as DETERMINED_EC2_SLOTS) keeps the
    table's count whatever ``instance_slots`` says; another type counts ``instance_slots``
    (validation added it to the table); 0 GPUs with ``cpu_slots_allowed`` is 1 CPU slot."""
    slots = DETERMINED_EC2_SLOTS.get(instance_type)
    if slots is None:
        slots = instance_slots or 0
    return 1 if slots == 0 and cpu_slots_allowed else slots


def gcp_slots_per_instance(gpu_num: int, cpu_slots_allowed: bool) -> int:
    """``GCPClusterConfig.SlotsPerInstance``: the GPUs (``instance_type.gpu_num``), or 1
    CPU slot with ``cpu_slots_allowed``."""
    return 1 if gpu_num == 0 and cpu_slots_allowed else gpu_num


@dataclass(frozen=True)
class ProviderConfig:
    """A pool's ``provider``, as the master holds it after its provisioner started:
    ``fields`` is what it prints (the provider's own fields flattened beside ``type``)."""

    type: Cloud
    fields: Mapping[str, Any]
    slots_per_instance: int

    @property
    def min_instances(self) -> int:
        return int(self.fields["min_instances"])

    @property
    def max_instances(self) -> int:
        return int(self.fields["max_instances"])

    @property
    def location(self) -> str:
        """The EC2 region or the GCE zone (what the pools API calls ``location``)."""
        return str(self.fields["region" if self.type == "aws" else "zone"])

    @property
    def instance_type(self) -> str:
        if self.type == "aws":
            return str(self.fields["instance_type"])
        return str(self.fields["instance_type"]["machine_type"])

    @property
    def preemptible(self) -> bool:
        if self.type == "aws":
            return bool(self.fields["spot"])
        return bool(self.fields["instance_type"]["preemptible"])

    @property
    def image_id(self) -> str:
        return str(self.fields["image_id" if self.type == "aws" else "boot_disk_source_image"])

    @property
    def gpus(self) -> int:
        """GPUs per instance (0 for a CPU type; the slot count may still be 1)."""
        if self.type == "aws":
            return aws_slots_per_instance(
                self.instance_type, self.fields.get("instance_slots"), cpu_slots_allowed=False
            )
        return int(self.fields["instance_type"]["gpu_num"])

    @property
    def slot_type(self) -> str:
        """``SlotType``: CUDA with GPUs, CPU with ``cpu_slots_allowed``, else none."""
        if self.gpus > 0:
            return "TYPE_CUDA"
        return "TYPE_CPU" if self.fields["cpu_slots_allowed"] else "TYPE_UNSPECIFIED"

    @property
    def accelerator(self) -> str:
        """``Accelerator``: ``4 x nvidia-tesla-t4`` on GCE (with GPUs); EC2 by family."""
        if self.type == "gcp":
            kind = self.fields["instance_type"]
            return f"{kind['gpu_num']} x {kind['gpu_type']}" if kind["gpu_num"] > 0 else ""
        name = self.instance_type
        prefixes = (
            ("g4dn", "NVIDIA T4 Tensor Core"),
            ("g5g", "NVIDIA T4G"),
            ("g5", "NVIDIA A10G"),
            ("g3", "NVIDIA Tesla M60"),
            ("p4d", "NVIDIA A100"),
            ("p3", "NVIDIA Tesla V100"),
            ("p2", "NVIDIA Tesla K80"),
        )
        found = next((card for prefix, card in prefixes if name.startswith(prefix)), "")
        return f"{self.gpus} x {found}" if found else ""


def provider_for_pool(
    cloud: Cloud,
    *,
    slots_per_instance: int,
    location: str,
    instance_type: str,
    preemptible: bool,
    min_instances: int,
    max_instances: int,
) -> ProviderConfig:
    """A provider made from ``LocalDetermined.add_pool``'s arguments, Determined's defaults
    for the rest, not validated: a test's shorthand, with the slot count given rather
    than looked up."""
    fields: JsonObject = {**copy.deepcopy(PROVIDER_DEFAULTS), "master_url": "http://:8080"}
    fields |= {"min_instances": min_instances, "max_instances": max_instances}
    if cloud == "aws":
        own = copy.deepcopy(AWS_DEFAULTS) | {
            "region": location,
            "instance_type": instance_type,
            "instance_slots": slots_per_instance,
            "spot": preemptible,
            "spot_max_price": "OnDemand",
            "tag_value": DETERMINED_IDENTIFIER,
            "image_id": DEFAULT_IMAGE_IDS.get(location, ""),
        }
    else:
        own = copy.deepcopy(GCP_DEFAULTS) | {
            "project": "local-project",
            "zone": location,
            "name_prefix": DETERMINED_IDENTIFIER + "-",
            "label_value": DETERMINED_IDENTIFIER,
        }
        own["instance_type"] |= {
            "machine_type": instance_type,
            "gpu_type": "nvidia-tesla-a100" if slots_per_instance > 0 else "",
            "gpu_num": slots_per_instance,
            "preemptible": preemptible,
        }
    return ProviderConfig(
        type=cloud, fields={**own, **fields, "type": cloud}, slots_per_instance=slots_per_instance
    )
