"""launch_error_timeout and launch_error_retries keep Determined's meaning
(master/pkg/errors/errors.go StickyError): after N+1 refusals each within T of the
last, launches pause until T after the last refusal."""

from __future__ import annotations

from datetime import timedelta

from dynagent.core.plan import Launch, Plan
from dynagent.run.launch_errors import LaunchErrorMemory, StickyLaunchError
from tests.builders import NOW, pool

T = timedelta(minutes=10)


def test_a_zero_timeout_never_pauses() -> None:
    sticky = StickyLaunchError()
    for minute in range(5):
        sticky = sticky.after("VcpuLimitExceeded", NOW + timedelta(minutes=minute), timedelta(0))
    assert sticky.paused_until(NOW + timedelta(minutes=4), timedelta(0), 0) is None


def test_no_retries_pause_after_the_first_refusal_for_the_timeout() -> None:
    sticky = StickyLaunchError().after("VcpuLimitExceeded", NOW, T)
    assert sticky.paused_until(NOW + timedelta(minutes=9), T, 0) == NOW + T
    assert sticky.paused_until(NOW + T + timedelta(seconds=1), T, 0) is None


def test_retries_count_refusals_within_the_timeout_of_the_one_before() -> None:
    sticky = StickyLaunchError()
    for minute in (0, 4, 8):  # each within 10 minutes of the previous
        sticky = sticky.after("InsufficientInstanceCapacity", NOW + timedelta(minutes=minute), T)
    assert sticky.retries == 2
    assert sticky.paused_until(NOW + timedelta(minutes=9), T, 2) == NOW + timedelta(minutes=18)
    assert sticky.paused_until(NOW + timedelta(minutes=9), T, 3) is None
    # A refusal longer than the timeout after the last starts the count again.
    later = sticky.after("InsufficientInstanceCapacity", NOW + timedelta(minutes=30), T)
    assert later.retries == 0


def test_a_launch_that_succeeds_starts_the_count_again() -> None:
    sticky = StickyLaunchError().after("x", NOW, T).after("x", NOW + timedelta(minutes=1), T)
    assert sticky.retries == 1
    assert sticky.after(None, NOW + timedelta(minutes=2), T).retries == 0


def test_the_memory_holds_a_plans_launches_and_says_why() -> None:
    the_pool = pool(launch_error_timeout="10m", launch_error_retries=1)
    memory = LaunchErrorMemory()
    plan = Plan(pool="gpu", launch_key="gpu:7", launch_at=NOW, launches=(Launch("demand"),))
    memory.record(the_pool, "VcpuLimitExceeded: no", NOW)
    assert memory.hold(the_pool, plan, NOW) == (plan, None)  # one refusal: retries left
    memory.record(the_pool, "VcpuLimitExceeded: no", NOW + timedelta(minutes=1))
    held, until = memory.hold(the_pool, plan, NOW + timedelta(minutes=2))
    assert until == NOW + timedelta(minutes=11)
    assert held.launches == ()
    (note,) = held.waiting
    assert note.startswith("1 launches paused until")
    assert "2 launches refused within launch_error_timeout (10m)" in note
    assert memory.hold(the_pool, plan, NOW + timedelta(minutes=12)) == (plan, None)
    other = pool("other", launch_error_timeout="10m")  # each pool counts its own
    assert memory.hold(other, plan, NOW + timedelta(minutes=2)) == (plan, None)
