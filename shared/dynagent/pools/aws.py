"""An EC2 pool: Determined's AWS provider fields."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, field_validator, model_validator

from dynagent.gpus import aws_gpus
from dynagent.pools.common import ProvisionerFields, StrictModel

_PRICE = re.compile(r"^\d+(\.\d+)?$")


class NetworkInterface(StrictModel):
    public_ip: bool = True
    security_group_id: str | None = None
    subnet_id: str | None = None


class CustomTag(StrictModel):
    key: str = Field(min_length=1, max_length=128)
    value: str = Field(max_length=256)


class AwsProvider(ProvisionerFields):
    """An EC2 pool, with Determined's AWS provider fields."""

    type: Literal["aws"]
    region: str = Field(min_length=1)
    image_id: str = Field(pattern=r"^ami-[0-9a-f]+$")
    instance_type: str = "p3.8xlarge"
    instance_slots: int | None = Field(default=None, ge=0)
    cpu_slots_allowed: bool = False
    root_volume_size: int = Field(default=200, ge=1)
    tag_key: str = Field(default="managed-by", min_length=1, max_length=128)
    tag_value: str = Field(default="dynagent", min_length=1, max_length=256)
    instance_name: str = "determined-ai-agent"
    ssh_key_name: str | None = None
    iam_instance_profile_arn: str | None = None
    network_interface: NetworkInterface = NetworkInterface()
    spot: bool = False
    spot_max_price: str | None = None
    custom_tags: tuple[CustomTag, ...] = ()
    use_private_ip: bool = True
    log_group: str | None = None
    log_stream: str | None = None

    @field_validator("spot_max_price")
    @classmethod
    def _price(cls, price: str | None) -> str | None:
        if price is not None and (not _PRICE.match(price) or float(price) <= 0):
            raise ValueError(f'{price!r} is not a price in dollars per hour, like "3.50"')
        return price

    @model_validator(mode="after")
    def _aws_checks(self) -> AwsProvider:
        if self.instance_slots is None and aws_gpus(self.instance_type) is None:
            raise ValueError(
                f"instance_slots is required: instance type {self.instance_type!r} "
                "is not in the built-in GPU table"
            )
        return self

    @property
    def shape(self) -> str:
        """The machine, as an admin would say it."""
        return self.instance_type

    @property
    def slots_per_instance(self) -> int:
        """Task slots one instance offers: its GPUs, or 1 for a CPU pool."""
        gpus = (
            self.instance_slots if self.instance_slots is not None else aws_gpus(self.instance_type)
        )
        if not gpus:
            return 1 if self.cpu_slots_allowed else 0
        return gpus
