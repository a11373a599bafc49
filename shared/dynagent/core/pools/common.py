"""Fields every pool's provider shares: how agents start and how the fleet is sized.

Names and defaults are Determined's provisioner's, so a pool pasted from a master's
config loads unchanged.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    field_validator,
    model_validator,
)

from dynagent.core.durations import HOW_TO_WRITE, parse_duration


def _duration(value: Any) -> Any:
    """Go duration text only, as Determined reads it: a bare number has no unit."""
    if isinstance(value, str):
        return parse_duration(value)
    if isinstance(value, int | float) and not isinstance(value, bool):
        raise ValueError(f"{value!r} has no unit: {HOW_TO_WRITE}")
    return value


Duration = Annotated[timedelta, BeforeValidator(_duration)]


class StrictModel(BaseModel):
    """Unknown fields are refused; ``null`` means the field is unset (its default applies),
    as Go's JSON decoding leaves a field alone for ``null``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    @model_validator(mode="before")
    @classmethod
    def _null_is_unset(cls, data: Any) -> Any:
        if isinstance(data, dict):
            return {key: value for key, value in data.items() if value is not None}
        return data


# The host names Determined resolves from the cloud's metadata when it starts
# (provconfig/config.go ``Config.InitMasterAddress``); resolved at launch here.
MASTER_HOST_ALIASES = frozenset(
    {"local-ipv4", "public-ipv4", "local-hostname", "public-hostname", "internal-ip", "external-ip"}
)


def check_master_url(url: str) -> str:
    """Determined's rule (provconfig/config.go ``Config.Validate``): empty, or
    ``scheme://host[:port]`` with scheme http or https and no path. The host may be one of
    Determined's metadata aliases (``local-ipv4``, ``internal-ip``, ...)."""
    if not url:
        return url
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 (a bad port raises here)
    except ValueError as error:
        raise ValueError(f"{url!r} cannot be parsed as a URL: {error}") from None
    if parts.scheme not in ("http", "https"):
        raise ValueError(f"{url!r}: the scheme must be http or https (like http://10.0.0.5:8080)")
    if parts.path:
        raise ValueError(f"{url!r} has a path; expecting scheme://host:port")
    return url


def _number_or_auto(value: Any, what: str) -> Any:
    """A count of ``what``, 0 or more, or ``auto``: one message either way."""
    if value == "auto":
        return value
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise ValueError(f"{value!r} is neither a number of {what} nor auto")
    try:
        number = int(value)
    except ValueError:
        raise ValueError(f"{value!r} is neither a number of {what} nor auto") from None
    if number < 0:
        raise ValueError(f"{number} is below 0: write a number of {what}, 0 or more, or auto")
    return number


def _slots_or_auto(value: Any) -> Any:
    return _number_or_auto(value, "slots")


def _count_or_auto(value: Any) -> Any:
    return _number_or_auto(value, "machines")


def _count_or_share(value: Any) -> Any:
    """A number of agents, 1 or more, or a share of the pool's agents (``10%``)."""
    how = "write a number of agents (like 2) or a share of them (like 10%)"
    if isinstance(value, str) and value.strip().endswith("%"):
        try:
            share = float(value.strip()[:-1])
        except ValueError:
            raise ValueError(f"{value!r} is not a share: {how}") from None
        if not 0 < share <= 100:
            raise ValueError(f"{value!r} is not a share from above 0% to 100%: {how}")
        return value.strip()
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)  # as --sweep writes it
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{value!r} is neither a number nor a share: {how}")
    if value < 1:
        raise ValueError(f"{value} is below 1: {how}")
    return value


class WarmPool(StrictModel):
    """Ours: idle agents stopped instead of terminated, and started again for new work.

    A stopped machine bills only its disks and keeps its Docker images, so its agent is
    back in the time a start takes, not a boot's with its image pull. ``max_stopped`` 0
    turns it off: every stopped machine is terminated, as before.
    """

    # How many stopped machines the pool keeps; ``auto``: as many as would bring the pool
    # back to its most agents at once over the last max_stopped_period
    # (dynagent.core.decide.warm_pool_size).
    max_stopped: Annotated[int | Literal["auto"], BeforeValidator(_count_or_auto)] = 0
    # How long one may stay stopped before it is deleted: its disks bill meanwhile.
    max_stopped_period: Duration = timedelta(days=7)

    @field_validator("max_stopped_period")
    @classmethod
    def _positive(cls, period: timedelta) -> timedelta:
        if period <= timedelta(0):
            raise ValueError("must be greater than 0 (like 168h)")
        return period

    @property
    def enabled(self) -> bool:
        return self.auto or self.max_stopped != 0

    @property
    def auto(self) -> bool:
        """Whether the pool's own history sizes it (``max_stopped: auto``)."""
        return self.max_stopped == "auto"

    @property
    def stopped_limit(self) -> int:
        """The fixed bound: ``max_stopped``, or 0 when it is ``auto``."""
        stopped = self.max_stopped
        return 0 if stopped == "auto" else stopped


