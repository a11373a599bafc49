"""``dynagent master-config``: the master's resource_pools from dynagent's pool file.

Every pool dynagent scales comes out with an admission-only provider that gives the
master, by Determined's own rules (``dynagent.core.admission``), the slots of the pool's
largest machine and its max_instances, in a region whose provisioner can never act;
other pools come out as the file has them. The fragment read back as the master reads
it is checked, not its text.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from dynagent.cli.main import main
from dynagent.core.admission import (
    ADMISSION_REGION,
    MasterPool,
    pools_from_master_config,
    provisioner_can_act,
)
from dynagent.core.config import ConfigError, parse_config
from dynagent.files.config import load_config
from dynagent.files.master_config import master_config
from tests.builders import IMAGE_ID

ENV = {"AWS_REGION": "us-west-2", "DYNAGENT_GCP_PROJECT": "p", "DYNAGENT_GCP_ZONE": "us-west1-b"}


def aws(instance_type: str, **fields: Any) -> dict[str, Any]:
    return {"type": "aws", "image_id": IMAGE_ID, "instance_type": instance_type, **fields}


def gcp(machine_type: str, gpu_type: str, gpu_num: int, **fields: Any) -> dict[str, Any]:
    machine = {"machine_type": machine_type, "gpu_type": gpu_type, "gpu_num": gpu_num}
    return {"type": "gcp", "instance_type": machine, **fields}


# Several of everything: shapes, clouds, a mixed pool, a CPU pool, a type Determined's
# table lacks, a static pool and Determined's pool-level keys.
POOLS: list[dict[str, Any]] = [
    {
        "pool_name": "a100",
        "description": "eight A100s a machine",
        "task_container_defaults": {"shm_size_bytes": 4294967296},
        "scheduler": {"type": "priority", "preemption": True},
        "provider": aws("p4d.24xlarge", max_instances=4),
    },
    {
        "pool_name": "a10g",
        "provider": aws(
            "g5.xlarge",
            max_instances=6,
            offerings={
                "instance_types": ["g5.xlarge", "g5.12xlarge", "g5.48xlarge"],
                "prices": {"g5.xlarge": 1.0, "g5.12xlarge": 5.7, "g5.48xlarge": 16.3},
            },
        ),
    },
    {"pool_name": "t4", "provider": gcp("n1-standard-32", "nvidia-tesla-t4", 4, max_instances=3)},
    {"pool_name": "t4-pair", "provider": gcp("n1-standard-32", "nvidia-tesla-t4", 2)},
    {"pool_name": "cpu", "provider": aws("m5.large", cpu_slots_allowed=True, max_instances=10)},
    {"pool_name": "h100", "provider": aws("p5.48xlarge", max_instances=2)},
    {"pool_name": "half", "provider": aws("p4d.24xlarge", instance_slots=4, max_instances=2)},
    {"pool_name": "on-prem", "description": "the lab's own", "max_aux_containers_per_agent": 7},
]


@pytest.fixture
def pools_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for name, value in ENV.items():
        monkeypatch.setenv(name, value)
    path = tmp_path / "pools.yaml"
    path.write_text(yaml.safe_dump({"resource_pools": POOLS}))
    return path


def read_back(text: str) -> dict[str, MasterPool]:
    return pools_from_master_config(yaml.safe_load(text))


def test_each_scaled_pool_gets_its_largest_machine_and_max_instances(pools_file: Path) -> None:
    config = load_config(pools_file)
    seen = read_back(master_config(pools_file))
    for name, pool in config.pools.items():
        assert seen[name] == MasterPool(
            name,
            "aws",
            pool.provider.slots_per_instance,
            pool.provider.max_instances,
            ADMISSION_REGION,
        ), name
        assert not seen[name].provisioner_acts
    expected = {"a100": 8, "a10g": 8, "t4": 4, "t4-pair": 2, "cpu": 1, "h100": 8, "half": 4}
    assert {name: seen[name].slots_per_agent for name in config.pools} == expected
    assert seen["a100"].capacity == 32 and seen["a10g"].capacity == 48


def test_each_admission_provider_has_a_tag_pair_of_its_own(pools_file: Path) -> None:
    """No pair the master's provisioner could filter on is one dynagent's machines carry:
    were its region ever valid, it still would not find them."""
    config = load_config(pools_file)
    written = yaml.safe_load(master_config(pools_file))["resource_pools"]
    pairs = {p["pool_name"]: (p["provider"]["tag_key"], p["provider"]["tag_value"])
             for p in written if "provider" in p}  # fmt: skip
    assert set(pairs) == set(config.pools)
    assert len(set(pairs.values())) == len(pairs)  # one per pool
    ours = {
        (p.provider.tag_key, p.provider.tag_value)
        if p.provider.type == "aws"
        else (p.provider.label_key, p.provider.label_value)
        for p in config.pools.values()
    }
    assert not ours & set(pairs.values())
    assert not {key for key, _ in ours} & {key for key, _ in pairs.values()}


def test_the_pools_keep_their_order_their_determined_keys_and_the_static_pool(
    pools_file: Path,
) -> None:
    pools = yaml.safe_load(master_config(pools_file))["resource_pools"]
    assert [p["pool_name"] for p in pools] == [p["pool_name"] for p in POOLS]
    first = pools[0]
    for key in ("description", "task_container_defaults", "scheduler"):
        assert first[key] == POOLS[0][key]
    assert pools[-1] == POOLS[-1]  # left to the master, as the file has it
    assert read_back(master_config(pools_file))["on-prem"].provider is None


def test_one_instance_type_name_never_means_two_slot_counts(pools_file: Path) -> None:
    """Determined keeps one count per instance_type name (instance_slots adds to one
    global table), and its table wins for the types it knows."""
    written = yaml.safe_load(master_config(pools_file))["resource_pools"]
    pools = {p["pool_name"]: p["provider"] for p in written if "provider" in p}
    assert (
        pools["a100"]["instance_type"] == "p4d.24xlarge" and "instance_slots" not in pools["a100"]
    )
    assert pools["half"]["instance_type"] != "p4d.24xlarge" and pools["half"]["instance_slots"] == 4
    assert pools["t4"]["instance_type"] == "n1-standard-32" and pools["t4"]["instance_slots"] == 4
    assert pools["t4-pair"]["instance_type"] != "n1-standard-32"
    assert pools["cpu"]["cpu_slots_allowed"] is True
    names: dict[str, int] = {}
    for name, seen in read_back(master_config(pools_file)).items():
        if seen.provider:
            kind = pools[name]["instance_type"]
            assert names.setdefault(kind, seen.slots_per_agent) == seen.slots_per_agent


def test_the_fragment_is_not_a_dynagent_config(pools_file: Path, tmp_path: Path) -> None:
    master_yaml = tmp_path / "master.yaml"
    master_yaml.write_text("port: 8080\nlaunch_error: true\n" + master_config(pools_file))
    with pytest.raises(ConfigError) as refused:
        load_config(master_yaml)
    message = str(refused.value)
    assert "pool 'a100'" in message and "for admission only" in message
    assert "dynagent master-config --config" in message


def test_a_master_yaml_without_providers_says_to_run_master_config() -> None:
    text = "resource_pools:\n  - pool_name: default\n  - pool_name: aux\n"
    with pytest.raises(ConfigError, match="dynagent master-config --config"):
        parse_config(text)


def test_a_pool_that_never_launches_has_no_master_fragment(tmp_path: Path) -> None:
    path = tmp_path / "pools.yaml"
    provider = aws("p4d.24xlarge", region="us-west-2", max_instances=0)
    pools = [{"pool_name": "off", "provider": provider}]
    path.write_text(yaml.safe_dump({"resource_pools": pools}))
    with pytest.raises(ConfigError, match="pool 'off': max_instances is 0"):
        master_config(path)


def test_the_old_single_pool_form_gives_the_default_pool(tmp_path: Path) -> None:
    path = tmp_path / "master.yaml"
    fields = aws("g4dn.12xlarge", region="us-west-2", max_instances=3)
    provisioner = {**{k: v for k, v in fields.items() if k != "type"}, "provider": "aws"}
    path.write_text(yaml.safe_dump({"provisioner": provisioner}))
    assert read_back(master_config(path)) == {
        "default": MasterPool("default", "aws", 4, 3, ADMISSION_REGION)
    }


def test_the_command_prints_the_fragment_and_names_a_bad_file(
    pools_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["master-config", "--config", str(pools_file)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("# Written by `dynagent master-config") and read_back(out)
    assert main(["master-config", "--config", str(tmp_path / "missing.yaml")]) == 2
    assert "missing.yaml" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("kind", "region", "acts"),
    [
        ("aws", "us-west-2", True),
        ("aws", "eu-central-1", True),
        ("aws", ADMISSION_REGION, False),
        ("aws", "scaled_by_dynagent", False),
        ("aws", "-us-west-2", False),
        ("gcp", "us-west1-b", True),
        ("hpc", "", False),
    ],
)
def test_whether_the_masters_provisioner_can_act(kind: str, region: str, acts: bool) -> None:
    """aws-sdk-go v1's region check: alphanumerics and inner dashes only."""
    assert provisioner_can_act(kind, region) is acts
