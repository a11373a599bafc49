"""The pool configuration: Determined's master.yaml, checked when it loads."""

from __future__ import annotations

import copy
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from dynagent.core.config import Config, ConfigError, Settings, config_from_document, parse_config
from dynagent.files.config import load_config
from tests.builders import IMAGE_ID

# A resource pool as an admin has it in Determined's master.yaml, pasted unchanged.
MASTER_YAML = f"""
port: 8080
db:
  user: postgres
  host: determined-db
checkpoint_storage:
  type: s3
  bucket: checkpoints
resource_manager:
  type: agent
  default_compute_resource_pool: gpu
resource_pools:
  - pool_name: gpu
    description: V100s on demand
    max_aux_containers_per_agent: 100
    agent_reattach_enabled: true
    task_container_defaults:
      shm_size_bytes: 4294967296
    provider:
      type: aws
      master_url: http://10.0.0.10:8080
      region: us-west-2
      image_id: {IMAGE_ID}
      instance_type: p3.8xlarge
      root_volume_size: 300
      tag_key: determined-pool
      tag_value: gpu
      instance_name: det-gpu-agent
      ssh_key_name: ops
      iam_instance_profile_arn: arn:aws:iam::123456789012:instance-profile/det-agent
      network_interface:
        public_ip: false
        security_group_id: sg-0abc
        subnet_id: subnet-0abc
      max_idle_agent_period: 5m
      max_agent_starting_period: 1m30s
      min_instances: 1
      max_instances: 8
      spot: true
      spot_max_price: "3.50"
      custom_tags:
        - key: team
          value: research
      agent_docker_image: determinedai/determined-agent:0.38.0
      startup_script: |
        mkdir -p /mnt/data
      launch_error_timeout: 30s
      launch_error_retries: 2
  - pool_name: cpu
    provider:
      type: aws
      region: us-west-2
      image_id: {IMAGE_ID}
      instance_type: c5.2xlarge
      instance_slots: 0
      cpu_slots_allowed: true
"""


def base_document() -> dict[str, Any]:
    """One minimal valid pool named gpu, as a parsed YAML document."""
    return {
        "resource_pools": [
            {
                "pool_name": "gpu",
                "provider": {
                    "type": "aws",
                    "region": "us-east-1",
                    "image_id": IMAGE_ID,
                    "instance_type": "p3.8xlarge",
                },
            }
        ]
    }


def with_provider(**fields: Any) -> dict[str, Any]:
    document = base_document()
    document["resource_pools"][0]["provider"].update(fields)
    return document


def test_master_yaml_resource_pools_load_unchanged() -> None:
    config = parse_config(MASTER_YAML)

    assert set(config.pools) == {"gpu", "cpu"}
    gpu = config.pool("gpu").provider
    assert gpu.region == "us-west-2"
    assert gpu.master_url == "http://10.0.0.10:8080"
    assert gpu.root_volume_size == 300
    assert (gpu.tag_key, gpu.tag_value) == ("determined-pool", "gpu")
    assert gpu.instance_name == "det-gpu-agent"
    assert gpu.network_interface.public_ip is False
    assert gpu.network_interface.subnet_id == "subnet-0abc"
    assert gpu.max_idle_agent_period == timedelta(minutes=5)
    assert gpu.max_agent_starting_period == timedelta(seconds=90)
    assert (gpu.min_instances, gpu.max_instances) == (1, 8)
    assert gpu.spot is True
    assert gpu.spot_max_price == "3.50"
    assert [(tag.key, tag.value) for tag in gpu.custom_tags] == [("team", "research")]
    assert gpu.slots_per_instance == 4
    assert config.pool("cpu").provider.slots_per_instance == 1


def test_determined_defaults_apply() -> None:
    provider = config_from_document(base_document()).pool("gpu").provider

    assert provider.max_idle_agent_period == timedelta(minutes=20)
    assert provider.max_agent_starting_period == timedelta(minutes=20)
    assert provider.min_instances == 0
    assert provider.max_instances == 5
    assert provider.root_volume_size == 200
    assert provider.instance_name == "determined-ai-agent"
    assert provider.max_disconnected_period == timedelta(minutes=10)
    assert provider.spot is False
    assert provider.network_interface.public_ip is True


