"""A quota against what a pool needs: one machine (else it fails) and max_instances of
them (else a warning: a launch may be refused later), for either cloud."""

from __future__ import annotations

from .findings import Finding, fail, ok, warn


def covers(
    check: str, what: str, limit: float, unit: str, machine: str, each: int, count: int, fix: str
) -> Finding:
    """``limit`` of ``unit`` (vCPUs, GPUs) against ``count`` machines of ``each``."""
    have, full = f"{limit:g} {unit}", count * each
    if limit < each:
        return fail(check, what, f"{have}, one {machine} needs {each}", fix)
    if limit < full:
        why = f"{have}: one {machine} ({each}) fits, max_instances {count} need {full}"
        return warn(check, what, why, fix)
    return ok(check, what, f"{have}, {count} x {machine} need {full}")
