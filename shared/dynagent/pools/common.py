"""Fields every pool's provider shares: how agents start and how the fleet is sized.

Names and defaults are Determined's provisioner's, so a pool pasted from a master's
config loads unchanged.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, model_validator

from dynagent.durations import HOW_TO_WRITE, parse_duration


def _duration(value: Any) -> Any:
    """Go duration text only, as Determined reads it: a bare number has no unit."""
    if isinstance(value, str):
        return parse_duration(value)
    if isinstance(value, int | float) and not isinstance(value, bool):
        raise ValueError(f"{value!r} has no unit: {HOW_TO_WRITE}")
    return value


Duration = Annotated[timedelta, BeforeValidator(_duration)]


class StrictModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ProvisionerFields(StrictModel):
    """Fields every provider shares: how agents start and how the fleet is sized."""

    master_url: str = "http://127.0.0.1:8080"
    master_cert_name: str = ""
    startup_script: str = ""
    container_startup_script: str = ""
    agent_docker_network: str = "default"
    agent_docker_runtime: str = "runc"
    agent_docker_image: str = "determinedai/determined-agent:0.38.0"
    agent_fluent_image: str | None = None
    agent_reconnect_attempts: int = Field(default=5, ge=0)
    agent_reconnect_backoff: int = Field(default=5, ge=0)
    min_instances: int = Field(default=0, ge=0)
    max_instances: int = Field(default=5, ge=0)
    max_idle_agent_period: Duration = timedelta(minutes=20)
    max_agent_starting_period: Duration = timedelta(minutes=20)
    # Ours: a registered agent missing from the snapshots this long is reaped.
    max_disconnected_period: Duration = timedelta(minutes=10)
    # Determined's launch retry and agent logging knobs; accepted so a pasted config
    # loads. Launch errors here are retried by the next snapshot, not by a timer.
    launch_error_timeout: Duration = timedelta(0)
    launch_error_retries: int = Field(default=0, ge=0)
    agent_config_file_contents: dict[str, Any] | None = None
    # Ours: free slots kept ready or starting on the pool's smallest shape, so short
    # tasks start without waiting for a boot.
    warm_headroom_slots: int = Field(default=0, ge=0)
    # Ours: let offerings mix GPU models (tasks must run on any of them).
    mixed_gpu_models: bool = False
    # Ours: terminate an idle agent only once the master drains it (``dynagent bridge``
    # disables it with drain) and the snapshot reports it draining and empty.
    drain_idle_agents: bool = False

    @model_validator(mode="after")
    def _bounds(self) -> ProvisionerFields:
        if self.max_instances < self.min_instances:
            raise ValueError(
                f"max_instances ({self.max_instances}) is below min_instances "
                f"({self.min_instances})"
            )
        return self


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
