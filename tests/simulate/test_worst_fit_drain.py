"""Under the master's worst fit, the fleet still shrinks to what best fit keeps.

Worst fit (``fitting_methods.go``) puts each new task on the emptiest agent. After a
burst, a trickle of short 1-GPU tasks then lands on one idle agent after another, and
no agent is idle for its whole idle period: ten 8-GPU machines stay up for work that
one would hold. With ``drain_idle_agents``, the bridge drains the busy agents best fit
would leave to empty (``bridge.drain``), and the functions terminate each once its last
task ends.
"""

from __future__ import annotations

import pytest

from dynagent.simulate.boot import UNIFORM, BootModel
from dynagent.simulate.run import PolicyRun, RunOptions

from .builders import pool, run, trace
from .test_fast_path import _facts, random_trace

# Eighty 1-GPU tasks for an hour fill ten machines (registered at 180 s, so demand falls
# at 3,780 s); then a 1-GPU task of 2 minutes every 30 s, for two hours.
BURST_THEN_TRICKLE = trace(*[(0, 3600, 1)] * 80, *[(3600 + 30 * k, 120, 1) for k in range(240)])
FALL = 180 + 3600
IDLE = 300


def fleet_slots_at(result: PolicyRun, second: int) -> int:
    return [fleet for time, _, fleet, _ in result.series.samples if time <= second][-1]


def replay(policy: str, drain: bool) -> PolicyRun:
    shape = pool(max_instances=10, drain_idle_agents=drain)
    return run(
        BURST_THEN_TRICKLE, "dynagent", shape, RunOptions(boot=UNIFORM, fitting_policy=policy)
    )


def test_within_one_idle_period_of_the_fall_worst_fit_keeps_what_best_fit_keeps() -> None:
    best, worst = replay("best", drain=True), replay("worst", drain=True)
    # A heartbeat and a sweep past the idle period, and the bridge's retirement of the
    # drained agents (RETIRE_AFTER, at the heartbeat after it).
    settled = FALL + IDLE + 60 + 60

    # The drains consolidate under best fit too: one machine holds the trickle, where
    # without them a second stays up (see below).
    assert fleet_slots_at(best, settled) == 8
    assert fleet_slots_at(worst, settled) <= fleet_slots_at(best, settled)
    assert fleet_slots_at(worst, FALL + 2 * 3600) == fleet_slots_at(best, FALL + 2 * 3600) == 8
    assert worst.billed_instance_seconds <= best.billed_instance_seconds
    assert max(worst.waits) == max(best.waits) == 180  # the burst's boot, no more


def test_without_the_drains_worst_fit_keeps_every_machine_of_the_burst() -> None:
    worst = replay("worst", drain=False)
    assert fleet_slots_at(worst, FALL + IDLE + 60) == 80
    assert fleet_slots_at(worst, FALL + 3600) == 80
    # Best fit needs no drains: the trickle fills one machine, the rest go idle.
    assert fleet_slots_at(replay("best", drain=False), FALL + IDLE + 60) == 16


@pytest.mark.parametrize("policy", ["best", "worst"])
def test_the_fast_path_matches_the_exhaustive_run_with_the_bridge_draining(policy: str) -> None:
    shape = pool(max_instances=8, drain_idle_agents=True)
    jobs = random_trace(8, jobs=80)
    options = {"boot": BootModel(jitter=20, seed=2), "fitting_policy": policy}
    fast = run(jobs, "dynagent", shape, RunOptions(**options))
    slow = run(jobs, "dynagent", shape, RunOptions(exhaustive=True, **options))
    assert _facts(fast) == _facts(slow)
    assert fast.decisions < slow.decisions


# Three machines full of 1-GPU tasks ending over an hour, an 8-GPU task behind them, and
# a 1-GPU task of 10 minutes every 2 minutes: worst fit puts each on the emptiest agent.
GANG_AT_THE_CAP = trace(
    *[(0, 1800 + 150 * k, 1) for k in range(24)],
    (60, 3600, 8),
    *[(300 + 120 * k, 600, 1) for k in range(90)],
)


def test_at_max_instances_worst_fit_holds_the_emptiest_agent_for_the_waiting_gang() -> None:
    def gang_wait(policy: str, drain: bool) -> int:
        shape = pool(max_instances=3, drain_idle_agents=drain)
        options = RunOptions(boot=UNIFORM, fitting_policy=policy)
        return max(run(GANG_AT_THE_CAP, "dynagent", shape, options).waits)

    # Without a hold the trickle keeps every agent busy until it stops (3 h 8 m).
    assert gang_wait("worst", drain=False) == 11_280
    # Held, the agent nearest to empty takes no small task and the gang starts there,
    # close to when best fit (which fills that agent last) starts it.
    assert gang_wait("worst", drain=True) == 5_370
    assert gang_wait("best", drain=False) == gang_wait("best", drain=True) == 4_560
