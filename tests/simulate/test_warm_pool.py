"""The warm pool in the simulator, worked by hand: an idle agent is stopped, not
terminated; the next task starts it and waits a warm start (90 s), not a boot (180 s);
the stopped machine bills its disk meanwhile; a start an outage covers is refused and a
new machine launched in the same pass. The pool: 8-GPU p4d.24xlarge, idle period 5m,
every boot alike (60 s running, 180 s registered), a start registering after 90 s."""

from __future__ import annotations

import pytest

from dynagent.core.prices import EBS_GP3_PER_GB_MONTH, HOURS_PER_MONTH
from dynagent.simulate.boot import UNIFORM
from dynagent.simulate.capacity import Outage
from dynagent.simulate.run import RunOptions
from dynagent.simulate.sweep import parse_sweep, sweep

from .builders import SETTINGS, pool, run, trace

WARM = pool(warm_pool={"max_stopped": 1})
# 200 GB of gp3 (the default root volume), per second.
DISK = 200 * EBS_GP3_PER_GB_MONTH / HOURS_PER_MONTH / 3600


def test_the_second_task_waits_a_start_not_a_boot_and_the_disk_is_billed() -> None:
    # The first task: launched at 0, registers at 180, runs to 780, idle 5m: stopped at
    # the next read, 1085. The second arrives at 2000: the machine starts, registers at
    # 2090.
    jobs = trace((0, 600, 8), (2000, 600, 8))
    ours = run(jobs, "dynagent", WARM)
    assert ours.waits == [90, 180]
    assert (ours.launches, ours.stops, ours.starts, ours.start_refusals) == (1, 2, 1, 0)
    # Running 0..1085 and 2000..2995 (idle from 2690, stopped at 2995); the disk bills
    # from 1085 to 2000 and from 2995 to the run's end.
    assert ours.billed_instance_seconds == 1085 + 995
    stopped = 2000 - 1085 + (ours.end - 2995)
    assert ours.disk_dollars == pytest.approx(stopped * DISK)
    assert ours.billed_dollars == pytest.approx(
        (1085 + 995) * 32.7726 / 3600 + stopped * DISK, rel=1e-9
    )
    # Without a warm pool: terminated at 1080, a second launch, a boot's wait.
    cold = run(jobs, "dynagent")
    assert cold.waits == [180, 180]
    assert (cold.launches, cold.stops, cold.disk_dollars) == (2, None, None)


def test_determined_keeps_no_warm_pool() -> None:
    theirs = run(trace((0, 600, 8), (2000, 600, 8)), "determined", WARM)
    assert theirs.waits == [180, 180] and theirs.stops is None


def test_a_start_an_outage_refuses_is_remembered_and_tried_again_after() -> None:
    # No capacity for the type from 1500 to 2200. At 2000 the start is refused, and its
    # cold launch too (the same offering): both are remembered 5 minutes, so the passes
    # meanwhile try nothing. The first snapshot after 2300 is the heartbeat at 2310: the
    # machine starts, and its agent registers at 2400.
    jobs = trace((0, 600, 8), (2000, 600, 8))
    options = RunOptions(boot=UNIFORM, outages=(Outage("p4d.24xlarge", 1500, 2200),))
    ours = run(jobs, "dynagent", WARM, options)
    assert (ours.start_refusals, ours.starts, ours.refusals, ours.launches) == (1, 1, 1, 1)
    assert ours.waits == [180, 400]


def test_a_warm_pool_is_swept_by_its_size() -> None:
    jobs = trace((0, 600, 8), (2000, 600, 8))
    points = sweep(jobs, pool(), SETTINGS, parse_sweep("warm_pool.max_stopped=0,1"), ("dynagent",),
                   RunOptions(boot=UNIFORM))  # fmt: skip
    waits = {value: result.column("dynagent").wait_p50 for value, result in points}
    assert waits == {"0": 180, "1": 90}
