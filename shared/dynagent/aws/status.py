"""The last applied snapshot's summary, kept as tags on the SQS snapshot queue.

The queue is already the stack's and the reconcile function's: no new resource, and
one ``TagQueue`` per write (tags merge, so a pool's write leaves the other pools' tags
and an older launch error alone). Per pool, two tags (SQS allows 50 per queue, so 25
pools; values at most 256 characters):

- ``dynagent:status:{pool}`` = ``seq=41 time=2026-11-23T08:20:30Z pending=2/8 agents=3
  busy=1 idle=1 draining=0`` (pending tasks / their slots), then ``paused-until=...``
  while launches are paused (launch_error_timeout/retries), and ``drifted=1 broken=0``
  while agents are replaced (``core.decide.replace``);
- ``dynagent:launch-error:{pool}`` = ``2026-11-23T08:10:00Z InsufficientInstanceCapacity:
  ...``, written only when a launch was refused, cut to fit.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from dynagent.report.status import Summary

from .tags import format_time, parse_time

STATUS_TAG = "dynagent:status:"
ERROR_TAG = "dynagent:launch-error:"
_MAX_VALUE = 256


def status_tags(pool: str, summary: Summary, new_error: bool) -> dict[str, str]:
    value = (
        f"seq={summary.seq} time={format_time(summary.time)} "
        f"pending={summary.pending}/{summary.pending_slots} agents={summary.agents} "
        f"busy={summary.busy} idle={summary.idle} draining={summary.draining}"
    )
    if summary.launches_paused_until is not None:
        value += f" paused-until={format_time(summary.launches_paused_until)}"
    if summary.drifted or summary.broken:
        value += f" drifted={summary.drifted} broken={summary.broken}"
    tags = {STATUS_TAG + pool: value}
    if new_error and summary.launch_error and summary.launch_error_at:
        error = f"{format_time(summary.launch_error_at)} {summary.launch_error}"
        tags[ERROR_TAG + pool] = error[:_MAX_VALUE]
    return tags


def summary_from_tags(pool: str, tags: dict[str, str]) -> Summary | None:
    """The pool's summary, or None when none was recorded (or someone edited the tag)."""
    text = tags.get(STATUS_TAG + pool)
    if not text:
        return None
    try:
        fields = dict(part.split("=", 1) for part in text.split())
        pending, slots = fields["pending"].split("/")
        when = parse_time(fields["time"])
        if when is None:
            return None
        paused = parse_time(fields["paused-until"]) if "paused-until" in fields else None
        summary = Summary(
            seq=int(fields["seq"]),
            time=when,
            pending=int(pending),
            pending_slots=int(slots),
            agents=int(fields["agents"]),
            busy=int(fields["busy"]),
            idle=int(fields["idle"]),
            draining=int(fields["draining"]),
            launches_paused_until=paused,
            drifted=int(fields.get("drifted", 0)),
            broken=int(fields.get("broken", 0)),
        )
    except (KeyError, ValueError):
        return None
    error = tags.get(ERROR_TAG + pool, "")
    at, _, message = error.partition(" ")
    error_at = parse_time(at) if at else None
    if error_at is None or not message:
        return summary
    return replace(summary, launch_error=message, launch_error_at=error_at)


class QueueTagStore:
    """Writes and reads the summaries on one queue, with the caller's SQS client."""

    def __init__(self, sqs: Any, queue_url: str) -> None:
        self.sqs = sqs
        self.queue_url = queue_url

    def write(self, pool: str, summary: Summary, new_error: bool = False) -> None:
        self.sqs.tag_queue(QueueUrl=self.queue_url, Tags=status_tags(pool, summary, new_error))

    def read(self) -> dict[str, str]:
        """Every tag of the queue, in one call: each pool's summary is read from these."""
        return dict(self.sqs.list_queue_tags(QueueUrl=self.queue_url).get("Tags") or {})