def test_legacy_single_pool_form_is_pool_default() -> None:
    config = parse_config(
        f"""
provisioner:
  provider: aws
  region: eu-west-1
  image_id: {IMAGE_ID}
  instance_type: g4dn.12xlarge
  max_instances: 3
  max_idle_agent_period: 10m
"""
    )

    assert list(config.pools) == ["default"]
    provider = config.pool("default").provider
    assert provider.type == "aws"
    assert provider.region == "eu-west-1"
    assert provider.max_instances == 3
    assert provider.max_idle_agent_period == timedelta(minutes=10)
    assert provider.slots_per_instance == 4


def test_legacy_and_resource_pools_together_are_refused() -> None:
    # Determined refuses the old and the new form together (root.go shimOldRMConfig).
    document = base_document()
    document["provisioner"] = {"provider": "aws", "region": "us-east-1", "image_id": IMAGE_ID}

    with pytest.raises(ConfigError, match="cannot be used together"):
        config_from_document(document)


def test_a_pool_without_provider_is_static_and_left_to_the_master() -> None:
    document = base_document()
    document["resource_pools"].append({"pool_name": "on-prem", "description": "our racks"})

    config = config_from_document(document)

    assert list(config.pools) == ["gpu"]
    assert config.static_pools == ("on-prem",)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("30s", timedelta(seconds=30)),
        ("1m30s", timedelta(seconds=90)),
        ("1h", timedelta(hours=1)),
        ("1.5h", timedelta(minutes=90)),
        ("300ms", timedelta(milliseconds=300)),
    ],
)
def test_durations_in_config(value: Any, expected: timedelta) -> None:
    config = config_from_document(with_provider(max_idle_agent_period=value))
    assert config.pool("gpu").provider.max_idle_agent_period == expected


@pytest.mark.parametrize(
    ("fields", "slots"),
    [
        ({"instance_type": "p3.8xlarge"}, 4),
        ({"instance_type": "p4d.24xlarge"}, 8),
        ({"instance_type": "g5.xlarge"}, 1),
        ({"instance_type": "x9.huge", "instance_slots": 2}, 2),
        ({"instance_type": "p3.8xlarge", "instance_slots": 2}, 2),
        ({"instance_type": "c5.large", "instance_slots": 0}, 0),
        ({"instance_type": "c5.large", "instance_slots": 0, "cpu_slots_allowed": True}, 1),
    ],
    ids=["table", "table-8", "table-1", "instance-slots", "slots-override", "cpu", "cpu-slots"],
)
def test_slots_per_instance(fields: dict[str, Any], slots: int) -> None:
    provider = config_from_document(with_provider(**fields)).pool("gpu").provider
    assert provider.slots_per_instance == slots


def test_dynagent_settings() -> None:
    document = base_document()
    document["dynagent"] = {"spot_request_grace": "5m", "max_snapshot_age": "120s"}

    settings = config_from_document(document).settings

    assert settings.spot_request_grace == timedelta(minutes=5)
    assert settings.max_snapshot_age == timedelta(minutes=2)
    assert settings.launch_visibility_timeout == Settings().launch_visibility_timeout


def _mutate(change: Any) -> dict[str, Any]:
    document = copy.deepcopy(base_document())
    change(document)
    return document


def _provider(document: dict[str, Any]) -> dict[str, Any]:
    provider: dict[str, Any] = document["resource_pools"][0]["provider"]
    return provider


