"""EC2's spot notices, as EventBridge delivers them, against the local AWS.

The agents' state comes from snapshots applied by the real reconcile path first, so the
marks the notice handler reads are the ones a reconcile wrote.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

import pytest

from dynagent.aws.functions import AwsFunctions
from dynagent.aws.status import QueueTagStore
from dynagent.core.drain_notices import parse_notice as parse_drain_notice
from dynagent.core.plan import Interruption
from dynagent.report.status import Summary
from dynagent.run.fallback import NO_CAPACITY
from dynagent.run.reconcile import apply_snapshot
from dynagent.testing.aws.local_aws import LocalAws

from .helpers import (
    FIFO,
    REGION,
    config,
    image_id,
    managed_instances,
    now,
    pool_document,
    snapshot,
    tags_of,
)

WARNING = "EC2 Spot Instance Interruption Warning"
REBALANCE = "EC2 Instance Rebalance Recommendation"


def notice(
    instance_id: str, detail_type: str = WARNING, at: datetime | None = None
) -> dict[str, Any]:
    """An EventBridge event of the shape EC2 sends (the interruption warning carries
    instance-action; the rebalance recommendation only the instance id)."""
    detail: dict[str, str] = {"instance-id": instance_id}
    if detail_type == WARNING:
        detail["instance-action"] = "terminate"
    return {
        "version": "0",
        "id": "7bf73129-1428-4cd3-a780-95db273d1602",
        "detail-type": detail_type,
        "source": "aws.ec2",
        "account": "123456789012",
        "time": (at or now()).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "region": REGION,
        "resources": [f"arn:aws:ec2:{REGION}:123456789012:instance/{instance_id}"],
        "detail": detail,
    }


@pytest.fixture
def subnets(ec2: Any) -> list[str]:
    return [s["SubnetId"] for s in ec2.describe_subnets()["Subnets"]][:2]


@pytest.fixture
def functions(ec2: Any, subnets: list[str]) -> AwsFunctions:
    offerings = {
        "instance_types": ["p3.8xlarge", "p3.16xlarge"],
        "subnet_ids": subnets,
        "purchase": ["spot", "on-demand"],
    }
    cfg = config(
        pool_document(image_id(ec2), instance_type="p3.8xlarge", offerings=offerings),
        pool_document(image_id(ec2), name="t4", instance_type="g4dn.xlarge"),
    )
    return AwsFunctions(cfg, ec2_for_region=lambda _: ec2, sleep=lambda _: None)


def agent_on_one_machine(functions: AwsFunctions, ec2: Any, used_slots: int) -> dict[str, Any]:
    """One p3.8xlarge launched for a task, then reported by a snapshot with its agent
    using ``used_slots`` of its 4: the reconcile writes the marks."""
    apply_snapshot(
        functions.config, snapshot(1, pending=[("trial-1", 4)]), functions.provider, now()
    )
    (machine,) = managed_instances(ec2)
    agents = [(machine["InstanceId"], 4, used_slots)]
    apply_snapshot(functions.config, snapshot(2, agents=agents), functions.provider, now())
    (machine,) = managed_instances(ec2)
    return machine


def test_a_busy_agents_warning_launches_its_replacement_at_once(
    aws: LocalAws, ec2: Any, functions: AwsFunctions, subnets: list[str]
) -> None:
    machine = agent_on_one_machine(functions, ec2, used_slots=4)
    interrupted = machine["InstanceId"]
    assert machine["InstanceLifecycle"] == "spot" and machine["SubnetId"] == subnets[0]
    assert "dynagent:registered" in tags_of(machine) and "dynagent:idle-since" not in tags_of(
        machine
    )
    at = now()

    outcome = functions.handle_notice(notice(interrupted, at=at))

    assert outcome is not None and outcome.plan is not None and outcome.launch is not None
    assert outcome.launch.error is None
    (launch,) = outcome.plan.launches
    assert launch.cause == "interrupted" and interrupted in launch.reason
    assert outcome.plan.interruptions == (Interruption(interrupted, "interruption"),)
    by_id = {i["InstanceId"]: i for i in managed_instances(ec2)}
    assert set(by_id) == {interrupted, *outcome.launch.started}
    (replacement,) = outcome.launch.started
    assert tags_of(by_id[interrupted])["dynagent:interrupted-at"] == at.strftime(
        "%Y-%m-%dT%H:%M:%SZ"
    )
    assert tags_of(by_id[replacement])["dynagent:launch-key"] == f"a100:interruption:{interrupted}"
    # The same shape and purchase, in the other subnet: the reclaimed offering comes last.
    assert by_id[replacement]["InstanceType"] == "p3.8xlarge"
    assert by_id[replacement]["InstanceLifecycle"] == "spot"
    assert by_id[replacement]["SubnetId"] == subnets[1]

    # The next snapshot, the agent still busy there: the interrupted machine is left to
    # EC2, and the replacement is the room its task will need.
    agents = [(interrupted, 4, 4)]
    later = apply_snapshot(functions.config, snapshot(3, agents=agents), functions.provider, now())
    assert later.plan is not None
    assert later.plan.terminations == () and later.plan.launches == ()


def test_a_redelivered_warning_launches_nothing_more(
    aws: LocalAws, ec2: Any, functions: AwsFunctions
) -> None:
    interrupted = agent_on_one_machine(functions, ec2, used_slots=4)["InstanceId"]
    event = notice(interrupted)
    first = functions.handle_notice(event)
    assert first is not None and first.launch is not None and len(first.launch.started) == 1
    aws.clear_calls()

    again = functions.handle_notice(event)

    assert again is not None and again.plan is not None and again.launch is not None
    assert again.launch.started == first.launch.started  # EC2 answers the same token
    assert again.plan.marks == () and again.plan.interruptions == ()  # counted once
    assert len(managed_instances(ec2)) == 2
    assert "CreateTags" not in aws.calls("ec2")


def test_an_idle_agents_warning_only_marks_it(ec2: Any, functions: AwsFunctions) -> None:
    interrupted = agent_on_one_machine(functions, ec2, used_slots=0)["InstanceId"]
    outcome = functions.handle_notice(notice(interrupted))
    assert outcome is not None and outcome.plan is not None
    assert outcome.plan.launches == () and outcome.launch is None
    (machine,) = managed_instances(ec2)
    assert "dynagent:interrupted-at" in tags_of(machine)


def test_a_rebalance_recommendation_marks_and_launches_nothing(
    ec2: Any, functions: AwsFunctions
) -> None:
    interrupted = agent_on_one_machine(functions, ec2, used_slots=4)["InstanceId"]
    outcome = functions.handle_notice(notice(interrupted, REBALANCE))
    assert outcome is not None and outcome.plan is not None
    assert outcome.plan.launches == ()
    assert outcome.plan.interruptions == (Interruption(interrupted, "rebalance"),)
    (machine,) = managed_instances(ec2)
    assert "dynagent:rebalance-at" in tags_of(machine)
    assert "dynagent:interrupted-at" not in tags_of(machine)


@pytest.mark.parametrize(
    "foreign_tags",
    [
        [],
        [{"Key": "managed-by", "Value": "someone-else"}, {"Key": "dynagent:pool", "Value": "a100"}],
        [{"Key": "dynagent:pool", "Value": "a100"}],
    ],
)
def test_a_warning_for_an_unmanaged_instance_changes_nothing(
    aws: LocalAws, ec2: Any, functions: AwsFunctions, foreign_tags: list[dict[str, str]]
) -> None:
    agent_on_one_machine(functions, ec2, used_slots=4)  # a pool with a busy agent of its own
    extra = {"TagSpecifications": [{"ResourceType": "instance", "Tags": foreign_tags}]}
    response = ec2.run_instances(
        ImageId=image_id(ec2),
        InstanceType="p3.8xlarge",
        MinCount=1,
        MaxCount=1,
        **(extra if foreign_tags else {}),
    )
    foreign = response["Instances"][0]["InstanceId"]
    aws.clear_calls()

    assert functions.handle_notice(notice(foreign)) is None

    (reservation,) = ec2.describe_instances(InstanceIds=[foreign])["Reservations"]
    assert reservation["Instances"][0].get("Tags", []) == foreign_tags
    calls = Counter(aws.calls("ec2"))
    assert set(calls) == {"DescribeInstances"}, calls  # looked up, nothing written or launched
    every = ec2.describe_instances()["Reservations"]
    assert sum(len(r["Instances"]) for r in every) == 2  # the pool's one and the foreign one


def test_events_that_are_not_spot_notices_are_ignored(
    aws: LocalAws, ec2: Any, functions: AwsFunctions
) -> None:
    interrupted = agent_on_one_machine(functions, ec2, used_slots=4)["InstanceId"]
    aws.clear_calls()
    wrong_source = {**notice(interrupted), "source": "aws.events"}
    other_type = {**notice(interrupted), "detail-type": "EC2 Instance State-change Notification"}
    for event in (wrong_source, other_type, {**notice(interrupted), "detail": {}}):
        assert functions.handle_notice(event) is None
    assert aws.calls("ec2") == []


def test_a_notice_is_counted_in_the_metrics(
    ec2: Any, functions: AwsFunctions, capsys: pytest.CaptureFixture[str]
) -> None:
    machine = agent_on_one_machine(functions, ec2, used_slots=4)
    capsys.readouterr()
    functions.handle_notice(notice(machine["InstanceId"]))
    emitted = Counter()
    for line in capsys.readouterr().out.splitlines():
        if line.startswith("{") and '"_aws"' in line:
            document = json.loads(line)
            for metric in document["_aws"]["CloudWatchMetrics"][0]["Metrics"]:
                key = (metric["Name"], document.get("kind") or document.get("reason"))
                emitted[key] += int(sum(document[metric["Name"]]))
    assert emitted[("Interruptions", "interruption")] == 1
    assert emitted[("Launches", "interrupted")] == 1


def test_an_idle_agents_warning_launches_when_the_last_snapshot_left_demand(
    sqs: Any, ec2: Any, functions: AwsFunctions
) -> None:
    interrupted = agent_on_one_machine(functions, ec2, used_slots=0)["InstanceId"]
    queue = str(sqs.create_queue(QueueName="snapshots.fifo", Attributes=FIFO)["QueueUrl"])
    functions.sqs, functions.snapshot_queue_url = sqs, queue
    # What a reconcile records after a snapshot with 8 slots still waiting; stale first.
    waiting = Summary(3, now(), 1, 8, 1, 0, 1, 0)
    store = QueueTagStore(sqs, queue)
    store.write("a100", replace(waiting, time=now() - timedelta(minutes=11)))
    stale = functions.handle_notice(notice(interrupted))
    assert stale is not None and stale.plan is not None and stale.plan.launches == ()

    store.write("a100", waiting)
    outcome = functions.handle_notice(notice(interrupted))
    assert outcome is not None and outcome.plan is not None and outcome.launch is not None
    (launch,) = outcome.plan.launches
    assert "demand waiting (8 slots" in launch.reason
    assert len(outcome.launch.started) == 1


def test_a_replacement_whose_type_is_out_everywhere_is_repacked_onto_a_cover_at_once(
    aws: LocalAws, ec2: Any
) -> None:
    """Issue 18: the busy 8-GPU machine's replacement finds no 8-GPU capacity in either
    subnet; the same invocation launches two 4-GPU machines instead, one CreateFleet
    call per offering tried, and remembers the refusals as the reconcile does."""
    zones = {s["AvailabilityZone"]: s for s in ec2.describe_subnets()["Subnets"]}
    subnets = [zones[zone] for zone in sorted(zones)[:2]]
    offerings = {
        "instance_types": ["p3.8xlarge", "p3.16xlarge"],
        "subnet_ids": [s["SubnetId"] for s in subnets],
        "purchase": ["spot"],
    }
    document = pool_document(image_id(ec2), instance_type="p3.16xlarge", offerings=offerings)
    functions = AwsFunctions(config(document), ec2_for_region=lambda _: ec2, sleep=lambda _: None)
    apply_snapshot(
        functions.config, snapshot(1, pending=[("trial-1", 8)]), functions.provider, now()
    )
    (machine,) = managed_instances(ec2)
    assert machine["InstanceType"] == "p3.16xlarge"
    interrupted = machine["InstanceId"]
    agents = [(interrupted, 8, 8)]
    apply_snapshot(functions.config, snapshot(2, agents=agents), functions.provider, now())
    aws.limit_capacity("p3.16xlarge", count=0)
    aws.clear_calls()
    event = notice(interrupted)

    outcome = functions.handle_notice(event)

    assert outcome is not None and outcome.launch is not None
    assert outcome.launch.error is None
    by_id = {i["InstanceId"]: i for i in managed_instances(ec2)}
    cover = sorted(set(by_id) - {interrupted})
    assert sorted(outcome.launch.started) == cover
    assert [by_id[i]["InstanceType"] for i in cover] == ["p3.8xlarge"] * 2
    assert all(by_id[i]["InstanceLifecycle"] == "spot" for i in cover)
    assert {tags_of(by_id[i])["dynagent:launch-key"] for i in cover} == {
        f"a100:interruption:{interrupted}:cover"
    }
    # Each 8-GPU offering asked once, then the two 4-GPU machines in one more call.
    refused = Counter((site.instance_type, site.zone) for site in aws.capacity_refusals())
    assert refused == {("p3.16xlarge", s["AvailabilityZone"]): 1 for s in subnets}
    assert Counter(aws.calls("ec2"))["CreateFleet"] == 3
    keys = {f"p3.16xlarge@{s['SubnetId']}/spot" for s in subnets}
    (round_,) = outcome.repacks
    assert set(round_.refused) == keys and sorted(round_.launch.started) == cover
    assert functions.warm.memory("a100").unavailable(now()) == keys
    assert functions.launch_errors.pools["a100"].error is None  # recorded: launched
    assert "dynagent:interrupted-at" in tags_of(by_id[interrupted])
    assert outcome.plan is not None and len(outcome.plan.interruptions) == 1

    # Redelivered, to this function (which remembers the refusals and chooses the cover
    # first) or to a cold one (which asks for 8 GPUs again): the same machines.
    cold = AwsFunctions(config(document), ec2_for_region=lambda _: ec2, sleep=lambda _: None)
    for again in (functions, cold):
        replay = again.handle_notice(event)
        assert replay is not None and replay.launch is not None
        assert sorted(replay.launch.started) == cover
        assert len(managed_instances(ec2)) == 3


def test_with_no_cover_left_the_replacement_waits_and_the_refusal_is_recorded(
    aws: LocalAws, ec2: Any, functions: AwsFunctions, subnets: list[str]
) -> None:
    """Both types out everywhere: every offering is asked once, the invocation's launch
    error is the reconcile's, and the function's launch error memory records it."""
    interrupted = agent_on_one_machine(functions, ec2, used_slots=4)["InstanceId"]
    aws.limit_capacity("p3.8xlarge", count=0)
    aws.limit_capacity("p3.16xlarge", count=0)
    aws.clear_calls()

    outcome = functions.handle_notice(notice(interrupted))

    assert outcome is not None and outcome.launch is not None
    assert outcome.launch.started == () and outcome.repacks == ()
    assert outcome.launch.error is not None and outcome.launch.error.startswith(NO_CAPACITY)
    assert functions.launch_errors.pools["a100"].error == outcome.launch.error
    # Two types, two subnets, spot and on-demand: eight offerings, each asked once.
    assert Counter(aws.calls("ec2"))["CreateFleet"] == 8
    assert len(aws.capacity_refusals()) == 8
    assert [i["InstanceId"] for i in managed_instances(ec2)] == [interrupted]


def test_a_warning_tells_the_bridge_to_drain_the_agent_a_rebalance_does_not(
    aws: LocalAws, ec2: Any, sqs: Any, functions: AwsFunctions
) -> None:
    # The master then places no new work on it in its last two minutes.
    functions.sqs = sqs
    functions.drain_notice_queue_url = sqs.create_queue(QueueName="drain-notices")["QueueUrl"]
    interrupted = agent_on_one_machine(functions, ec2, used_slots=2)["InstanceId"]

    def notices() -> list[tuple[str, str]]:
        found = []
        for message in sqs.receive_message(
            QueueUrl=functions.drain_notice_queue_url, MaxNumberOfMessages=10
        ).get("Messages", []):
            pool, drains = parse_drain_notice(message["Body"])
            found += [(pool, d.agent_id) for d in drains]
            sqs.delete_message(
                QueueUrl=functions.drain_notice_queue_url, ReceiptHandle=message["ReceiptHandle"]
            )
        return found

    functions.handle_notice(notice(interrupted, REBALANCE))
    assert notices() == []
    functions.handle_notice(notice(interrupted))
    assert notices() == [("a100", interrupted)]
    functions.handle_notice(notice(interrupted))  # a redelivery tells it again
    assert notices() == [("a100", interrupted)]
