"""A throwaway Cloud Function for the emulator tests: it writes down what it receives.

Served by functions-framework (``--target echo --signature-type cloudevent``), it appends
one JSON line per CloudEvent to the file named by ``ECHO_RECORD_FILE``: the event's type
and source and the Pub/Sub message, its data decoded. A message whose attribute
``fail`` is ``"once"`` fails its first delivery (an exception, so an HTTP 500), to show
that Pub/Sub delivers it again; one with ``sleep`` takes that many seconds, to show what
runs while it does.
"""

from __future__ import annotations

import base64
import json
import os
import time
from pathlib import Path
from typing import Any

RECORD_ENV = "ECHO_RECORD_FILE"


def echo(cloud_event: Any) -> None:
    message = cloud_event.data["message"]
    attributes = message.get("attributes") or {}
    record = {
        "type": cloud_event["type"],
        "source": cloud_event["source"],
        "id": cloud_event["id"],
        "message_id": message.get("messageId"),
        "data": base64.b64decode(message["data"]).decode(),
        "attributes": attributes,
        "ordering_key": message.get("orderingKey"),
        "pid": os.getpid(),
        "received_at": time.time(),
    }
    time.sleep(float(attributes.get("sleep", 0)))
    record["finished_at"] = time.time()
    path = Path(os.environ[RECORD_ENV])
    failed_before = path.with_suffix(f".failed-{message.get('messageId')}")
    if attributes.get("fail") == "once" and not failed_before.exists():
        failed_before.touch()
        raise RuntimeError("failing the first delivery on purpose")
    with path.open("a") as out:
        out.write(json.dumps(record) + "\n")
