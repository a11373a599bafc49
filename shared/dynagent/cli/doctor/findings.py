"""A finding: one check's verdict on one thing, with why and what to do, as data."""

from __future__ import annotations

import enum
from dataclasses import dataclass


class Status(enum.Enum):
    OK = "ok"
    # Works for one machine, not for the pool at its largest: a launch may be refused later.
    WARN = "warn"
    FAIL = "fail"
    # Could not be checked (no permission to look, or the cloud has no answer).
    UNKNOWN = "unknown"


@dataclass(frozen=True)
class Finding:
    """What was checked, how it stands, why (when not OK, or a detail), and the fix."""

    check: str  # a stable name, such as "aws.image", for scripts reading --json
    what: str
    status: Status
    why: str = ""
    fix: str = ""


def ok(check: str, what: str, why: str = "") -> Finding:
    return Finding(check, what, Status.OK, why)


def fail(check: str, what: str, why: str, fix: str) -> Finding:
    return Finding(check, what, Status.FAIL, why, fix)


def warn(check: str, what: str, why: str, fix: str) -> Finding:
    return Finding(check, what, Status.WARN, why, fix)


def unknown(check: str, what: str, why: str, fix: str = "") -> Finding:
    return Finding(check, what, Status.UNKNOWN, why, fix)
