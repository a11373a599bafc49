"""A Compute Engine pool: Determined's GCP provider fields, plus ``spot``."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from dynagent.gpus import gce_gpu_problem
from dynagent.pools.common import Duration, ProvisionerFields, StrictModel

# Compute Engine's rules for label keys and values, and for instance names (RFC 1035).
LABEL_KEY = re.compile(r"^[a-z][a-z0-9_-]{0,62}$")
LABEL_VALUE = re.compile(r"^[a-z0-9_-]{0,63}$")
NAME_PREFIX = re.compile(r"^[a-z][-a-z0-9]*$")
# Room the prefix leaves in a 63-character name for "{pool}-{seq}-{index}".
MAX_NAME_PREFIX = 30


class GcpNetworkInterface(StrictModel):
    network: str = "global/networks/default"
    subnetwork: str = ""
    external_ip: bool = False


class GcpServiceAccount(StrictModel):
    email: str = ""
    scopes: tuple[str, ...] = ("https://www.googleapis.com/auth/cloud-platform",)


class GcpInstanceType(StrictModel):
    machine_type: str = "n1-standard-32"
    gpu_type: str = "nvidia-tesla-t4"
    gpu_num: int = Field(default=4, ge=0)
    preemptible: bool = False

    @model_validator(mode="after")
    def _offered(self) -> GcpInstanceType:
        problem = gce_gpu_problem(self.gpu_type, self.gpu_num) if self.gpu_num else None
        if problem:
            raise ValueError(problem)
        return self


class GcpProvider(ProvisionerFields):
    """A pool of Compute Engine VMs in one zone."""

    type: Literal["gcp"]
    project: str = Field(min_length=1)
    zone: str = Field(pattern=r"^[a-z]+-[a-z]+[0-9]+-[a-z]$")
    boot_disk_size: int = Field(default=200, ge=10)
    boot_disk_source_image: str = Field(min_length=1)
    label_key: str = "managed-by"
    label_value: str = "dynagent"
    name_prefix: str = "det-dynamic-agent-"
    network_interface: GcpNetworkInterface = GcpNetworkInterface()
    network_tags: tuple[str, ...] = ()
    service_account: GcpServiceAccount = GcpServiceAccount()
    instance_type: GcpInstanceType = GcpInstanceType()
    cpu_slots_allowed: bool = False
    operation_timeout_period: Duration = timedelta(minutes=5)
    # Raw Compute Engine instance fields (REST names), merged under what we set.
    base_config: dict[str, Any] = Field(default_factory=dict)
    # Spot provisioning model (terminated instances are deleted); beside the legacy
    # instance_type.preemptible.
    spot: bool = False

    @field_validator("label_key")
    @classmethod
    def _label_key(cls, key: str) -> str:
        if not LABEL_KEY.match(key):
            raise ValueError(
                f"{key!r} is not a Compute Engine label key (lowercase letter first, then "
                "lowercase letters, digits, - or _, at most 63)"
            )
        return key

    @field_validator("label_value")
    @classmethod
    def _label_value(cls, value: str) -> str:
        if not value or not LABEL_VALUE.match(value):
            raise ValueError(
                f"{value!r} is not a Compute Engine label value (lowercase letters, digits, "
                "- or _, 1 to 63)"
            )
        return value

    @field_validator("name_prefix")
    @classmethod
    def _name_prefix(cls, prefix: str) -> str:
        if not NAME_PREFIX.match(prefix) or len(prefix) > MAX_NAME_PREFIX:
            raise ValueError(
                f"{prefix!r} cannot start instance names (a lowercase letter, then lowercase "
                f"letters, digits or -, at most {MAX_NAME_PREFIX})"
            )
        return prefix

    @property
    def slots_per_instance(self) -> int:
        """Task slots one VM offers: its GPUs, or 1 for a CPU pool."""
        if self.instance_type.gpu_num:
            return self.instance_type.gpu_num
        return 1 if self.cpu_slots_allowed else 0

    @property
    def shape(self) -> str:
        """The machine, as an admin would say it."""
        kind = self.instance_type
        gpus = f" + {kind.gpu_num} x {kind.gpu_type}" if kind.gpu_num else ""
        return f"{kind.machine_type}{gpus}"

    @property
    def preemptible_or_spot(self) -> bool:
        return self.spot or self.instance_type.preemptible
