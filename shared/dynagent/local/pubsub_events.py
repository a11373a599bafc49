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
    from cloudevents.http import CloudEvent

    message = received.message
    data = {
        "message": {
            "data": base64.b64encode(message.data).decode(),
            "attributes": dict(message.attributes),
            "messageId": message.message_id,
            "orderingKey": message.ordering_key,
            "publishTime": message.publish_time.isoformat(),
        },
        "subscription": subscription,
    }
    attributes = {
        "type": MESSAGE_PUBLISHED,
        "source": f"//pubsub.googleapis.com/{topic}",
        "id": message.message_id,
    }
    return CloudEvent(attributes, data)


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
