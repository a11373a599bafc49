"""Pub/Sub: publishing snapshots with the pool as ordering key, and dead letters."""

from __future__ import annotations

from typing import Any

from dynagent.snapshot import Snapshot

# Pub/Sub caps an attribute value at 1024 bytes.
_MAX_ATTRIBUTE = 1000
DEDUP_ATTRIBUTE = "dynagent-dedup-id"
REASON_ATTRIBUTE = "dynagent-reason"


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
    """Put a message that can never be applied on the dead-letter topic, with why."""
    client.publish(
        topic,
        body or b"(empty)",
        **{REASON_ATTRIBUTE: reason[:_MAX_ATTRIBUTE], "source-message-id": message_id},
    ).result(timeout=timeout)
