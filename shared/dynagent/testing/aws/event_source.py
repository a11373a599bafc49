"""A local stand-in for Lambda's SQS event source mapping.

It receives a batch from a queue, hands the function an event of the shape Lambda
delivers (records with ``messageId``, ``body``, ``attributes``, ...), then deletes the
records the function did not report as failed, as the real mapping does with
``ReportBatchItemFailures``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

Handler = Callable[[dict[str, Any], Any], dict[str, Any]]


@dataclass(frozen=True)
class LambdaContext:
    """The fields of Lambda's context object that Powertools reads."""

    function_name: str = "dynagent-reconcile"
    memory_limit_in_mb: int = 256
    invoked_function_arn: str = "arn:aws:lambda:us-west-2:123456789012:function:dynagent-reconcile"
    aws_request_id: str = "00000000-0000-0000-0000-000000000000"

    def get_remaining_time_in_millis(self) -> int:
        return 60_000


def queue_arn(sqs: Any, queue_url: str) -> str:
    attributes = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])
    return str(attributes["Attributes"]["QueueArn"])


def sqs_event(messages: list[dict[str, Any]], arn: str, region: str) -> dict[str, Any]:
    """Lambda's event for received SQS messages."""
    return {
        "Records": [
            {
                "messageId": message["MessageId"],
                "receiptHandle": message["ReceiptHandle"],
                "body": message["Body"],
                "attributes": message.get("Attributes", {}),
                "messageAttributes": {
                    name: {
                        "stringValue": value.get("StringValue"),
                        "dataType": value["DataType"],
                        "stringListValues": [],
                        "binaryListValues": [],
                    }
                    for name, value in message.get("MessageAttributes", {}).items()
                },
                "md5OfBody": message["MD5OfBody"],
                "eventSource": "aws:sqs",
                "eventSourceARN": arn,
                "awsRegion": region,
            }
            for message in messages
        ]
    }


def deliver_once(
    sqs: Any, queue_url: str, handler: Handler, region: str, batch_size: int = 10
) -> tuple[int, int]:
    """Receive one batch, invoke ``handler``, delete what succeeded: (delivered, failed)."""
    response = sqs.receive_message(
        QueueUrl=queue_url,
        MaxNumberOfMessages=batch_size,
        MessageSystemAttributeNames=["All"],
        MessageAttributeNames=["All"],
        WaitTimeSeconds=0,
    )
    messages = response.get("Messages", [])
    if not messages:
        return 0, 0
    event = sqs_event(messages, queue_arn(sqs, queue_url), region)
    result = handler(event, LambdaContext())
    failed = {item["itemIdentifier"] for item in result.get("batchItemFailures", [])}
    done = [m for m in messages if m["MessageId"] not in failed]
    if done:
        sqs.delete_message_batch(
            QueueUrl=queue_url,
            Entries=[
                {"Id": str(index), "ReceiptHandle": m["ReceiptHandle"]}
                for index, m in enumerate(done)
            ],
        )
    return len(messages), len(failed)
