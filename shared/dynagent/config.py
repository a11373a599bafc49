"""The pool configuration: the ``resource_pools`` section of a Determined ``master.yaml``.

Field names and defaults follow Determined's provisioner where it has one, so an admin
can paste a pool from the master's config unchanged. Everything is checked when the
file loads: a wrong field fails there, naming the pool and the field path, never later
at launch time.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from datetime import timedelta
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from dynagent.durations import parse_duration
from dynagent.gpus import aws_gpus


class ConfigError(ValueError):
    """The configuration cannot be used; the message names the pool and field path."""


def _duration(value: Any) -> Any:
    if isinstance(value, str):
        return parse_duration(value)
    if isinstance(value, int | float) and not isinstance(value, bool):
        return timedelta(seconds=value)
    return value


Duration = Annotated[timedelta, BeforeValidator(_duration)]
_PRICE = re.compile(r"^\d+(\.\d+)?$")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class NetworkInterface(_Strict):
    public_ip: bool = True
    security_group_id: str | None = None
    subnet_id: str | None = None


class CustomTag(_Strict):
    key: str = Field(min_length=1, max_length=128)
    value: str = Field(max_length=256)


class ProvisionerFields(_Strict):
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

    @model_validator(mode="after")
    def _bounds(self) -> ProvisionerFields:
        if self.max_instances < self.min_instances:
            raise ValueError(
                f"max_instances ({self.max_instances}) is below min_instances "
                f"({self.min_instances})"
            )
        return self


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
    def slots_per_instance(self) -> int:
        """Task slots one instance offers: its GPUs, or 1 for a CPU pool."""
        gpus = (
            self.instance_slots if self.instance_slots is not None else aws_gpus(self.instance_type)
        )
        if not gpus:
            return 1 if self.cpu_slots_allowed else 0
        return gpus


ProviderConfig = AwsProvider

# Pool-level keys of Determined's resource pools that the autoscaler has no use for.
_DETERMINED_POOL_KEYS = frozenset(
    {
        "description", "scheduler", "max_aux_containers_per_agent", "max_cpu_containers_per_agent",
        "task_container_defaults", "agent_reattach_enabled", "agent_reconnect_wait",
        "kubernetes_namespace", "accelerator_type",
    }
)  # fmt: skip


class Pool(BaseModel):
    """One resource pool: its name and its provider."""

    model_config = ConfigDict(frozen=True)

    name: str = Field(min_length=1, max_length=63, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
    provider: ProviderConfig


class Settings(_Strict):
    """dynagent's own knobs, under a top-level ``dynagent:`` key."""

    # A snapshot older than this is ignored: a newer one has surely been sent since.
    max_snapshot_age: Duration = timedelta(minutes=10)
    # How long a spot request may sit in a status that cannot be fulfilled.
    spot_request_grace: Duration = timedelta(minutes=2)
    # How long to wait for launched instances to show in describe calls.
    launch_visibility_timeout: Duration = timedelta(seconds=60)
    # A spot request not fulfilled by then expires on its own (ValidUntil).
    spot_request_valid_for: Duration = timedelta(minutes=20)


class Config(BaseModel):
    """Every pool the functions manage, by name, and the shared settings."""

    model_config = ConfigDict(frozen=True)

    pools: Mapping[str, Pool]
    settings: Settings = Settings()

    def pool(self, name: str) -> Pool:
        try:
            return self.pools[name]
        except KeyError:
            known = ", ".join(sorted(self.pools)) or "none"
            raise KeyError(f"pool {name!r} is not configured (configured: {known})") from None


_TOP_LEVEL_KEYS = frozenset({"resource_pools", "provisioner", "dynagent"})


def load_config(path: str | os.PathLike[str]) -> Config:
    """Read and check a config file; raise ConfigError naming what is wrong."""
    try:
        text = Path(path).read_text()
    except OSError as error:
        raise ConfigError(f"cannot read config {os.fspath(path)!r}: {error.strerror}") from None
    return parse_config(text, source=os.fspath(path))


