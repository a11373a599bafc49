"""What the demo needs from a local cloud: the same story plays on AWS and on GCP."""

from __future__ import annotations

import io
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from dynagent.core.config import Pool
from dynagent.core.snapshot import Snapshot


@dataclass(frozen=True)
class FleetRow:
    """One instance as the cloud console shows it."""

    id: str
    state: str
    alive: bool
    launch_key: str = "-"
    registered: str = "-"
    idle_since: str = "-"


class Rig(Protocol):
    """A local cloud with the real queue, functions and instance API behind it."""

    description: str
    pool: Pool

    def publish(self, snapshot: Snapshot) -> None:
        """Send a snapshot the way a master does (the real publisher)."""
        ...

    def publish_corrupt(self, body: bytes) -> None: ...

    def deliver(self) -> None:
        """Hand everything queued to the reconcile function, as the cloud's trigger does."""
        ...

    def sweep(self) -> None: ...

    def fleet(self) -> list[FleetRow]:
        """Every instance the pool ever had, terminated ones included."""
        ...

    def set_launch_time(self, instance_id: str, when: datetime) -> None:
        """Move the fake cloud's launch time to the demo's virtual clock."""
        ...

    def dead_letters(self) -> list[str]:
        """The reasons of the messages set aside."""
        ...


class Discard(io.StringIO):
    """A stream that keeps nothing: the demo prints its timeline, not the functions'
    metric lines, which would grow with every pass of the day."""

    def write(self, text: str) -> int:
        return len(text)
