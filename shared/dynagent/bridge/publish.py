"""The publisher masters use: send a pool snapshot to the autoscaler's queue.

    from dynagent.bridge.publish import publisher_for
    publisher_for("https://sqs.us-west-2.amazonaws.com/123456789012/dynagent.fifo").publish(s)

The destination picks the transport: an SQS FIFO queue URL, or a Pub/Sub topic
(``projects/PROJECT/topics/NAME``).
"""

from __future__ import annotations

from typing import Protocol

from dynagent.core.snapshot import Snapshot


class Publisher(Protocol):
    def publish(self, snapshot: Snapshot) -> str:
        """Send one snapshot; return the transport's message id."""
        ...


def publisher_for(destination: str, region: str | None = None) -> Publisher:
    """A publisher for a queue URL or topic; ValueError for a destination we cannot reach."""
    if destination.startswith("projects/"):
        from dynagent.gcp.pubsub import PubSubPublisher, publisher_client

        return PubSubPublisher(destination, publisher_client())
    if destination.startswith(("https://", "http://")):
        from dynagent.aws.clients import sqs_client
        from dynagent.aws.sqs import SqsPublisher

        return SqsPublisher(destination, sqs_client(region or region_of(destination)))
    raise ValueError(
        f"{destination!r} is neither an SQS queue URL (https://sqs.REGION.amazonaws.com/...) "
        "nor a Pub/Sub topic (projects/PROJECT/topics/NAME)"
    )


def region_of(queue_url: str) -> str | None:
    """``https://sqs.us-west-2.amazonaws.com/...`` -> ``us-west-2``; None for other hosts."""
    host = queue_url.split("://", 1)[1].split("/", 1)[0]
    parts = host.split(".")
    if len(parts) >= 3 and parts[0] == "sqs":
        return parts[1]
    return None