class ProvisionerFields(StrictModel):
    """Fields every provider shares: how agents start and how the fleet is sized.

    Names, defaults and rules mirror Determined's provconfig/config.go (``Config``,
    ``DefaultConfig``, ``Config.Validate``); dynagent's own fields say so.
    """

    master_url: str = "http://127.0.0.1:8080"
    master_cert_name: str = ""
    # Ours: the PEM text of a TLS master's certificate, for the agents to trust. Determined
    # hands its agents its own cert file; the functions cannot read the master's disk.
    master_cert: str = ""
    startup_script: str = ""
    container_startup_script: str = ""
    agent_docker_network: str = "default"
    agent_docker_runtime: str = "runc"
    agent_docker_image: str = Field(default="determinedai/determined-agent:0.38.0", min_length=1)
    # Deprecated in Determined, which no longer uses it.
    agent_fluent_image: str | None = None
    agent_reconnect_attempts: int = Field(default=5, ge=0)
    agent_reconnect_backoff: int = Field(default=5, ge=0)
    # Any YAML value: written, as JSON, verbatim as the agent's agent.yaml.
    agent_config_file_contents: Any = None
    min_instances: int = Field(default=0, ge=0)
    # Determined requires > 0; 0 (a pool that never launches) loads with a warning.
    max_instances: int = Field(default=5, ge=0)
    max_idle_agent_period: Duration = timedelta(minutes=20)
    max_agent_starting_period: Duration = timedelta(minutes=20)
    # Ours: a registered agent missing from the snapshots this long is reaped.
    max_disconnected_period: Duration = timedelta(minutes=10)
    # Determined's: after launch_error_retries + 1 refusals within the timeout of each
    # other, launches pause until the timeout has passed (dynagent.run.launch_errors).
    launch_error_timeout: Duration = timedelta(0)
    launch_error_retries: int = Field(default=0, ge=0)
    # Ours: free slots kept ready or starting, so short tasks start without waiting for
    # a boot: a number, on the pool's smallest shape; or ``auto``, sized from the pool's
    # recent arrivals (dynagent.core.decide.expected_work).
    warm_headroom_slots: Annotated[int | Literal["auto"], BeforeValidator(_slots_or_auto)] = 0
    # Ours: one machine more for a task that needs several new ones, so it starts on the
    # first of them to register (dynagent.core.decide.gang_spares).
    gang_spares: bool = True
    # Ours: near its cap in GPUs, a pool that launches for waiting work launches the
    # rest of the cap too (dynagent.core.decide.cap_fill).
    fill_near_cap: bool = True
    # Ours: let offerings mix GPU models (tasks must run on any of them).
    mixed_gpu_models: bool = False
    # Ours: terminate an idle agent only once the master drains it (``dynagent bridge``
    # disables it with drain) and the snapshot reports it draining and empty.
    drain_idle_agents: bool = False
    # Ours: idle agents stopped, not terminated, and started before new machines launch.
    warm_pool: WarmPool = WarmPool()
    # Ours: how long before a reservation's hard end (a Capacity Block's, a calendar-mode
    # reservation's) its agents stop taking work. EC2 warns 40 minutes before a block's
    # end and starts terminating its instances 30 minutes before.
    drain_before_reservation_end: Duration = timedelta(minutes=40)
    # Ours: agents launched with a boot config other than the pool's now (another image,
    # agent image, master address, startup script) are replaced, idle ones at once and
    # busy ones drained first (dynagent.core.decide.drift); false leaves them to idle out.
    drift: bool = True
    # Ours: agents that registered fewer GPUs than their machine has are replaced as
    # broken (dynagent.core.decide.repair).
    repair: bool = True
    # Ours: at most this many busy agents drained for drift or repair at once: a number,
    # or a share of the pool's agents (at least 1).
    drift_budget: Annotated[int | str, BeforeValidator(_count_or_share)] = "10%"

    def drift_budget_of(self, agents: int) -> int:
        """Busy agents that may drain for drift or repair at once, in a pool of ``agents``."""
        budget = self.drift_budget
        if isinstance(budget, int):
            return budget
        return max(1, int(agents * float(budget[:-1]) / 100))

    @property
    def headroom_auto(self) -> bool:
        """Whether the warm headroom is sized from the pool's arrivals."""
        return self.warm_headroom_slots == "auto"

    @property
    def headroom_slots(self) -> int:
        """The fixed warm headroom in slots: 0 where there is none, or it is ``auto``."""
        slots = self.warm_headroom_slots
        return 0 if slots == "auto" else slots

    @field_validator("master_url")
    @classmethod
    def _master_url(cls, url: str) -> str:
        return check_master_url(url)

    @field_validator("master_cert")
    @classmethod
    def _master_cert(cls, pem: str) -> str:
        if pem and "-----BEGIN CERTIFICATE-----" not in pem:
            raise ValueError("is not a PEM certificate (-----BEGIN CERTIFICATE----- ...)")
        return pem

    @field_validator(
        "max_idle_agent_period",
        "max_agent_starting_period",
        "max_disconnected_period",
        "drain_before_reservation_end",
    )
    @classmethod
    def _positive(cls, period: timedelta) -> timedelta:
        if period <= timedelta(0):
            raise ValueError("must be greater than 0 (like 10m)")
        return period

    @model_validator(mode="after")
    def _bounds(self) -> ProvisionerFields:
        if self.max_instances < self.min_instances:
            raise ValueError(
                f"max_instances ({self.max_instances}) is below min_instances "
                f"({self.min_instances})"
            )
        return self

    def slot_cap_of(self, max_slots: int | None, instance_type_slots: int, largest: int) -> int:
        """The pool's cap in slots, with offerings: ``offerings.max_slots``, else what
        ``max_instances`` means to Determined: that many machines of ``instance_type``
        (of ``instance_type_slots``; the ``largest`` offered when the field is unset)."""
        if max_slots is not None:
            return max_slots
        if "instance_type" not in self.model_fields_set or not instance_type_slots:
            instance_type_slots = largest
        return self.max_instances * instance_type_slots

    def machine_cap_of(self, with_offerings: bool, max_machines: int | None) -> int | None:
        """The pool's cap in machines (None: none). Without offerings, ``max_instances``,
        as in Determined. With them, only ``offerings.max_machines``: machines of several
        sizes do not count the same, and what ``max_instances`` means to Determined is the
        GPUs it buys (resource_pool.go ``CapacityCheck``), which the cap in slots keeps."""
        return max_machines if with_offerings else self.max_instances

    def check_max_machines(self, max_machines: int | None) -> None:
        """``offerings.max_machines`` leaves room for ``min_instances``."""
        if max_machines is not None and max_machines < self.min_instances:
            raise ValueError(
                f"offerings.max_machines ({max_machines}) is below min_instances "
                f"({self.min_instances})"
            )

    def ignored_fields(self) -> list[tuple[str, str]]:
        """The fields this config sets that dynagent accepts and ignores, each with why."""
        ignored = []
        if self.agent_fluent_image:
            ignored.append(("agent_fluent_image", "Determined no longer uses it either"))
        return ignored

    def common_warnings(self) -> list[str]:
        """The fields ignored, and what loads here though Determined would refuse it."""
        found = [f"{name} is ignored: {why}" for name, why in self.ignored_fields()]
        if self.max_instances == 0:
            found.append("max_instances is 0: the pool never launches (Determined requires > 0)")
        return found


def check_distinct(values: tuple[str, ...]) -> tuple[str, ...]:
    """A list that names nothing twice."""
    if len(set(values)) != len(values):
        raise ValueError(f"lists {sorted(v for v in set(values) if values.count(v) > 1)} twice")
    return values


def check_prices(
    types: tuple[str, ...], prices: dict[str, float], table: dict[str, float], where: str
) -> None:
    """Every price names an offered type (``TYPE`` or ``TYPE/spot``) and is positive; with
    several types, each has an on-demand price, from ``prices`` or the built-in table."""
    for key, price in prices.items():
        if key.removesuffix("/spot") not in types:
            raise ValueError(f"{where}.prices: {key!r} is not one of the offered types")
        if price <= 0:
            raise ValueError(f"{where}.prices: {key!r} must be a positive price per hour")
    if len(types) > 1:
        missing = [t for t in types if t not in prices and t not in table]
        if missing:
            raise ValueError(
                f"{where}.prices: no built-in price for {', '.join(missing)}; give dollars "
                "per hour, so the pool can choose the cheapest machine"
            )
