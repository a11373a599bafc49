"""An upgrade mid-trace: the pool moves to a new agent image, as on the day the master
moves to a new Determined version. dynagent replaces the agents of the old one (idle
ones at once, busy ones drained and gone when their task ends) and loses no work;
Determined's provisioner keeps them until they idle out.

Hand-worked, with every boot 180 s and an idle period of 5 minutes: machine A runs
job-1 from 180 to 7380; machine B runs job-2 from 180 to 780 and is idle from then.
"""

from __future__ import annotations

from dynagent.simulate.boot import UNIFORM
from dynagent.simulate.run import RunOptions

from .builders import pool, run, trace

# B was reaped idle at 1085 under both policies. job-3 arrives at 2000 while A runs.
JOBS = trace((0, 7200, 8), (0, 600, 8), (2000, 3600, 8), (9000, 600, 8))
UPGRADE = RunOptions(boot=UNIFORM, upgrade_at=1800)


def test_the_old_agents_go_once_their_work_ends_and_nothing_is_requeued() -> None:
    ours = run(JOBS, "dynagent", pool(), UPGRADE)
    theirs = run(JOBS, "determined", pool(), UPGRADE)
    # dynagent drains A at the upgrade: job-3 gets a machine of the new image (launched
    # at 2000, registered at 2180), and A goes when job-1 ends at 7380, not 5 minutes
    # later: 7380 - 1800.
    assert ours.upgraded_after == 7380 - 1800
    assert ours.requeued_since_upgrade == 0 and ours.requeued == 0
    # Determined's A idles out at 7380 + 300 and a tick: 5885.
    assert theirs.upgraded_after is not None and theirs.upgraded_after > ours.upgraded_after
    assert theirs.requeued_since_upgrade == 0
    # The wait of job-3 is one boot either way; the upgrade costs no extra launch.
    assert sorted(ours.waits) == sorted(theirs.waits)


def test_without_an_upgrade_nothing_is_reported_and_the_fast_path_matches() -> None:
    plain = run(JOBS, "dynagent", pool(), RunOptions(boot=UNIFORM))
    assert plain.upgraded_after is None and plain.requeued_since_upgrade is None
    slow = run(JOBS, "dynagent", pool(), RunOptions(boot=UNIFORM, upgrade_at=1800, exhaustive=True))
    fast = run(JOBS, "dynagent", pool(), UPGRADE)
    assert (fast.upgraded_after, fast.billed_instance_seconds, fast.waits) == (
        slow.upgraded_after,
        slow.billed_instance_seconds,
        slow.waits,
    )


def test_with_drift_off_dynagent_keeps_them_as_determined_does() -> None:
    off = run(JOBS, "dynagent", pool(drift=False), UPGRADE)
    assert off.upgraded_after is not None and off.upgraded_after > 7380 - 1800
