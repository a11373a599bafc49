"""Durations as Determined writes them: Go's ``time.ParseDuration`` syntax.

Determined reads every duration of its master.yaml with Go's parser
(master/pkg/model/duration.go ``Duration.UnmarshalJSON`` calls ``time.ParseDuration``),
so the same text means the same time here: ``30s``, ``1m30s``, ``1.5h``, ``300ms``,
``-5m``, ``10us``. A number without a unit is refused, as Go refuses it (only ``0``
may go without one).
"""

from __future__ import annotations

import re
from datetime import timedelta

# Go's units, including both spellings of the micro sign (U+00B5 and U+03BC).
_UNIT_SECONDS = {
    "ns": 1e-9, "us": 1e-6, "\u00b5s": 1e-6, "\u03bcs": 1e-6,
    "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0,
}  # fmt: skip
# One part: a decimal number (digits on at least one side of the point), then a unit.
_PART = re.compile(r"(\d+\.?\d*|\.\d+)([^\d.]*)")
HOW_TO_WRITE = "write it with a unit, like 10s, 10m or 1m30s"
# Go's longest duration: an int64 of nanoseconds, 2562047h47m16.854775807s (about 292
# years); ParseDuration refuses a longer one as invalid, and so does Determined.
LONGEST_SECONDS = (2**63 - 1) / 1e9


def parse_duration(text: str) -> timedelta:
    """Parse a Go duration; raise ValueError naming the text when it is not one.

    Mirrors Go's ``time.ParseDuration``: an optional sign, then one or more number+unit
    parts; a bare ``0`` is zero. Surrounding blanks are forgiven (YAML strips them anyway).
    """
    cleaned = text.strip()
    sign, body = (-1.0, cleaned[1:]) if cleaned[:1] == "-" else (1.0, cleaned.removeprefix("+"))
    if body == "0":
        return timedelta(0)
    if not body:
        raise ValueError(f"{text!r} is not a duration: {HOW_TO_WRITE}")
    total = 0.0
    position = 0
    while position < len(body):
        match = _PART.match(body, position)
        if match is None or match.group(2) not in _UNIT_SECONDS:
            raise ValueError(f"{text!r} is not a duration: {HOW_TO_WRITE}")
        total += float(match.group(1)) * _UNIT_SECONDS[match.group(2)]
        position = match.end()
    if total > LONGEST_SECONDS:
        raise ValueError(
            f"{text!r} is longer than the longest duration Determined reads (2562047h, "
            "about 292 years): write a shorter one"
        )
    return timedelta(seconds=sign * total)


def format_duration(value: timedelta) -> str:
    """The shortest Go-style text for a whole number of seconds (``1h20m``, ``45s``)."""
    seconds = int(value.total_seconds())
    if seconds == 0:
        return "0s"
    sign = "-" if seconds < 0 else ""
    hours, rest = divmod(abs(seconds), 3600)
    minutes, seconds = divmod(rest, 60)
    text = ""
    if hours:
        text += f"{hours}h"
    if minutes:
        text += f"{minutes}m"
    if seconds:
        text += f"{seconds}s"
    return sign + text
