"""SQS: publishing snapshots to the FIFO queue, and setting bad messages aside."""

from __future__ import annotations

from typing import Any

from dynagent.snapshot import Snapshot

# SQS message attribute values are capped; a reason is a sentence, keep it short.
_MAX_REASON = 1000


class SqsPublisher:
    """Publishes snapshots so that one pool's snapshots are applied in order, once.

    The message group is the pool (one writer per pool, in order); the deduplication
    id is ``{pool}:{seq}``, so a master that resends a snapshot is not applied twice.
    """

    def __init__(self, queue_url: str, sqs: Any) -> None:
        if not queue_url.endswith(".fifo"):
            raise ValueError(f"{queue_url!r} is not a FIFO queue (its name ends in .fifo)")
        self.queue_url = queue_url
        self.sqs = sqs

    def publish(self, snapshot: Snapshot) -> str:
        """Send one snapshot; return the queue's message id."""
        response = self.sqs.send_message(
            QueueUrl=self.queue_url,
            MessageBody=snapshot.to_json(),
            MessageGroupId=snapshot.pool,
            MessageDeduplicationId=snapshot.dedup_id,
        )
        return str(response["MessageId"])


def send_dead_letter(
    sqs: Any, queue_url: str, body: str, reason: str, message_id: str, group: str | None
) -> None:
    """Put a message that can never be applied on the dead-letter queue, with why."""
    sqs.send_message(
        QueueUrl=queue_url,
        MessageBody=body or "(empty)",
        MessageGroupId=group or "invalid",
        MessageDeduplicationId=message_id,
        MessageAttributes={
            "dynagent-reason": {"DataType": "String", "StringValue": reason[:_MAX_REASON]},
            "source-message-id": {"DataType": "String", "StringValue": message_id},
        },
    )
