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
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, Final, Literal

import yaml

# Determined's tables, which dynagent mirrors once: the EC2 slot table, gcp_config.go's
# machine families and the GPU counts each GCE accelerator allows, and aws_config.go
# defaultAWSImageID (the image an EC2 pool boots when it names none).
from dynagent.core.gpus import DETERMINED_EC2_SLOTS
from dynagent.core.gpus import DETERMINED_GCE_GPU_COUNTS as _GCE_GPU_TYPES
from dynagent.core.gpus import DETERMINED_GCE_MACHINE_FAMILIES as _GCE_MACHINE_TYPES
from dynagent.core.pools.aws import DEFAULT_IMAGE_IDS

VERSION: Final = "0.38.1"
DEFAULT_POOL: Final = "default"
DEFAULT_PRIORITY: Final = 42  # config.DefaultSchedulingPriority
FITTING_POLICIES: Final = ("best", "worst")  # scheduler_config.go: best is the default
MAX_AUX_CONTAINERS_PER_AGENT: Final = 100  # defaultRPConfig
# pkg.DeterminedIdentifier: the tag value, label value and name prefix off EC2 and GCE.
DETERMINED_IDENTIFIER: Final = "determined-ai-determined"
_MASKED: Final = "********"

JsonObject = dict[str, Any]
Cloud = Literal["aws", "gcp"]


class MasterConfigError(ValueError):
    """A master.yaml the master refuses to start with; the message is the master's."""


# --------------------------------------------------------------------------------------
# Go durations, as time.ParseDuration reads them and Duration.String writes them
# --------------------------------------------------------------------------------------

_DURATION = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)")
_NANOS: Final = {
    "ns": 1, "us": 10**3, "µs": 10**3, "ms": 10**6, "s": 10**9, "m": 60 * 10**9, "h": 3600 * 10**9,
}  # fmt: skip


def parse_go_duration(text: str) -> int:
    """A Go duration string (``720h``, ``1h30m``, ``500ms``) in nanoseconds."""
    sign = -1 if text.startswith("-") else 1
    body = text.lstrip("+-")
    parts = _DURATION.findall(body)
    if body == "0":
        return 0
    if not body or "".join(n + u for n, u in parts) != body:
        raise ValueError(f'time: invalid duration "{text}"')
    return sign * round(sum(float(n) * _NANOS[u] for n, u in parts))


def go_duration_string(nanos: int) -> str:
    """time.Duration.String: ``20m0s``, ``25s``, ``1h0m0s``, ``1.5s``, ``500ms``, ``0s``."""
    if nanos == 0:
        return "0s"
    sign, nanos = ("-" if nanos < 0 else ""), abs(nanos)
    if nanos < 10**9:
        for unit, size in (("ms", 10**6), ("µs", 10**3), ("ns", 1)):
            if nanos >= size:
                return sign + _trim(nanos / size) + unit
    hours, rest = divmod(nanos, 3600 * 10**9)
    minutes, rest = divmod(rest, 60 * 10**9)
    seconds = _trim(rest / 10**9) + "s"
    if hours:
        return f"{sign}{hours}h{minutes}m{seconds}"
    if minutes:
        return f"{sign}{minutes}m{seconds}"
    return sign + seconds


def _trim(value: float) -> str:
    return f"{value:.9f}".rstrip("0").rstrip(".")


# --------------------------------------------------------------------------------------
# Slots per instance (provconfig)
# --------------------------------------------------------------------------------------


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


# --------------------------------------------------------------------------------------
# The config
# --------------------------------------------------------------------------------------


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
    fields = copy.deepcopy(_POOL_DEFAULTS)
    fields |= {"pool_name": name, "description": description}
    fields["provider"] = None if provider is None else copy.deepcopy(dict(provider.fields))
    return fields


def default_resource_manager() -> JsonObject:
    """The agent resource manager's printed fields when master.yaml sets none."""
    return copy.deepcopy(_AGENT_RM_DEFAULTS)


def _printable_pool(fields: Mapping[str, Any]) -> JsonObject:
    out = copy.deepcopy(dict(fields))
    provider = out.get("provider")
    if provider:  # provconfig.Config.Printable masks the scripts
        for key in ("startup_script", "container_startup_script"):
            if provider.get(key):
                provider[key] = _MASKED
    return out


# -- defaults -----------------------------------------------------------------------

