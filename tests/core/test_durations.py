"""Durations as Determined writes them in master.yaml."""

from __future__ import annotations

from datetime import timedelta

import pytest

from dynagent.core.durations import format_duration, parse_duration


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("30s", timedelta(seconds=30)),
        ("5m", timedelta(minutes=5)),
        ("1m30s", timedelta(minutes=1, seconds=30)),
        ("1h", timedelta(hours=1)),
        ("1h20m5s", timedelta(hours=1, minutes=20, seconds=5)),
        ("1.5h", timedelta(minutes=90)),
        ("500ms", timedelta(milliseconds=500)),
        ("0", timedelta(0)),
        ("0s", timedelta(0)),
        (" 20m ", timedelta(minutes=20)),
        ("1h30m", timedelta(minutes=90)),
        ("300ms", timedelta(milliseconds=300)),
        ("-5m", timedelta(minutes=-5)),
        ("+5m", timedelta(minutes=5)),
        ("10us", timedelta(microseconds=10)),
        ("10\u00b5s", timedelta(microseconds=10)),
        ("10\u03bcs", timedelta(microseconds=10)),
        ("1500000ns", timedelta(milliseconds=1.5)),
        (".5s", timedelta(milliseconds=500)),
    ],
)
def test_parses_go_durations(text: str, expected: timedelta) -> None:
    assert parse_duration(text) == expected


@pytest.mark.parametrize(
    "text", ["", "5", "10", "1.5", "m", "5x", "5 m", "-", "-m", ".s", "5m junk", "1d", "1h5", "x"]
)
def test_rejects_what_is_not_a_duration(text: str) -> None:
    with pytest.raises(ValueError, match="is not a duration") as raised:
        parse_duration(text)
    assert repr(text) in str(raised.value)
    assert "write it with a unit, like 10s" in str(raised.value), "it shows how to write one"


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (timedelta(0), "0s"),
        (timedelta(seconds=45), "45s"),
        (timedelta(minutes=20), "20m"),
        (timedelta(minutes=1, seconds=30), "1m30s"),
        (timedelta(hours=1, minutes=20), "1h20m"),
        (timedelta(hours=2, seconds=1), "2h1s"),
        (timedelta(seconds=59.9), "59s"),
    ],
)
def test_formats_the_shortest_text(value: timedelta, expected: str) -> None:
    assert format_duration(value) == expected


@pytest.mark.parametrize("text", ["30s", "5m", "1m30s", "1h", "1h20m", "2h1s"])
def test_format_round_trips(text: str) -> None:
    assert format_duration(parse_duration(text)) == text


def test_the_longest_duration_is_go_s_and_a_longer_one_is_refused_in_words() -> None:
    # Go's int64 of nanoseconds: 2562047h47m16.854775807s; ParseDuration refuses more.
    assert parse_duration("2562047h47m16s") == timedelta(hours=2562047, minutes=47, seconds=16)
    for text in ("2562048h", "999999999999h", "9" * 30 + "s"):
        with pytest.raises(ValueError, match="longer than the longest duration"):
            parse_duration(text)
