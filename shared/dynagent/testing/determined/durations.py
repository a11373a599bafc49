"""Go's durations, as ``time.ParseDuration`` reads them and ``Duration.String`` writes
them: master.yaml's periods, and a token's lifespan in the API."""

from __future__ import annotations

import re
from typing import Final

_DURATION = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)")
_NANOS: Final = {
    "ns": 1, "us": 10**3, "µs": 10**3, "ms": 10**6, "s": 10**9, "m": 60 * 10**9, "h": 3600 * 10**9,
}  # fmt: skip


def parse_go_duration(text: str) -> int:
    """A Go duration string (``720h``, ``1h30m``, ``500ms``) in nanoseconds."""
    sign = -1 if text.startswith("-") else 1
    body = text.lstrip("+-")
    parts = _DURATION.findall(body)
    if body == "0":
        return 0
    if not body or "".join(n + u for n, u in parts) != body:
        raise ValueError(f'time: invalid duration "{text}"')
    return sign * round(sum(float(n) * _NANOS[u] for n, u in parts))


def go_duration_string(nanos: int) -> str:
    """time.Duration.String: ``20m0s``, ``25s``, ``1h0m0s``, ``1.5s``, ``500ms``, ``0s``."""
    if nanos == 0:
        return "0s"
    sign, nanos = ("-" if nanos < 0 else ""), abs(nanos)
    if nanos < 10**9:
        for unit, size in (("ms", 10**6), ("µs", 10**3), ("ns", 1)):
            if nanos >= size:
                return sign + _trim(nanos / size) + unit
    hours, rest = divmod(nanos, 3600 * 10**9)
    minutes, rest = divmod(rest, 60 * 10**9)
    seconds = _trim(rest / 10**9) + "s"
    if hours:
        return f"{sign}{hours}h{minutes}m{seconds}"
    if minutes:
        return f"{sign}{minutes}m{seconds}"
    return sign + seconds


def _trim(value: float) -> str:
    return f"{value:.9f}".rstrip("0").rstrip(".")
