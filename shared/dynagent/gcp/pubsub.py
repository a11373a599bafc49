"""Pub/Sub: publishing snapshots with the pool as ordering key, and dead letters."""

from __future__ import annotations

import hashlib
from typing import Any

from dynagent.core.snapshot import Snapshot

# Pub/Sub caps an attribute value at 1024 bytes.
_MAX_ATTRIBUTE = 1000
DEDUP_ATTRIBUTE = "dynagent-dedup-id"
REASON_ATTRIBUTE = "dynagent-reason"
# A dead letter's body is cut to this (1 MB under Pub/Sub's 10,000,000-byte publish
# limit, room for the topic and attributes); the attributes then say it was.
MAX_DEAD_LETTER_BODY = 9_000_000
BODY_BYTES_ATTRIBUTE = "dynagent-body-bytes"
BODY_SHA256_ATTRIBUTE = "dynagent-body-sha256"


def publisher_client() -> Any:
    """A client that keeps each ordering key's messages in order (one writer per pool).

    It honours ``PUBSUB_EMULATOR_HOST``, so the same code publishes to the emulator.
    """
    from google.cloud import pubsub_v1  # type: ignore[attr-defined]

    return pubsub_v1.PublisherClient(
        publisher_options=pubsub_v1.types.PublisherOptions(enable_message_ordering=True)
    )


class PubSubPublisher:
    """Publishes snapshots so that one pool's snapshots arrive in order.

    The ordering key is the pool. Pub/Sub has no deduplication id; the snapshot's
    ``{pool}:{seq}`` travels as an attribute, and replaying a snapshot is harmless.
    """

    def __init__(self, topic: str, client: Any) -> None:
        if not topic.startswith("projects/") or "/topics/" not in topic:
            raise ValueError(f"{topic!r} is not a Pub/Sub topic (projects/PROJECT/topics/NAME)")
        self.topic = topic
        self.client = client

    def publish(self, snapshot: Snapshot, timeout: float = 60.0) -> str:
        """Send one snapshot; return Pub/Sub's message id."""
        future = self.client.publish(
            self.topic,
            snapshot.to_json().encode(),
            ordering_key=snapshot.pool,
            **{DEDUP_ATTRIBUTE: snapshot.dedup_id},
        )
        try:
            return str(future.result(timeout=timeout))
        except Exception:
            # A failed publish pauses its ordering key; resume it for the next snapshot.
            self.client.resume_publish(self.topic, snapshot.pool)
            raise


def send_dead_letter(
    client: Any, topic: str, body: bytes, reason: str, message_id: str, timeout: float = 60.0
) -> None:
    """Put a message that can never be applied on the dead-letter topic, with why.

    A body too large to travel with its attributes (Pub/Sub takes at most 10,000,000
    bytes per publish, and a message may arrive that close to it) is cut to its head;
    its whole size and SHA-256 go along, so what arrived can still be identified.
    """
    attributes = {REASON_ATTRIBUTE: reason[:_MAX_ATTRIBUTE], "source-message-id": message_id}
    if len(body) > MAX_DEAD_LETTER_BODY:
        attributes[BODY_BYTES_ATTRIBUTE] = str(len(body))
        attributes[BODY_SHA256_ATTRIBUTE] = hashlib.sha256(body).hexdigest()
        body = body[:MAX_DEAD_LETTER_BODY]
    client.publish(topic, body or b"(empty)", **attributes).result(timeout=timeout)
