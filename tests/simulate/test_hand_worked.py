"""Small traces whose right answers are worked out by hand, for both policies.

The pool: 8-GPU instances, at most 4, idle period 5m. The cloud: an instance shows
running 60 s after launch, its agent registers after 180 s. The bridge reads the master
every 5 s and dynagent reconciles each snapshot at once; an agent idle longer than 5m is
reaped, by the snapshot the bridge publishes at its first read after the idle period it
published runs out. Determined ticks every 5 s, on the same grid: an agent is idle from
the first tick that sees it so, and reaped at the first tick strictly after that + 5m.
Where the two decide alike, they bill alike.
"""

from __future__ import annotations

import dataclasses

from dynagent.simulate.boot import BootModel
from dynagent.simulate.run import RunOptions
from dynagent.simulate.trace import Job, Trace

from .builders import pool, replay_both, run, trace


def test_one_job() -> None:
    jobs = trace((0, 3600, 8))
    # dynagent: launched at 0, agent at 180, the task runs 180..3780; idle from 3780, 5m
    # later at 4080, terminated at the bridge's next read, 4085: billed 0..4085.
    ours = run(jobs, "dynagent")
    assert (ours.billed_instance_seconds, ours.waits) == (4085, [180])
    assert (ours.launches, ours.terminations, ours.unused_launches) == (1, 1, 0)
    # Its 8 slots: 180 s booting, 3600 s running the task, 305 s idle.
    usage = ours.usage
    assert (usage.booting, usage.busy, usage.idle, usage.free) == (8 * 180, 8 * 3600, 8 * 305, 0)
    # Determined: the tick at 3780 sees it idle; the first tick after 4080 is 4085.
    theirs = run(jobs, "determined")
    assert (theirs.billed_instance_seconds, theirs.waits) == (4085, [180])
    assert (theirs.launches, theirs.terminations) == (1, 1)


def test_an_idle_agent_goes_when_its_period_runs_out_not_at_the_next_heartbeat() -> None:
    # The task runs 180..1190 and ends off the 30 s heartbeat grid. The bridge published
    # the agent idle at 1190 and publishes again at its first read after those 5m run
    # out, 1495: reaped then, not by the heartbeat at 1500. Determined: idle from its
    # tick at 1190, reaped at the first tick after 1490, 1495.
    jobs = trace((0, 1010, 8))
    ours, theirs = run(jobs, "dynagent"), run(jobs, "determined")
    assert (ours.billed_instance_seconds, theirs.billed_instance_seconds) == (1495, 1495)
    assert ours.usage.idle == 8 * 305  # never at or before its idle period's end
    assert ours.waits == theirs.waits == [180]


def test_the_bridge_sees_a_change_at_its_next_read() -> None:
    # The task arrives at 7: both see it at 10 (the bridge's read, Determined's tick) and
    # launch; the agent registers at 190 and the task runs 190..793. The bridge reads the
    # agent idle at 795 and publishes at its first read after 5m have run out, at 1100:
    # reaped then. Determined: idle from its tick at 795, reaped at the first tick after
    # 1095, 1100.
    jobs = trace((7, 603, 8))
    ours, theirs = run(jobs, "dynagent"), run(jobs, "determined")
    assert ours.waits == theirs.waits == [183]
    assert (ours.billed_instance_seconds, theirs.billed_instance_seconds) == (1090, 1090)
    # The master's agent was idle from 793: 307 s, 2 s of them before the bridge saw it.
    assert ours.usage.idle == 8 * 307


def test_two_overlapping_jobs_share_one_instance() -> None:
    # 4 GPUs at 0 and 4 more at 60: the second is packed into the instance on its way.
    jobs = trace((0, 1000, 4), (60, 1000, 4))
    ours = run(jobs, "dynagent")
    # Both start when the agent registers at 180 and end at 1180; reaped at 1485.
    assert (ours.billed_instance_seconds, ours.waits, ours.launches) == (1485, [120, 180], 1)
    theirs = run(jobs, "determined")
    # ceil(8 / 8) = 1 wanted, 1 recently launched: nothing more. Reaped at 1485.
    assert (theirs.billed_instance_seconds, theirs.waits, theirs.launches) == (1485, [120, 180], 1)


def test_two_overlapping_jobs_that_need_two_instances() -> None:
    jobs = trace((0, 1000, 8), (60, 600, 4))
    ours = run(jobs, "dynagent")
    # i1: 0..1485 (task 180..1180, idle 5m and a read); i2: launched at 60 for the second
    # job, which runs 240..840; reaped at 1145: 1085 s. 1485 + 1085 = 2570.
    assert (ours.billed_instance_seconds, ours.waits, ours.launches) == (2570, [180, 180], 2)
    theirs = run(jobs, "determined")
    # ceil(12 / 8) = 2 wanted at 60, one on its way: one more. 1485 + (1145 - 60) = 2570.
    assert (theirs.billed_instance_seconds, theirs.waits, theirs.launches) == (2570, [180, 180], 2)
    # i2's other 4 slots sat free beside the 4-GPU job for its 600 s.
    assert theirs.usage.free == 4 * 600
    assert theirs.usage.total == 8 * theirs.billed_instance_seconds


