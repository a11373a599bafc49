"""The local master's master.yaml: read, defaulted and refused as Determined 0.38 does it.

Each expected value is from Determined's source (master/internal/config/**): the
defaults of provconfig.DefaultConfig, defaultAWSClusterConfig, DefaultGCPClusterConfig and
defaultRPConfig, the slot table of aws_config.go, and check.Validate's messages. These
need no Determined client, so they run in both environments.
"""

from __future__ import annotations

from typing import Any

import pytest

from dynagent.testing.determined.master_config import (
    MasterConfigError,
    aws_slots_per_instance,
    fitting_policy,
    gcp_slots_per_instance,
    go_duration_string,
    parse_go_duration,
    read_master_config,
)
from tests.determined.fragment import FRAGMENT


def aws_pool(**provider: Any) -> dict[str, Any]:
    fields = {"type": "aws", "region": "us-west-2", "ssh_key_name": "key"} | provider
    return {"resource_pools": [{"pool_name": "a100", "provider": fields}]}


def gcp_pool(**provider: Any) -> dict[str, Any]:
    fields = {"type": "gcp", "project": "det", "zone": "us-west1-b"} | provider
    return {"resource_pools": [{"pool_name": "t4", "provider": fields}]}


def refusal(config: Any) -> str:
    with pytest.raises(MasterConfigError) as caught:
        read_master_config(config)
    return str(caught.value)


def test_no_config_is_one_default_pool_and_launch_error_on() -> None:
    config = read_master_config(None)
    assert config.launch_error is True
    assert [(p.name, p.provider) for p in config.pools] == [("default", None)]
    assert (config.default_compute_pool, config.default_aux_pool) == ("default", "default")
    printed = config.printable()
    assert printed["resource_pools"] == [
        {
            "pool_name": "default",
            "description": "",
            "provider": None,
            "max_aux_containers_per_agent": 100,
            "task_container_defaults": None,
            "agent_reattach_enabled": False,
            "agent_reconnect_wait": "25s",
        }
    ]
    assert printed["resource_manager"]["type"] == "agent"
    assert printed["resource_manager"]["scheduler"] == {
        "type": "priority",
        "preemption": False,
        "default_priority": 42,
        "fitting_policy": "best",
        "allow_heterogeneous_fits": False,
    }


def test_the_fragment_is_an_aws_pool_of_four_p4d_with_determined_defaults() -> None:
    (pool,) = read_master_config(FRAGMENT).pools
    provider = pool.provider
    assert provider is not None
    assert (provider.type, provider.slots_per_instance) == ("aws", 8)
    assert (provider.min_instances, provider.max_instances) == (0, 4)
    assert (provider.location, provider.instance_type) == ("scaled by dynagent", "p4d.24xlarge")
    printed = read_master_config(FRAGMENT).printable()["resource_pools"][0]["provider"]
    # The given fields, the type beside them, every default, and what the provisioner's
    # start fills in (master_url, spot_max_price, tag_value).
    assert {k: printed[k] for k in ("type", "region", "image_id", "ssh_key_name")} == {
        "type": "aws",
        "region": "scaled by dynagent",
        "image_id": "none",
        "ssh_key_name": "none",
    }
    assert printed["root_volume_size"] == 200
    assert printed["tag_key"] == "managed_by"
    assert printed["tag_value"] == "determined-ai-determined"
    assert printed["network_interface"] == {
        "public_ip": True,
        "subnet_id": "",
        "security_group_id": "",
    }
    assert printed["spot_max_price"] == "OnDemand"
    assert printed["master_url"] == "http://:8080"
    assert printed["agent_docker_image"] == "determinedai/determined-agent:0.38.1"
    assert (printed["max_idle_agent_period"], printed["max_agent_starting_period"]) == (
        "20m0s",
        "20m0s",
    )
    assert printed["launch_error_timeout"] is None
    assert "instance_slots" not in printed  # omitempty


@pytest.mark.parametrize(
    ("instance_type", "instance_slots", "cpu_slots_allowed", "slots"),
    [
        ("p4d.24xlarge", None, False, 8),
        ("p4d.24xlarge", 2, False, 8),  # the table wins over instance_slots
        ("g5.12xlarge", None, False, 4),
        ("p5.48xlarge", 8, False, 8),  # not in Determined's table: instance_slots
        ("c5.xlarge", None, False, 0),
        ("c5.xlarge", None, True, 1),  # no GPU, CPU slots allowed
        ("x9.huge", 0, True, 1),
    ],
)
def test_aws_slots_per_instance(
    instance_type: str, instance_slots: int | None, cpu_slots_allowed: bool, slots: int
) -> None:
    assert aws_slots_per_instance(instance_type, instance_slots, cpu_slots_allowed) == slots
    extra: dict[str, Any] = {"cpu_slots_allowed": cpu_slots_allowed}
    if instance_slots is not None:
        extra["instance_slots"] = instance_slots
    (pool,) = read_master_config(aws_pool(instance_type=instance_type, **extra)).pools
    assert pool.provider is not None and pool.provider.slots_per_instance == slots


