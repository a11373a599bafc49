"""The fast path changes nothing: skipping the passes that cannot act gives the same run.

Exhaustive runs deliver every snapshot (on any change of the master and every 30 s
heartbeat), every 60 s sweep and every 5 s Determined tick; the fast path only those a
change or a running-out timer makes count. Both must bill, launch and wait alike.
Both run with the default boots: each machine type its own time, jittered.
"""

from __future__ import annotations

import random

import pytest

from dynagent.simulate.boot import UNIFORM, BootModel
from dynagent.simulate.capacity import Outage
from dynagent.simulate.run import POLICIES, PolicyRun, RunOptions
from dynagent.simulate.trace import Job, Trace

from .builders import mixed_pool, pool, run, trace


def _facts(result: PolicyRun) -> tuple[object, ...]:
    return (
        result.billed_instance_seconds,
        result.waits,
        result.launches,
        result.terminations,
        result.unused_launches,
        result.never_scheduled,
        result.end,
        result.series.samples,
        result.billed_slot_seconds,
        result.launches_by_type,
        result.refusals,
        result.pending_at_max_seconds,
    )


def random_trace(seed: int, jobs: int = 120, hours: int = 10) -> Trace:
    """Bursts of small and large jobs with quiet spells between them, repeatably."""
    rng = random.Random(seed)
    made = []
    for _ in range(jobs):
        arrival = rng.randrange(hours * 3600)
        gpus = rng.choice((1, 1, 1, 2, 4, 8, 8, 16))
        made.append((arrival, rng.randrange(600, 3 * 3600), gpus))
    return trace(*made)


def random_queue(seed: int, jobs: int = 120, hours: int = 10) -> Trace:
    """As ``random_trace``, with priority levels, zero-slot and single-agent tasks."""
    rng = random.Random(seed)
    made = []
    for n, (arrival, duration, gpus) in enumerate(_jobs(random_trace(seed, jobs, hours))):
        gpus = 0 if rng.random() < 0.15 else gpus
        priority = rng.choice((10, 42, 42, 70))
        made.append(Job(f"job-{n}", arrival, duration, gpus, priority, rng.random() < 0.3))
    return Trace("hand-made", tuple(made))


def _jobs(jobs: Trace) -> list[tuple[int, int, int]]:
    return [(job.arrival, job.duration, job.gpus) for job in jobs.jobs]


CASES = {
    "one job": trace((0, 3600, 8)),
    "overlap": trace((0, 1000, 8), (60, 600, 4), (75, 900, 2)),
    "burst after a gap": trace((0, 600, 1), *[(10_000, 600, 8)] * 6),
    "random 1": random_trace(1),
    "random 2": random_trace(2),
    "priorities and zero-slot 1": random_queue(3),
    "priorities and zero-slot 2": random_queue(4),
}


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("case", CASES)
def test_the_fast_path_matches_the_exhaustive_run(case: str, policy: str) -> None:
    jobs = CASES[case]
    fast = run(jobs, policy, pool(max_instances=8), RunOptions())
    slow = run(jobs, policy, pool(max_instances=8), RunOptions(exhaustive=True))
    assert _facts(fast) == _facts(slow)
    assert fast.decisions < slow.decisions


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize(("seed", "max_instances"), [(3, 3), (6, 4), (7, 8)])
def test_it_matches_when_priorities_hold_tasks_back_at_the_cap(
    policy: str, seed: int, max_instances: int
) -> None:
    # A task of a lower level waits, though it fits, while one of a higher level waits
    # for a machine: then a busy agent's free slots changing changes the decision.
    jobs = random_queue(seed)
    fast = run(jobs, policy, pool(max_instances=max_instances), RunOptions())
    slow = run(jobs, policy, pool(max_instances=max_instances), RunOptions(exhaustive=True))
    assert _facts(fast) == _facts(slow)
    if policy == "dynagent":
        assert fast.pending_at_max_seconds


