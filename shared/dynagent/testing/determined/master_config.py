"""A Determined 0.38 master's config (master.yaml), read as the master reads it.

``read_master_config(text_or_mapping)`` gives what ``LocalDetermined`` runs with: the
top-level ``launch_error`` (default true, ``master/internal/config/config.go``
``DefaultConfig``), the agent resource manager's default pools, and the resource pools,
each with its optional ``provider`` (``type: aws`` or ``gcp``) and Determined's defaults
filled in. ``MasterConfig.printable()`` is the config as ``GET /api/v1/master/config``
answers it (``Config.Printable``: JSON tag names, a provider flattened beside its
``type`` by ``pkg/union``, scripts masked).

Where it comes from, in Determined's source:

* Reading: ``master/cmd/determined-master/root.go`` ``getConfig`` (unknown fields are an
  error); each section's ``UnmarshalJSON`` starts from its defaults, so a nested mapping
  given in part keeps the defaults of the keys it leaves out
  (``resource_pool_config.go``, ``resource_manager_config.go``, ``provconfig/config.go``,
  ``provconfig/aws_config.go``, ``provconfig/gcp_config.go``).
* Refusing: ``check.Validate`` over the whole config (``master/pkg/check/validate.go``):
  ``Check Failed! N errors found:`` and one ``error found at <Go path>: <message>`` per
  failed rule, sorted. The rules modelled: a pool's name, the provider's instance counts,
  periods and agent image (``provconfig.Config.Validate``), the EC2 key name, root volume,
  spot price and instance type's slots (``AWSClusterConfig.Validate``,
  ``validateInstanceTypeSlots``), the GCE boot disk, machine type and GPUs
  (``GCPClusterConfig.Validate``, ``gceInstanceType.Validate``), duplicate pool names and
  an empty pool list (``ResourceConfig.Validate``, which ``Config`` also inherits, so its
  errors show twice, at ``root`` and at ``root.ResourceConfig``, as on a real master).
* The provisioner's start (``provisioner.New``): ``InitMasterAddress`` and the
  providers' ``InitDefaultValues`` fill ``master_url``, the EC2 image from the region,
  ``spot_max_price``, tags, labels and name prefix in the shared config, so the printed
  config shows them; an EC2 region without a default image fails the master's start.

Simpler than Determined, on purpose: only ``launch_error``, ``cluster_name``,
``resource_manager`` (type ``agent``, the priority scheduler, best or worst fit) and
``resource_pools`` are interpreted and printed; the other top-level sections Determined
knows (``db``, ``log``, ``security``...) are accepted and ignored. What the real master
reads from a cloud's metadata server when a field is empty (an EC2 ``region``, a GCE
``project`` or ``zone``), this master refuses, saying which field to set: it runs on no
cloud. Type errors are reported in this module's words, not encoding/json's.

This module reads, refuses and prints; Determined's defaults are in ``config_defaults``,
the validation rules in ``config_checks``, a pool's provider in ``provider_config`` and
Go's durations in ``durations``.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, Final

import yaml

# Determined's table aws_config.go defaultAWSImageID (the image an EC2 pool boots when it
# names none), which dynagent mirrors once.
from dynagent.core.pools.aws import DEFAULT_IMAGE_IDS
from dynagent.testing.determined.config_checks import (
    MasterConfigError,
    aws_errors,
    check_duration,
    error_at,
    gcp_errors,
    provider_errors,
    resource_config_errors,
)
from dynagent.testing.determined.config_defaults import (
    AGENT_RM_DEFAULTS,
    AGENT_RM_OPTIONAL,
    AWS_DEFAULTS,
    AWS_OPTIONAL,
    DEFAULT_POOL,
    DEFAULT_PRIORITY,
    DETERMINED_IDENTIFIER,
    FITTING_POLICIES,
    GCP_DEFAULTS,
    MAX_AUX_CONTAINERS_PER_AGENT,
    POOL_DEFAULTS,
    POOL_OPTIONAL,
    PROVIDER_DEFAULTS,
    SCHEDULER_DEFAULTS,
    TOP_LEVEL_KEYS,
    VERSION,
    JsonObject,
)
from dynagent.testing.determined.durations import go_duration_string, parse_go_duration
from dynagent.testing.determined.provider_config import (
    Cloud,
    ProviderConfig,
    aws_slots_per_instance,
    gcp_slots_per_instance,
    provider_for_pool,
)

__all__ = [
    "DEFAULT_POOL",
    "DEFAULT_PRIORITY",
    "DETERMINED_IDENTIFIER",
    "FITTING_POLICIES",
    "MAX_AUX_CONTAINERS_PER_AGENT",
    "VERSION",
    "Cloud",
    "MasterConfig",
    "MasterConfigError",
    "PoolConfig",
    "ProviderConfig",
    "aws_slots_per_instance",
    "default_resource_manager",
    "fitting_policy",
    "gcp_slots_per_instance",
    "go_duration_string",
    "parse_go_duration",
    "pool_fields",
    "printable_config",
    "provider_for_pool",
    "read_master_config",
]

_MASKED: Final = "********"


# --------------------------------------------------------------------------------------
# The config
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PoolConfig:
    """One entry of ``resource_pools``; ``fields`` is what the master prints for it."""

    name: str
    description: str
    provider: ProviderConfig | None
    max_aux_containers_per_agent: int
    fields: Mapping[str, Any]


@dataclass(frozen=True)
class MasterConfig:
    """What LocalDetermined runs with; see the module docstring."""

    launch_error: bool
    cluster_name: str
    default_compute_pool: str
    default_aux_pool: str
    pools: tuple[PoolConfig, ...]
    resource_manager: Mapping[str, Any]

    def printable(self) -> JsonObject:
        """``Config.Printable`` for the sections modelled: JSON tag names, defaults in."""
        return printable_config(
            self.launch_error,
            self.cluster_name,
            self.resource_manager,
            [p.fields for p in self.pools],
        )


def printable_config(
    launch_error: bool,
    cluster_name: str,
    resource_manager: Mapping[str, Any],
    pools: list[Mapping[str, Any]],
) -> JsonObject:
    """The modelled sections of ``Config.Printable``, from a resource manager's fields and
    each pool's (``PoolConfig.fields`` or ``pool_fields``)."""
    return {
        "launch_error": launch_error,
        "cluster_name": cluster_name,
        "resource_manager": copy.deepcopy(dict(resource_manager)),
        "resource_pools": [_printable_pool(p) for p in pools],
        "additional_resource_managers": None,
    }


