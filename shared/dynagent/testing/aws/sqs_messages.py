"""SQS message size, as SQS counts it against the queue's MaximumMessageSize: the body's
UTF-8 bytes plus each attribute's name, data type and value (moto compares the body's
length in characters only)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from moto.sqs.exceptions import InvalidParameterValue
from moto.sqs.models import SQSBackend

from dynagent.testing.aws.knobs import knobs_for

# moto's originals, taken once at import: the wrappers always call through to these.
_moto_sqs_send_message = SQSBackend.send_message


def sqs_message_size(body: str, attributes: Mapping[str, Mapping[str, Any]] | None) -> int:
    """A message's size as SQS limits it: the body and every attribute's name, type and
    value, in bytes."""
    size = len(body.encode())
    for name, value in (attributes or {}).items():
        data_type = str(value.get("DataType") or value.get("data_type") or "")
        text = value.get("StringValue") or value.get("string_value") or ""
        binary = value.get("BinaryValue") or value.get("binary_value") or b""
        size += len(name.encode()) + len(data_type.encode()) + len(str(text).encode())
        size += len(binary)
    return size


def sqs_send_message(self: Any, queue_name: str, message_body: str, *args: Any, **kw: Any) -> Any:
    if knobs_for(self.account_id) is not None:
        attributes = kw.get("message_attributes", args[0] if args else None)
        limit = int(self.get_queue(queue_name).maximum_message_size)
        size = sqs_message_size(message_body, attributes)
        if size > limit:
            raise InvalidParameterValue(
                "One or more parameters are invalid. Reason: Message must be shorter than "
                f"{limit} bytes."
            )
    return _moto_sqs_send_message(self, queue_name, message_body, *args, **kw)
