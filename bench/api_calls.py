"""Cloud API calls per reconcile, counted at the wire against the local AWS.

For fleets of 100 and 1,000 managed instances, one reconcile (the very function the
Lambda runs, through the EC2 adapter) is timed by what it asks of EC2:

- steady state: every agent registered and busy, its marks written, nothing pending:
  the plan is empty, so the pass is its describe pages and nothing else;
- the same with ``spot: true``: the spot requests are described too;
- scale-up of 50: pending tasks that need 50 more 8-GPU instances;
- scale-down of 50: 50 agents idle past ``max_idle_agent_period``.

The fleets are made with RunInstances in reservations of 250. moto pages
DescribeInstances by reservation (at most 100 a page, even without MaxResults), where
EC2 pages by instance (up to the adapter's 1,000): a few large reservations make
moto's pages what EC2's would be for the same fleet, one page for 1,000 instances.
"""

from __future__ import annotations

import json
from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any

from dynagent.aws.ec2 import Ec2Provider
from dynagent.aws.tags import MARK_TAGS, POOL_TAG, format_time
from dynagent.core.config import Config, config_from_document
from dynagent.core.fleet import Mark
from dynagent.core.snapshot import Agent, PendingTask, Snapshot
from dynagent.run.reconcile import reconcile
from dynagent.testing.aws.local_aws import LocalAws

FLEETS = (100, 1_000)
CHANGE = 50
RESERVATION = 250
TAG_KEY, TAG_VALUE = "managed-by", "dynagent-bench"
SLOTS = 8  # p4d.24xlarge


def pool_config(image: str, max_instances: int, spot: bool = False) -> Config:
    provider = {
        "type": "aws",
        "region": "us-west-2",
        "image_id": image,
        "instance_type": "p4d.24xlarge",
        "max_instances": max_instances,
        "tag_key": TAG_KEY,
        "tag_value": TAG_VALUE,
        "spot": spot,
    }
    return config_from_document({"resource_pools": [{"pool_name": "a100", "provider": provider}]})


def make_fleet(ec2: Any, image: str, count: int, marks: dict[Mark, datetime]) -> list[str]:
    """``count`` managed instances carrying ``marks``, in reservations of 250."""
    tags = [
        {"Key": TAG_KEY, "Value": TAG_VALUE},
        {"Key": POOL_TAG, "Value": "a100"},
        *({"Key": MARK_TAGS[mark], "Value": format_time(when)} for mark, when in marks.items()),
    ]
    ids: list[str] = []
    while len(ids) < count:
        size = min(RESERVATION, count - len(ids))
        response = ec2.run_instances(
            ImageId=image,
            InstanceType="p4d.24xlarge",
            MinCount=size,
            MaxCount=size,
            TagSpecifications=[{"ResourceType": "instance", "Tags": tags}],
        )
        ids += [instance["InstanceId"] for instance in response["Instances"]]
    return ids


def snapshot(
    now: datetime, busy: list[str], idle: tuple[str, ...] | list[str] = (), pending: int = 0
) -> Snapshot:
    return Snapshot(
        pool="a100",
        seq=1,
        time=now,
        pending=tuple(PendingTask(task=f"trial-{k}", slots=SLOTS) for k in range(pending)),
        agents=tuple(
            [Agent(id=i, slots=SLOTS, used_slots=SLOTS) for i in busy]
            + [Agent(id=i, slots=SLOTS, used_slots=0) for i in idle]
        ),
    )


def count_calls(aws: LocalAws, config: Config, state: Snapshot, now: datetime) -> dict[str, Any]:
    pool = config.pool("a100")
    provider = Ec2Provider(pool, aws.client("ec2"), config.settings, sleep=lambda _: None)
    aws.clear_calls()
    outcome = reconcile(pool, provider, state, now, config.settings)
    calls = Counter(aws.calls("ec2"))
    plan = outcome.plan
    return {
        "calls": dict(sorted(calls.items())),
        "total": sum(calls.values()),
        "launched": len(outcome.launch.started) if outcome.launch else 0,
        "terminated": len(plan.terminations) if plan else 0,
    }


