"""Building blocks for AWS tests: configs, snapshots and Lambda events of the real shape."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from dynagent.aws.sqs import SqsPublisher
from dynagent.core.snapshot import Snapshot
from dynagent.testing.aws.event_source import queue_arn, sqs_event
from tests import builders

REGION = "us-west-2"
FIFO = {"FifoQueue": "true", "ContentBasedDeduplication": "false"}


def now() -> datetime:
    # moto stamps real times, so AWS tests decide with the real clock (tests age
    # instances and tags in the fake cloud instead of moving the clock).
    return datetime.now(UTC).replace(microsecond=0)


def image_id(ec2: Any) -> str:
    """An AMI the local AWS knows. Listing them all costs most of a second, and moto's
    public AMIs are the same after every reset, so the first answer is kept."""
    if not _IMAGES:
        images = ec2.describe_images(Owners=["amazon"])["Images"]
        _IMAGES.append(str(images[0]["ImageId"]))
    return _IMAGES[0]


_IMAGES: list[str] = []


# The AWS tests' account: the local AWS's region, its own tag pair, an 8-GPU type.
AWS_TEST_POOL: dict[str, Any] = {
    "region": REGION,
    "instance_type": "p4d.24xlarge",
    "max_instances": 5,
    "tag_key": "managed-by",
    "tag_value": "dynagent-test",
    "master_url": "http://10.0.0.5:8080",
    "agent_docker_network": "determined",
    "startup_script": "echo hello",
}


def pool_document(image: str, name: str = "a100", **provider: Any) -> dict[str, Any]:
    return builders.pool_entry(name, **(AWS_TEST_POOL | {"image_id": image} | provider))


config = builders.config


def write_config(path: Path, *pools: dict[str, Any], **settings: Any) -> Path:
    path.write_text(yaml.safe_dump(builders.config_document(*pools, **settings)))
    return path


def snapshot(
    seq: int,
    pool: str = "a100",
    pending: Iterable[tuple[str, int]] = (),
    agents: Iterable[tuple[str, int, int]] = (),
    time: datetime | None = None,
) -> Snapshot:
    return builders.snapshot(
        pool_name=pool, seq=seq, time=time or now(), pending=pending, agents=agents
    )


def fifo_queue(sqs: Any, name: str) -> str:
    return str(sqs.create_queue(QueueName=name, Attributes=FIFO)["QueueUrl"])


def event_from_queue(
    sqs: Any, queue_url: str, bodies: list[tuple[str, str, str]]
) -> dict[str, Any]:
    """Send (group, dedup id, body) messages and receive them as Lambda's SQS event."""
    for group, dedup, body in bodies:
        sqs.send_message(
            QueueUrl=queue_url, MessageBody=body, MessageGroupId=group, MessageDeduplicationId=dedup
        )
    return _received_event(sqs, queue_url)


def published_event(sqs: Any, queue_url: str, *snapshots: Snapshot) -> dict[str, Any]:
    """Publish with the real publisher, then receive as Lambda would be handed them."""
    publisher = SqsPublisher(queue_url, sqs)
    for item in snapshots:
        publisher.publish(item)
    return _received_event(sqs, queue_url)


def _received_event(sqs: Any, queue_url: str) -> dict[str, Any]:
    """Receive a batch as Lambda's SQS event, and acknowledge it at once.

    The real event source deletes a batch after the function returns; acknowledging
    first keeps a test's FIFO group open for its next event.
    """
    messages = sqs.receive_message(
        QueueUrl=queue_url,
        MaxNumberOfMessages=10,
        MessageSystemAttributeNames=["All"],
        MessageAttributeNames=["All"],
    )["Messages"]
    sqs.delete_message_batch(
        QueueUrl=queue_url,
        Entries=[
            {"Id": str(index), "ReceiptHandle": message["ReceiptHandle"]}
            for index, message in enumerate(messages)
        ],
    )
    return sqs_event(messages, queue_arn(sqs, queue_url), REGION)


def managed_instances(
    ec2: Any, pool: str = "a100", states: tuple[str, ...] = ("pending", "running")
) -> list[dict[str, Any]]:
    response = ec2.describe_instances(
        Filters=[
            {"Name": "tag:dynagent:pool", "Values": [pool]},
            {"Name": "instance-state-name", "Values": list(states)},
        ]
    )
    return [i for r in response["Reservations"] for i in r["Instances"]]


def tags_of(instance: dict[str, Any]) -> dict[str, str]:
    return {t["Key"]: t["Value"] for t in instance.get("Tags", [])}


def lookalike(ec2: Any, **fields: Any) -> str:
    """An instance of the pool's name and pool tag without the managed pair (someone
    else's), stopped: what no pass may ever touch. Its id."""
    (instance,) = ec2.run_instances(
        ImageId=image_id(ec2),
        MinCount=1,
        MaxCount=1,
        TagSpecifications=[
            {
                "ResourceType": "instance",
                "Tags": [
                    {"Key": "Name", "Value": "determined-ai-agent"},
                    {"Key": "dynagent:pool", "Value": "a100"},
                    {"Key": "managed-by", "Value": "not-us"},
                ],
            }
        ],
        **fields,
    )["Instances"]
    ec2.stop_instances(InstanceIds=[instance["InstanceId"]])
    return str(instance["InstanceId"])
