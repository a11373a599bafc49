"""The pool configuration: the ``resource_pools`` section of a Determined ``master.yaml``.

Field names and defaults follow Determined's provisioner where it has one, so an admin
can paste a pool from the master's config unchanged. Everything is checked when the
file loads: a wrong field fails there, naming the pool and the field path, never later
at launch time.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from typing import Annotated, Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from dynagent.core.admission import ADMISSION_REGION
from dynagent.core.field_names import close_name, field_tree, hint
from dynagent.core.fitting import DEFAULT_MAX_AUX_CONTAINERS
from dynagent.core.pools.aws import AwsProvider, CustomTag, NetworkInterface
from dynagent.core.pools.common import Duration, ProvisionerFields, StrictModel
from dynagent.core.pools.gcp import LABEL_VALUE, GcpProvider

__all__ = [
    "DETERMINED_POOL_KEYS",
    "PROVIDER_TYPES",
    "AwsProvider",
    "Config",
    "ConfigError",
    "CustomTag",
    "GcpProvider",
    "NetworkInterface",
    "Pool",
    "ProviderConfig",
    "ProvisionerFields",
    "Settings",
    "config_from_document",
    "parse_config",
    "parse_document",
]


class ConfigError(ValueError):
    """The configuration cannot be used; the message names the pool and field path."""


ProviderConfig = Annotated[AwsProvider | GcpProvider, Field(discriminator="type")]
PROVIDER_TYPES = ("aws", "gcp")

# Pool-level keys of Determined's resource pools that the autoscaler has no use for.
DETERMINED_POOL_KEYS = frozenset(
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
    # Determined's pool-level max_aux_containers_per_agent (the deprecated
    # max_cpu_containers_per_agent, when set, replaces it): the zero-slot tasks one agent
    # runs at most (resource_pool_config.go).
    max_aux_containers_per_agent: int = Field(default=DEFAULT_MAX_AUX_CONTAINERS, ge=0)

    @model_validator(mode="after")
    def _name_fits_labels(self) -> Pool:
        # On GCP the pool's name is a label value on every instance it owns.
        if isinstance(self.provider, GcpProvider) and not LABEL_VALUE.match(self.name):
            raise ValueError(
                f"pool_name {self.name!r} must be a Compute Engine label value for a gcp "
                "pool (lowercase letters, digits, - or _)"
            )
        return self


class Settings(StrictModel):
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
    # Pools without a provider (static agents) or with an hpc one, left to the master.
    static_pools: tuple[str, ...] = ()

    def for_cloud(self, kind: str) -> Config:
        """The pools one cloud's functions manage (a config may hold both clouds)."""
        pools = {name: pool for name, pool in self.pools.items() if pool.provider.type == kind}
        return Config(pools=pools, settings=self.settings, static_pools=self.static_pools)

    def pool(self, name: str) -> Pool:
        try:
            return self.pools[name]
        except KeyError:
            known = ", ".join(sorted(self.pools)) or "none"
            raise KeyError(f"pool {name!r} is not configured (configured: {known})") from None


_TOP_LEVEL_KEYS = frozenset({"resource_pools", "provisioner", "dynagent"})


def parse_config(
    text: str, source: str = "<config>", environ: Mapping[str, str] | None = None
) -> Config:
    """Check a YAML config given as text."""
    return config_from_document(parse_document(text, source), source, environ)


class _DuplicateKey(yaml.MarkedYAMLError):
    """A mapping that names a key twice."""