def scenarios(aws: LocalAws, size: int) -> dict[str, Any]:
    ec2, image = aws.client("ec2"), aws.image_id()
    now = datetime.now(UTC).replace(microsecond=0)
    registered = {Mark.REGISTERED: now - timedelta(minutes=50)}
    results: dict[str, Any] = {}

    aws.reset()
    busy = make_fleet(ec2, image, size, registered)
    results["steady"] = count_calls(aws, pool_config(image, size), snapshot(now, busy), now)
    spot = pool_config(image, size, spot=True)
    results["steady_spot"] = count_calls(aws, spot, snapshot(now, busy), now)
    up = pool_config(image, size + CHANGE)
    results["scale_up_50"] = count_calls(aws, up, snapshot(now, busy, pending=CHANGE), now)

    aws.reset()
    busy = make_fleet(ec2, image, size - CHANGE, registered)
    idle = make_fleet(ec2, image, CHANGE, {**registered, Mark.IDLE_SINCE: now - timedelta(hours=1)})
    down = snapshot(now, busy, idle)
    results["scale_down_50"] = count_calls(aws, pool_config(image, size), down, now)
    return results


OFFERED_TYPES = ["p3.2xlarge", "p3.8xlarge", "p3.16xlarge"]


def offerings_config(image: str, subnets: list[str], types: list[str]) -> Config:
    provider = {
        "type": "aws",
        "region": "us-west-2",
        "image_id": image,
        "instance_type": types[-1],
        "max_instances": 100,
        "tag_key": TAG_KEY,
        "tag_value": TAG_VALUE,
        # Half the default cap in slots: machines to spare, so the cheapest shape (not a
        # fallback for the cap's sake) is the first choice.
        "offerings": {"instance_types": types, "subnet_ids": subnets, "max_slots": 400},
    }
    return config_from_document({"resource_pools": [{"pool_name": "a100", "provider": provider}]})


def fallback(aws: LocalAws) -> dict[str, Any]:
    """One reconcile of a pool whose cheapest type has no capacity in any subnet, beside
    a pool of one offering: launch calls per offering tried, describes per pass."""
    ec2, image = aws.client("ec2"), aws.image_id()
    now = datetime.now(UTC).replace(microsecond=0)
    state = Snapshot(pool="a100", seq=1, time=now, pending=(PendingTask(task="trial-0", slots=1),))
    results = {}
    for name, types in (("one_offering", OFFERED_TYPES[1:2]), ("six_offerings", OFFERED_TYPES)):
        aws.reset()  # a reset makes the default subnets anew
        subnets = [s["SubnetId"] for s in ec2.describe_subnets()["Subnets"]][:2]
        aws.limit_capacity("p3.2xlarge", count=0)
        config = offerings_config(image, subnets, types)
        results[name] = count_calls(aws, config, state, now)
    return results


def run() -> dict[str, Any]:
    fleets: dict[str, Any] = {}
    with LocalAws() as aws:
        for size in FLEETS:
            fleets[str(size)] = found = scenarios(aws, size)
            for name, result in found.items():
                print(f"  {size:>5,} instances, {name:<14} {result['calls']}", flush=True)
        offered = fallback(aws)
        for name, result in offered.items():
            print(f"  scale-up of 1, {name:<14} {result['calls']}", flush=True)
    steady = fleets["1000"]
    writes = {"RunInstances", "TerminateInstances", "CreateTags", "DeleteTags"}
    met = (
        steady["steady"]["calls"] == {"DescribeInstances": 1}
        and steady["steady_spot"]["calls"]
        == {"DescribeInstances": 1, "DescribeSpotInstanceRequests": 1}
        and not writes & set(steady["steady"]["calls"])
    )
    six = offered["six_offerings"]["calls"]
    one = offered["one_offering"]["calls"]
    fallback_met = (
        six.get("CreateFleet") == 3  # p3.2xlarge in each subnet, then p3.8xlarge
        and six.get("DescribeInstances") == one.get("DescribeInstances")
        and offered["six_offerings"]["launched"] == 1
        and offered["one_offering"]["launched"] == 1
    )
    return {
        "fleets": fleets,
        "offerings": offered,
        "targets": {
            "fallback": "with the cheapest type out in both subnets, one CreateFleet per "
            "offering tried and as many DescribeInstances as a pool of one offering",
            "fallback_met": fallback_met,
            "steady_1000": "one DescribeInstances page (plus one spot-request page with spot "
            "on) and no writes",
            "steady_1000_met": met,
        },
    }


if __name__ == "__main__":
    print(json.dumps(run(), indent=2))
