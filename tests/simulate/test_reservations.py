"""Reservations in the simulator: a reservation's places are used before anything is
bought, its window is billed whole whether used or not, and Determined's provisioner,
which knows nothing of it, pays twice. Worked by hand on a small trace, then on
cluster05 (the trace a clone carries) beside the same pool without the reservation."""

from __future__ import annotations

from pathlib import Path

import pytest

from dynagent.simulate.boot import UNIFORM
from dynagent.simulate.reservations import SimReservation, parse_reservation
from dynagent.simulate.run import RunOptions
from dynagent.simulate.trace import load_trace

from .builders import SETTINGS, pool, replay, run, trace

P4D = 32.7726  # the built-in on-demand price of a p4d.24xlarge, dollars an hour
CLUSTER05 = Path(__file__).resolve().parents[2] / "bench" / "traces" / "itp" / "cluster05.csv"


def reserved(*reservations: SimReservation) -> RunOptions:
    return RunOptions(boot=UNIFORM, reservations=reservations)


def test_the_first_task_goes_into_the_reservation_and_the_second_is_bought_beside_it() -> None:
    # Two 8-GPU tasks at once: one machine reserved for the whole trace (0 .. 600 s).
    jobs = trace((0, 600, 8), (0, 600, 8))
    ours = run(jobs, "dynagent", pool(), reserved(SimReservation("p4d.24xlarge", 1)))

    assert ours.waits == [180, 180]
    assert ours.on_demand_beside_free == 0
    # Over the whole trace: from its first arrival to its last end (0 .. 600 s), and the
    # reserved machine held its place all that time.
    assert ours.reserved_hours == pytest.approx(600 / 3600)
    assert ours.reserved_used_hours == pytest.approx(600 / 3600)
    window = 600 * P4D / 3600
    assert ours.reserved_dollars == pytest.approx(window)
    # Both ran their task 180 .. 780 and were reaped at the first read after 5m idle, at
    # 1085: the bought one billed all of it, the reserved one only past the window's end.
    bought, reserved_past_end = 1085 * P4D / 3600, (1085 - 600) * P4D / 3600
    assert ours.billed_dollars == pytest.approx(window + bought + reserved_past_end, rel=1e-6)

    theirs = run(jobs, "determined", pool(), reserved(SimReservation("p4d.24xlarge", 1)))
    assert theirs.reserved_used_hours == 0
    assert theirs.on_demand_beside_free == 2
    assert theirs.billed_dollars > ours.billed_dollars


def test_a_reservation_starting_later_is_used_from_its_start() -> None:
    jobs = trace((0, 600, 8), (1200, 600, 8))
    later = SimReservation("p4d.24xlarge", 1, start=900, end=5000)
    ours = run(jobs, "dynagent", pool(), reserved(later))
    # The first task bought a machine (the reservation had not started), reaped idle at
    # 1080; the second went into the reservation, kept there until its end.
    assert ours.launches == 2
    assert ours.on_demand_beside_free == 0
    assert ours.reserved_used_hours == pytest.approx((5000 - 1200) / 3600)
    assert ours.reserved_hours == pytest.approx((5000 - 900) / 3600)
    # The reserved machine, idle long before, goes at the reservation's end (within a
    # heartbeat): billed 0 .. 1080 and 1200 .. 5000, and hardly more.
    billed = ours.billed_instance_seconds - 1080 - (5000 - 1200)
    assert 0 <= billed <= 30


def test_cluster05_on_a_p4d_pool_with_ten_reserved_beside_the_same_pool_without() -> None:
    jobs = load_trace(CLUSTER05)
    # As an admin writes it: max_instances, the rest Determined's defaults.
    a100 = pool(max_instances=40, max_idle_agent_period="5m")
    options = RunOptions(reservations=(parse_reservation("p4d.24xlarge=10"),))
    with_it = replay(jobs, a100, SETTINGS, options=options)
    without = replay(jobs, a100, SETTINGS, options=RunOptions())

    ours, theirs = with_it.column("dynagent"), with_it.column("determined")
    plain = without.column("dynagent")
    # Reserved hours are never left idle while on-demand machines run the same work.
    assert ours.on_demand_beside_free == 0
    assert theirs.on_demand_beside_free and theirs.on_demand_beside_free > 100
    assert ours.reserved_hours and ours.reserved_used_hours is not None
    assert ours.reserved_used_hours > 0.98 * ours.reserved_hours
    assert theirs.reserved_used_hours == 0
    # The same window billed to both; dynagent buys little beside it, Determined all.
    assert ours.reserved_cost == pytest.approx(theirs.reserved_cost)
    assert ours.cost < theirs.cost
    assert ours.cost - (ours.reserved_cost or 0) < plain.cost
    # Reserved machines kept up start more tasks at once than the pool without.
    assert ours.wait_p95 is not None and plain.wait_p95 is not None
    assert ours.wait_p95 <= plain.wait_p95
    assert ours.never_scheduled == plain.never_scheduled == 0
