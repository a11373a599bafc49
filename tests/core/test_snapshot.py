"""The wire contract: pool snapshot version 1."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from dynagent.core.snapshot import (
    InvalidSnapshot,
    parse_snapshot,
    snapshot_age,
    snapshot_from_document,
)
from tests.builders import NOW, busy, snapshot, snapshot_document, task


def test_parses_a_v1_snapshot() -> None:
    parsed = parse_snapshot(json.dumps(snapshot_document()))

    assert parsed.pool == "gpu"
    assert parsed.seq == 7
    assert parsed.time == datetime(2024, 5, 1, 12, 0, tzinfo=UTC)
    assert [(t.task, t.slots) for t in parsed.pending] == [("exp-1.trial-1", 4)]
    assert [(a.id, a.slots, a.used_slots) for a in parsed.agents] == [("i-0a", 4, 2)]
    assert not parsed.agents[0].idle
    assert parsed.dedup_id == "gpu:7"


def test_parses_bytes() -> None:
    assert parse_snapshot(json.dumps(snapshot_document()).encode()).seq == 7


def test_pending_and_agents_may_be_absent() -> None:
    document = snapshot_document()
    del document["pending"], document["agents"]

    parsed = parse_snapshot(json.dumps(document))

    assert parsed.pending == ()
    assert parsed.agents == ()


def test_unknown_fields_are_ignored_within_version_1() -> None:
    document = snapshot_document(cluster="prod")
    document["agents"][0]["label"] = "a100"

    assert parse_snapshot(json.dumps(document)).agents[0].id == "i-0a"


def test_an_agent_with_nothing_running_is_idle() -> None:
    document = snapshot_document(agents=[{"id": "i-0a", "slots": 8, "used_slots": 0}])
    assert parse_snapshot(json.dumps(document)).agents[0].idle


def test_round_trips_through_json() -> None:
    original = snapshot(pending=[task("t1", 2)], agents=[busy("i-1", used=1)])
    assert parse_snapshot(original.to_json()) == original


# Bodies a publisher might send, each read alike by the one-step reader and the long
# way (json.loads, then validation of the document).
AGREEING_BODIES = [
    pytest.param(json.dumps(snapshot_document()), id="plain"),
    pytest.param(json.dumps(snapshot_document()).encode(), id="bytes"),
    pytest.param(
        json.dumps(
            snapshot_document(
                pending=[{"task": "t1", "slots": 2, "priority": 10, "single_agent": True}],
                agents=[
                    {"id": "i-1", "slots": 8, "used_slots": 0, "draining": True, "tasks": 1},
                    {"id": "i-2", "slots": 8, "used_slots": 8, "enabled": False},
                ],
                master_addresses={"local-ipv4": "10.0.0.2"},
                fitting_policy="worst",
            )
        ),
        id="optional-fields",
    ),
    pytest.param(
        '{"type": "x", "version": 1.0, "pool": "gpu", "seq": "7", "time": 1714564800,'
        ' "type": "pool.snapshot", "agents": [{"id": "i-1", "slots": 4.0, "used_slots": 0,'
        ' "label": NaN}]}',
        id="lax-values-and-a-repeated-key",
    ),
    # json.loads reads bytes with a byte order mark (and UTF-16): pydantic's reader does not.
    pytest.param(("\ufeff" + json.dumps(snapshot_document())).encode(), id="utf-8-bom"),
    pytest.param(json.dumps(snapshot_document()).encode("utf-16"), id="utf-16"),
]


@pytest.mark.parametrize("body", AGREEING_BODIES)
def test_the_one_step_reader_agrees_with_the_long_way(body: str | bytes) -> None:
    try:
        expected: Any = snapshot_from_document(json.loads(body))
    except (InvalidSnapshot, ValueError) as error:
        expected = type(error)
    try:
        found: Any = parse_snapshot(body)
    except (InvalidSnapshot, ValueError) as error:
        found = type(error)

    assert found == expected


def _without(field: str) -> dict[str, Any]:
    document = snapshot_document()
    del document[field]
    return document


# Each bad message, and fragments its InvalidSnapshot must say.
BAD_BODIES = [
    pytest.param(b"{not json", ["not JSON"], id="not-json"),
    pytest.param(b"\xff\xfe\x00garbage", ["not JSON"], id="not-utf8"),
    pytest.param(json.dumps([1, 2]), ["not a JSON object"], id="array"),
    pytest.param(json.dumps("pool.snapshot"), ["not a JSON object"], id="string"),
    pytest.param(
        json.dumps(snapshot_document(type="pool.metrics")),
        ["type is 'pool.metrics'", "'pool.snapshot'"],
        id="wrong-type",
    ),
    pytest.param(json.dumps(_without("type")), ["type is None"], id="missing-type"),
    pytest.param(
        json.dumps(snapshot_document(version=2)),
        ["version 2 is not one this function knows", "reads 1"],
        id="unknown-version",
    ),
    pytest.param(
        json.dumps(snapshot_document(version="1")),
        ["version '1'"],
        id="version-as-string",
    ),
    pytest.param(json.dumps(_without("version")), ["version None"], id="missing-version"),
    pytest.param(json.dumps(_without("pool")), ["pool", "Field required"], id="missing-pool"),
    pytest.param(json.dumps(_without("seq")), ["seq", "Field required"], id="missing-seq"),
    pytest.param(json.dumps(_without("time")), ["time", "Field required"], id="missing-time"),
    pytest.param(
        json.dumps(snapshot_document(time="2024-05-01T12:00:00")),
        ["time", "timezone"],
        id="naive-time",
    ),
    pytest.param(
        json.dumps(snapshot_document(seq=-1)), ["seq", "greater than or equal to 0"], id="neg-seq"
    ),
    pytest.param(
        json.dumps(snapshot_document(pending=[{"task": "t1"}])),
        ["pending.0.slots", "Field required"],
        id="task-without-slots",
    ),
    pytest.param(
        json.dumps(snapshot_document(pending=[{"task": "t1", "slots": "four"}])),
        ["pending.0.slots"],
        id="slots-not-a-number",
    ),
    pytest.param(
        json.dumps(snapshot_document(agents=[{"id": "i-1", "slots": 4}])),
        ["agents.0.used_slots", "Field required"],
        id="agent-without-used-slots",
    ),
    pytest.param(
        json.dumps(snapshot_document(agents=[{"id": "i-1", "slots": 4, "used_slots": 5}])),
        ["agents.0", "used_slots (5) exceeds slots (4)"],
        id="used-over-slots",
    ),
    pytest.param(
        json.dumps(snapshot_document(agents=[{"id": "", "slots": 4, "used_slots": 0}])),
        ["agents.0.id"],
        id="empty-agent-id",
    ),
]


@pytest.mark.parametrize(("body", "fragments"), BAD_BODIES)
def test_invalid_snapshot_says_what_is_wrong(body: str | bytes, fragments: list[str]) -> None:
    with pytest.raises(InvalidSnapshot) as raised:
        parse_snapshot(body)

    message = str(raised.value)
    for fragment in fragments:
        assert fragment in message, f"{fragment!r} not in {message!r}"


def test_invalid_snapshot_is_a_value_error() -> None:
    with pytest.raises(ValueError):
        snapshot_from_document(None)


def test_snapshot_age() -> None:
    sent = snapshot(time=NOW - timedelta(minutes=3))
    assert snapshot_age(sent, NOW) == 180
    assert snapshot_age(snapshot(time=NOW + timedelta(seconds=5)), NOW) == -5