class _UniqueKeyLoader(yaml.SafeLoader):
    """YAML's safe loader, refusing a key given twice in one mapping, as Determined's
    loader (go-yaml) refuses it: PyYAML would keep the last silently."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, yaml.Node] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if isinstance(key, str) and key in seen:
                first = seen[key].start_mark.line + 1
                raise _DuplicateKey(
                    problem=f"{key!r} is given twice (first on line {first}): keep one",
                    problem_mark=key_node.start_mark,
                )
            seen[key] = key_node
        return super().construct_mapping(node, deep=deep)


def parse_document(text: str, source: str = "<config>") -> dict[str, Any]:
    """The YAML document of a config file: a mapping."""
    try:
        document = yaml.load(text, Loader=_UniqueKeyLoader)  # a SafeLoader: no objects
    except yaml.YAMLError as error:
        raise ConfigError(f"{source}: {_yaml_problem(error)}") from None
    if not isinstance(document, dict):
        raise ConfigError(f"{source}: expected a mapping with resource_pools")
    return document


def _yaml_problem(error: yaml.YAMLError) -> str:
    """What YAML found wrong, and where in the file: no "<unicode string>"."""
    if isinstance(error, yaml.MarkedYAMLError) and error.problem_mark is not None:
        mark = error.problem_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}"
        if isinstance(error, _DuplicateKey):
            return f"{where}: {error.problem}"
        return f"{where}: not valid YAML: {error.problem}"
    return f"not valid YAML: {error}"


def config_from_document(
    document: Mapping[str, Any],
    source: str = "<config>",
    environ: Mapping[str, str] | None = None,
) -> Config:
    unknown = sorted(set(document) - _TOP_LEVEL_KEYS - _MASTER_YAML_KEYS)
    if unknown:
        raise ConfigError(f"{source}: unknown top-level field(s): {', '.join(unknown)}")
    env = {} if environ is None else environ
    pools: dict[str, Pool] = {}
    static: list[str] = []
    for index, entry in enumerate(_pool_entries(document, source)):
        pool = _parse_pool(entry, index, source, env)
        name = pool.name if isinstance(pool, Pool) else pool
        if name in pools or name in static:
            raise ConfigError(f"{source}: pool {name!r} is defined twice")
        if isinstance(pool, Pool):
            pools[pool.name] = pool
        else:
            static.append(pool)
    if not pools:
        raise ConfigError(
            f"{source}: no pools with a provider: nothing to autoscale. dynagent's config gives "
            "each pool it scales its aws or gcp provider, as Determined's provisioner has it; "
            "the master's resource_pools then come from `dynagent master-config --config "
            "POOLS.yaml`"
        )
    settings = _parse_settings(document.get("dynagent") or {}, source)
    return Config(pools=pools, settings=settings, static_pools=tuple(static))


def _pool_entries(document: Mapping[str, Any], source: str) -> list[Any]:
    """The pools, from ``resource_pools`` or the legacy ``provisioner:`` (never both, as
    in Determined's master/cmd/determined-master/root.go ``shimOldRMConfig``)."""
    pools = document.get("resource_pools")
    legacy = document.get("provisioner")
    old_schema = "provisioner" in document or "scheduler" in document
    if old_schema and ("resource_pools" in document or "resource_manager" in document):
        raise ConfigError(
            f"{source}: provisioner/scheduler (the old form) and resource_pools/"
            "resource_manager cannot be used together"
        )
    if legacy is not None:
        return [_legacy_pool(legacy, source)]
    if pools is None:
        raise ConfigError(f"{source}: no pools: add a resource_pools list")
    if not isinstance(pools, list):
        raise ConfigError(f"{source}: resource_pools must be a list of pools")
    return pools


def _legacy_pool(provisioner: Any, source: str) -> dict[str, Any]:
    """The first seed docs' single pool: ``provisioner:`` with ``provider: aws``."""
    if not isinstance(provisioner, dict):
        raise ConfigError(f"{source}: provisioner must be a mapping")
    fields = dict(provisioner)
    fields["type"] = fields.pop("provider", None)
    return {"pool_name": "default", "provider": fields}


def _parse_pool(entry: Any, index: int, source: str, environ: Mapping[str, str]) -> Pool | str:
    """A pool with a provider, or the name of a pool dynagent leaves to the master: one
    without a provider (static agents) or with Determined's ``type: hpc`` (Slurm/PBS)."""
    if not isinstance(entry, dict):
        raise ConfigError(f"{source}: resource_pools[{index}] must be a mapping")
    name = entry.get("pool_name")
    label = f"pool {name!r}" if isinstance(name, str) else f"resource_pools[{index}]"
    known = {"pool_name", "provider", *DETERMINED_POOL_KEYS}
    unknown = sorted(set(entry) - known)
    if unknown:
        said = [_pool_field_hint(name, entry.get("provider"), known) for name in unknown]
        raise ConfigError(f"{source}: {label}: unknown field(s): {', '.join(said)}")
    provider = entry.get("provider")
    kind = provider.get("type") if isinstance(provider, dict) else None
    if (provider is None or kind == "hpc") and isinstance(name, str) and name:
        return name
    if kind not in PROVIDER_TYPES:
        raise ConfigError(
            f"{source}: {label}: provider.type: {kind!r} is not one of {', '.join(PROVIDER_TYPES)}"
        )
    assert isinstance(provider, dict)
    if kind == "aws" and provider.get("region") == ADMISSION_REGION:
        raise ConfigError(
            f"{source}: {label}: this provider is the master's, for admission only (region "
            f"{ADMISSION_REGION!r}): dynagent cannot launch with it. Keep the pool's real "
            "provider in dynagent's own pools file, and give the master what `dynagent "
            "master-config --config POOLS.yaml` prints"
        )
    fields = deployment_defaults(provider, environ, f"{source}: {label}")
    try:
        return Pool.model_validate({"name": name, "provider": fields, **_aux_containers(entry)})
    except ValidationError as error:
        raise ConfigError(f"{source}: {label}: {_describe(error)}") from None


def _pool_field_hint(name: str, provider: Any, known: set[str]) -> str:
    """A pool-level unknown field, with the provider field it was meant to be, if any."""
    kind = provider.get("type") if isinstance(provider, dict) else None
    model = GcpProvider if kind == "gcp" else AwsProvider
    if name in model.model_fields:
        return f"{name} (it lives at provider.{name})"
    close = close_name(name, known)
    return f"{name} (did you mean {close}?)" if close else name


def _aux_containers(entry: Mapping[str, Any]) -> dict[str, Any]:
    """A pool entry's max_aux_containers_per_agent, as Determined reads it
    (resource_pool_config.go ``UnmarshalJSON``): the deprecated
    max_cpu_containers_per_agent replaces it when set to anything but -1; null leaves
    a field unset."""
    value = entry.get("max_aux_containers_per_agent")
    legacy = entry.get("max_cpu_containers_per_agent")
    if legacy is not None and legacy != -1:
        value = legacy
    return {} if value is None else {"max_aux_containers_per_agent": value}


# Where a pool's unset location comes from: the functions' environment. Determined asks
# its own host (EC2 instance metadata, then AWS_DEFAULT_REGION; the GCE metadata server);
# the functions run elsewhere, so their deployment says.
DEFAULT_SOURCES: dict[tuple[str, str], tuple[str, ...]] = {
    ("aws", "region"): ("AWS_REGION", "AWS_DEFAULT_REGION"),
    ("gcp", "project"): ("DYNAGENT_GCP_PROJECT", "GOOGLE_CLOUD_PROJECT"),
    ("gcp", "zone"): ("DYNAGENT_GCP_ZONE",),
}


def deployment_defaults(
    provider: Mapping[str, Any], environ: Mapping[str, str], where: str
) -> dict[str, Any]:
    """The provider's fields with an unset (absent, null or empty) region, project or zone
    filled from the environment; ConfigError naming the field and variables when none is
    set."""
    fields = dict(provider)
    for (kind, name), variables in DEFAULT_SOURCES.items():
        if fields.get("type") != kind or fields.get(name) not in (None, ""):
            continue
        value = next((environ[v] for v in variables if environ.get(v)), None)
        if value is None:
            raise ConfigError(
                f"{where}: provider.{name}: required: set it, or {' or '.join(variables)} "
                "in the functions' environment"
            )
        fields[name] = value
    return fields


def _parse_settings(section: Any, source: str) -> Settings:
    try:
        return Settings.model_validate(section)
    except ValidationError as error:
        raise ConfigError(f"{source}: dynagent: {_describe(error)}") from None


def _unknown_field_hint(location: tuple[Any, ...]) -> str:
    """Did you mean, or where the field lives, for an unknown field of a provider."""
    if len(location) < 3 or location[0] != "provider" or location[1] not in PROVIDER_TYPES:
        return ""
    model = AwsProvider if location[1] == "aws" else GcpProvider
    path = tuple(str(part) for part in location[2:] if not isinstance(part, int))
    return hint(path[-1], path[:-1], field_tree(model), root="provider")


def _describe(error: ValidationError) -> str:
    """Each problem as ``field.path: message``, with Determined's names."""
    problems = []
    for item in error.errors():
        location = [str(part) for part in item["loc"] if part not in PROVIDER_TYPES]
        path = ".".join("pool_name" if part == "name" else part for part in location)
        message = item["msg"].removeprefix("Value error, ")
        if item["type"] == "extra_forbidden":
            message = "unknown field"
            said = _unknown_field_hint(item["loc"])
            message += f": {said}" if said else ""
        problems.append(f"{path}: {message}" if path else message)
    return "; ".join(problems)


# Top-level keys of a whole Determined master.yaml, accepted (with whatever they hold) so
# the master's own file loads: the json tags of master/internal/config/config.go
# ``Config`` and its embedded ``ResourceConfig``, and the old form's ``scheduler``.
_MASTER_YAML_KEYS = frozenset(
    {
        "config_file", "log", "db", "tensorboard_timeout", "notebook_timeout", "security",
        "checkpoint_storage", "task_container_defaults", "port", "root", "telemetry",
        "enable_cors", "launch_error", "cluster_name", "ui_customization", "logging",
        "retention_policy", "observability", "cache", "webhooks", "feature_switches",
        "reserved_ports", "__internal", "scim", "saml", "oidc", "det_cloud", "integrations",
        "resource_manager", "additional_resource_managers", "scheduler",
    }
)  # fmt: skip