@pytest.mark.parametrize("policy", POLICIES)
def test_it_matches_with_random_boot_times_and_min_instances(policy: str) -> None:
    options = {"boot": BootModel(jitter=45, seed=3)}
    jobs = random_trace(5, jobs=80)
    shape = pool(max_instances=6, min_instances=1, max_idle_agent_period="3m")
    fast = run(jobs, policy, shape, RunOptions(**options))
    slow = run(jobs, policy, shape, RunOptions(exhaustive=True, **options))
    assert _facts(fast) == _facts(slow)


def test_the_same_seed_repeats_a_run_and_another_differs() -> None:
    jobs = random_trace(7, jobs=60)

    def with_seed(seed: int) -> PolicyRun:
        return run(
            jobs,
            "dynagent",
            pool(max_instances=8),
            RunOptions(boot=BootModel(jitter=60, seed=seed)),
        )

    assert _facts(with_seed(1)) == _facts(with_seed(1))
    assert with_seed(1).waits != with_seed(2).waits


@pytest.mark.parametrize("policy", POLICIES)
def test_a_launch_frees_an_idle_agent_that_min_instances_held(policy: str) -> None:
    # The agent is idle from 780 and min_instances keeps it; the gang at 5000 launches
    # two more, and with them above the minimum the next snapshot may reap it.
    shape = pool(max_instances=4, min_instances=1, max_idle_agent_period="1m")
    jobs = trace((0, 600, 8), (5000, 600, 16))
    fast = run(jobs, policy, shape, RunOptions())
    slow = run(jobs, policy, shape, RunOptions(exhaustive=True))
    assert _facts(fast) == _facts(slow)
    assert fast.terminations >= 1


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("headroom", [0, 2, 5, "auto"])
@pytest.mark.parametrize("seed", [1, 4])
def test_it_matches_with_several_types_warm_headroom_and_an_outage(
    policy: str, headroom: int, seed: int
) -> None:
    # The two smaller types are out for hours, overlapping: refusals, fallbacks, the
    # capacity memory expiring while a type is still out, then after it is back.
    shape = mixed_pool(max_instances=12, warm_headroom_slots=headroom)
    outages = (Outage("p3.2xlarge", 0, 4 * 3600), Outage("p3.8xlarge", 2 * 3600, 6 * 3600))
    options = {"outages": outages, "boot": UNIFORM}  # the launches the outages refuse
    jobs = random_trace(seed)
    fast = run(jobs, policy, shape, RunOptions(**options))
    slow = run(jobs, policy, shape, RunOptions(exhaustive=True, **options))
    assert _facts(fast) == _facts(slow)
    if policy == "dynagent":
        assert fast.refusals > 0


@pytest.mark.parametrize("headroom", [3, 6])
def test_it_matches_when_headroom_is_kept_on_machines_of_several_slots(headroom: int) -> None:
    # The smallest machine has 4 GPUs: a task starting beside another on it uses up
    # headroom without the agent going from idle to busy.
    shape = mixed_pool(
        max_instances=12,
        warm_headroom_slots=headroom,
        offerings={"instance_types": ["p3.8xlarge", "p3.16xlarge"]},
    )
    jobs = random_trace(9)
    fast = run(jobs, "dynagent", shape, RunOptions())
    slow = run(jobs, "dynagent", shape, RunOptions(exhaustive=True))
    assert _facts(fast) == _facts(slow)


@pytest.mark.parametrize(
    ("seed", "max_stopped", "period"),
    [(2, 3, "2h"), (5, 3, "2h"), (1, "auto", "3h"), (6, "auto", "3h")],
)
def test_it_matches_with_sizes_from_arrivals_and_the_peak_of_agents(
    seed: int, max_stopped: int | str, period: str
) -> None:
    # The room kept changes as arrivals leave the hour's window, and with max_stopped
    # auto a stopped machine goes at its own break-even time, with no change of the
    # master: the fast path must wake for them as every heartbeat would.
    shape = mixed_pool(
        max_instances=12,
        warm_headroom_slots="auto",
        max_idle_agent_period="5m",
        warm_pool={"max_stopped": max_stopped, "max_stopped_period": period},
    )
    jobs = random_trace(seed)
    fast = run(jobs, "dynagent", shape, RunOptions())
    slow = run(jobs, "dynagent", shape, RunOptions(exhaustive=True))
    assert _facts(fast) == _facts(slow)
    assert fast.launches and fast.stops and fast.starts
