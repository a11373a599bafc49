"""Reading the functions' drain notices (``core.drain_notices``): from their SQS queue
on AWS, from a Pub/Sub subscription on their topic on GCP.

Each pass takes what is there now (a few calls at most) and deletes, or acknowledges,
what it read, a notice it cannot read too: the functions send notices again every pass,
so nothing is lost by dropping one, and a bad one is never read again and again.
"""

from __future__ import annotations

from typing import Any

from dynagent.core.drain_notices import InvalidNotice, parse_notice
from dynagent.core.plan import DrainNotice

# SQS hands out at most 10 messages a call, Pub/Sub as many as asked (MAX_PULLED here);
# a pass reads at most this many calls' worth.
MAX_CALLS = 5
MAX_PULLED = 100
# A pull waits until a message comes or its deadline: an empty subscription costs the
# bridge's pass this long. Pub/Sub answers a pull with messages at once.
PULL_TIMEOUT_SECONDS = 1.0


def notices_in(body: str, message_id: Any, logger: Any) -> list[tuple[str, DrainNotice]]:
    """(pool, notice) of one message; none, with an error line, when it is no notice."""
    try:
        pool, notices = parse_notice(body)
    except InvalidNotice as error:
        logger.error(f"not a drain notice, dropped: {error}", extra={"message_id": message_id})
        return []
    return [(pool, notice) for notice in notices]


class SqsDrainNotices:
    """The drain notice queue on SQS (the stack's DrainNoticeQueue)."""

    def __init__(self, sqs: Any, url: str, logger: Any) -> None:
        self.sqs, self.url, self.logger = sqs, url, logger

    def receive(self) -> list[tuple[str, DrainNotice]]:
        """(pool, notice) for every notice queued now."""
        found: list[tuple[str, DrainNotice]] = []
        for _ in range(MAX_CALLS):
            messages = self.sqs.receive_message(
                QueueUrl=self.url, MaxNumberOfMessages=10, WaitTimeSeconds=0
            ).get("Messages", [])
            if not messages:
                break
            for message in messages:
                body, message_id = message.get("Body", ""), message.get("MessageId")
                found += notices_in(body, message_id, self.logger)
            self.sqs.delete_message_batch(
                QueueUrl=self.url,
                Entries=[
                    {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]}
                    for i, m in enumerate(messages)
                ],
            )
        return found


class PubSubDrainNotices:
    """The drain notice subscription on Pub/Sub (deploy.sh's ``NAME-drain-notices``), read
    with synchronous pulls through a ``pubsub_v1.SubscriberClient``."""

    def __init__(self, subscriber: Any, subscription: str, logger: Any) -> None:
        self.subscriber, self.subscription, self.logger = subscriber, subscription, logger

    def receive(self) -> list[tuple[str, DrainNotice]]:
        """(pool, notice) for every notice waiting now."""
        found: list[tuple[str, DrainNotice]] = []
        for _ in range(MAX_CALLS):
            received = self._pull()
            for item in received:
                body = item.message.data.decode(errors="replace")
                found += notices_in(body, item.message.message_id, self.logger)
            if received:
                self.subscriber.acknowledge(
                    request={
                        "subscription": self.subscription,
                        "ack_ids": [item.ack_id for item in received],
                    }
                )
            # Fewer than asked for: all there was, most likely, and another pull would only
            # wait; what Pub/Sub held back is read on the next pass.
            if len(received) < MAX_PULLED:
                break
        return found

    def _pull(self) -> list[Any]:
        from google.api_core.exceptions import DeadlineExceeded

        try:
            response = self.subscriber.pull(
                request={"subscription": self.subscription, "max_messages": MAX_PULLED},
                timeout=PULL_TIMEOUT_SECONDS,
            )
        except DeadlineExceeded:  # nothing came before the deadline
            return []
        return list(response.received_messages)
