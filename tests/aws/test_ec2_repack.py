"""The reconcile function re-packs in the same pass when the cheapest machine for the
tasks has no capacity in any subnet: two 4-slot tasks decided onto one 8-GPU machine
(at the admin's discounted price for it) start on two 4-GPU machines instead, through
CreateFleet on the local AWS, in a pool written as in master.yaml (``max_instances:
10``, no ``max_slots``). At list prices, where the two sizes cost the same per GPU,
the 4-GPU machines are the first choice and the stockout is never met."""

from __future__ import annotations

from collections import Counter
from typing import Any

from dynagent.aws.functions import AwsFunctions
from dynagent.testing.aws.event_source import LambdaContext
from dynagent.testing.aws.local_aws import LocalAws

from .helpers import (
    config,
    fifo_queue,
    image_id,
    managed_instances,
    now,
    pool_document,
    published_event,
    snapshot,
    tags_of,
)


class Log:
    """A logger that keeps each line's report."""

    def __init__(self) -> None:
        self.reports: list[dict[str, Any]] = []

    def info(self, message: str, extra: dict[str, Any] | None = None) -> None:
        self.reports.append(extra or {})

    warning = error = info


def two_subnets(ec2: Any) -> list[dict[str, Any]]:
    """Two subnets of the default VPC, in different zones."""
    by_zone = {s["AvailabilityZone"]: s for s in ec2.describe_subnets()["Subnets"]}
    return [by_zone[zone] for zone in sorted(by_zone)[:2]]


def four_and_eight(ec2: Any, subnets: list[dict[str, Any]], **offerings: Any) -> dict[str, Any]:
    """A pool of p3.8xlarge and p3.16xlarge in ``subnets``, as an admin copies it from
    master.yaml: ``max_instances: 10`` and no max_slots, so the cap is 10 x 8 slots in
    machines of either size."""
    offerings |= {
        "instance_types": ["p3.8xlarge", "p3.16xlarge"],
        "subnet_ids": [s["SubnetId"] for s in subnets],
    }
    return pool_document(
        image_id(ec2), instance_type="p3.16xlarge", max_instances=10, offerings=offerings
    )


def test_a_shape_out_in_every_subnet_is_repacked_onto_smaller_machines_in_one_pass(
    aws: LocalAws, ec2: Any, sqs: Any
) -> None:
    subnets = two_subnets(ec2)
    # At list prices the two types cost the same per GPU and two p3.8xlarge would be the
    # cover; at the admin's discounted price for the p3.16xlarge, one of those is.
    document = four_and_eight(ec2, subnets, prices={"p3.16xlarge": 23.0})
    log = Log()
    functions = AwsFunctions(
        config(document), ec2_for_region=lambda _: ec2, sleep=lambda _: None, logger=log
    )
    aws.limit_capacity("p3.16xlarge", count=0)
    event = published_event(
        sqs, fifo_queue(sqs, "snapshots.fifo"), snapshot(1, pending=[("a", 4), ("b", 4)])
    )
    aws.clear_calls()

    assert functions.reconcile_batch(event, LambdaContext()) == {"batchItemFailures": []}

    instances = managed_instances(ec2)
    assert Counter(i["InstanceType"] for i in instances) == {"p3.8xlarge": 2}
    assert {tags_of(i)["dynagent:launch-key"] for i in instances} == {"a100:1:repack1"}
    # Each 8-GPU offering was asked once, then the two machines in one more call.
    refused = Counter((site.instance_type, site.zone) for site in aws.capacity_refusals())
    assert refused == {("p3.16xlarge", s["AvailabilityZone"]): 1 for s in subnets}
    assert Counter(aws.calls("ec2"))["CreateFleet"] == 3
    keys = {f"p3.16xlarge@{s['SubnetId']}/on-demand" for s in subnets}
    assert functions.warm.memory("a100").unavailable(now()) == keys
    (report,) = log.reports
    assert "launch_error" not in report
    (repacked,) = report["repacked"]
    assert set(repacked["refused"]) == keys and len(repacked["launched"]) == 2

    # The same record again (SQS delivers at least once), to this function or to a
    # cold one that remembers no refusal: nothing more starts.
    cold = AwsFunctions(config(document), ec2_for_region=lambda _: ec2, sleep=lambda _: None)
    for again in (functions, cold):
        aws.clear_calls()
        assert again.reconcile_batch(event, LambdaContext()) == {"batchItemFailures": []}
        assert "CreateFleet" not in aws.calls("ec2")
    assert len(managed_instances(ec2)) == 2


def test_at_list_prices_two_4_slot_tasks_get_4_gpu_machines_without_asking_for_an_8(
    aws: LocalAws, ec2: Any, sqs: Any
) -> None:
    document = four_and_eight(ec2, two_subnets(ec2))
    functions = AwsFunctions(config(document), ec2_for_region=lambda _: ec2, sleep=lambda _: None)
    aws.limit_capacity("p3.16xlarge", count=0)
    event = published_event(
        sqs, fifo_queue(sqs, "snapshots.fifo"), snapshot(1, pending=[("a", 4), ("b", 4)])
    )
    for delivery in range(2):  # the second: SQS delivering the record again
        aws.clear_calls()
        assert functions.reconcile_batch(event, LambdaContext()) == {"batchItemFailures": []}
        instances = managed_instances(ec2)
        assert Counter(i["InstanceType"] for i in instances) == {"p3.8xlarge": 2}
        assert Counter(aws.calls("ec2"))["CreateFleet"] == (1 if delivery == 0 else 0)
    assert aws.capacity_refusals() == []