def test_a_gang_takes_whole_instances() -> None:
    jobs = trace((0, 600, 16))
    ours = run(jobs, "dynagent")
    # Two instances at 0, both agents at 180, the job 180..780, both reaped at 1085.
    assert (ours.billed_instance_seconds, ours.waits, ours.launches) == (2 * 1085, [180], 2)
    theirs = run(jobs, "determined")
    assert (theirs.billed_instance_seconds, theirs.waits, theirs.launches) == (2 * 1085, [180], 2)


def test_a_job_larger_than_the_pool() -> None:
    # Two instances at most: 32 GPUs needs four, and 12 is not a multiple of 8.
    small = pool(max_instances=2)
    jobs = trace((0, 600, 8), (0, 600, 32), (0, 600, 12))
    ours = run(jobs, "dynagent", small)
    # dynagent reports both as unschedulable and launches only for the one that fits.
    assert (ours.billed_instance_seconds, ours.waits, ours.launches) == (1085, [180], 1)
    assert (ours.never_scheduled, ours.larger_than_pool) == (2, 2)
    theirs = run(jobs, "determined", small)
    # Determined counts the 32-GPU job in its demand (it only ignores non-multiples), so
    # it keeps launching agents that can never run it, reaping them idle, until the run
    # gives up six hours after the last task ended.
    assert (theirs.never_scheduled, theirs.larger_than_pool) == (2, 2)
    assert theirs.launches > 20
    assert theirs.billed_instance_seconds > 20 * ours.billed_instance_seconds


def test_a_burst_after_a_long_idle_gap() -> None:
    big = pool(max_instances=16)
    jobs = trace((0, 600, 1), *[(10_000, 600, 8)] * 10)
    ours = run(jobs, "dynagent", big)
    # The first instance: 0..1085. Nothing is billed in the gap. The burst: ten instances
    # launched at 10000, tasks 10180..10780, reaped at 11085.
    assert ours.billed_instance_seconds == 1085 + 10 * 1085
    assert (ours.waits, ours.launches) == ([180] * 11, 11)
    gap = [s for s in ours.series.samples if 1085 <= s[0] < 10_000]
    assert gap and all(fleet == 0 for _, _, fleet, _ in gap)
    theirs = run(jobs, "determined", big)
    assert theirs.billed_instance_seconds == 1085 + 10 * 1085
    assert (theirs.waits, theirs.launches) == ([180] * 11, 11)


def test_slower_boots_add_to_waits_and_bills() -> None:
    jobs = trace((0, 3600, 8))
    slow = BootModel(running_after=90, registered_after=300, jitter=0, per_gpu=0)
    ours = run(jobs, "dynagent", options=RunOptions(boot=slow))
    # Agent at 300, task 300..3900, idle until the first read after 4200.
    assert (ours.billed_instance_seconds, ours.waits) == (4205, [300])


def test_the_report_sets_both_beside_the_limit() -> None:
    result = replay_both(trace((0, 3600, 8)))
    limit = result.column("limit")
    assert (limit.gpu_hours, limit.instance_hours) == (8.0, 1.0)
    ours = result.column("dynagent")
    assert ours.gpu_hours == 8 * 4085 / 3600
    assert ours.vs_limit == 4085 / 3600
    assert (ours.wait_p50, ours.wait_p95, ours.wait_max) == (180, 180, 180)
    assert result.column("determined").instance_hours == 4085 / 3600


def test_a_zero_slot_task_gets_an_agent_of_its_own() -> None:
    # Nothing runs: both launch one machine for it (Determined: ceil(1 / 100 aux) = 1).
    jobs = trace((0, 600, 0))
    ours, theirs = run(jobs, "dynagent"), run(jobs, "determined")
    assert (ours.billed_instance_seconds, ours.waits, ours.launches) == (1085, [180], 1)
    assert (theirs.billed_instance_seconds, theirs.waits, theirs.launches) == (1085, [180], 1)
    # It runs on the agent without a slot: billed, never busy, and the agent not idle.
    assert (ours.usage.busy, ours.usage.idle, ours.usage.free) == (0, 8 * 305, 8 * 600)


def test_a_lower_priority_task_that_fits_waits_for_a_higher_levels_boot() -> None:
    # a: 4 GPUs on the first machine from 180. At 1000, b (16 GPUs, priority 10) needs two
    # more machines; c (2 GPUs, priority 50) fits beside a but starts only with b, at 1180.
    jobs = Trace(
        "priorities",
        (Job("a", 0, 3600, 4), Job("b", 1000, 600, 16, priority=10), Job("c", 1000, 600, 2, 50)),
    )
    assert run(jobs, "dynagent").waits == [180, 180, 180]
    # At one priority c starts at once beside a.
    alike = Trace("alike", tuple(dataclasses.replace(job, priority=42) for job in jobs.jobs))
    assert run(alike, "dynagent").waits == [0, 180, 180]


def test_the_time_demand_waits_at_the_cap() -> None:
    # One instance at most. At 60 the second task joins the first, pending: the plan has
    # demand waiting at max_instances until the first ends at 3780 and the second starts.
    jobs = trace((0, 3600, 8), (60, 600, 8))
    ours = run(jobs, "dynagent", pool(max_instances=1))
    assert (ours.pending_at_max_seconds, ours.waits) == (3780 - 60, [180, 3720])
    assert run(jobs, "dynagent", pool(max_instances=2)).pending_at_max_seconds == 0
    assert run(jobs, "determined", pool(max_instances=1)).pending_at_max_seconds is None
    result = replay_both(jobs, pool(max_instances=1))
    assert [result.column(n).pending_at_max_seconds for n in ("dynagent", "limit")] == [3720, None]
