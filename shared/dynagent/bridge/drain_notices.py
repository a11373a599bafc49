"""Reading the functions' drain notices (``core.drain_notices``) from their queue.

Each pass takes what is queued (a few calls of ten messages at most) and deletes what it
read, a notice it cannot read too: the functions send notices again every pass, so
nothing is lost by dropping one, and a bad one is never read again and again.
"""

from __future__ import annotations

from typing import Any

from dynagent.core.drain_notices import InvalidNotice, parse_notice
from dynagent.core.plan import DrainNotice

# SQS hands out at most 10 messages a call; a pass reads at most this many calls' worth.
MAX_CALLS = 5


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
                try:
                    pool, notices = parse_notice(message.get("Body", ""))
                except InvalidNotice as error:
                    self.logger.error(
                        f"not a drain notice, dropped: {error}",
                        extra={"message_id": message.get("MessageId")},
                    )
                    continue
                found += [(pool, notice) for notice in notices]
            self.sqs.delete_message_batch(
                QueueUrl=self.url,
                Entries=[
                    {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]}
                    for i, m in enumerate(messages)
                ],
            )
        return found
