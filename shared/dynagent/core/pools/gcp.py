"""A Compute Engine pool: Determined's GCP provider fields (provconfig/gcp_config.go),
plus ``spot``."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Annotated, Any, Literal

from pydantic import Field, field_validator, model_validator

from dynagent.core.gpus import (
    DETERMINED_GCE_GPU_COUNTS,
    determined_accepts_machine_type,
    gce_gpu_problem,
    gce_machine_type_problem,
)
from dynagent.core.offerings import Catalog, Offering, Purchase
from dynagent.core.pools.common import (
    Duration,
    ProvisionerFields,
    StrictModel,
    check_distinct,
    check_prices,
)
from dynagent.core.prices import (
    GCE_DISK_PER_GB_MONTH,
    GCE_GPU_PRICES,
    GCE_ON_DEMAND,
    disk_price_per_hour,
)

# Compute Engine's rules for label keys and values, and for instance names (RFC 1035).
LABEL_KEY = re.compile(r"^[a-z][a-z0-9_-]{0,62}$")
LABEL_VALUE = re.compile(r"^[a-z0-9_-]{0,63}$")
NAME_PREFIX = re.compile(r"^[a-z][-a-z0-9]*$")
# A pool's ``reservations`` entry: a reservation of the pool's project, by name, or a
# shared one of another project.
RESERVATION = re.compile(
    r"^(projects/[a-z][-a-z0-9]{4,28}[a-z0-9]/reservations/)?[a-z]([-a-z0-9]{0,61}[a-z0-9])?$"
)
# Room the prefix leaves in a 63-character name for a 16-character launch digest and an
# index. ``det deploy gcp`` writes prefixes like det-dynamic-agent-CLUSTER-0-38-0-.
MAX_NAME_PREFIX = 40


# projects/P/global/images/family/F, as a path or a full URL: the newest image of a family.
IMAGE_FAMILY = re.compile(
    r"(?:.*/)?projects/(?P<project>[^/]+)/global/images/family/(?P<family>[^/]+)"
)


class GcpNetworkInterface(StrictModel):
    network: str = "global/networks/default"
    subnetwork: str = ""
    external_ip: bool = False


class GcpServiceAccount(StrictModel):
    email: str = ""
    scopes: tuple[str, ...] = ("https://www.googleapis.com/auth/cloud-platform",)


class GcpInstanceType(StrictModel):
    """A machine and its GPUs; checked as gcp_config.go ``gceInstanceType.Validate`` does,
    with dynagent's larger tables (what only those know loads with a warning)."""

    machine_type: str = "n1-standard-32"
    gpu_type: str = "nvidia-tesla-t4"
    gpu_num: int = Field(default=4, ge=0)
    preemptible: bool = False

    @model_validator(mode="after")
    def _offered(self) -> GcpInstanceType:
        problem = gce_machine_type_problem(self.machine_type) or gce_gpu_problem(
            self.gpu_type, self.gpu_num
        )
        if problem:
            raise ValueError(problem)
        return self

    def warnings(self) -> list[str]:
        """What Determined's own tables would refuse."""
        found = []
        if not determined_accepts_machine_type(self.machine_type):
            found.append(
                f"machine_type {self.machine_type} is not one of Determined's machine "
                "families (Determined would refuse it)"
            )
        if self.gpu_type not in DETERMINED_GCE_GPU_COUNTS:
            found.append(
                f"gpu_type {self.gpu_type} is not in Determined's GPU table "
                "(Determined would refuse it)"
            )
        return found


ZONE = r"^[a-z]+-[a-z]+[0-9]+-[a-z]$"