# Each bad config, and the fragments its message must have: the pool and the field path.
BAD_CONFIGS = [
    pytest.param(
        with_provider(instance_count=3),
        ["pool 'gpu'", "provider.instance_count", "unknown field"],
        id="unknown-provider-field",
    ),
    pytest.param(
        _mutate(lambda d: d["resource_pools"][0].update(pool_size=3)),
        ["pool 'gpu'", "unknown field", "pool_size"],
        id="unknown-pool-field",
    ),
    pytest.param(
        with_provider(network_interface={"public_ip": True, "vpc": "vpc-1"}),
        ["pool 'gpu'", "provider.network_interface.vpc", "unknown field"],
        id="unknown-nested-field",
    ),
    pytest.param(
        with_provider(max_instances="many"),
        ["pool 'gpu'", "provider.max_instances", "integer"],
        id="wrong-type",
    ),
    pytest.param(
        with_provider(network_interface={"public_ip": "sometimes"}),
        ["pool 'gpu'", "provider.network_interface.public_ip", "boolean"],
        id="wrong-nested-type",
    ),
    pytest.param(
        with_provider(min_instances=-1),
        ["pool 'gpu'", "provider.min_instances"],
        id="negative-min",
    ),
    pytest.param(
        with_provider(min_instances=3, max_instances=2),
        ["pool 'gpu'", "provider", "max_instances (2) is below min_instances (3)"],
        id="max-below-min",
    ),
    pytest.param(
        with_provider(spot=True, spot_max_price="$3.50"),
        ["pool 'gpu'", "provider.spot_max_price", "'$3.50'", "dollars per hour"],
        id="spot-price-currency-sign",
    ),
    pytest.param(
        with_provider(spot=True, spot_max_price="3.5.0"),
        ["pool 'gpu'", "provider.spot_max_price"],
        id="spot-price-two-points",
    ),
    pytest.param(
        with_provider(spot=True, spot_max_price="0"),
        ["pool 'gpu'", "provider.spot_max_price"],
        id="spot-price-zero",
    ),
    pytest.param(
        with_provider(spot=True, spot_max_price=3.5),
        ["pool 'gpu'", "provider.spot_max_price", "string"],
        id="spot-price-not-a-string",
    ),
    pytest.param(
        with_provider(instance_type="x9.huge"),
        ["pool 'gpu'", "instance_slots is required", "'x9.huge'"],
        id="unknown-instance-type",
    ),
    pytest.param(
        with_provider(max_idle_agent_period="20 minutes"),
        ["pool 'gpu'", "provider.max_idle_agent_period", "'20 minutes' is not a duration"],
        id="bad-duration",
    ),
    pytest.param(
        with_provider(max_idle_agent_period=45),
        ["pool 'gpu'", "provider.max_idle_agent_period", "45", "write it with a unit, like 10s"],
        id="duration-bare-int",
    ),
    pytest.param(
        with_provider(max_agent_starting_period=1.5),
        ["pool 'gpu'", "provider.max_agent_starting_period", "write it with a unit, like 10s"],
        id="duration-bare-float",
    ),
    pytest.param(
        with_provider(max_idle_agent_period="10"),
        ["pool 'gpu'", "provider.max_idle_agent_period", "'10'", "write it with a unit"],
        id="duration-bare-string",
    ),
    pytest.param(
        with_provider(image_id="ubuntu-22.04"),
        ["pool 'gpu'", "provider.image_id"],
        id="bad-image-id",
    ),
    pytest.param(
        with_provider(custom_tags=[{"key": "", "value": "x"}]),
        ["pool 'gpu'", "provider.custom_tags.0.key"],
        id="empty-custom-tag-key",
    ),
    pytest.param(
        with_provider(type="azure"),
        ["pool 'gpu'", "provider.type", "aws, gcp"],
        id="unsupported-provider-type",
    ),
    pytest.param(
        _mutate(lambda d: _provider(d).pop("region")),
        ["pool 'gpu'", "provider.region", "required", "AWS_REGION or AWS_DEFAULT_REGION"],
        id="missing-region",
    ),
    pytest.param(
        _mutate(lambda d: d["resource_pools"][0].pop("provider")),
        ["no pools with a provider"],
        id="only-static-pools",
    ),
    pytest.param(
        _mutate(lambda d: d["resource_pools"][0].update(pool_name="bad name!")),
        ["pool 'bad name!'", "pool_name"],
        id="bad-pool-name",
    ),
    pytest.param(
        _mutate(lambda d: d["resource_pools"].append(copy.deepcopy(d["resource_pools"][0]))),
        ["pool 'gpu'", "defined twice"],
        id="duplicate-pool",
    ),
    pytest.param(
        {"provisioner": {"provider": "aws", "region": "us-east-1", "image_id": IMAGE_ID, "x": 1}},
        ["pool 'default'", "provider.x", "unknown field"],
        id="legacy-unknown-field",
    ),
    pytest.param(
        {"provisioner": {"region": "us-east-1", "image_id": IMAGE_ID}},
        ["pool 'default'", "provider.type"],
        id="legacy-without-provider",
    ),
    pytest.param(
        _mutate(lambda d: d.update(autoscaler={"enabled": True})),
        ["unknown top-level field", "autoscaler"],
        id="unknown-top-level-field",
    ),
    pytest.param(
        _mutate(lambda d: d.update(dynagent={"spot_grace": "2m"})),
        ["dynagent", "spot_grace", "unknown field"],
        id="unknown-settings-field",
    ),
    pytest.param(
        _mutate(lambda d: d.update(dynagent={"spot_request_grace": "soon"})),
        ["dynagent", "spot_request_grace", "'soon' is not a duration"],
        id="bad-settings-duration",
    ),
    pytest.param({"port": 8080}, ["no pools"], id="no-pools"),
    pytest.param({"resource_pools": {"gpu": {}}}, ["resource_pools must be a list"], id="not-list"),
    pytest.param({"resource_pools": ["gpu"]}, ["resource_pools[0]"], id="pool-not-mapping"),
]


