"""The demo on a local AWS: moto's EC2 and SQS, the reconcile and sweep Lambdas' code."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from dynagent.aws.emf import EmfWriter
from dynagent.aws.functions import AwsFunctions
from dynagent.aws.sqs import SqsPublisher
from dynagent.aws.tags import LAUNCH_KEY_TAG, MARK_TAGS, POOL_TAG
from dynagent.core.config import Config
from dynagent.core.fleet import Mark
from dynagent.core.snapshot import Snapshot
from dynagent.demo.rig import Discard, FleetRow
from dynagent.testing.aws.event_source import deliver_once
from dynagent.testing.aws.local_aws import LocalAws

_FIFO = {"FifoQueue": "true", "ContentBasedDeduplication": "false"}


class AwsRig:
    def __init__(
        self, aws: LocalAws, config: Config, clock: Callable[[], datetime], logger: Any
    ) -> None:
        self.aws = aws
        self.description = f"local AWS (moto) on {aws.endpoint_url}"
        self.pool = next(iter(config.pools.values()))
        self.ec2 = aws.client("ec2")
        self.sqs = aws.client("sqs")
        self.dead_letter_url = self._queue("dynagent-dlq.fifo")
        self.queue_url = self._queue("dynagent-snapshots.fifo")
        self.publisher = SqsPublisher(self.queue_url, self.sqs)
        self.functions = AwsFunctions(
            config,
            ec2_for_region=lambda region: self.ec2,
            sqs=self.sqs,
            dead_letter_url=self.dead_letter_url,
            snapshot_queue_url=self.queue_url,
            clock=clock,
            sleep=lambda seconds: None,
            logger=logger,
            metrics=EmfWriter(Discard()),
        )

    def _queue(self, name: str) -> str:
        return str(self.sqs.create_queue(QueueName=name, Attributes=_FIFO)["QueueUrl"])

    def publish(self, snapshot: Snapshot) -> None:
        self.publisher.publish(snapshot)

    def publish_corrupt(self, body: bytes) -> None:
        self.sqs.send_message(
            QueueUrl=self.queue_url,
            MessageBody=body.decode(),
            MessageGroupId=self.pool.name,
            MessageDeduplicationId="corrupt-1",
        )

    def deliver(self) -> None:
        handler = self.functions.reconcile_batch
        while deliver_once(self.sqs, self.queue_url, handler, self.aws.region)[0]:
            pass

    def sweep(self) -> None:
        self.functions.sweep()

    def fleet(self) -> list[FleetRow]:
        response = self.ec2.describe_instances(
            Filters=[{"Name": f"tag:{POOL_TAG}", "Values": [self.pool.name]}]
        )
        rows = []
        for reservation in response["Reservations"]:
            for item in reservation["Instances"]:
                tags = {t["Key"]: t["Value"] for t in item.get("Tags", [])}
                state = item["State"]["Name"]
                rows.append(
                    FleetRow(
                        id=item["InstanceId"],
                        state=state,
                        alive=state in ("pending", "running"),
                        launch_key=tags.get(LAUNCH_KEY_TAG, "-"),
                        registered=tags.get(MARK_TAGS[Mark.REGISTERED], "-"),
                        idle_since=tags.get(MARK_TAGS[Mark.IDLE_SINCE], "-"),
                    )
                )
        return rows

    def set_launch_time(self, instance_id: str, when: datetime) -> None:
        self.aws.set_launch_time(instance_id, when)

    def dead_letters(self) -> list[str]:
        response = self.sqs.receive_message(
            QueueUrl=self.dead_letter_url, MaxNumberOfMessages=10, MessageAttributeNames=["All"]
        )
        return [
            m["MessageAttributes"]["dynagent-reason"]["StringValue"]
            for m in response.get("Messages", [])
        ]