def test_gcp_slots_come_from_gpu_num_and_a_partial_instance_type_keeps_its_defaults() -> None:
    assert (gcp_slots_per_instance(4, False), gcp_slots_per_instance(0, True)) == (4, 1)
    config = read_master_config(gcp_pool(instance_type={"machine_type": "a2-highgpu-8g"}))
    provider = config.pools[0].provider
    assert provider is not None
    # gpu_type and gpu_num keep DefaultGCPClusterConfig's nvidia-tesla-t4 x 4
    assert provider.slots_per_instance == 4
    assert provider.fields["instance_type"] == {
        "machine_type": "a2-highgpu-8g",
        "gpu_type": "nvidia-tesla-t4",
        "gpu_num": 4,
        "preemptible": False,
    }
    assert (provider.location, provider.instance_type, provider.max_instances) == (
        "us-west1-b",
        "a2-highgpu-8g",
        5,
    )
    assert provider.fields["boot_disk_type"] == (
        "projects/determined-ai/zones/us-west1-b/diskTypes/pd-standard"
    )
    cpu = read_master_config(
        gcp_pool(cpu_slots_allowed=True, instance_type={"gpu_type": "", "gpu_num": 0})
    )
    assert cpu.pools[0].provider is not None and cpu.pools[0].provider.slots_per_instance == 1


def test_refusals_carry_determined_check_messages_sorted() -> None:
    message = refusal(
        {
            "resource_pools": [
                {"pool_name": "a", "provider": {"type": "aws", "region": "us-west-2"}},
                {
                    "pool_name": "b",
                    "provider": {
                        "type": "gcp",
                        "project": "p",
                        "zone": "z",
                        "max_instances": 0,
                        "boot_disk_size": 50,
                        "instance_type": {"gpu_num": 3},
                    },
                },
            ]
        }
    )
    assert message == (
        "Check Failed! 4 errors found:\n\t"
        "error found at root.ResourceConfig.RootPoolsInternal[0].Provider.AWS: "
        "ec2 key name must be non-empty: 0 is not greater than 0\n\t"
        "error found at root.ResourceConfig.RootPoolsInternal[1].Provider.GCP.InstanceType: "
        "gce VM gpu type nvidia-tesla-t4 num must be within: [0 1 2 4]\n\t"
        "error found at root.ResourceConfig.RootPoolsInternal[1].Provider.GCP: "
        "gce VM boot disk size must be >= 100: 50 is not greater than or equal to 100\n\t"
        "error found at root.ResourceConfig.RootPoolsInternal[1].Provider: "
        "max instance must be greater than 0: 0 is not greater than 0"
    )


def test_an_unknown_ec2_type_needs_instance_slots() -> None:
    message = refusal(aws_pool(instance_type="p5.48xlarge"))
    assert message.startswith(
        "Check Failed! 1 errors found:\n\terror found at "
        "root.ResourceConfig.RootPoolsInternal[0].Provider.AWS: Either ec2 'instance_type' "
        "and 'instance_slots' must be specified or the ec2 'instance_type' must be one of "
        "types: "
    )
    assert "p4d.24xlarge" in message and "p5.48xlarge" not in message
    assert "instance_slots' must be greater than or equal to 0" in refusal(
        aws_pool(instance_type="p5.48xlarge", instance_slots=-1)
    )


def test_min_above_max_and_duplicate_pools_are_refused() -> None:
    assert refusal(aws_pool(min_instances=3, max_instances=2)) == (
        "Check Failed! 1 errors found:\n\terror found at "
        "root.ResourceConfig.RootPoolsInternal[0].Provider: max instance must be greater than "
        "or equal to min instance: 2 is not greater than or equal to 3"
    )
    # ResourceConfig.Validate runs at root.ResourceConfig and, inherited, at root.
    assert refusal({"resource_pools": [{"pool_name": "a"}, {"pool_name": "a"}]}) == (
        "Check Failed! 2 errors found:\n\t"
        "error found at root.ResourceConfig: resource pool has a duplicate name: a\n\t"
        "error found at root: resource pool has a duplicate name: a"
    )
    assert refusal({"resource_pools": []}).startswith("Check Failed! 2 errors found:")
    assert refusal({"resource_pools": [{"description": "x"}]}) == (
        "Check Failed! 1 errors found:\n\terror found at "
        "root.ResourceConfig.RootPoolsInternal[0]: resource pool name cannot be empty: "
        "expected true, got false"
    )


