"""``launch_error_timeout`` and ``launch_error_retries``: launches pause after repeated
refusals, as Determined's provisioner pauses them.

Determined keeps one sticky error per pool (``master/pkg/errors/errors.go``
``StickyError``, used by ``provisioner.go`` ``launch``): a launch result is recorded
(``setError``): a success, or a refusal later than ``timeout`` after the previous one,
starts the count again; a refusal within it counts one more retry. While the count has
reached ``retries`` and the last refusal is younger than ``timeout``, no launch is
tried. A ``timeout`` of 0 (the default) never pauses.

Like Determined's, which a master restart forgets, the memory is the warm function's:
a cold start begins with a clean count (its status summary still says until when the
last pause held).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

from dynagent.core.config import Pool
from dynagent.core.durations import format_duration
from dynagent.core.plan import Plan


@dataclass(frozen=True)
class StickyLaunchError:
    """The last launch result of one pool, as Determined's ``StickyError`` keeps it."""

    error: str | None = None
    at: datetime | None = None
    retries: int = 0

    def expired(self, now: datetime, timeout: timedelta) -> bool:
        return timeout <= timedelta(0) or self.at is None or now > self.at + timeout

    def after(self, error: str | None, now: datetime, timeout: timedelta) -> StickyLaunchError:
        """This record once a launch ended with ``error`` (None: it succeeded)."""
        if error is None or self.expired(now, timeout):
            retries = 0
        elif self.error is not None:
            retries = self.retries + 1
        else:
            retries = self.retries
        return StickyLaunchError(error, now, retries)

    def paused_until(self, now: datetime, timeout: timedelta, retries: int) -> datetime | None:
        """When launches may be tried again, or None if they may be now."""
        if self.error is None or self.retries < retries or self.expired(now, timeout):
            return None
        assert self.at is not None  # an error is always recorded with its time
        return self.at + timeout


@dataclass
class LaunchErrorMemory:
    """Each pool's sticky launch error, kept by a warm function across its passes."""

    pools: dict[str, StickyLaunchError] = field(default_factory=dict)

    def paused_until(self, pool: Pool, now: datetime) -> datetime | None:
        provider = pool.provider
        sticky = self.pools.get(pool.name, StickyLaunchError())
        return sticky.paused_until(
            now, provider.launch_error_timeout, provider.launch_error_retries
        )

    def hold(self, pool: Pool, plan: Plan, now: datetime) -> tuple[Plan, datetime | None]:
        """The plan without its launches while they are paused, and until when."""
        until = self.paused_until(pool, now) if plan.launches else None
        if until is None:
            return plan, None
        sticky = self.pools[pool.name]
        note = (
            f"{len(plan.launches)} launches paused until {until.isoformat()}: "
            f"{sticky.retries + 1} launches refused within launch_error_timeout "
            f"({format_duration(pool.provider.launch_error_timeout)}), the last: {sticky.error}"
        )
        return replace(plan, launches=(), waiting=(*plan.waiting, note)), until

    def record(self, pool: Pool, error: str | None, now: datetime) -> None:
        sticky = self.pools.get(pool.name, StickyLaunchError())
        self.pools[pool.name] = sticky.after(error, now, pool.provider.launch_error_timeout)