# provconfig.DefaultConfig; the durations as Duration.MarshalJSON writes them.
_PROVIDER_DEFAULTS: Final[JsonObject] = {
    "master_url": "",
    "master_cert_name": "",
    "startup_script": "",
    "container_startup_script": "",
    "agent_docker_network": "default",
    "agent_docker_runtime": "runc",
    "agent_docker_image": f"determinedai/determined-agent:{VERSION}",
    "agent_fluent_image": "",
    "agent_reconnect_attempts": 5,  # aproto.AgentReconnectAttempts
    "agent_reconnect_backoff": 5,  # aproto.AgentReconnectBackoffValue
    "agent_config_file_contents": None,
    "max_idle_agent_period": "20m0s",
    "max_agent_starting_period": "20m0s",
    "min_instances": 0,
    "max_instances": 5,
    "launch_error_timeout": None,
    "launch_error_retries": 0,
}
# defaultAWSClusterConfig (instance_slots is omitempty: absent unless given).
_AWS_DEFAULTS: Final[JsonObject] = {
    "region": "",
    "root_volume_size": 200,
    "image_id": "",
    "tag_key": "managed_by",
    "tag_value": "",
    "instance_name": "determined-ai-agent",
    "ssh_key_name": "",
    "network_interface": {"public_ip": True, "subnet_id": "", "security_group_id": ""},
    "iam_instance_profile_arn": "",
    "instance_type": "g4dn.metal",
    "log_group": "",
    "log_stream": "",
    "spot": False,
    "spot_max_price": "",
    "custom_tags": None,
    "cpu_slots_allowed": False,
}
_AWS_OPTIONAL: Final = frozenset({"instance_slots"})
# DefaultGCPClusterConfig.
_GCP_DEFAULTS: Final[JsonObject] = {
    "base_config": None,
    "project": "",
    "zone": "",
    "boot_disk_size": 200,
    "boot_disk_source_image": "projects/determined-ai/global/images/det-environments-0736b6d",
    "boot_disk_type": "",
    "labels": None,
    "label_key": "managed-by",
    "label_value": "",
    "name_prefix": "",
    "network_interface": {"network": "", "subnetwork": "", "external_ip": False},
    "network_tags": None,
    "service_account": {"email": "", "scopes": None},
    "instance_type": {
        "machine_type": "n1-standard-32",
        "gpu_type": "nvidia-tesla-t4",
        "gpu_num": 4,
        "preemptible": False,
    },
    "operation_timeout_period": "5m0s",
    "cpu_slots_allowed": False,
    "use_cloud_logging": False,
}
# defaultRPConfig and the ResourcePoolConfig fields it leaves zero.
_POOL_DEFAULTS: Final[JsonObject] = {
    "pool_name": "",
    "description": "",
    "provider": None,
    "max_aux_containers_per_agent": MAX_AUX_CONTAINERS_PER_AGENT,
    "task_container_defaults": None,
    "agent_reattach_enabled": False,
    "agent_reconnect_wait": "25s",  # aproto.AgentReconnectWait
}
_POOL_OPTIONAL: Final = frozenset({"scheduler", "max_cpu_containers_per_agent"})
# config.DefaultSchedulerConfig, flattened beside its type by pkg/union.
_SCHEDULER: Final[JsonObject] = {
    "type": "priority",
    "preemption": False,
    "default_priority": DEFAULT_PRIORITY,
    "fitting_policy": "best",
    "allow_heterogeneous_fits": False,
}
_AGENT_RM_DEFAULTS: Final[JsonObject] = {
    "type": "agent",
    "cluster_name": "default",  # config.DefaultClusterName
    "scheduler": _SCHEDULER,
    "default_aux_resource_pool": DEFAULT_POOL,
    "default_compute_resource_pool": DEFAULT_POOL,
    "no_default_resource_pools": False,
    "require_authentication": False,
    "client_ca": "",
    "name": "",
    "metadata": None,
}
_AGENT_RM_OPTIONAL: Final = frozenset({"default_cpu_resource_pool", "default_gpu_resource_pool"})
# Config's top-level JSON tags (config.go Config and the embedded ResourceConfig).
_TOP_LEVEL: Final = frozenset(
    {
        "config_file", "log", "db", "tensorboard_timeout", "notebook_timeout", "security",
        "checkpoint_storage", "task_container_defaults", "port", "root", "telemetry",
        "enable_cors", "launch_error", "cluster_name", "ui_customization", "logging",
        "retention_policy", "observability", "cache", "webhooks", "feature_switches",
        "reserved_ports", "resource_manager", "resource_pools", "additional_resource_managers",
        "__internal", "scim", "saml", "oidc", "det_cloud", "integrations",
    }
)  # fmt: skip
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
        if key not in _TOP_LEVEL:
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
    errors += _resource_config_errors([p.name for p in pools])
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
    extra = {k: given.pop(k) for k in list(given) if k in _AGENT_RM_OPTIONAL}
    scheduler = given.pop("scheduler", None)
    out = _merge({k: v for k, v in _AGENT_RM_DEFAULTS.items() if k != "type"}, given, "rm")
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
    out = _merge({k: v for k, v in _SCHEDULER.items() if k != "type"}, given, where)
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
    optional = {k: given.pop(k) for k in list(given) if k in _POOL_OPTIONAL}
    raw_provider = given.pop("provider", None)
    fields = _merge(_POOL_DEFAULTS, given, where)
    # ResourcePoolConfig.UnmarshalJSON: the deprecated name wins when given.
    if "max_cpu_containers_per_agent" in optional:
        value = _typed(optional["max_cpu_containers_per_agent"], int, where)
        fields["max_aux_containers_per_agent"] = value
    if optional.get("scheduler") is not None:
        fields["scheduler"] = _scheduler(optional["scheduler"], f"{where}.scheduler")
    _check_duration(fields["agent_reconnect_wait"], f"{where}.agent_reconnect_wait")
    path = f"root.ResourceConfig.RootPoolsInternal[{index}]"
    if not fields["pool_name"]:
        errors.append(_at(path, "resource pool name cannot be empty: expected true, got false"))
    if fields["max_aux_containers_per_agent"] < 0:
        errors.append(
            _at(
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


def _at(path: str, message: str) -> str:
    return f"error found at {path}: {message}"


def _check_duration(value: Any, where: str) -> int:
    if not isinstance(value, str):
        raise MasterConfigError(f"{where}: invalid duration: {value!r} (write it as 20m or 30s)")
    try:
        return parse_go_duration(value)
    except ValueError as exc:
        raise MasterConfigError(f"{where}: error parsing duration: {exc}") from None


def _provider(raw: Any, where: str, path: str, errors: list[str]) -> ProviderConfig:
    given = _mapping(raw, where)
    kind = given.pop("type", None)
    if kind not in ("aws", "gcp"):
        raise MasterConfigError(
            f"{where}.type: unexpected type: {kind} (aws or gcp; hpc is not modelled)"
            if kind is not None
            else f"{where}.type: missing; set type: aws or type: gcp"
        )
    base = {k: v for k, v in given.items() if k in _PROVIDER_DEFAULTS}
    own = {k: v for k, v in given.items() if k not in _PROVIDER_DEFAULTS}
    fields = _merge(_PROVIDER_DEFAULTS, base, where)
    cloud_defaults = _AWS_DEFAULTS if kind == "aws" else _GCP_DEFAULTS
    optional = {k: own.pop(k) for k in list(own) if kind == "aws" and k in _AWS_OPTIONAL}
    cloud = _merge(cloud_defaults, own, where)
    if "instance_slots" in optional and optional["instance_slots"] is not None:
        cloud["instance_slots"] = _typed(optional["instance_slots"], int, f"{where}.instance_slots")
    errors += _provider_errors(fields, path, where)
    if kind == "aws":
        errors += _aws_errors(cloud, f"{path}.AWS")
        slots = aws_slots_per_instance(
            cloud["instance_type"], cloud.get("instance_slots"), cloud["cpu_slots_allowed"]
        )
    else:
        errors += _gcp_errors(cloud, f"{path}.GCP")
        slots = gcp_slots_per_instance(
            cloud["instance_type"]["gpu_num"], cloud["cpu_slots_allowed"]
        )
    # pkg/union.Marshal: the provider's own fields beside the base ones and the type.
    return ProviderConfig(
        type=kind, fields={**cloud, **fields, "type": kind}, slots_per_instance=slots
    )


def _greater(actual: int, bound: int, message: str) -> str | None:
    return None if actual > bound else f"{message}: {actual} is not greater than {bound}"


def _at_least(actual: int, bound: int, message: str) -> str | None:
    if actual >= bound:
        return None
    return f"{message}: {actual} is not greater than or equal to {bound}"


def _provider_errors(fields: JsonObject, path: str, where: str) -> list[str]:
    """provconfig.Config.Validate."""
    idle = _check_duration(fields["max_idle_agent_period"], f"{where}.max_idle_agent_period")
    starting = _check_duration(
        fields["max_agent_starting_period"], f"{where}.max_agent_starting_period"
    )
    minimum, maximum = fields["min_instances"], fields["max_instances"]
    found: list[str | None] = []
    url = fields["master_url"]
    if url:
        scheme, _, rest = url.partition("://")
        if "/" in rest:
            found.append(
                "invalid master url (expecting scheme://host:port): expected true, got false"
            )
        if scheme not in ("http", "https"):
            found.append(
                "master url scheme must be within [http, https]: "
                f"{scheme} is not in {{http, https}}"
            )
    found += [
        None
        if fields["agent_docker_image"]
        else "must configure an agent docker image:  must be non-empty",
        _greater(idle, 0, "max idle agent period must be greater than 0"),
        _greater(starting, 0, "max agent starting period must be greater than 0"),
        _at_least(minimum, 0, "min instance must be greater than or equal to 0"),
        _greater(maximum, 0, "max instance must be greater than 0"),
        _at_least(maximum, minimum, "max instance must be greater than or equal to min instance"),
    ]
    return [_at(path, message) for message in found if message]


def _aws_errors(cloud: JsonObject, path: str) -> list[str]:
    """AWSClusterConfig.Validate and validateInstanceTypeSlots."""
    found = [
        _greater(len(cloud["ssh_key_name"]), 0, "ec2 key name must be non-empty"),
        _at_least(cloud["root_volume_size"], 100, "ec2 root volume size must be >= 100"),
    ]
    price = cloud["spot_max_price"]
    if cloud["spot"] and price != "OnDemand":
        points = price.count(".")
        if points not in (0, 1):
            found.append(
                "spot max price should have either 0 or 1 decimal points. "
                f"Received {price}, which has {points} decimal points"
            )
        else:
            bad = next((c for c in price.replace(".", "") if not c.isdigit()), None)
            if bad is not None:
                found.append(
                    "spot max price should only contain digits and, optionally, one decimal "
                    f"point. Received {price}, which has the non-digit character {bad}"
                )
    slots = cloud.get("instance_slots")
    if cloud["instance_type"] not in DETERMINED_EC2_SLOTS:
        if slots is None:
            # Go lists the table in map order; sorted here so the message is stable.
            types = ", ".join(sorted(DETERMINED_EC2_SLOTS))
            found.append(
                "Either ec2 'instance_type' and 'instance_slots' must be specified or the ec2 "
                f"'instance_type' must be one of types: {types}"
            )
        elif slots < 0:
            found.append("ec2 'instance_slots' must be greater than or equal to 0")
    return [_at(path, message) for message in found if message]


def _gcp_errors(cloud: JsonObject, path: str) -> list[str]:
    """GCPClusterConfig.Validate and gceInstanceType.Validate."""
    found = [_at_least(cloud["boot_disk_size"], 100, "gce VM boot disk size must be >= 100")]
    kind = cloud["instance_type"]
    machine = kind["machine_type"]
    machine_ok = len(machine.split("-")) == 3 and machine.startswith(_GCE_MACHINE_TYPES)
    type_found = []
    if not machine_ok:
        type_found.append(f"gce VM machine type must be within: {', '.join(_GCE_MACHINE_TYPES)}")
    allowed = _GCE_GPU_TYPES.get(kind["gpu_type"])
    if allowed is None:
        # Go lists the map's keys in map order; sorted here.
        type_found.append(f"gce VM gpu type must be within: {', '.join(sorted(_GCE_GPU_TYPES))}")
    elif kind["gpu_num"] not in allowed:
        nums = " ".join(str(n) for n in sorted(allowed))
        type_found.append(f"gce VM gpu type {kind['gpu_type']} num must be within: [{nums}]")
    return [_at(path, m) for m in found if m] + [_at(f"{path}.InstanceType", m) for m in type_found]


def _resource_config_errors(names: list[str]) -> list[str]:
    """ResourceConfig.Validate, which the embedding Config inherits: each error twice."""
    found = []
    if not names:
        found.append(
            "for additional_resource_managers, you must specify at least one resource pool"
        )
    seen: set[str] = set()
    for name in names:
        if name in seen:
            found.append(f"resource pool has a duplicate name: {name}")
        seen.add(name)
    return [_at(path, m) for m in found for path in ("root", "root.ResourceConfig")]


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
    fields: JsonObject = {**copy.deepcopy(_PROVIDER_DEFAULTS), "master_url": "http://:8080"}
    fields |= {"min_instances": min_instances, "max_instances": max_instances}
    if cloud == "aws":
        own = copy.deepcopy(_AWS_DEFAULTS) | {
            "region": location,
            "instance_type": instance_type,
            "instance_slots": slots_per_instance,
            "spot": preemptible,
            "spot_max_price": "OnDemand",
            "tag_value": DETERMINED_IDENTIFIER,
            "image_id": DEFAULT_IMAGE_IDS.get(location, ""),
        }
    else:
        own = copy.deepcopy(_GCP_DEFAULTS) | {
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
