"""An EC2 pool: Determined's AWS provider fields (provconfig/aws_config.go)."""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from dynagent.core.gpus import DETERMINED_EC2_SLOTS, aws_gpu_model, aws_gpus
from dynagent.core.offerings import Catalog, Offering, Purchase
from dynagent.core.pools.common import ProvisionerFields, StrictModel, check_distinct, check_prices
from dynagent.core.prices import AWS_ON_DEMAND, EBS_GP3_PER_GB_MONTH, disk_price_per_hour

# Determined's rule (aws_config.go ``validateMaxSpotPrice``): digits and at most one point.
_PRICE = re.compile(r"^(\d+\.?\d*|\.\d+)$")

# Determined's agent AMI per region, used when a pool gives no image_id
# (aws_config.go ``defaultAWSImageID``).
DEFAULT_IMAGE_IDS: dict[str, str] = {
    "ap-northeast-1": "ami-0e199a4564d2bb8c5",
    "ap-northeast-2": "ami-09043281c2988de23",
    "ap-southeast-1": "ami-026791eca219c5cc0",
    "ap-southeast-2": "ami-09fcadc6e05761b30",
    "us-east-2": "ami-0dca1adfc8c152c7a",
    "us-east-1": "ami-07329961c2a161c61",
    "us-west-2": "ami-015aabd7d10854b76",
    "eu-central-1": "ami-0a6a509944baa9c38",
    "eu-west-2": "ami-02248e5d563fb4017",
    "eu-west-1": "ami-0870dc8c1081c2ed0",
}
# What a pool's ``reservations`` entry may be: an ODCR or Capacity Block id, or a tag
# selector matching reservations by their tags. A capacity reservation group's ARN is
# recognised, to say it is not read yet.
RESERVATION_ID = re.compile(r"^cr-[0-9a-f]{8}([0-9a-f]{9})?$")
RESERVATION_GROUP = re.compile(r"^arn:aws[a-z-]*:resource-groups:[a-z0-9-]+:\d{12}:group/[\w.-]+$")
RESERVATION_TAGS = re.compile(r"^tag:[^=]{1,128}=.{0,256}$")

# Fields Determined fills in when they are empty (aws_config.go ``InitDefaultValues``):
# an empty string is unset for these.
# An AMI id, or the AMI an SSM parameter holds, as RunInstances' ImageId takes it
# (parameter names: letters, digits, _ . - and /; a version or label after a colon).
SSM_IMAGE_PREFIX = "resolve:ssm:"
_NAME = r"[A-Za-z0-9_.\-]+"
SSM_IMAGE_OR_AMI = rf"^(ami-[0-9a-f]+|resolve:ssm:/?{_NAME}(/{_NAME})*(:{_NAME})?)$"
_EMPTY_IS_UNSET = ("region", "image_id", "spot_max_price", "tag_value")


class NetworkInterface(StrictModel):
    public_ip: bool = True
    security_group_id: str | None = None
    subnet_id: str | None = None


class CustomTag(StrictModel):
    key: str = Field(min_length=1, max_length=128)
    value: str = Field(max_length=256)


class AwsOfferings(StrictModel):
    """dynagent's own: the shapes, subnets and purchase options a pool may buy."""

    instance_types: tuple[str, ...] = Field(min_length=1)
    # Default: the pool's network_interface.subnet_id.
    subnet_ids: tuple[str, ...] = ()
    # Preference order; default: spot if the pool's ``spot`` is set, else on-demand.
    purchase: tuple[Literal["spot", "on-demand"], ...] | None = Field(default=None, min_length=1)
    # Dollars per hour: "TYPE" for on-demand (over the built-in table), "TYPE/spot" for spot.
    prices: dict[str, float] = Field(default_factory=dict)
    # Slots of types outside the built-in GPU table.
    slots: dict[str, int] = Field(default_factory=dict)
    # The pool's cap in slots (GPUs); default max_instances x the slots of instance_type.
    max_slots: int | None = Field(default=None, ge=1)
    # A cap in machines of any size, only where the admin sets one (default: none).
    max_machines: int | None = Field(default=None, ge=1)

    @field_validator("instance_types", "subnet_ids", "purchase")
    @classmethod
    def _distinct(cls, values: tuple[str, ...] | None) -> tuple[str, ...] | None:
        return None if values is None else check_distinct(values)


