"""Offerings in the config: shapes, subnets or zones, purchase options, prices, and the
mistakes each names by pool and field."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from dynagent.core.config import ConfigError, parse_config
from dynagent.core.offerings import Purchase
from dynagent.core.pools.aws import AwsProvider
from dynagent.core.pools.gcp import GcpProvider
from tests.builders import IMAGE_ID

V100S = ["p3.2xlarge", "p3.8xlarge", "p3.16xlarge"]


def aws(**fields: Any) -> dict[str, Any]:
    provider = {"type": "aws", "region": "us-east-1", "image_id": IMAGE_ID, **fields}
    return {"resource_pools": [{"pool_name": "v100", "provider": provider}]}


def gcp(**fields: Any) -> dict[str, Any]:
    provider = {
        "type": "gcp",
        "project": "proj",
        "zone": "us-central1-a",
        "boot_disk_source_image": "projects/p/global/images/agent",
        **fields,
    }
    return {"resource_pools": [{"pool_name": "a100", "provider": provider}]}


def load(document: dict[str, Any]) -> Any:
    return parse_config(yaml.safe_dump(document), source="pools.yaml").pools


def test_without_offerings_the_one_type_is_the_one_offering() -> None:
    provider = load(aws(instance_type="p3.16xlarge", spot=True))["v100"].provider
    catalog = provider.catalog()
    assert [(o.instance_type, o.slots, o.purchase) for o in catalog.offerings] == [
        ("p3.16xlarge", 8, Purchase.SPOT)
    ]


def test_aws_offerings_in_preference_order_with_prices() -> None:
    offerings = {
        "instance_types": V100S,
        "subnet_ids": ["subnet-a", "subnet-b"],
        "purchase": ["spot", "on-demand"],
        "prices": {"p3.2xlarge/spot": 0.95, "p3.8xlarge": 12.0},
    }
    provider = load(aws(instance_type="p3.16xlarge", offerings=offerings))["v100"].provider
    assert isinstance(provider, AwsProvider)
    catalog = provider.catalog(spot_prices={"p3.8xlarge": 4.1, "p3.16xlarge": 99.0})
    keys = [o.key for o in catalog.offerings]
    assert keys[:4] == [
        "p3.2xlarge@subnet-a/spot",
        "p3.2xlarge@subnet-b/spot",
        "p3.2xlarge@subnet-a/on-demand",
        "p3.2xlarge@subnet-b/on-demand",
    ]
    price = {o.key: o.price for o in catalog.offerings}
    assert price["p3.2xlarge@subnet-a/spot"] == 0.95  # the user's spot price wins
    assert price["p3.8xlarge@subnet-a/spot"] == 4.1  # the cloud's spot price
    assert price["p3.8xlarge@subnet-a/on-demand"] == 12.0  # the user's over the table
    assert price["p3.16xlarge@subnet-a/spot"] == 24.48  # spot never above on-demand
    assert [s.slots for s in catalog.shapes()] == [1, 4, 8]
    assert provider.slots_per_instance == 8


def test_unavailable_offerings_leave_the_shapes() -> None:
    offerings = {"instance_types": V100S}
    provider = load(aws(offerings=offerings))["v100"].provider
    out = frozenset({"p3.2xlarge@/on-demand"})
    assert [s.instance_type for s in provider.catalog(unavailable=out).shapes()] == V100S[1:]


def test_gcp_offerings_across_zones() -> None:
    offerings = {
        "machines": [
            {"machine_type": "a2-highgpu-1g", "gpu_type": "nvidia-tesla-a100", "gpu_num": 1},
            {"machine_type": "a2-highgpu-8g", "gpu_type": "nvidia-tesla-a100", "gpu_num": 8},
        ],
        "zones": ["us-central1-a", "us-central1-b"],
        "purchase": ["spot", "standard"],
    }
    provider = load(gcp(offerings=offerings))["a100"].provider
    assert isinstance(provider, GcpProvider)
    catalog = provider.catalog()
    assert catalog.offerings[0].key == "a2-highgpu-1g@us-central1-a/spot"
    assert catalog.offerings[2].key == "a2-highgpu-1g@us-central1-a/on-demand"
    assert [s.slots for s in catalog.shapes()] == [1, 8]
    assert provider.machine("a2-highgpu-8g").gpu_num == 8


def test_mixed_gpu_models_load_with_a_warning_when_asked_for() -> None:
    offerings = {"instance_types": ["p3.2xlarge", "g5.xlarge"]}
    provider = load(aws(offerings=offerings, mixed_gpu_models=True, ssh_key_name="ops"))
    assert provider["v100"].provider.warnings() == [
        "offerings mix GPU models (A10G, V100) on purpose"
    ]


A100 = {"machine_type": "a2-highgpu-1g", "gpu_type": "nvidia-tesla-a100", "gpu_num": 1}
BAD = [
    pytest.param(
        aws(offerings={"instance_types": ["x9.huge"]}),
        ["pool 'v100'", "offerings.instance_types", "'x9.huge'", "offerings.slots"],
        id="unknown-type-without-slots",
    ),
    pytest.param(
        aws(offerings={"instance_types": ["p3.2xlarge", "x9.huge"], "slots": {"x9.huge": 2}}),
        ["pool 'v100'", "offerings.prices", "x9.huge"],
        id="unknown-type-without-price",
    ),
    pytest.param(
        aws(offerings={"instance_types": ["p3.2xlarge", "g5.xlarge"]}),
        ["pool 'v100'", "mix GPU models", "mixed_gpu_models: true"],
        id="mixed-gpu-models",
    ),
    pytest.param(
        aws(offerings={"instance_types": ["p3.2xlarge"], "prices": {"p3.8xlarge": 1.0}}),
        ["offerings.prices", "'p3.8xlarge' is not one of the offered types"],
        id="price-of-a-type-not-offered",
    ),
    pytest.param(
        aws(offerings={"instance_types": ["p3.2xlarge"], "purchase": ["reserved"]}),
        ["pool 'v100'", "offerings.purchase"],
        id="unknown-purchase",
    ),
    pytest.param(
        aws(offerings={"instance_types": ["p3.2xlarge", "p3.2xlarge"]}),
        ["offerings.instance_types", "twice"],
        id="type-twice",
    ),
    pytest.param(
        aws(offerings={"instance_types": []}),
        ["offerings.instance_types"],
        id="no-types",
    ),
    pytest.param(
        aws(warm_headroom_slots=-1),
        ["warm_headroom_slots"],
        id="negative-headroom",
    ),
    pytest.param(
        gcp(offerings={"machines": [A100], "zones": ["us-east1-b"]}),
        ["pool 'a100'", "offerings.zones", "us-east1-b", "region us-central1"],
        id="zone-in-another-region",
    ),
    pytest.param(
        gcp(offerings={"machines": [A100, A100]}),
        ["pool 'a100'", "offerings.machines", "twice"],
        id="machine-twice",
    ),
]


@pytest.mark.parametrize(("document", "fragments"), BAD)
def test_mistakes_name_pool_and_field(document: dict[str, Any], fragments: list[str]) -> None:
    with pytest.raises(ConfigError) as raised:
        load(document)
    for fragment in fragments:
        assert fragment in str(raised.value), f"{fragment!r} not in {raised.value}"
