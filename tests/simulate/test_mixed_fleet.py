"""Pools with several machine types: packing onto the cheapest shapes, dollars per
type, falling back when the cloud has no capacity, and the baseline on instance_type.

The pool (``mixed_pool``): p3.2xlarge (1 GPU, $3.06/h), p3.8xlarge (4, $12.24/h) and
p3.16xlarge (8, $24.48/h), at most 8 machines, idle period 5m; boots of 60 s to
running and 180 s to a registered agent, as in the other hand-worked tests.
"""

from __future__ import annotations

import pytest

from dynagent.simulate.capacity import Outage, parse_outage
from dynagent.simulate.run import RunOptions

from .builders import mixed_pool, replay_both, run, trace

PRICES = {"p3.2xlarge": 3.06, "p3.8xlarge": 12.24, "p3.16xlarge": 24.48}


def test_each_task_gets_the_cheapest_machine_that_holds_it() -> None:
    jobs = trace((0, 600, 1), (0, 600, 2), (0, 600, 2), (0, 600, 16))
    ours = run(jobs, "dynagent", mixed_pool())
    # One pass at 0: the 16-GPU gang takes two p3.16xlarge; the 1 + 2 + 2 GPUs left cost
    # $15.30 an hour as a p3.2xlarge and a p3.8xlarge (a p3.16xlarge would be $24.48).
    assert ours.launches_by_type == {"p3.16xlarge": 2, "p3.2xlarge": 1, "p3.8xlarge": 1}
    # The agents register at 180: the 1-GPU task best-fits the p3.2xlarge, the two 2-GPU
    # tasks share the p3.8xlarge, the gang takes both p3.16xlarge. All end at 780 and
    # are reaped at the bridge's first read after their 5m idle run out, at 1085: each
    # machine billed 1085 s.
    assert ours.waits == [180] * 4
    assert ours.billed_instance_seconds == 4 * 1085
    assert ours.billed_slot_seconds == (1 + 4 + 8 + 8) * 1085
    assert ours.billed_dollars == pytest.approx(1085 / 3600 * (3.06 + 12.24 + 2 * 24.48))
    usage = ours.usage
    assert (usage.booting, usage.busy, usage.idle, usage.free) == (
        21 * 180,
        21 * 600,
        21 * 305,
        0,
    )


def test_the_baseline_runs_determined_on_the_pools_instance_type() -> None:
    jobs = trace((0, 600, 1), (0, 600, 2), (0, 600, 2), (0, 600, 16))
    theirs = run(jobs, "determined", mixed_pool())
    # ceil(21 / 8) = 3 p3.16xlarge. The small tasks best-fit one agent, the gang the other
    # two; all idle from the tick at 780, reaped at the first tick after 1080.
    assert theirs.launches_by_type == {"p3.16xlarge": 3}
    assert theirs.billed_slot_seconds == 3 * 8 * 1085
    assert theirs.billed_dollars == pytest.approx(3 * 1085 / 3600 * 24.48)
    assert theirs.usage.free == 3 * 600  # 5 of the first agent's 8 GPUs were busy


def test_the_report_prices_each_policy_and_the_limit() -> None:
    result = replay_both(trace((0, 600, 1), (0, 600, 16)), mixed_pool())
    assert result.prices.by_type == PRICES
    assert (result.prices.baseline_type, result.prices.baseline) == ("p3.16xlarge", 24.48)
    ours, theirs, limit = (result.column(n) for n in ("dynagent", "determined", "limit"))
    # dynagent: a p3.2xlarge and two p3.16xlarge, 1085 s each; Determined three
    # p3.16xlarge (ceil(17 / 8)), 1085 s each. The limit pays $3.06 per busy GPU-hour.
    assert ours.cost == pytest.approx(1085 / 3600 * (3.06 + 2 * 24.48))
    assert theirs.cost == pytest.approx(3 * 1085 / 3600 * 24.48)
    assert limit.cost == pytest.approx(17 * 600 / 3600 * 3.06)
    assert ours.gpu_hours == pytest.approx(17 * 1085 / 3600)


def test_a_launch_with_no_capacity_falls_back_in_the_same_pass() -> None:
    # No p3.2xlarge at all in the first hour: the 1-GPU task's launch moves on to the
    # next offering, a p3.8xlarge, in the very pass that decided it.
    options = RunOptions(outages=(Outage("p3.2xlarge", 0, 3600),))
    ours = run(trace((0, 600, 1)), "dynagent", mixed_pool(), options)
    assert ours.launches_by_type == {"p3.8xlarge": 1}
    assert ours.refusals == 1
    # Running after one boot, with at most one reconcile (a heartbeat) more.
    assert ours.waits[0] <= 360 + 30


def test_a_refused_type_is_left_out_while_remembered_and_chosen_again_after() -> None:
    # No p3.2xlarge for the first minute; the cloud's memory keeps it out until 300.
    options = RunOptions(outages=(Outage("p3.2xlarge", 0, 60),))
    jobs = trace((0, 3600, 1), *[(200, 3600, 1)] * 4, *[(400, 3600, 1)] * 4)
    ours = run(jobs, "dynagent", mixed_pool(), options)
    # 0: the first task is refused its p3.2xlarge and gets a p3.8xlarge, which registers
    # at 180. 200: three of four tasks fit beside it; the fourth would be cheapest on a
    # p3.2xlarge, and the window is over, but the type is remembered as out: it gets a
    # p3.8xlarge, without asking the cloud again. 400: that one holds three of the next
    # four; the memory has expired, so the fourth gets a p3.2xlarge.
    assert ours.launches_by_type == {"p3.8xlarge": 2, "p3.2xlarge": 1}
    assert ours.refusals == 1


def test_a_type_still_out_when_the_memory_expires_is_refused_again() -> None:
    options = RunOptions(outages=(Outage("p3.2xlarge", 0, 3600),))
    jobs = trace((0, 3600, 1), *[(200, 3600, 1)] * 4, *[(400, 3600, 1)] * 4)
    ours = run(jobs, "dynagent", mixed_pool(), options)
    assert ours.launches_by_type == {"p3.8xlarge": 3}
    assert ours.refusals == 2  # at 0, and at 400 once the memory let it be tried


@pytest.mark.parametrize(
    ("text", "outage"),
    [
        ("p3.2xlarge=2h-5h", Outage("p3.2xlarge", 7200, 18000)),
        ("p3.8xlarge@subnet-1=0s-90m", Outage("p3.8xlarge", 0, 5400, "subnet-1")),
    ],
)
def test_outage_windows_parse(text: str, outage: Outage) -> None:
    assert parse_outage(text) == outage


@pytest.mark.parametrize("text", ["p3.2xlarge", "p3.2xlarge=2h", "p3.2xlarge=5h-2h", "=1h-2h"])
def test_a_malformed_outage_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="--unavailable"):
        parse_outage(text)