class GcpOfferings(StrictModel):
    """dynagent's own: the machines, zones and provisioning models a pool may buy."""

    machines: tuple[GcpInstanceType, ...] = Field(min_length=1)
    # Default: the pool's zone.
    zones: tuple[Annotated[str, Field(pattern=ZONE)], ...] = ()
    # Preference order; default: spot if the pool's ``spot`` (or preemptible) is set.
    purchase: tuple[Literal["spot", "standard"], ...] | None = Field(default=None, min_length=1)
    # Dollars per hour: "MACHINE" for standard, "MACHINE/spot" for spot.
    prices: dict[str, float] = Field(default_factory=dict)
    # The pool's cap in slots (GPUs); default max_instances x the GPUs of instance_type.
    max_slots: int | None = Field(default=None, ge=1)
    # A cap in machines of any size, only where the admin sets one (default: none).
    max_machines: int | None = Field(default=None, ge=1)

    @model_validator(mode="after")
    def _distinct(self) -> GcpOfferings:
        names = [m.machine_type for m in self.machines]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(
                f"offerings.machines: {twice} listed twice (one entry per machine type)"
            )
        regions = {zone.rsplit("-", 1)[0] for zone in self.zones}
        if len(regions) > 1:
            raise ValueError(
                f"offerings.zones: {list(self.zones)} span regions {sorted(regions)}; "
                "a pool's zones share one region (its subnetwork's)"
            )
        return self


# Fields Determined fills in when they are empty (gcp_config.go ``InitDefaultValues``).
_EMPTY_IS_UNSET = ("project", "zone", "boot_disk_type", "label_value", "name_prefix")


