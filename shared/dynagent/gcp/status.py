"""The last applied snapshot's summary, kept as labels on the Pub/Sub snapshot topic.

The topic is already the deployment's, and the reconcile function, its only writer
(``--max-instances=1``), has it in ``DYNAGENT_SNAPSHOT_TOPIC``. Labels allow only
lowercase letters, digits, ``-`` and ``_``, at most 63 characters, so per pool:

- ``dynagent-s-{pool}`` = ``{seq}-{time}-{pending}-{slots}-{agents}-{busy}-{idle}-{draining}``
  with seq and time (epoch seconds) in base 36, then ``-{until}`` while launches are
  paused (launch_error_timeout/retries), and ``-r{drifted}_{broken}`` while agents are
  replaced (``core.decide.replace``);
- ``dynagent-e-{pool}`` = ``{time}-{code}``: when a launch was refused, and the error
  code Compute Engine gave (``zone_resource_pool_exhausted``), not its sentence.

``UpdateTopic`` replaces the whole label map: the warm function keeps the map it last
read or wrote, so a write is one call (a cold start reads the topic once first).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from dynagent.report.status import Summary

from .labels import label_safe

STATUS_LABEL = "dynagent-s-"
ERROR_LABEL = "dynagent-e-"
_MAX = 63
_CODE = re.compile(r"\b[A-Z][A-Z0-9_]{3,}\b")


def label_key(prefix: str, pool: str) -> str:
    """The pool's label key; a pool name too long for one is cut and told apart by hash."""
    key = prefix + pool
    if len(key) <= _MAX:
        return key
    digest = hashlib.sha256(pool.encode()).hexdigest()[:8]
    return f"{prefix}{pool[: _MAX - len(prefix) - 9]}-{digest}"


def _b36(number: int) -> str:
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"
    text = ""
    while True:
        number, rest = divmod(number, 36)
        text = digits[rest] + text
        if not number:
            return text


def status_labels(pool: str, summary: Summary) -> dict[str, str]:
    counts = (
        summary.pending,
        summary.pending_slots,
        summary.agents,
        summary.busy,
        summary.idle,
        summary.draining,
    )
    fields = [_b36(summary.seq), _b36(int(summary.time.timestamp())), *map(str, counts)]
    if summary.launches_paused_until is not None:
        fields.append(_b36(int(summary.launches_paused_until.timestamp())))
    if summary.drifted or summary.broken:
        # "_" tells it from the base-36 paused time, which has none.
        fields.append(f"r{summary.drifted}_{summary.broken}")
    value = "-".join(fields)
    labels = {label_key(STATUS_LABEL, pool): value[:_MAX]}
    if summary.launch_error and summary.launch_error_at:
        code = _CODE.search(summary.launch_error)
        text = label_safe(code.group(0) if code else "error")
        when = _b36(int(summary.launch_error_at.timestamp()))
        labels[label_key(ERROR_LABEL, pool)] = f"{when}-{text}"[:_MAX]
    return labels


def summary_from_labels(pool: str, labels: dict[str, str]) -> Summary | None:
    """The pool's summary, or None when none was recorded (or the label was edited)."""
    text = labels.get(label_key(STATUS_LABEL, pool))
    if not text:
        return None
    try:
        seq, when, *counts = text.split("-")
        paused = [field for field in counts[6:] if "_" not in field][:1]
        replacing = [field for field in counts[6:] if "_" in field][:1]
        drifted, broken = map(int, replacing[0][1:].split("_")) if replacing else (0, 0)
        pending, slots, agents, busy, idle, draining = map(int, counts[:6])
        summary = Summary(
            seq=int(seq, 36),
            time=datetime.fromtimestamp(int(when, 36), UTC),
            pending=pending,
            pending_slots=slots,
            agents=agents,
            busy=busy,
            idle=idle,
            draining=draining,
            launches_paused_until=(
                datetime.fromtimestamp(int(paused[0], 36), UTC) if paused else None
            ),
            drifted=drifted,
            broken=broken,
        )
    except ValueError:
        return None
    error = labels.get(label_key(ERROR_LABEL, pool), "")
    at, _, code = error.partition("-")
    try:
        error_at = datetime.fromtimestamp(int(at, 36), UTC) if at and code else None
    except ValueError:
        error_at = None
    if error_at is None:
        return summary
    return replace(summary, launch_error=code.upper(), launch_error_at=error_at)


def topics_client() -> Any:
    """A Pub/Sub admin client for the topic; ``DYNAGENT_PUBSUB_ENDPOINT`` (local runs)
    points it at a local server over REST, as the Compute client's endpoint does."""
    import os

    from google.cloud import pubsub_v1  # type: ignore[attr-defined]

    endpoint = os.environ.get(PUBSUB_ENDPOINT_ENV)
    if not endpoint:
        return pubsub_v1.PublisherClient()
    from google.api_core.client_options import ClientOptions
    from google.auth.credentials import AnonymousCredentials

    return pubsub_v1.PublisherClient(
        transport="rest",
        client_options=ClientOptions(api_endpoint=endpoint),
        credentials=AnonymousCredentials(),  # type: ignore[no-untyped-call]
    )


PUBSUB_ENDPOINT_ENV = "DYNAGENT_PUBSUB_ENDPOINT"


class TopicLabelStore:
    """Writes and reads the summaries on one topic, with a Pub/Sub PublisherClient."""

    def __init__(self, client: Any, topic: str) -> None:
        self.client = client
        self.topic = topic
        self._labels: dict[str, str] | None = None

    def read(self) -> dict[str, str]:
        self._labels = dict(self.client.get_topic(topic=self.topic).labels)
        return dict(self._labels)

    def write(self, pool: str, summary: Summary, new_error: bool = False) -> None:
        labels = self.read() if self._labels is None else dict(self._labels)
        labels.update(status_labels(pool, summary))
        updated = self.client.update_topic(
            request={
                "topic": {"name": self.topic, "labels": labels},
                "update_mask": {"paths": ["labels"]},
            }
        )
        self._labels = dict(updated.labels)
