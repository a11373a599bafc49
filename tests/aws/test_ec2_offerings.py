"""An EC2 pool with offerings over the wire: CreateFleet from the function's own launch
template, the cheapest machine per task, and falling through when EC2 has no capacity.

Against the local AWS, whose CreateFleet is EC2's where this depends on it (ClientToken,
``Errors`` per override, capacity limits; see dynagent.testing.aws.local_aws)."""

from __future__ import annotations

import base64
from collections import Counter
from datetime import timedelta
from typing import Any

from dynagent.aws.ec2 import Ec2Provider
from dynagent.aws.fleet_launch import WarmState, template_name
from dynagent.core.snapshot import Snapshot
from dynagent.run.reconcile import reconcile
from dynagent.testing.aws.local_aws import LocalAws

from .helpers import config, image_id, managed_instances, now, pool_document, snapshot, tags_of

V100S = ["p3.2xlarge", "p3.8xlarge", "p3.16xlarge"]


def offerings_provider(
    ec2: Any, warm: WarmState, clock: Any = now, **offerings: Any
) -> Ec2Provider:
    # A cap of 40 GPUs on 20 machines: room to spare for machines of every shape.
    spec = {"instance_types": V100S, "max_slots": 40, **offerings}
    cfg = config(
        pool_document(image_id(ec2), instance_type="p3.16xlarge", offerings=spec, max_instances=20)
    )
    pool = cfg.pool("a100")
    return Ec2Provider(pool, ec2, cfg.settings, clock=clock, sleep=lambda _: None, warm=warm)


def demand(seq: int, *slots: int) -> Snapshot:
    return snapshot(seq, "a100", pending=[(f"t{i}", n) for i, n in enumerate(slots)])


def types(ec2: Any) -> Counter[str]:
    return Counter(i["InstanceType"] for i in managed_instances(ec2))


def test_each_task_gets_its_cheapest_machine_from_the_launch_template(
    aws: LocalAws, ec2: Any
) -> None:
    provider = offerings_provider(ec2, WarmState())
    outcome = reconcile(provider.pool, provider, demand(1, 1, 2, 2, 16), now())

    assert outcome.launch is not None and outcome.launch.error is None
    assert types(ec2) == {"p3.2xlarge": 1, "p3.8xlarge": 1, "p3.16xlarge": 2}
    assert Counter(aws.calls("ec2"))["CreateFleet"] == 3  # one per offering
    for instance in managed_instances(ec2):
        tags = tags_of(instance)
        assert tags["managed-by"] == "dynagent-test" and tags["dynagent:pool"] == "a100"
        assert tags["dynagent:launch-key"] == "a100:1"
        assert instance["MetadataOptions"]["HttpTokens"] == "required"
        assert instance["MetadataOptions"]["HttpPutResponseHopLimit"] == 2
    (template,) = ec2.describe_launch_templates(
        LaunchTemplateNames=[template_name(provider.config, "a100")]
    )["LaunchTemplates"]
    assert tags_of(template)["managed-by"] == "dynagent-test"
    version = ec2.describe_launch_template_versions(LaunchTemplateId=template["LaunchTemplateId"])
    data = version["LaunchTemplateVersions"][0]["LaunchTemplateData"]
    assert "DET_RESOURCE_POOL=a100" in base64.b64decode(data["UserData"]).decode()
    assert data["MetadataOptions"]["HttpTokens"] == "required"
    assert data["MetadataOptions"]["HttpPutResponseHopLimit"] == 2
    observed = provider.observe()
    assert sorted(i.instance_type for i in observed.instances) == sorted(types(ec2).elements())


def test_a_retried_record_launches_nothing_twice(aws: LocalAws, ec2: Any) -> None:
    warm = WarmState()
    provider = offerings_provider(ec2, warm)
    plan = reconcile(provider.pool, provider, demand(4, 1, 4), now()).plan
    assert plan is not None
    # The same plan again (a redelivered record that decided before seeing the fleet).
    again = offerings_provider(ec2, WarmState()).launch(plan)
    assert again.error is None
    assert sum(types(ec2).values()) == 2
    # A template version is made once, however many passes and cold starts.
    assert Counter(aws.calls("ec2"))["CreateLaunchTemplate"] == 1


def test_the_first_type_out_of_capacity_falls_to_the_next_in_the_same_pass(
    aws: LocalAws, ec2: Any
) -> None:
    warm = WarmState()
    provider = offerings_provider(ec2, warm)
    aws.limit_capacity("p3.2xlarge", count=0)
    outcome = reconcile(provider.pool, provider, demand(1, 1), now())

    assert outcome.launch is not None and outcome.launch.error is None
    assert types(ec2) == {"p3.8xlarge": 1}
    assert Counter(aws.calls("ec2"))["CreateFleet"] == 2
    refused = outcome.launch.unavailable
    assert len(refused) == 1 and refused[0].startswith("p3.2xlarge@")
    assert provider.observe().unavailable == set(refused)