class AwsProvider(ProvisionerFields):
    """An EC2 pool, with Determined's AWS provider fields."""

    type: Literal["aws"]
    # Default: the functions' AWS_REGION / AWS_DEFAULT_REGION (filled in when loading).
    region: str = Field(min_length=1)
    # Default: Determined's agent AMI for the region (DEFAULT_IMAGE_IDS). Or EC2's
    # ``resolve:ssm:NAME[:VERSION]``: the AMI an SSM parameter holds (dynagent.aws.images).
    image_id: str
    instance_type: str = "g4dn.metal"
    instance_slots: int | None = Field(default=None, ge=0)
    cpu_slots_allowed: bool = False
    root_volume_size: int = Field(default=200, ge=100)
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
    offerings: AwsOfferings | None = None
    # Ours: reservations the pool launches into before anything else (core.reservations).
    reservations: tuple[str, ...] = ()

    @model_validator(mode="before")
    @classmethod
    def _determined_defaults(cls, data: Any) -> Any:
        """Empty means unset for the fields Determined fills in; a missing image_id is
        Determined's AMI for the region (aws_config.go ``InitDefaultValues``)."""
        if not isinstance(data, dict):
            return data
        fields = {
            k: v
            for k, v in data.items()
            if v is not None and not (k in _EMPTY_IS_UNSET and v == "")
        }
        region = fields.get("region")
        if "image_id" not in fields and isinstance(region, str) and region:
            if region not in DEFAULT_IMAGE_IDS:
                raise ValueError(
                    f"image_id: required: Determined has no default agent AMI in region "
                    f"{region} (it has one in {', '.join(sorted(DEFAULT_IMAGE_IDS))})"
                )
            fields["image_id"] = DEFAULT_IMAGE_IDS[region]
        return fields

    @field_validator("image_id")
    @classmethod
    def _image(cls, image: str) -> str:
        if not re.match(SSM_IMAGE_OR_AMI, image):
            raise ValueError(
                f"{image!r} is neither an AMI id (ami-0123456789abcdef0) nor "
                "resolve:ssm:PARAMETER (the AMI an SSM parameter holds, e.g. "
                "resolve:ssm:/aws/service/deeplearning/ami/...)"
            )
        return image

    @property
    def image_parameter(self) -> str | None:
        """The SSM parameter ``image_id`` names (``resolve:ssm:NAME``), or None."""
        if self.image_id.startswith(SSM_IMAGE_PREFIX):
            return self.image_id.removeprefix(SSM_IMAGE_PREFIX)
        return None

    @field_validator("spot_max_price")
    @classmethod
    def _price(cls, price: str | None) -> str | None:
        if price is not None and (not _PRICE.match(price) or float(price) <= 0):
            raise ValueError(f'{price!r} is not a price in dollars per hour, like "3.50"')
        return price

    @field_validator("reservations")
    @classmethod
    def _reservations(cls, entries: tuple[str, ...]) -> tuple[str, ...]:
        for entry in entries:
            if RESERVATION_GROUP.match(entry):
                raise ValueError(
                    f"{entry!r}: capacity reservation groups are not read yet; name the "
                    "group's reservations by id, or by a tag they carry (tag:KEY=VALUE)"
                )
            if not (RESERVATION_ID.match(entry) or RESERVATION_TAGS.match(entry)):
                raise ValueError(
                    f"{entry!r} is not a capacity reservation: give its id "
                    "(cr-0123456789abcdef0) or tags its reservations carry (tag:KEY=VALUE)"
                )
        return check_distinct(entries)

    @model_validator(mode="after")
    def _aws_checks(self) -> AwsProvider:
        if self.offerings is not None:
            self._check_offerings(self.offerings)
        elif self.instance_slots is None and aws_gpus(self.instance_type) is None:
            raise ValueError(
                f"instance_slots is required: instance type {self.instance_type!r} "
                "is not in the built-in slot table"
            )
        return self

    def _check_offerings(self, offerings: AwsOfferings) -> None:
        self.check_max_machines(offerings.max_machines)
        for instance_type in offerings.instance_types:
            if instance_type not in offerings.slots and aws_gpus(instance_type) is None:
                raise ValueError(
                    f"offerings.instance_types: {instance_type!r} is not in the built-in GPU "
                    "table; give its slots in offerings.slots"
                )
        check_prices(offerings.instance_types, offerings.prices, AWS_ON_DEMAND, "offerings")
        unknown = sorted(set(offerings.slots) - set(offerings.instance_types))
        if unknown:
            raise ValueError(f"offerings.slots: {unknown} not in offerings.instance_types")
        models = _gpu_models(offerings.instance_types)
        if len(models) > 1 and not self.mixed_gpu_models:
            raise ValueError(
                f"offerings.instance_types mix GPU models ({', '.join(sorted(models))}); "
                "set mixed_gpu_models: true if tasks may run on any of them"
            )

    def warnings(self) -> list[str]:
        """What loads but deserves a second look: fields ignored, and what Determined
        itself would refuse (aws_config.go ``AWSClusterConfig.Validate``)."""
        found = self.common_warnings()
        if not self.ssh_key_name:
            found.append(
                "ssh_key_name is not set: agents take no SSH key (Determined requires one)"
            )
        found += self._slot_warnings()
        if self.offerings is not None:
            models = _gpu_models(self.offerings.instance_types)
            if len(models) > 1:
                found.append(f"offerings mix GPU models ({', '.join(sorted(models))}) on purpose")
        return found

    def _slot_warnings(self) -> list[str]:
        """Where dynagent's slot count differs from what Determined would do."""
        if self.offerings is not None:
            return []
        table = DETERMINED_EC2_SLOTS.get(self.instance_type)
        if table is not None and self.instance_slots not in (None, table):
            return [
                f"instance_slots {self.instance_slots} overrides the table's {table} for "
                f"{self.instance_type} (Determined keeps its table's count)"
            ]
        if table is None and self.instance_slots is None:
            return [
                f"instance_type {self.instance_type} is not in Determined's slot table "
                f"(Determined needs instance_slots; dynagent counts {self.slots_per_instance})"
            ]
        return []

    @property
    def purchases(self) -> tuple[Purchase, ...]:
        """How the pool buys, in preference order: ``offerings.purchase``, else by ``spot``."""
        listed = self.offerings.purchase if self.offerings else None
        return tuple(Purchase(p) for p in listed or ("spot" if self.spot else "on-demand",))

    def catalog(
        self, spot_prices: dict[str, float] | None = None, unavailable: frozenset[str] = frozenset()
    ) -> Catalog:
        """The pool's offerings in preference order; spot prices as the cloud quotes them."""
        if self.offerings is None:
            purchase = Purchase.SPOT if self.spot else Purchase.ON_DEMAND
            price = AWS_ON_DEMAND.get(self.instance_type, 0.0)
            if self.spot and self.spot_max_price:
                ceiling = float(self.spot_max_price)
                price = min(price, ceiling) if price else ceiling
            zone = self.network_interface.subnet_id or ""
            only = Offering(self.instance_type, self.slots_per_instance, price, zone, purchase)
            return Catalog((only,), unavailable)
        spec = self.offerings
        purchases = self.purchases
        zones = spec.subnet_ids or (self.network_interface.subnet_id or "",)
        found = []
        for instance_type in spec.instance_types:
            slots = self.gpus_of(instance_type)
            on_demand = spec.prices.get(instance_type, AWS_ON_DEMAND.get(instance_type, 0.0))
            for purchase in purchases:
                price = on_demand
                if purchase is Purchase.SPOT:
                    quoted = (spot_prices or {}).get(instance_type, on_demand)
                    price = spec.prices.get(f"{instance_type}/spot", min(quoted, on_demand))
                found += [Offering(instance_type, slots, price, z, purchase) for z in zones]
        return Catalog(tuple(found), unavailable)

    @property
    def shape(self) -> str:
        """The machine, as an admin would say it."""
        if self.offerings is not None:
            return " | ".join(self.offerings.instance_types)
        return self.instance_type

    @property
    def stopped_disk_per_hour(self) -> float:
        """What a stopped machine of the pool bills: its gp3 root volume."""
        return disk_price_per_hour(self.root_volume_size, EBS_GP3_PER_GB_MONTH)

    @property
    def slots_per_instance(self) -> int:
        """Task slots one instance offers: its GPUs, or 1 for a CPU pool. With offerings,
        those of the largest machine."""
        if self.offerings is not None:
            return max(self.gpus_of(t) for t in self.offerings.instance_types)
        gpus = self.gpus_of(self.instance_type)
        if not gpus:
            return 1 if self.cpu_slots_allowed else 0
        return gpus

    @property
    def machine_cap(self) -> int | None:
        """The pool's cap in machines (None: none): ``machine_cap_of``."""
        offerings = self.offerings
        return self.machine_cap_of(
            offerings is not None, offerings.max_machines if offerings else None
        )

    @property
    def slot_cap(self) -> int | None:
        """The cap in slots of a pool with offerings (None: max_instances alone)."""
        if self.offerings is None:
            return None
        own = self.instance_slots or aws_gpus(self.instance_type) or 0
        return self.slot_cap_of(self.offerings.max_slots, own, self.slots_per_instance)

    def gpus_of(self, instance_type: str) -> int:
        """GPUs of a machine type the pool launches: the pool's own count
        (``offerings.slots``, or ``instance_slots``, which Determined adds to its slot
        table), else the table's."""
        if self.offerings is not None:
            return self.offerings.slots.get(instance_type) or aws_gpus(instance_type) or 0
        if instance_type == self.instance_type and self.instance_slots is not None:
            return self.instance_slots
        return aws_gpus(instance_type) or 0


def _gpu_models(instance_types: tuple[str, ...]) -> set[str]:
    return {model for t in instance_types if (model := aws_gpu_model(t))}
