"""The warm pool on the local AWS, through the Lambda functions: an idle agent past its
period is stopped, not terminated; the next scale-up starts it (StartInstances, no
RunInstances or CreateFleet); a start refused for capacity launches elsewhere in the same
pass; a stopped machine of another boot config is terminated, never started; one
without the managed pair is never touched; the sweep keeps max_stopped and the period."""

from __future__ import annotations

from collections import Counter
from datetime import timedelta
from typing import Any

from dynagent.aws import tags
from dynagent.aws.functions import AwsFunctions
from dynagent.core.fleet import Mark
from dynagent.core.snapshot import Snapshot
from dynagent.testing.aws.event_source import LambdaContext
from dynagent.testing.aws.local_aws import LocalAws

from .helpers import (
    config,
    fifo_queue,
    image_id,
    lookalike,
    managed_instances,
    now,
    pool_document,
    published_event,
    snapshot,
    tags_of,
)
from .test_ec2_repack import two_subnets

STOPPED = ("stopped", "stopping")
WARM = {"max_stopped": 1}


class Pass:
    """Snapshots of pool a100 sent through the reconcile function, in seq order."""

    def __init__(self, sqs: Any, functions: AwsFunctions) -> None:
        self.sqs, self.functions = sqs, functions
        self.queue = fifo_queue(sqs, "snapshots.fifo")
        self.seq = 0

    def __call__(self, **fields: Any) -> None:
        self.seq += 1
        shot: Snapshot = snapshot(self.seq, **fields)
        event = published_event(self.sqs, self.queue, shot)
        failures = self.functions.reconcile_batch(event, LambdaContext())
        assert failures == {"batchItemFailures": []}


def functions_for(ec2: Any, **provider: Any) -> AwsFunctions:
    document = pool_document(image_id(ec2), **provider)
    return AwsFunctions(config(document), ec2_for_region=lambda _: ec2, sleep=lambda _: None)


def idle_for(ec2: Any, instance_id: str, minutes: float) -> None:
    """The agent's idle mark, aged: tests move the cloud's state, not the clock."""
    since = tags.format_time(now() - timedelta(minutes=minutes))
    key = tags.MARK_TAGS[Mark.IDLE_SINCE]
    ec2.create_tags(Resources=[instance_id], Tags=[{"Key": key, "Value": since}])


def state_of(ec2: Any, instance_id: str) -> str:
    reservations = ec2.describe_instances(InstanceIds=[instance_id])["Reservations"]
    return str(reservations[0]["Instances"][0]["State"]["Name"])


def one_idle_agent(ec2: Any, send: Pass) -> str:
    """A machine launched for a task, registered, then idle past its period, stopped."""
    send(pending=[("exp-1", 8)])
    (machine,) = managed_instances(ec2)
    instance_id = str(machine["InstanceId"])
    send(agents=[(instance_id, 8, 0)])
    idle_for(ec2, instance_id, minutes=30)
    send(agents=[(instance_id, 8, 0)])
    return instance_id


def test_an_idle_agent_is_stopped_then_started_for_the_next_work(
    aws: LocalAws, ec2: Any, sqs: Any
) -> None:
    send = Pass(sqs, functions_for(ec2, warm_pool=WARM))
    instance_id = one_idle_agent(ec2, send)
    assert state_of(ec2, instance_id) in STOPPED
    stopped = tags_of(
        ec2.describe_instances(InstanceIds=[instance_id])["Reservations"][0]["Instances"][0]
    )
    assert "dynagent:stopped-at" in stopped
    assert not {"dynagent:registered", "dynagent:idle-since"} & set(stopped)
    assert stopped[tags.BOOT_CONFIG_TAG]  # launched with the pool's boot config

    aws.clear_calls()
    send(pending=[("exp-2", 8)])
    calls = Counter(aws.calls("ec2"))
    assert calls["StartInstances"] == 1
    assert not calls["RunInstances"] and not calls["CreateFleet"]
    assert not calls["TerminateInstances"]
    assert state_of(ec2, instance_id) in ("pending", "running")
    # Started, it is a machine on its way: the same snapshot again starts nothing more.
    aws.clear_calls()
    send(pending=[("exp-2", 8)])
    assert not {"StartInstances", "RunInstances", "CreateFleet"} & set(aws.calls("ec2"))


def test_without_a_warm_pool_the_idle_agent_is_terminated(
    aws: LocalAws, ec2: Any, sqs: Any
) -> None:
    send = Pass(sqs, functions_for(ec2))
    instance_id = one_idle_agent(ec2, send)
    assert state_of(ec2, instance_id) in ("shutting-down", "terminated")