def test_all_spot_out_falls_to_on_demand(aws: LocalAws, ec2: Any) -> None:
    provider = offerings_provider(
        ec2, WarmState(), instance_types=["p3.2xlarge"], purchase=["spot", "on-demand"]
    )
    aws.limit_capacity("p3.2xlarge", purchase="spot", count=0)
    outcome = reconcile(provider.pool, provider, demand(1, 1, 1), now())

    assert outcome.launch is not None and len(outcome.launch.started) == 2
    lifecycles = {i.get("InstanceLifecycle", "on-demand") for i in managed_instances(ec2)}
    assert lifecycles == {"on-demand"}


def test_all_out_says_so_then_waits_for_the_memory_without_a_hot_loop(
    aws: LocalAws, ec2: Any
) -> None:
    clock = [now()]
    warm = WarmState()
    provider = offerings_provider(ec2, warm, clock=lambda: clock[0])
    for instance_type in V100S:
        aws.limit_capacity(instance_type, count=0)
    first = reconcile(provider.pool, provider, demand(1, 1), clock[0])
    assert first.launch is not None and first.launch.started == ()
    assert first.launch.error is not None and "no capacity for 1 machine(s)" in first.launch.error
    assert Counter(aws.calls("ec2"))["CreateFleet"] == 3  # once per offering

    aws.clear_calls()
    second = reconcile(provider.pool, provider, demand(2, 1), clock[0])
    assert second.plan is not None and second.plan.launches == ()
    assert second.plan.waiting == ("t0 (1 slots): no machine of 1 or more slots has capacity now",)
    assert "CreateFleet" not in aws.calls("ec2")

    aws.clear_capacity_limits()
    clock[0] += timedelta(minutes=5)  # the memory forgets: the cheapest machine again
    third = reconcile(provider.pool, provider, demand(3, 1), clock[0])
    assert third.launch is not None and third.launch.error is None
    assert types(ec2) == {"p3.2xlarge": 1}


def test_describes_do_not_grow_with_offerings_and_spot_prices_are_read_once(
    aws: LocalAws, ec2: Any
) -> None:
    subnets = [s["SubnetId"] for s in ec2.describe_subnets()["Subnets"]][:3]
    warm = WarmState()
    provider = offerings_provider(ec2, warm, subnet_ids=subnets, purchase=["spot", "on-demand"])
    aws.set_spot_price("p3.2xlarge", aws.region + "a", 0.5)
    for _ in range(3):
        aws.clear_calls()
        fleet = provider.observe()
        describes = Counter(aws.calls("ec2"))
        assert describes["DescribeInstances"] == 1
        assert describes["DescribeSpotPriceHistory"] <= 1
    assert fleet.spot_prices == {"p3.2xlarge": 0.5}
    catalog = provider.config.catalog(fleet.spot_prices)
    assert len(catalog.offerings) == 18  # 3 types x 3 subnets x 2 purchase options
    assert catalog.shapes()[0].price == 0.5


def test_a_subnet_of_another_region_is_named_as_a_config_mistake(aws: LocalAws, ec2: Any) -> None:
    # A subnet id says nothing of its region, so the config loads; EC2's answer is
    # turned into the pool and field to fix, and is not taken for a capacity problem.
    provider = offerings_provider(
        ec2, WarmState(), instance_types=["p3.2xlarge"], subnet_ids=["subnet-0123456789abcdef0"]
    )
    outcome = reconcile(provider.pool, provider, demand(1, 1), now())

    assert outcome.launch is not None and outcome.launch.error is not None
    assert outcome.launch.error.startswith(
        "pool 'a100': offerings.subnet_ids: 'subnet-0123456789abcdef0' is not a subnet of "
        "region us-west-2"
    )
    assert outcome.launch.unavailable == ()


def test_a_missing_image_is_a_reported_launch_error_not_an_exception(ec2: Any) -> None:
    # Found by doctor's helper: the launch template's root device is read from the
    # image, and EC2 answers a missing AMI with InvalidAMIID.NotFound, not an empty list.
    spec = {"instance_types": V100S, "max_slots": 40}
    document = pool_document(
        "ami-00000000000000000", instance_type="p3.16xlarge", offerings=spec, max_instances=20
    )
    cfg = config(document)
    provider = Ec2Provider(cfg.pool("a100"), ec2, cfg.settings, clock=now, sleep=lambda _: None)
    outcome = reconcile(provider.pool, provider, demand(1, 8), now())

    assert outcome.launch is not None and outcome.launch.error is not None
    assert "AMI" in outcome.launch.error.upper()
    assert managed_instances(ec2) == []
