"""The bridge's arrivals: each task counted once, when a read first shows it; a restart
takes the tasks there at their registered time, not as a burst; the window is an hour;
the snapshot of a pool with ``warm_headroom_slots: auto`` reports them."""

from __future__ import annotations

from datetime import timedelta

from dynagent.bridge.arrivals import ArrivalLog
from dynagent.bridge.reading import TaskReading, read_pools
from dynagent.core.snapshot import ARRIVALS_WINDOW_SECONDS, Arrival
from tests.builders import NOW

from .test_reading import allocation


def test_a_task_arrives_once_when_first_seen_pending_or_placed() -> None:
    log = ArrivalLog()
    log.read([TaskReading("old.1", 1)], NOW)  # there before the bridge, registered unknown
    later = NOW + timedelta(seconds=5)
    log.read([TaskReading("old.1", 1), TaskReading("a.1", 1), TaskReading("b.1", 4)], later)
    end = later + timedelta(seconds=20)
    log.read([TaskReading("a.1", 1), TaskReading("b.1", 4)], end)
    assert sorted(log.arrivals(end), key=lambda a: a.slots) == [
        Arrival(20, 1, 1),
        Arrival(20, 4, 1),
    ]


def test_a_restart_takes_the_tasks_there_at_their_registered_time() -> None:
    log = ArrivalLog()
    log.read(
        [
            TaskReading("a.1", 1, NOW - timedelta(minutes=10)),
            TaskReading("b.1", 1, NOW - timedelta(hours=3)),  # beyond the window
        ],
        NOW,
    )
    assert log.arrivals(NOW) == (Arrival(600, 1, 1),)


def test_arrivals_leave_the_window_after_an_hour() -> None:
    log = ArrivalLog()
    log.read([], NOW)
    log.read([TaskReading("a.1", 2)], NOW)
    hour = NOW + timedelta(seconds=ARRIVALS_WINDOW_SECONDS)
    log.read([TaskReading("a.1", 2)], hour)
    assert log.arrivals(hour) == (Arrival(ARRIVALS_WINDOW_SECONDS, 2, 1),)
    log.read([], hour + timedelta(seconds=1))
    assert log.arrivals(hour + timedelta(seconds=1)) == ()


def test_the_reading_lists_every_task_of_the_pool_with_its_registered_time() -> None:
    placed = allocation("1.1", 4, on=("agent-1",)) | {"registeredTime": "2024-05-01T12:00:00.5Z"}
    pending = allocation("2.1", 1)
    (pool,) = read_pools([], [{"name": "a100"}], [placed, pending], {}).values()
    assert [(t.id, t.slots) for t in pool.tasks] == [("1.1", 4), ("2.1", 1)]
    assert pool.tasks[0].registered == NOW.replace(second=0, microsecond=500000)
    assert pool.tasks[1].registered is None