def test_a_start_refused_for_capacity_launches_elsewhere_in_the_same_pass(
    aws: LocalAws, ec2: Any, sqs: Any
) -> None:
    subnets = two_subnets(ec2)
    offerings = {"instance_types": ["p3.8xlarge"], "subnet_ids": [s["SubnetId"] for s in subnets]}
    send = Pass(
        sqs,
        functions_for(ec2, instance_type="p3.8xlarge", offerings=offerings, warm_pool=WARM),
    )
    send(pending=[("exp-1", 4)])
    (machine,) = managed_instances(ec2)
    instance_id, zone = str(machine["InstanceId"]), machine["Placement"]["AvailabilityZone"]
    send(agents=[(instance_id, 4, 0)])
    idle_for(ec2, instance_id, minutes=30)
    send(agents=[(instance_id, 4, 0)])
    assert state_of(ec2, instance_id) in STOPPED

    aws.limit_capacity("p3.8xlarge", zone=zone, count=0)
    aws.clear_calls()
    send(pending=[("exp-2", 4)])
    calls = Counter(aws.calls("ec2"))
    assert calls["StartInstances"] >= 1 and calls["CreateFleet"] == 1
    assert state_of(ec2, instance_id) in STOPPED
    (new,) = managed_instances(ec2)
    assert new["Placement"]["AvailabilityZone"] != zone
    assert tags_of(new)["dynagent:launch-key"] == f"a100:{send.seq}:cold:{instance_id}"


def test_a_stopped_machine_of_another_boot_config_is_terminated_never_started(
    aws: LocalAws, ec2: Any, sqs: Any
) -> None:
    instance_id = one_idle_agent(ec2, Pass(sqs, functions_for(ec2, warm_pool=WARM)))
    assert state_of(ec2, instance_id) in STOPPED
    # The admin moves the pool to a newer agent image: the stopped machine would boot the
    # old one.
    newer = functions_for(
        ec2, warm_pool=WARM, agent_docker_image="determinedai/determined-agent:0.38.1"
    )
    send = Pass(sqs, newer)
    send.seq = 10
    aws.clear_calls()
    send(pending=[("exp-2", 8)])
    calls = Counter(aws.calls("ec2"))
    assert not calls["StartInstances"]
    assert calls["TerminateInstances"] == 1 and calls["RunInstances"] == 1
    assert state_of(ec2, instance_id) in ("shutting-down", "terminated")


def test_an_unmanaged_stopped_instance_is_never_touched(aws: LocalAws, ec2: Any, sqs: Any) -> None:
    other = lookalike(ec2, InstanceType="p4d.24xlarge")
    send = Pass(sqs, functions_for(ec2, warm_pool=WARM))
    aws.clear_calls()
    send(pending=[("exp-1", 8)])
    assert "StartInstances" not in aws.calls("ec2")
    assert state_of(ec2, other) in STOPPED
    send(pending=[])
    functions_for(ec2, warm_pool=WARM).sweep()
    assert state_of(ec2, other) in STOPPED


def test_the_sweep_keeps_max_stopped_and_deletes_machines_past_their_period(
    aws: LocalAws, ec2: Any, sqs: Any
) -> None:
    warm = {"max_stopped": 1, "max_stopped_period": "24h"}
    send = Pass(sqs, functions_for(ec2, warm_pool=warm | {"max_stopped": 2}))
    send(pending=[("a", 8), ("b", 8)])
    ids = sorted(str(i["InstanceId"]) for i in managed_instances(ec2))
    send(agents=[(i, 8, 0) for i in ids])
    for instance_id in ids:
        idle_for(ec2, instance_id, minutes=30)
    send(agents=[(i, 8, 0) for i in ids])
    assert [state_of(ec2, i) in STOPPED for i in ids] == [True, True]
    # The first stopped longer ago; the pool now keeps one.
    older = tags.format_time(now() - timedelta(hours=2))
    ec2.create_tags(Resources=[ids[0]], Tags=[{"Key": "dynagent:stopped-at", "Value": older}])
    functions_for(ec2, warm_pool=warm).sweep()
    assert state_of(ec2, ids[0]) in ("shutting-down", "terminated")
    assert state_of(ec2, ids[1]) in STOPPED
    # Past its period, the last one goes too.
    past = tags.format_time(now() - timedelta(hours=25))
    ec2.create_tags(Resources=[ids[1]], Tags=[{"Key": "dynagent:stopped-at", "Value": past}])
    functions_for(ec2, warm_pool=warm).sweep()
    assert state_of(ec2, ids[1]) in ("shutting-down", "terminated")
