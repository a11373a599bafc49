"""The AWS side of an end-to-end cluster: an SQS FIFO queue on the local AWS, the real
publisher, the reconcile Lambda's code fed by the event source stand-in, and EC2."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from dynagent.aws.functions import AwsFunctions
from dynagent.aws.sqs import SqsPublisher
from dynagent.aws.tags import POOL_TAG
from dynagent.bridge.drain_notices import SqsDrainNotices
from dynagent.core.config import Config
from dynagent.core.snapshot import Snapshot
from dynagent.testing.aws.event_source import LambdaContext, deliver_once, queue_arn, sqs_event
from dynagent.testing.aws.local_aws import LocalAws
from dynagent.testing.determined.master import LocalDetermined

from ..aws.helpers import fifo_queue
from .cluster import Cluster, Recorder, VirtualClock


class AwsSide:
    def __init__(
        self, aws: LocalAws, config: Config, clock: VirtualClock, logger: Recorder
    ) -> None:
        self.aws = aws
        self.pools = list(config.pools)
        self.ec2 = aws.client("ec2")
        self.sqs = aws.client("sqs")
        self.queue_url = fifo_queue(self.sqs, "e2e-snapshots.fifo")
        self.dead_letter_url = fifo_queue(self.sqs, "e2e-dead-letters.fifo")
        self.publisher = SqsPublisher(self.queue_url, self.sqs)
        self.functions = AwsFunctions(
            config,
            ec2_for_region=lambda region: self.ec2,
            sqs=self.sqs,
            dead_letter_url=self.dead_letter_url,
            clock=clock,
            sleep=lambda seconds: None,
            logger=logger,
        )

    def publish(self, snapshot: Snapshot) -> object:
        return self.publisher.publish(snapshot)

    def deliver(self) -> None:
        handler = self.functions.reconcile_batch
        while deliver_once(self.sqs, self.queue_url, handler, self.aws.region)[0]:
            pass

    def receive(self) -> list[dict[str, Any]]:
        """Receive what is queued without handing it to the function yet: a Lambda that
        took its batch and has not acted on it."""
        response = self.sqs.receive_message(
            QueueUrl=self.queue_url,
            MaxNumberOfMessages=10,
            MessageSystemAttributeNames=["All"],
            MessageAttributeNames=["All"],
            WaitTimeSeconds=0,
        )
        return list(response.get("Messages", []))

    def hand_over(self, messages: list[dict[str, Any]]) -> None:
        """The function acts on a batch received earlier; the batch is then deleted."""
        event = sqs_event(messages, queue_arn(self.sqs, self.queue_url), self.aws.region)
        result = self.functions.reconcile_batch(event, LambdaContext())
        assert result == {"batchItemFailures": []}
        self.sqs.delete_message_batch(
            QueueUrl=self.queue_url,
            Entries=[
                {"Id": str(n), "ReceiptHandle": m["ReceiptHandle"]} for n, m in enumerate(messages)
            ],
        )

    def sweep(self) -> None:
        self.functions.sweep()

    def alive(self) -> dict[str, str]:
        response = self.ec2.describe_instances(
            Filters=[
                {"Name": f"tag:{POOL_TAG}", "Values": self.pools},
                {"Name": "instance-state-name", "Values": ["pending", "running"]},
            ]
        )
        return {
            i["InstanceId"]: next(t["Value"] for t in i["Tags"] if t["Key"] == POOL_TAG)
            for r in response["Reservations"]
            for i in r["Instances"]
        }

    def set_launch_time(self, instance_id: str, when: datetime) -> None:
        self.aws.set_launch_time(instance_id, when)

    def dead_letters(self) -> int:
        response = self.sqs.receive_message(QueueUrl=self.dead_letter_url, MaxNumberOfMessages=10)
        return len(response.get("Messages", []))


def told_to_drain(
    aws: LocalAws, master: LocalDetermined, config: Config
) -> tuple[Cluster, AwsSide]:
    """A cluster whose functions send drain notices to a queue the bridge reads."""
    clock, log = VirtualClock(), Recorder()
    side = AwsSide(aws, config, clock, log)
    notices = side.sqs.create_queue(QueueName="e2e-drain-notices")["QueueUrl"]
    side.functions.drain_notice_queue_url = notices
    cluster = Cluster(master, side, config, clock, log)
    cluster.bridge.drain_notices = SqsDrainNotices(side.sqs, notices, cluster.bridge_log)
    return cluster, side