def test_unknown_fields_and_types_are_refused_naming_them() -> None:
    assert refusal("resourcepools: []") == (
        'cannot unmarshal configuration: json: unknown field "resourcepools"'
    )
    assert refusal(aws_pool(max_instance=4)) == (
        'cannot unmarshal configuration: json: unknown field "max_instance"'
    )
    assert "unexpected type: azure" in refusal(aws_pool(type="azure"))
    assert refusal(aws_pool(max_instances="four")) == (
        "resource_pools[0].provider.max_instances: expected an integer, not 'four'"
    )
    assert "launch_error: expected true or false" in refusal({"launch_error": "no"})


def test_the_provisioner_start_needs_an_image_and_a_region_or_zone() -> None:
    assert refusal(aws_pool(region="mars-1")) == (
        "cannot create resource pool: a100: error creating provisioner: cannot create an EC2 "
        "cluster: failed to initialize auto configuration: cannot find default image ID in "
        "the region mars-1"
    )
    (pool,) = read_master_config(aws_pool(region="eu-west-1")).pools
    assert pool.provider is not None
    assert pool.provider.fields["image_id"] == "ami-0870dc8c1081c2ed0"
    assert "set the pool's provider.region" in refusal(aws_pool(region=""))
    assert "set the pool's provider.zone" in refusal(gcp_pool(zone=""))


def test_launch_error_default_pools_and_deprecated_names() -> None:
    config = read_master_config(
        {
            "launch_error": False,
            "resource_manager": {"default_gpu_resource_pool": "a100"},
            "resource_pools": [{"pool_name": "a100", "max_cpu_containers_per_agent": 7}],
        }
    )
    assert config.launch_error is False
    assert (config.default_compute_pool, config.default_aux_pool) == ("a100", "default")
    assert config.pools[0].max_aux_containers_per_agent == 7
    none = read_master_config({"resource_manager": {"no_default_resource_pools": True}})
    assert (none.default_compute_pool, none.default_aux_pool) == ("", "")


def test_printed_scripts_are_masked_and_a_partial_network_interface_keeps_defaults() -> None:
    config = read_master_config(
        aws_pool(startup_script="echo secret", network_interface={"subnet_id": "subnet-1"})
    )
    printed = config.printable()["resource_pools"][0]["provider"]
    assert printed["startup_script"] == "********"
    assert printed["container_startup_script"] == ""
    assert printed["network_interface"] == {
        "public_ip": True,
        "subnet_id": "subnet-1",
        "security_group_id": "",
    }
    assert config.pools[0].provider is not None
    assert config.pools[0].provider.fields["startup_script"] == "echo secret"


@pytest.mark.parametrize(
    ("text", "nanos", "printed"),
    [
        ("20m", 20 * 60 * 10**9, "20m0s"),
        ("25s", 25 * 10**9, "25s"),
        ("1h30m", 5400 * 10**9, "1h30m0s"),
        ("1.5s", 1_500_000_000, "1.5s"),
        ("500ms", 500_000_000, "500ms"),
        ("0", 0, "0s"),
    ],
)
def test_go_durations(text: str, nanos: int, printed: str) -> None:
    assert parse_go_duration(text) == nanos
    assert go_duration_string(nanos) == printed


def test_a_bad_duration_is_refused_naming_the_field() -> None:
    assert refusal(aws_pool(max_idle_agent_period="soon")) == (
        "resource_pools[0].provider.max_idle_agent_period: error parsing duration: "
        'time: invalid duration "soon"'
    )


def test_a_pools_fitting_policy_is_its_own_schedulers_else_the_managers() -> None:
    config = read_master_config(
        {
            "resource_manager": {"scheduler": {"fitting_policy": "worst"}},
            "resource_pools": [
                {"pool_name": "spread"},
                {"pool_name": "packed", "scheduler": {"fitting_policy": "best"}},
                {"pool_name": "unset", "scheduler": {"fitting_policy": ""}},
            ],
        }
    )
    policies = {pool.name: fitting_policy(config, pool) for pool in config.pools}
    # An empty fitting_policy is UnmarshalJSON's default, best, not the manager's.
    assert policies == {"spread": "worst", "packed": "best", "unset": "best"}
    assert refusal({"resource_manager": {"scheduler": {"fitting_policy": "tight"}}}) == (
        "resource_manager.scheduler.fitting_policy: invalid fitting policy: tight not in "
        "[best worst]"
    )