class GcpProvider(ProvisionerFields):
    """A pool of Compute Engine VMs in one zone."""

    type: Literal["gcp"]
    # Default for both: the deployment's DYNAGENT_GCP_PROJECT (or GOOGLE_CLOUD_PROJECT) and
    # DYNAGENT_GCP_ZONE, filled in when loading; Determined asks the metadata server.
    project: str = Field(min_length=1)
    zone: str = Field(pattern=ZONE)
    boot_disk_size: int = Field(default=200, ge=100)
    boot_disk_source_image: str = Field(
        default="projects/determined-ai/global/images/det-environments-0736b6d", min_length=1
    )
    # A disk type name, or its URL (Determined keeps the last path part).
    boot_disk_type: str = "pd-standard"
    # Labels on every instance, under the pool's own label_key.
    labels: dict[str, str] = Field(default_factory=dict)
    # Send the agent's container logs to Cloud Logging (docker's gcplogs driver).
    use_cloud_logging: bool = False
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
    offerings: GcpOfferings | None = None
    # Ours: reservations the pool launches into before anything else (core.reservations).
    reservations: tuple[str, ...] = ()

    @field_validator("reservations")
    @classmethod
    def _reservations(cls, entries: tuple[str, ...]) -> tuple[str, ...]:
        for entry in entries:
            if not RESERVATION.match(entry):
                raise ValueError(
                    f"{entry!r} is not a reservation: give its name (h100-reserved) or, shared "
                    "from another project, projects/PROJECT/reservations/NAME"
                )
        return check_distinct(entries)

    @model_validator(mode="before")
    @classmethod
    def _empty_is_unset(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        return {k: v for k, v in data.items() if not (k in _EMPTY_IS_UNSET and v == "")}

    @field_validator("labels")
    @classmethod
    def _labels(cls, labels: dict[str, str]) -> dict[str, str]:
        for key, value in labels.items():
            if not LABEL_KEY.match(key) or not LABEL_VALUE.match(value):
                raise ValueError(
                    f"{key}={value!r} is not a Compute Engine label (keys: a lowercase letter, "
                    "then lowercase letters, digits, - or _; values may be empty)"
                )
        return labels

    @model_validator(mode="after")
    def _gcp_checks(self) -> GcpProvider:
        if self.label_key in self.labels:
            raise ValueError(
                f"labels: {self.label_key!r} is the pool's label_key; the pool sets it itself"
            )
        spec = self.offerings
        if spec is None:
            return self
        self.check_max_machines(spec.max_machines)
        names = tuple(m.machine_type for m in spec.machines)
        table = {m.machine_type: _list_price(m) for m in spec.machines if _list_price(m)}
        check_prices(names, spec.prices, table, "offerings")
        models = {m.gpu_type for m in spec.machines if m.gpu_num}
        if len(models) > 1 and not self.mixed_gpu_models:
            raise ValueError(
                f"offerings.machines mix GPU models ({', '.join(sorted(models))}); "
                "set mixed_gpu_models: true if tasks may run on any of them"
            )
        region = self.zone.rsplit("-", 1)[0]
        foreign = [z for z in spec.zones if not z.startswith(region + "-")]
        if foreign:
            raise ValueError(f"offerings.zones: {foreign} are not in the pool's region {region}")
        return self

    def warnings(self) -> list[str]:
        """What loads but deserves a second look: fields ignored, and what Determined
        itself would refuse (gcp_config.go ``gceInstanceType.Validate``)."""
        found = self.common_warnings()
        for machine in self.machines():
            found += [w for w in machine.warnings() if w not in found]
        models = {m.gpu_type for m in self.machines() if m.gpu_num}
        if len(models) > 1:
            found.append(f"offerings mix GPU models ({', '.join(sorted(models))}) on purpose")
        return found

    @property
    def image_family(self) -> tuple[str, str] | None:
        """(project, family) when ``boot_disk_source_image`` names an image family, which
        the functions resolve to its newest image (dynagent.gcp.images); else None."""
        found = IMAGE_FAMILY.fullmatch(self.boot_disk_source_image)
        return (found["project"], found["family"]) if found else None

    def machines(self) -> tuple[GcpInstanceType, ...]:
        """Every machine the pool may launch: its offerings', or its one instance_type."""
        return self.offerings.machines if self.offerings else (self.instance_type,)

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
        own = self.instance_type.gpu_num
        return self.slot_cap_of(self.offerings.max_slots, own, self.slots_per_instance)

    def machine(self, machine_type: str) -> GcpInstanceType:
        for machine in self.machines():
            if machine.machine_type == machine_type:
                return machine
        return self.instance_type

    def catalog(
        self, spot_prices: dict[str, float] | None = None, unavailable: frozenset[str] = frozenset()
    ) -> Catalog:
        """The pool's offerings in preference order ("standard" is on-demand)."""
        spec = self.offerings
        default = "spot" if self.preemptible_or_spot else "standard"
        purchases = [
            Purchase.SPOT if p == "spot" else Purchase.ON_DEMAND
            for p in (spec.purchase if spec and spec.purchase else (default,))
        ]
        zones = spec.zones if spec and spec.zones else (self.zone,)
        prices = spec.prices if spec else {}
        found = []
        for machine in self.machines():
            name = machine.machine_type
            slots = machine.gpu_num or (1 if self.cpu_slots_allowed else 0)
            standard = prices.get(name, _list_price(machine))
            for purchase in purchases:
                price = standard
                if purchase is Purchase.SPOT:
                    quoted = (spot_prices or {}).get(name, standard)
                    price = prices.get(f"{name}/spot", min(quoted, standard))
                gpus = f"{machine.gpu_num} x {machine.gpu_type}" if machine.gpu_num else ""
                found += [Offering(name, slots, price, zone, purchase, gpus) for zone in zones]
        return Catalog(tuple(found), unavailable)

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
    def stopped_disk_per_hour(self) -> float:
        """What a stopped VM of the pool bills: its boot disk, of ``boot_disk_type``
        (pd-standard's price for a type not in the table)."""
        kind = self.boot_disk_type.rsplit("/", 1)[-1]
        per_gb = GCE_DISK_PER_GB_MONTH.get(kind, GCE_DISK_PER_GB_MONTH["pd-standard"])
        return disk_price_per_hour(self.boot_disk_size, per_gb)

    @property
    def slots_per_instance(self) -> int:
        """Task slots one VM offers: its GPUs, or 1 for a CPU pool. With offerings, those
        of the largest machine."""
        gpus = max(machine.gpu_num for machine in self.machines())
        if gpus:
            return gpus
        return 1 if self.cpu_slots_allowed else 0

    @property
    def shape(self) -> str:
        """The machine, as an admin would say it."""
        shapes = []
        for kind in self.machines():
            gpus = f" + {kind.gpu_num} x {kind.gpu_type}" if kind.gpu_num else ""
            shapes.append(f"{kind.machine_type}{gpus}")
        return " | ".join(shapes)

    @property
    def preemptible_or_spot(self) -> bool:
        return self.spot or self.instance_type.preemptible


def _list_price(machine: GcpInstanceType) -> float:
    """The built-in price of a machine with its GPUs, or 0 when the table does not know it."""
    base = GCE_ON_DEMAND.get(machine.machine_type)
    if base is None:
        return 0.0
    if machine.machine_type.startswith(("a2-", "a3-", "g2-")):
        return base  # these machine types include their GPUs
    return base + machine.gpu_num * GCE_GPU_PRICES.get(machine.gpu_type, 0.0)
