"""How findings print: one line each, or JSON; and the exit code they make."""

from __future__ import annotations

import json
from collections.abc import Sequence

from .findings import Finding, Status

MARKS = {Status.OK: "✔", Status.WARN: "!", Status.FAIL: "✘", Status.UNKNOWN: "?"}


def line(finding: Finding) -> str:
    """``✘ what: why (fix: ...)``; an OK finding's why is a detail."""
    text = f"{MARKS[finding.status]} {finding.what}"
    if finding.why:
        text += f": {finding.why}"
    if finding.fix:
        text += f" (fix: {finding.fix})"
    return text


def as_json(findings: Sequence[Finding], skipped: Sequence[str] = ()) -> str:
    """The findings, and why a cloud was not checked at all (``skipped``)."""
    return json.dumps(
        {
            "failed": failed(findings),
            "skipped": list(skipped),
            "checks": [
                {
                    "check": f.check,
                    "status": f.status.value,
                    "what": f.what,
                    "why": f.why,
                    "fix": f.fix,
                }
                for f in findings
            ],
        },
        indent=2,
        ensure_ascii=False,
    )


def summary(findings: Sequence[Finding]) -> str:
    counts = {status: sum(f.status is status for f in findings) for status in Status}
    return (
        f"{counts[Status.OK]} passed, {counts[Status.FAIL]} failed, "
        f"{counts[Status.WARN]} warnings, {counts[Status.UNKNOWN]} not checked"
    )


def failed(findings: Sequence[Finding]) -> bool:
    return any(f.status is Status.FAIL for f in findings)


def exit_code(findings: Sequence[Finding]) -> int:
    """1 when any check failed; warnings and what could not be checked do not fail."""
    return 1 if failed(findings) else 0
