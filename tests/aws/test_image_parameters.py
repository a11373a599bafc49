"""``image_id: resolve:ssm:NAME`` on the local AWS, through the reconcile function as
Lambda runs it: launches use the AMI the parameter holds; when the parameter changes,
the agents of the old AMI drift within a minute and a pass; a parameter that cannot be
read is said, and judges nothing."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from dynagent.aws.functions import AwsFunctions
from dynagent.core.snapshot import Snapshot
from dynagent.testing.aws.event_source import LambdaContext
from dynagent.testing.aws.local_aws import LocalAws

from ..bridge.cluster import Recorder
from .helpers import config, fifo_queue, managed_instances, now, pool_document, published_event
from .helpers import snapshot as pool_snapshot

PARAMETER = "/dynagent/test/gpu-ami"


class Clock:
    def __init__(self) -> None:
        self.now = now()

    def __call__(self) -> datetime:
        return self.now


def two_images(ec2: Any) -> tuple[str, str]:
    images = ec2.describe_images(Owners=["amazon"])["Images"]
    return str(images[0]["ImageId"]), str(images[1]["ImageId"])


def test_launches_use_the_parameter_s_ami_and_its_change_drifts_the_old_agents(
    aws: LocalAws, ec2: Any, sqs: Any
) -> None:
    ssm = aws.client("ssm")
    first, second = two_images(ec2)
    ssm.put_parameter(Name=PARAMETER, Value=first, Type="String", DataType="aws:ec2:image")
    clock, log = Clock(), Recorder()
    functions = AwsFunctions(
        config(pool_document(f"resolve:ssm:{PARAMETER}")),
        ec2_for_region=lambda _: ec2,
        ssm_for_region=lambda _: ssm,
        clock=clock,
        logger=log,
        sleep=lambda _: None,
    )
    queue = fifo_queue(sqs, "snapshots.fifo")
    seq = iter(range(1, 100))

    def send(**fields: Any) -> None:
        shot: Snapshot = pool_snapshot(next(seq), time=clock.now, **fields)
        event = published_event(sqs, queue, shot)
        assert functions.reconcile_batch(event, LambdaContext()) == {"batchItemFailures": []}

    send(pending=[("exp-1.trial-1", 8)])
    (machine,) = managed_instances(ec2)
    agent = str(machine["InstanceId"])
    assert machine["ImageId"] == first
    send(agents=[(agent, 8, 0)])

    ssm.put_parameter(Name=PARAMETER, Value=second, Overwrite=True)
    clock.now += timedelta(seconds=30)
    send(agents=[(agent, 8, 0)])  # read 30 s ago: not read again yet
    assert [m["InstanceId"] for m in managed_instances(ec2)] == [agent]
    clock.now += timedelta(seconds=31)
    send(agents=[(agent, 8, 0)], pending=[("exp-2.trial-1", 8)])
    # Work waits: the old agent is drained, not terminated, and the work gets the new AMI.
    images = {str(m["InstanceId"]): m["ImageId"] for m in managed_instances(ec2)}
    assert images.pop(agent) == first and list(images.values()) == [second]
    assert any(f"{PARAMETER} now names {second}" in m for _, m, _ in log.lines)
    send(agents=[(agent, 8, 0)])
    assert [m["ImageId"] for m in managed_instances(ec2)] == [second]


def test_a_parameter_that_cannot_be_read_is_said_and_judges_nothing(
    aws: LocalAws, ec2: Any, sqs: Any
) -> None:
    ssm = aws.client("ssm")
    first, _ = two_images(ec2)
    ssm.put_parameter(Name=PARAMETER, Value=first, Type="String", DataType="aws:ec2:image")
    clock, log = Clock(), Recorder()
    document = pool_document(f"resolve:ssm:{PARAMETER}")

    def function() -> AwsFunctions:
        return AwsFunctions(
            config(document),
            ec2_for_region=lambda _: ec2,
            ssm_for_region=lambda _: ssm,
            clock=clock,
            logger=log,
            sleep=lambda _: None,
        )

    warm = function()
    queue = fifo_queue(sqs, "snapshots.fifo")
    seq = iter(range(1, 100))

    def send(to: AwsFunctions, **fields: Any) -> None:
        shot: Snapshot = pool_snapshot(next(seq), time=clock.now, **fields)
        event = published_event(sqs, queue, shot)
        assert to.reconcile_batch(event, LambdaContext()) == {"batchItemFailures": []}

    send(warm, pending=[("exp-1.trial-1", 8)])
    (machine,) = managed_instances(ec2)
    agent = str(machine["InstanceId"])
    ssm.delete_parameter(Name=PARAMETER)
    clock.now += timedelta(minutes=2)
    # A warm function keeps the AMI it read; a cold one knows none, and judges nothing:
    # the idle agent of the AMI launched before is not taken for drifted.
    send(warm, agents=[(agent, 8, 0)])
    send(function(), agents=[(agent, 8, 0)])
    assert [m["InstanceId"] for m in managed_instances(ec2)] == [agent]
    errors = [m for level, m, _ in log.lines if level == "error"]
    assert len(errors) == 2 and all(
        f"could not read SSM parameter {PARAMETER}" in m for m in errors
    )
    assert f"launches use {first}, read before" in errors[0]
    assert "ssm:GetParameter" in errors[1]