def pool_fields(name: str, description: str, provider: ProviderConfig | None) -> JsonObject:
    """A pool's printed fields when master.yaml gave only its name, description and
    provider."""
    fields = copy.deepcopy(POOL_DEFAULTS)
    fields |= {"pool_name": name, "description": description}
    fields["provider"] = None if provider is None else copy.deepcopy(dict(provider.fields))
    return fields


def default_resource_manager() -> JsonObject:
    """The agent resource manager's printed fields when master.yaml sets none."""
    return copy.deepcopy(AGENT_RM_DEFAULTS)


def _printable_pool(fields: Mapping[str, Any]) -> JsonObject:
    out = copy.deepcopy(dict(fields))
    provider = out.get("provider")
    if provider:  # provconfig.Config.Printable masks the scripts
        for key in ("startup_script", "container_startup_script"):
            if provider.get(key):
                provider[key] = _MASKED
    return out


# -- reading ------------------------------------------------------------------------


def read_master_config(source: str | Mapping[str, Any] | None = None) -> MasterConfig:
    """The config the master starts with, from master.yaml text or its parsed mapping
    (None or empty: every default, one ``default`` pool). MasterConfigError if the master
    would refuse to start with it."""
    raw: Any = source
    if isinstance(source, str):
        try:
            raw = yaml.safe_load(source)
        except yaml.YAMLError as exc:
            raise MasterConfigError(f"unmarshalling yaml configuration file: {exc}") from None
    if raw is None:
        raw = {}
    top = _mapping(raw, "the master config")
    for key in top:
        if key in ("scheduler", "provisioner"):
            raise MasterConfigError(
                f"{key}: the pre-0.15 form (top-level scheduler/provisioner) is not modelled "
                "by LocalDetermined; write resource_manager and resource_pools instead"
            )
        if key not in TOP_LEVEL_KEYS:
            raise _unknown(key)
    launch_error = _typed(top.get("launch_error", True), bool, "launch_error")
    cluster_name = _typed(top.get("cluster_name", ""), str, "cluster_name")
    resource_manager = _resource_manager(top.get("resource_manager"))
    if top.get("additional_resource_managers"):
        raise MasterConfigError(
            "additional_resource_managers: not modelled by LocalDetermined (Determined takes "
            "only kubernetes ones there)"
        )
    raw_pools = top.get("resource_pools")
    errors: list[str] = []
    if raw_pools is None:  # ResourceConfig.ResolveResource adds the default pool
        raw_pools = [{"pool_name": DEFAULT_POOL}]
    pools_list = _typed(raw_pools, list, "resource_pools")
    pools = [_pool(raw_pool, index, errors) for index, raw_pool in enumerate(pools_list)]
    errors += resource_config_errors([p.name for p in pools])
    if errors:
        listed = "\n\t".join(sorted(errors))
        raise MasterConfigError(f"Check Failed! {len(errors)} errors found:\n\t{listed}")
    pools = [_start_provisioner(pool) for pool in pools]
    return MasterConfig(
        launch_error=launch_error,
        cluster_name=cluster_name,
        default_compute_pool=resource_manager["default_compute_resource_pool"],
        default_aux_pool=resource_manager["default_aux_resource_pool"],
        pools=tuple(pools),
        resource_manager=resource_manager,
    )


