"""Durations as Determined writes them: ``30s``, ``5m``, ``1m30s``, ``1h``."""

from __future__ import annotations

import re
from datetime import timedelta

_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|h|m|s)")
_UNIT_SECONDS = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}


def parse_duration(text: str) -> timedelta:
    """Parse a Go-style duration; raise ValueError naming the text when it is not one."""
    cleaned = text.strip()
    if cleaned == "0":
        return timedelta(0)
    parts = _PART.findall(cleaned)
    if not parts or "".join(number + unit for number, unit in parts) != cleaned:
        raise ValueError(f"{text!r} is not a duration (write it like 30s, 5m, 1m30s or 1h)")
    return timedelta(seconds=sum(float(number) * _UNIT_SECONDS[unit] for number, unit in parts))


def format_duration(value: timedelta) -> str:
    """The shortest Go-style text for a whole number of seconds (``1h20m``, ``45s``)."""
    seconds = int(value.total_seconds())
    if seconds == 0:
        return "0s"
    hours, rest = divmod(seconds, 3600)
    minutes, seconds = divmod(rest, 60)
    text = ""
    if hours:
        text += f"{hours}h"
    if minutes:
        text += f"{minutes}m"
    if seconds:
        text += f"{seconds}s"
    return text
