"""Which moto accounts the fixes act on, and the knobs each account's fixes read.

An account is owned while its LocalAws runs; each wrapper installed over moto
(moto_patches.py) looks the account of a call up here and leaves any other account to
moto. ``STATE_LOCK`` serialises the fixes' read-modify-write of fake-cloud state across
the server's threads.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from dynagent.testing.aws.account import AccountFacts
from dynagent.testing.aws.fleet import Scarcity
from dynagent.testing.aws.wire import ApiCall, WireFault


@dataclass
class Knobs:
    """Per-account settings the fixes read; tests turn them, reset() restores them."""

    fulfil_spot_requests: bool = True
    hide_new_instances_for: int = 0  # DescribeInstances calls a new instance is missing from
    scarcity: Scarcity = field(default_factory=Scarcity)  # capacity, injected errors, prices
    wire_faults: list[WireFault] = field(default_factory=list)  # errors and late answers
    # Faults served so far, by kind ("error", "late", "hidden"); see LocalAws.faults_served.
    served: dict[str, int] = field(default_factory=dict)
    # Service quotas, spot placement scores, types withheld from zones (account.py).
    facts: AccountFacts = field(default_factory=AccountFacts)
    # Capacity reservations by id (capacity_reservations.py).
    reservations: dict[str, Any] = field(default_factory=dict)

    def count(self, kind: str, n: int = 1) -> None:
        with STATE_LOCK:
            self.served[kind] = self.served.get(kind, 0) + n

    def wire_fault(self, call: ApiCall) -> WireFault | None:
        with STATE_LOCK:
            for fault in self.wire_faults:
                if fault.strikes(call):
                    return fault
        return None


OWNED: dict[str, Knobs] = {}  # account id -> knobs, for every running LocalAws
OWNED_LOCK = threading.Lock()
# Serialises the fixes' read-modify-write of fake-cloud state across server threads
# (above all the client-token check-then-launch, which must not launch twice).
STATE_LOCK = threading.RLock()


def knobs_for(account_id: str) -> Knobs | None:
    return OWNED.get(account_id)


def facts_for(account_id: str) -> AccountFacts | None:
    knobs = OWNED.get(account_id)
    return None if knobs is None else knobs.facts


def owned(account_id: str) -> bool:
    return account_id in OWNED


def naive_utc(when: datetime) -> datetime:
    """moto keeps naive UTC datetimes; accept only aware ones so a local time never slips in."""
    if when.tzinfo is None:
        raise ValueError(f"use a timezone-aware datetime, got {when!r}")
    return when.astimezone(UTC).replace(tzinfo=None)
