"""The reconcile function under ugly input and a slow cloud: each test pins a defect the
reliability suite (tests/reliability) found, so it stays fixed.

Every batch is a Lambda-shaped SQS event received from the local AWS's FIFO queue.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
from botocore.config import Config as BotoConfig

from dynagent.aws.functions import AwsFunctions
from dynagent.aws.sqs import SqsPublisher
from dynagent.testing.aws.event_source import LambdaContext, deliver_once
from dynagent.testing.aws.local_aws import LocalAws

from .helpers import (
    FIFO,
    config,
    event_from_queue,
    fifo_queue,
    image_id,
    managed_instances,
    now,
    pool_document,
    snapshot,
)


def dead_letters(sqs: Any, url: str) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []
    while batch := sqs.receive_message(
        QueueUrl=url, MaxNumberOfMessages=10, MessageAttributeNames=["All"]
    ).get("Messages"):
        messages += batch
    return messages


def reasons(sqs: Any, url: str) -> list[str]:
    return [
        m["MessageAttributes"]["dynagent-reason"]["StringValue"] for m in dead_letters(sqs, url)
    ]


def functions_for(ec2: Any, sqs: Any, cfg: Any, queues: tuple[str, str], **kw: Any) -> AwsFunctions:
    return AwsFunctions(
        cfg,
        ec2_for_region=lambda _: ec2,
        sqs=sqs,
        snapshot_queue_url=queues[0],
        dead_letter_url=queues[1],
        **kw,
    )


def test_a_deeply_nested_body_is_set_aside_and_the_rest_of_the_batch_applies(
    ec2: Any, sqs: Any
) -> None:
    queues = fifo_queue(sqs, "snapshots.fifo"), fifo_queue(sqs, "dead-letters.fifo")
    cfg = config(pool_document(image_id(ec2)))
    functions = functions_for(ec2, sqs, cfg, queues)
    event = event_from_queue(
        sqs,
        queues[0],
        [
            ("t4", "nested", "[" * 100_000),
            ("a100", "good", snapshot(1, pending=[("trial", 8)]).to_json()),
        ],
    )
    assert functions.reconcile_batch(event, LambdaContext()) == {"batchItemFailures": []}
    assert len(managed_instances(ec2)) == 1
    assert reasons(sqs, queues[1]) == ["not JSON: nested too deeply"]


def test_a_batch_whose_every_record_fails_is_reported_and_retried_soon(
    aws: LocalAws, sqs: Any
) -> None:
    queues = fifo_queue(sqs, "snapshots.fifo"), fifo_queue(sqs, "dead-letters.fifo")
    unreachable = boto3.client(  # nothing listens on port 9 of loopback
        "ec2",
        region_name="us-west-2",
        endpoint_url="http://127.0.0.1:9",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
        config=BotoConfig(retries={"total_max_attempts": 1}, connect_timeout=1),
    )
    cfg = config(pool_document("ami-12345678"))
    functions = functions_for(unreachable, sqs, cfg, queues)
    SqsPublisher(queues[0], sqs).publish(snapshot(1, pending=[("y", 8)]))
    aws.clear_calls()

    # Powertools raises BatchProcessingError on an all-failed batch unless told not to:
    # then no record would come back after the short retry delay.
    delivered, failed = deliver_once(sqs, queues[0], functions.reconcile_batch, "us-west-2")
    assert (delivered, failed) == (1, 1)
    assert "ChangeMessageVisibilityBatch" in aws.calls()


@dataclass
class VirtualClock:
    now: datetime

    def __call__(self) -> datetime:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


def test_instances_a_late_describe_hides_count_for_the_snapshot_after(
    aws: LocalAws, ec2: Any, sqs: Any
) -> None:
    queues = fifo_queue(sqs, "snapshots.fifo"), fifo_queue(sqs, "dead-letters.fifo")
    cfg = config(pool_document(image_id(ec2)), launch_visibility_timeout="5s")
    clock = VirtualClock(now())
    functions = functions_for(ec2, sqs, cfg, queues, clock=clock, sleep=clock.sleep)
    # EC2 shows the new instance only after many describe calls: longer than the wait.
    aws.hide_new_instances(describes=50)
    SqsPublisher(queues[0], sqs).publish(snapshot(1, pending=[("trial", 8)], time=clock.now))

    first = deliver_once(sqs, queues[0], functions.reconcile_batch, "us-west-2")
    assert first == (1, 1)  # the wait gave up: the record is retried

    # The retry comes back with the next snapshot of the same demand, which supersedes
    # it. (Purged and sent again: the FIFO group is held while the failed one waits.)
    sqs.purge_queue(QueueUrl=queues[0])
    retry = snapshot(1, pending=[("trial", 8)], time=clock.now).to_json()
    newer = snapshot(2, pending=[("trial", 8)], time=clock.now).to_json()
    event = event_from_queue(sqs, queues[0], [("a100", "r1", retry), ("a100", "r2", newer)])
    assert functions.reconcile_batch(event, LambdaContext()) == {"batchItemFailures": []}

    assert aws.calls().count("RunInstances") == 1
    seen: list[dict[str, Any]] = []
    for _ in range(60):  # the describes the double still hides it from
        if seen := managed_instances(ec2):
            break
    assert len(seen) == 1


def test_a_spot_snapshot_from_the_far_future_is_refused_not_retried(
    aws: LocalAws, ec2: Any, sqs: Any
) -> None:
    queues = fifo_queue(sqs, "snapshots.fifo"), fifo_queue(sqs, "dead-letters.fifo")
    cfg = config(pool_document(image_id(ec2), spot=True))
    functions = functions_for(ec2, sqs, cfg, queues)
    future = datetime(9999, 12, 31, 23, 0, tzinfo=UTC)
    SqsPublisher(queues[0], sqs).publish(snapshot(1, pending=[("a", 8)], time=future))

    assert deliver_once(sqs, queues[0], functions.reconcile_batch, "us-west-2") == (1, 0)
    (reason,) = reasons(sqs, queues[1])
    assert reason.startswith("time: 9999-12-31T23:00:00+00:00 is ") and "ahead" in reason
    assert "RequestSpotInstances" not in aws.calls()


def test_a_set_aside_message_near_the_size_limit_is_cut_to_fit(ec2: Any, sqs: Any) -> None:
    limit = {"MaximumMessageSize": "262144"}
    queues = (
        str(sqs.create_queue(QueueName="s.fifo", Attributes={**FIFO, **limit})["QueueUrl"]),
        str(sqs.create_queue(QueueName="d.fifo", Attributes={**FIFO, **limit})["QueueUrl"]),
    )
    functions = functions_for(ec2, sqs, config(pool_document(image_id(ec2))), queues)
    body = "é" * 131_060  # 262,120 bytes: fits the queue alone, not beside its reason
    event = event_from_queue(sqs, queues[0], [("a100", "big", body)])

    assert functions.reconcile_batch(event, LambdaContext()) == {"batchItemFailures": []}
    (letter,) = dead_letters(sqs, queues[1])
    attributes = {k: v["StringValue"] for k, v in letter["MessageAttributes"].items()}
    assert attributes["dynagent-reason"].startswith("not JSON")
    kept = len(letter["Body"].encode())
    assert body.startswith(letter["Body"]) and 250_000 < kept < 262_120
    assert attributes["dynagent-truncated"] == (
        f"the body is cut to its first {kept} of 262120 bytes"
    )


def test_the_local_sqs_counts_attributes_toward_the_size_limit(sqs: Any) -> None:
    url = str(
        sqs.create_queue(QueueName="q", Attributes={"MaximumMessageSize": "1024"})["QueueUrl"]
    )
    sqs.send_message(QueueUrl=url, MessageBody="x" * 1024)
    send: Callable[..., Any] = sqs.send_message
    attribute = {"why": {"DataType": "String", "StringValue": "y"}}
    for body, attributes in (("x" * 1024, attribute), ("é" * 513, {})):
        try:
            send(QueueUrl=url, MessageBody=body, MessageAttributes=attributes)
        except sqs.exceptions.ClientError as error:
            assert "Message must be shorter than 1024 bytes" in str(error)
        else:
            raise AssertionError(f"SQS refuses a {len(body.encode())}-byte body with {attributes}")
