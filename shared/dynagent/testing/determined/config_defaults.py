"""Determined's defaults for a master.yaml: the version, default pool and priority, and
each section's defaults as the master fills them in before it reads the file
(``master/internal/config``, ``provconfig``, ``resource_pool_config.go``), with the
top-level keys it knows."""

from __future__ import annotations

from typing import Any, Final

VERSION: Final = "0.38.1"
DEFAULT_POOL: Final = "default"
DEFAULT_PRIORITY: Final = 42  # config.DefaultSchedulingPriority
FITTING_POLICIES: Final = ("best", "worst")  # scheduler_config.go: best is the default
MAX_AUX_CONTAINERS_PER_AGENT: Final = 100  # defaultRPConfig
# pkg.DeterminedIdentifier: the tag value, label value and name prefix off EC2 and GCE.
DETERMINED_IDENTIFIER: Final = "determined-ai-determined"

JsonObject = dict[str, Any]

# provconfig.DefaultConfig; the durations as Duration.MarshalJSON writes them.
PROVIDER_DEFAULTS: Final[JsonObject] = {
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
AWS_DEFAULTS: Final[JsonObject] = {
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
AWS_OPTIONAL: Final = frozenset({"instance_slots"})
# DefaultGCPClusterConfig.
GCP_DEFAULTS: Final[JsonObject] = {
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
POOL_DEFAULTS: Final[JsonObject] = {
    "pool_name": "",
    "description": "",
    "provider": None,
    "max_aux_containers_per_agent": MAX_AUX_CONTAINERS_PER_AGENT,
    "task_container_defaults": None,
    "agent_reattach_enabled": False,
    "agent_reconnect_wait": "25s",  # aproto.AgentReconnectWait
}
POOL_OPTIONAL: Final = frozenset({"scheduler", "max_cpu_containers_per_agent"})
# config.DefaultSchedulerConfig, flattened beside its type by pkg/union.
SCHEDULER_DEFAULTS: Final[JsonObject] = {
    "type": "priority",
    "preemption": False,
    "default_priority": DEFAULT_PRIORITY,
    "fitting_policy": "best",
    "allow_heterogeneous_fits": False,
}
AGENT_RM_DEFAULTS: Final[JsonObject] = {
    "type": "agent",
    "cluster_name": "default",  # config.DefaultClusterName
    "scheduler": SCHEDULER_DEFAULTS,
    "default_aux_resource_pool": DEFAULT_POOL,
    "default_compute_resource_pool": DEFAULT_POOL,
    "no_default_resource_pools": False,
    "require_authentication": False,
    "client_ca": "",
    "name": "",
    "metadata": None,
}
AGENT_RM_OPTIONAL: Final = frozenset({"default_cpu_resource_pool", "default_gpu_resource_pool"})
# Config's top-level JSON tags (config.go Config and the embedded ResourceConfig).
TOP_LEVEL_KEYS: Final = frozenset(
    {
        "config_file", "log", "db", "tensorboard_timeout", "notebook_timeout", "security",
        "checkpoint_storage", "task_container_defaults", "port", "root", "telemetry",
        "enable_cors", "launch_error", "cluster_name", "ui_customization", "logging",
        "retention_policy", "observability", "cache", "webhooks", "feature_switches",
        "reserved_ports", "resource_manager", "resource_pools", "additional_resource_managers",
        "__internal", "scim", "saml", "oidc", "det_cloud", "integrations",
    }
)  # fmt: skip