def _unknown(key: str) -> MasterConfigError:
    return MasterConfigError(f'cannot unmarshal configuration: json: unknown field "{key}"')


def _mapping(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, Mapping):
        raise MasterConfigError(f"{where}: expected a mapping, not {value!r}")
    return {str(k): v for k, v in value.items()}


def _typed(value: Any, kind: type, where: str) -> Any:
    if kind is int and isinstance(value, bool):
        raise MasterConfigError(f"{where}: expected an integer, not {value!r}")
    if not isinstance(value, kind):
        names = {bool: "true or false", int: "an integer", str: "a string", list: "a list"}
        raise MasterConfigError(
            f"{where}: expected {names.get(kind, kind.__name__)}, not {value!r}"
        )
    return value


def _merge(defaults: Mapping[str, Any], given: Mapping[str, Any], where: str) -> JsonObject:
    """Decode ``given`` over ``defaults`` as encoding/json decodes into a struct holding its
    defaults: a nested struct given in part keeps the defaults it does not name; a key the
    struct lacks is an error."""
    out = copy.deepcopy(dict(defaults))
    for key, value in given.items():
        if key not in defaults:
            raise _unknown(key)
        default = defaults[key]
        if isinstance(default, dict) and value is not None:
            out[key] = _merge(default, _mapping(value, f"{where}.{key}"), f"{where}.{key}")
        elif value is None or default is None:
            out[key] = value
        else:
            out[key] = _typed(value, type(default), f"{where}.{key}")
    return out


