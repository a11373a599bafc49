"""Drain notices: the one thing the functions tell the bridge.

A snapshot carries the master's state to the functions. Some of what decides when the
master must stop placing work on an agent only the cloud knows: its machine is in a
Capacity Block, or a GCP reservation, that the cloud takes back at its end, or EC2 is
about to reclaim it; or the functions' config: it must be replaced (``decide.replace``).
The functions tell the bridge which agents to drain and from when; the bridge disables
them with drain through the master at that time, for good. Each side still acts on its
own system: the functions never call the master, the bridge never the cloud.

A notice is one JSON message on a queue of its own (an SQS standard queue on AWS, a
Pub/Sub topic on GCP)::

    {"type": "pool.drain", "version": 1, "pool": "a100", "time": "2026-11-26T21:30:00Z",
     "agents": [{"id": "i-0abc", "at": "2026-11-26T22:20:00Z",
                 "reason": "reservation cr-0123 ends at 2026-11-26 23:00Z"}]}

The functions send one each pass, from a few minutes before the drain until the
machine is gone (``decide.context.ANNOUNCE`` for reservations): a notice lost or read
late is made up by the next, so the queue needs no ordering and a bridge restarted
meanwhile learns again.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from dynagent.core.plan import DrainNotice

NOTICE_TYPE = "pool.drain"
NOTICE_VERSION = 1


class InvalidNotice(ValueError):
    """A message that is not a drain notice this version can read."""


def notice_message(pool: str, notices: Sequence[DrainNotice], now: datetime) -> str:
    return json.dumps(
        {
            "type": NOTICE_TYPE,
            "version": NOTICE_VERSION,
            "pool": pool,
            "time": _iso(now),
            "agents": [{"id": n.agent_id, "at": _iso(n.at), "reason": n.reason} for n in notices],
        },
        separators=(",", ":"),
    )


def parse_notice(body: str) -> tuple[str, list[DrainNotice]]:
    """(pool, notices) of a message; InvalidNotice naming what is wrong."""
    try:
        document: Any = json.loads(body)
    except ValueError as error:
        raise InvalidNotice(f"not JSON: {error}") from None
    if not isinstance(document, dict) or document.get("type") != NOTICE_TYPE:
        raise InvalidNotice(f"type is not {NOTICE_TYPE!r}")
    if document.get("version") != NOTICE_VERSION:
        raise InvalidNotice(f"version {document.get('version')!r} is not {NOTICE_VERSION}")
    pool = document.get("pool")
    agents = document.get("agents")
    if not isinstance(pool, str) or not pool or not isinstance(agents, list):
        raise InvalidNotice("pool (a name) and agents (a list) are required")
    notices = []
    for index, agent in enumerate(agents):
        try:
            at = datetime.fromisoformat(str(agent["at"]).replace("Z", "+00:00"))
            notices.append(DrainNotice(str(agent["id"]), at, str(agent.get("reason", ""))))
        except (KeyError, TypeError, ValueError) as error:
            raise InvalidNotice(f"agents[{index}]: {error}") from None
        if at.tzinfo is None:
            raise InvalidNotice(f"agents[{index}].at has no time zone")
    return pool, notices


def _iso(when: datetime) -> str:
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