def parse_config(text: str, source: str = "<config>") -> Config:
    """Check a YAML config given as text."""
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as error:
        raise ConfigError(f"{source}: not valid YAML: {error}") from None
    if not isinstance(document, dict):
        raise ConfigError(f"{source}: expected a mapping with resource_pools")
    return config_from_document(document, source)


def config_from_document(document: Mapping[str, Any], source: str = "<config>") -> Config:
    unknown = sorted(set(document) - _TOP_LEVEL_KEYS - _MASTER_YAML_KEYS)
    if unknown:
        raise ConfigError(f"{source}: unknown top-level field(s): {', '.join(unknown)}")
    entries = _pool_entries(document, source)
    pools: dict[str, Pool] = {}
    for index, entry in enumerate(entries):
        pool = _parse_pool(entry, index, source)
        if pool.name in pools:
            raise ConfigError(f"{source}: pool {pool.name!r} is defined twice")
        pools[pool.name] = pool
    settings = _parse_settings(document.get("dynagent") or {}, source)
    return Config(pools=pools, settings=settings)


def _pool_entries(document: Mapping[str, Any], source: str) -> list[Any]:
    entries: list[Any] = []
    pools = document.get("resource_pools")
    if pools is not None:
        if not isinstance(pools, list):
            raise ConfigError(f"{source}: resource_pools must be a list of pools")
        entries.extend(pools)
    legacy = document.get("provisioner")
    if legacy is not None:
        entries.append(_legacy_pool(legacy, source))
    if not entries:
        raise ConfigError(f"{source}: no pools: add a resource_pools list")
    return entries


def _legacy_pool(provisioner: Any, source: str) -> dict[str, Any]:
    """The first seed docs' single pool: ``provisioner:`` with ``provider: aws``."""
    if not isinstance(provisioner, dict):
        raise ConfigError(f"{source}: provisioner must be a mapping")
    fields = dict(provisioner)
    fields["type"] = fields.pop("provider", None)
    return {"pool_name": "default", "provider": fields}


def _parse_pool(entry: Any, index: int, source: str) -> Pool:
    if not isinstance(entry, dict):
        raise ConfigError(f"{source}: resource_pools[{index}] must be a mapping")
    name = entry.get("pool_name")
    label = f"pool {name!r}" if isinstance(name, str) else f"resource_pools[{index}]"
    unknown = sorted(set(entry) - {"pool_name", "provider"} - _DETERMINED_POOL_KEYS)
    if unknown:
        raise ConfigError(f"{source}: {label}: unknown field(s): {', '.join(unknown)}")
    if entry.get("provider") is None:
        raise ConfigError(f"{source}: {label}: provider: required (the autoscaled instances)")
    try:
        return Pool.model_validate({"name": name, "provider": entry["provider"]})
    except ValidationError as error:
        raise ConfigError(f"{source}: {label}: {_describe(error)}") from None


def _parse_settings(section: Any, source: str) -> Settings:
    try:
        return Settings.model_validate(section)
    except ValidationError as error:
        raise ConfigError(f"{source}: dynagent: {_describe(error)}") from None


def _describe(error: ValidationError) -> str:
    """Each problem as ``field.path: message``, with Determined's names."""
    problems = []
    for item in error.errors():
        location = [str(part) for part in item["loc"] if part != "aws"]
        path = ".".join("pool_name" if part == "name" else part for part in location)
        message = item["msg"].removeprefix("Value error, ")
        if item["type"] == "extra_forbidden":
            message = "unknown field"
        problems.append(f"{path}: {message}" if path else message)
    return "; ".join(problems)


# Top-level keys of a whole Determined master.yaml, accepted so the file can be shared.
_MASTER_YAML_KEYS = frozenset(
    {
        "port", "db", "checkpoint_storage", "task_container_defaults", "log", "logging",
        "security", "scheduler", "resource_manager", "additional_resource_managers",
        "cluster_name", "telemetry", "tensorboard_timeout", "notebook_timeout",
        "webhooks", "observability", "cache", "integrations", "root", "config_file",
        "enable_cors", "launch_error", "feature_switches", "internal", "ui",
        "default_aux_resource_pool", "default_compute_resource_pool",
    }
)  # fmt: skip