def _resource_manager(raw: Any) -> JsonObject:
    given = _mapping(raw or {}, "resource_manager")
    kind = given.pop("type", "agent")
    if kind != "agent":
        raise MasterConfigError(
            f"resource_manager.type: {kind!r} is not modelled by LocalDetermined (only agent)"
        )
    extra = {k: given.pop(k) for k in list(given) if k in AGENT_RM_OPTIONAL}
    scheduler = given.pop("scheduler", None)
    out = _merge({k: v for k, v in AGENT_RM_DEFAULTS.items() if k != "type"}, given, "rm")
    out = {"type": "agent", **out}
    out["scheduler"] = _scheduler(scheduler, "resource_manager.scheduler")
    # AgentResourceManagerConfig.UnmarshalJSON: the deprecated names, then the defaults.
    if out["no_default_resource_pools"]:
        out["default_compute_resource_pool"] = out["default_aux_resource_pool"] = ""
    else:
        if not given.get("default_aux_resource_pool") and extra.get("default_cpu_resource_pool"):
            out["default_aux_resource_pool"] = extra["default_cpu_resource_pool"]
        if not given.get("default_compute_resource_pool") and extra.get(
            "default_gpu_resource_pool"
        ):
            out["default_compute_resource_pool"] = extra["default_gpu_resource_pool"]
        for key in ("default_compute_resource_pool", "default_aux_resource_pool"):
            out[key] = out[key] or DEFAULT_POOL
    if not out["cluster_name"]:  # ResolveResource: the deprecated name, else "default"
        out["cluster_name"] = out["name"] or "default"
    return out


def _scheduler(raw: Any, where: str) -> JsonObject:
    given = _mapping(raw or {}, where)
    kind = given.pop("type", "priority")
    if kind != "priority":
        raise MasterConfigError(
            f"{where}: only the priority scheduler is modelled by LocalDetermined, not {kind}"
        )
    out = _merge({k: v for k, v in SCHEDULER_DEFAULTS.items() if k != "type"}, given, where)
    out["fitting_policy"] = out["fitting_policy"] or "best"  # UnmarshalJSON's default
    if out["fitting_policy"] not in FITTING_POLICIES:
        # SchedulerConfig.Validate's check.Contains, without check.Validate's Go path.
        raise MasterConfigError(
            f"{where}.fitting_policy: invalid fitting policy: {out['fitting_policy']} "
            "not in [best worst]"
        )
    return {"type": "priority", **out}


def fitting_policy(config: MasterConfig, pool: PoolConfig) -> str:
    """The pool's fitting policy: its own scheduler's, else the resource manager's
    (``agent_resource_manager.go`` ``createResourcePool``)."""
    scheduler = pool.fields.get("scheduler") or config.resource_manager["scheduler"]
    return str(scheduler["fitting_policy"])


def _pool(raw: Any, index: int, errors: list[str]) -> PoolConfig:
    where = f"resource_pools[{index}]"
    given = _mapping(raw, where)
    optional = {k: given.pop(k) for k in list(given) if k in POOL_OPTIONAL}
    raw_provider = given.pop("provider", None)
    fields = _merge(POOL_DEFAULTS, given, where)
    # ResourcePoolConfig.UnmarshalJSON: the deprecated name wins when given.
    if "max_cpu_containers_per_agent" in optional:
        value = _typed(optional["max_cpu_containers_per_agent"], int, where)
        fields["max_aux_containers_per_agent"] = value
    if optional.get("scheduler") is not None:
        fields["scheduler"] = _scheduler(optional["scheduler"], f"{where}.scheduler")
    check_duration(fields["agent_reconnect_wait"], f"{where}.agent_reconnect_wait")
    path = f"root.ResourceConfig.RootPoolsInternal[{index}]"
    if not fields["pool_name"]:
        errors.append(
            error_at(path, "resource pool name cannot be empty: expected true, got false")
        )
    if fields["max_aux_containers_per_agent"] < 0:
        errors.append(
            error_at(
                path,
                "resource pool max cpu containers per agent should be >= 0: "
                "expected true, got false",
            )
        )
    provider = None
    if raw_provider is not None:
        provider = _provider(raw_provider, f"{where}.provider", f"{path}.Provider", errors)
        fields["provider"] = dict(provider.fields)
    return PoolConfig(
        name=fields["pool_name"],
        description=fields["description"],
        provider=provider,
        max_aux_containers_per_agent=fields["max_aux_containers_per_agent"],
        fields=fields,
    )


