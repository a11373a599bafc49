"""A local stand-in for Eventarc's Pub/Sub trigger: pulled messages become CloudEvents.

Eventarc hands a Cloud Function one message per event, as a CloudEvent of type
``google.cloud.pubsub.topic.v1.messagePublished`` whose data holds the message (base64
``data``, ``attributes``, ``messageId``, ``orderingKey``) and the subscription. A
function that returns acknowledges the message; one that raises has it redelivered.
"""

from __future__ import annotations

import base64
from collections.abc import Callable
from typing import Any

MESSAGE_PUBLISHED = "google.cloud.pubsub.topic.v1.messagePublished"


def cloud_event(received: Any, topic: str, subscription: str) -> Any:
    """The CloudEvent Eventarc would deliver for one received Pub/Sub message."""
    message = received.message
    return message_event(
        message.data,
        topic,
        subscription,
        message_id=message.message_id,
        attributes=dict(message.attributes),
        ordering_key=message.ordering_key,
        published=message.publish_time.isoformat(),
    )


def message_event(
    data: bytes,
    topic: str,
    subscription: str,
    message_id: str = "1",
    attributes: dict[str, str] | None = None,
    ordering_key: str = "",
    published: str = "2026-11-21T23:00:00Z",
) -> Any:
    """The CloudEvent of a Pub/Sub message with these fields."""
    from cloudevents.http import CloudEvent

    payload = {
        "message": {
            "data": base64.b64encode(data).decode(),
            "attributes": attributes or {},
            "messageId": message_id,
            "orderingKey": ordering_key,
            "publishTime": published,
        },
        "subscription": subscription,
    }
    headers = {
        "type": MESSAGE_PUBLISHED,
        "source": f"//pubsub.googleapis.com/{topic}",
        "id": message_id,
    }
    return CloudEvent(headers, payload)


def deliver_pulled(
    subscriber: Any, subscription: str, topic: str, function: Callable[[Any], object]
) -> int:
    """Pull a batch, call ``function`` per message, ack those it did not raise on."""
    response = subscriber.pull(subscription=subscription, max_messages=10, timeout=10)
    done = []
    for received in response.received_messages:
        function(cloud_event(received, topic, subscription))
        done.append(received.ack_id)
    if done:
        subscriber.acknowledge(subscription=subscription, ack_ids=done)
    return len(response.received_messages)
