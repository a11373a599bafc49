"""SQS: publishing snapshots to the FIFO queue, and setting bad messages aside."""

from __future__ import annotations

from typing import Any

from dynagent.core.snapshot import Snapshot

# SQS message attribute values are capped; a reason is a sentence, keep it short.
_MAX_REASON = 1000
# A queue's MaximumMessageSize when it cannot be read: SQS's limit before 2025, and the
# smallest a deployment of ours may have.
DEFAULT_MAX_MESSAGE_BYTES = 262_144
REASON_ATTRIBUTE = "dynagent-reason"
TRUNCATED_ATTRIBUTE = "dynagent-truncated"


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
    sqs: Any,
    queue_url: str,
    body: str,
    reason: str,
    message_id: str,
    group: str | None,
    max_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
) -> None:
    """Put a message that can never be applied on the dead-letter queue, with why.

    SQS counts the attributes toward the queue's size limit: a body that came in near the
    limit is cut to fit beside them, and an attribute says how much was kept.
    """
    attributes = {
        REASON_ATTRIBUTE: _string(reason[:_MAX_REASON]),
        "source-message-id": _string(message_id),
    }
    data = (body or "(empty)").encode()
    # Room for the truncation note itself, whose digits are not known yet.
    room = max_bytes - _attributes_size(attributes) - 200
    if len(data) + _attributes_size(attributes) > max_bytes:
        kept = data[: max(room, 0)].decode(errors="ignore")
        note = f"the body is cut to its first {len(kept.encode())} of {len(data)} bytes"
        attributes[TRUNCATED_ATTRIBUTE] = _string(note)
        body = kept or "(empty)"
    sqs.send_message(
        QueueUrl=queue_url,
        MessageBody=body or "(empty)",
        MessageGroupId=group or "invalid",
        MessageDeduplicationId=message_id,
        MessageAttributes=attributes,
    )


def _string(value: str) -> dict[str, str]:
    return {"DataType": "String", "StringValue": value}


def _attributes_size(attributes: dict[str, dict[str, str]]) -> int:
    """Bytes SQS counts for message attributes: each name, data type and value."""
    return sum(
        len(name.encode()) + len(value["DataType"].encode()) + len(value["StringValue"].encode())
        for name, value in attributes.items()
    )