def _provider(raw: Any, where: str, path: str, errors: list[str]) -> ProviderConfig:
    given = _mapping(raw, where)
    kind = given.pop("type", None)
    if kind not in ("aws", "gcp"):
        raise MasterConfigError(
            f"{where}.type: unexpected type: {kind} (aws or gcp; hpc is not modelled)"
            if kind is not None
            else f"{where}.type: missing; set type: aws or type: gcp"
        )
    base = {k: v for k, v in given.items() if k in PROVIDER_DEFAULTS}
    own = {k: v for k, v in given.items() if k not in PROVIDER_DEFAULTS}
    fields = _merge(PROVIDER_DEFAULTS, base, where)
    cloud_defaults = AWS_DEFAULTS if kind == "aws" else GCP_DEFAULTS
    optional = {k: own.pop(k) for k in list(own) if kind == "aws" and k in AWS_OPTIONAL}
    cloud = _merge(cloud_defaults, own, where)
    if "instance_slots" in optional and optional["instance_slots"] is not None:
        cloud["instance_slots"] = _typed(optional["instance_slots"], int, f"{where}.instance_slots")
    errors += provider_errors(fields, path, where)
    if kind == "aws":
        errors += aws_errors(cloud, f"{path}.AWS")
        slots = aws_slots_per_instance(
            cloud["instance_type"], cloud.get("instance_slots"), cloud["cpu_slots_allowed"]
        )
    else:
        errors += gcp_errors(cloud, f"{path}.GCP")
        slots = gcp_slots_per_instance(
            cloud["instance_type"]["gpu_num"], cloud["cpu_slots_allowed"]
        )
    # pkg/union.Marshal: the provider's own fields beside the base ones and the type.
    return ProviderConfig(
        type=kind, fields={**cloud, **fields, "type": kind}, slots_per_instance=slots
    )


def _start_provisioner(pool: PoolConfig) -> PoolConfig:
    """provisioner.New: InitMasterAddress, then the provider's InitDefaultValues, which
    write into the config the master prints. A failure stops the master's start."""
    provider = pool.provider
    if provider is None:
        return pool
    fields = dict(provider.fields)

    def fail(reason: str) -> MasterConfigError:
        cluster = "an EC2" if provider.type == "aws" else "a GCP"
        return MasterConfigError(
            f"cannot create resource pool: {pool.name}: error creating provisioner: cannot "
            f"create {cluster} cluster: failed to initialize auto configuration: {reason}"
        )

    url = fields["master_url"]
    scheme, _, rest = url.partition("://") if "://" in url else ("", "", url)
    host, _, port = rest.partition(":")
    fields["master_url"] = f"{scheme or 'http'}://{host}:{port or '8080'}"
    if provider.type == "aws":
        if not fields["region"]:
            raise fail(
                "unable to get region: this master is not on EC2 and has no AWS_DEFAULT_REGION"
                " (set the pool's provider.region)"
            )
        fields["spot_max_price"] = fields["spot_max_price"] or "OnDemand"
        if not fields["image_id"]:
            image = DEFAULT_IMAGE_IDS.get(fields["region"])
            if image is None:
                raise fail(f"cannot find default image ID in the region {fields['region']}")
            fields["image_id"] = image
        fields["tag_value"] = fields["tag_value"] or DETERMINED_IDENTIFIER
    else:
        for key in ("project", "zone"):
            if not fields[key]:
                raise fail(
                    f"metadata: GCE metadata {key} not defined (this master is not on GCE; "
                    f"set the pool's provider.{key})"
                )
        zone = fields["zone"]
        fields["boot_disk_type"] = (
            fields["boot_disk_type"] or f"projects/determined-ai/zones/{zone}/diskTypes/pd-standard"
        )
        fields["name_prefix"] = fields["name_prefix"] or DETERMINED_IDENTIFIER + "-"
        fields["label_value"] = fields["label_value"] or DETERMINED_IDENTIFIER
        account = dict(fields["service_account"])
        if account["email"] and not account["scopes"]:
            account["scopes"] = ["https://www.googleapis.com/auth/cloud-platform"]
        fields["service_account"] = account
    started = replace(provider, fields=fields)
    return replace(pool, provider=started, fields={**pool.fields, "provider": dict(fields)})