@pytest.mark.parametrize(("document", "fragments"), BAD_CONFIGS)
def test_bad_config_names_pool_and_field(document: dict[str, Any], fragments: list[str]) -> None:
    with pytest.raises(ConfigError) as raised:
        parse_config(yaml.safe_dump(document), source="master.yaml", environ={})

    message = str(raised.value)
    assert message.startswith("master.yaml: ")
    for fragment in fragments:
        assert fragment in message, f"{fragment!r} not in {message!r}"


@pytest.mark.parametrize(
    "text", ["resource_pools: [", "- just\n- a list\n", "just text"], ids=["yaml", "list", "scalar"]
)
def test_unreadable_yaml(text: str) -> None:
    with pytest.raises(ConfigError, match=r"^<config>: "):
        parse_config(text)


def test_load_config_from_a_file(tmp_path: Path) -> None:
    path = tmp_path / "master.yaml"
    path.write_text(MASTER_YAML)

    assert set(load_config(path).pools) == {"gpu", "cpu"}


def test_load_config_names_a_missing_file(tmp_path: Path) -> None:
    missing = tmp_path / "nope.yaml"
    with pytest.raises(ConfigError, match="cannot read config") as raised:
        load_config(missing)
    assert str(missing) in str(raised.value)


def test_errors_in_a_file_name_the_file(tmp_path: Path) -> None:
    path = tmp_path / "master.yaml"
    path.write_text(yaml.safe_dump(with_provider(max_instances="many")))
    with pytest.raises(ConfigError, match=r"provider\.max_instances") as raised:
        load_config(path)
    assert str(raised.value).startswith(f"{path}: pool 'gpu': ")


def test_unknown_pool_lists_the_configured_ones() -> None:
    config: Config = parse_config(MASTER_YAML)
    with pytest.raises(KeyError, match=r"pool 'tpu' is not configured \(configured: cpu, gpu\)"):
        config.pool("tpu")


def test_config_is_frozen() -> None:
    provider = config_from_document(base_document()).pool("gpu").provider
    with pytest.raises(ValueError, match="frozen"):
        provider.max_instances = 50  # type: ignore[misc]


@pytest.mark.parametrize(
    ("fields", "says"),
    [
        ({"gpu_type": "nvidia-tesla-t4"}, "it lives at provider.instance_type.gpu_type"),
        ({"subnetwork": "default"}, "it lives at provider.network_interface.subnetwork"),
        ({"labal_key": "owner"}, "did you mean label_key?"),
        ({"service_account": {"emial": "a@b"}}, "did you mean email?"),
    ],
)
def test_an_unknown_gcp_field_says_where_it_belongs(fields: dict[str, Any], says: str) -> None:
    provider = {
        "type": "gcp",
        "project": "proj",
        "zone": "us-central1-a",
        "boot_disk_source_image": "projects/proj/global/images/agent",
        **fields,
    }
    with pytest.raises(ConfigError, match="unknown field") as raised:
        config_from_document({"resource_pools": [{"pool_name": "t4", "provider": provider}]})
    assert says in str(raised.value)
