"""How long the warm pool keeps a stopped machine with ``max_stopped: auto``: until its
disk has billed what one start of it saves over a launch, at most max_stopped_period.

A start instead of a launch saves the boot's extra minutes (the image pull) at the
machine's price: $0.23 for a p3.2xlarge with a 6-minute boot and a 90 s start, $1.84
for a p3.16xlarge; its stopped disk bills $0.022 an hour. Whether a start will come is
not known when the machine is stopped; keeping it for the break-even time and no longer
(ski rental's rule) bills at most twice what knowing would have: a machine started
within that time saved more than its disk cost, one never started cost at most one
start's saving. So a small machine goes within hours, a large one within days, and no
count is needed: each machine's own stop time and price decide. Nothing is kept in
between passes but the machine's ``stopped-at`` mark.
"""

from __future__ import annotations

from datetime import timedelta

from dynagent.core.config import ProviderConfig
from dynagent.core.decide.expected_work import BOOT_SECONDS, START_SECONDS


def kept_for(provider: ProviderConfig, price_per_hour: float) -> timedelta:
    """How long a stopped machine of ``price_per_hour`` is kept: ``max_stopped_period``,
    or with ``auto`` the break-even time when that is shorter."""
    warm = provider.warm_pool
    disk = provider.stopped_disk_per_hour
    if not warm.auto or disk <= 0:
        return warm.max_stopped_period
    saved = price_per_hour * (BOOT_SECONDS - START_SECONDS) / 3600
    return min(warm.max_stopped_period, timedelta(hours=saved / disk))
