"""``dynagent trace`` reading a busy master: one call per task and per experiment, one at
a time beside ``READERS`` at a time, side by side in one run.

The local master answers each call after a fixed delay, a master across a region (a
real one also spends its database's time on each). The day holds commands and
experiments' trials, each a task of its own, so the reads are the tasks' and the
experiments'; the allocations CSV and the agents are a few calls either way.
"""

from __future__ import annotations

import os
import time
from datetime import timedelta
from typing import Any

from dynagent.bridge.client import Credentials, MasterClient
from dynagent.bridge.trace import READERS, read_trace
from dynagent.testing.determined.master import DEFAULT_PASSWORD, LocalDetermined

TASKS = 200  # half commands, half trials of experiments of two trials each
ANSWER_DELAY = 0.02  # seconds the master takes to answer each call
TARGET_RATIO = 4.0  # the least one-at-a-time ÷ READERS-at-a-time may be


def _day(master: LocalDetermined) -> None:
    master.add_agent("gpu-1", slots=TASKS)
    for _ in range(TASKS // 4):
        first = master.launch("TRIAL", 1)
        second = master.create_trial(int(first.task_id.split(".")[0]))
        commands = [master.launch("COMMAND", 1) for _ in range(2)]
        master.schedule()
        master.advance(60)
        for task in (*commands, first, second):
            master.finish(task.task_id)


def run() -> dict[str, Any]:
    os.environ.pop("DET_MASTER", None)
    with LocalDetermined() as master:
        _day(master)
        until = master.now() + timedelta(seconds=1)
        since = until - timedelta(days=1)
        master.slow(ANSWER_DELAY)
        seconds = {}
        for readers in (1, READERS):
            client = MasterClient(master.url, Credentials("admin", DEFAULT_PASSWORD))
            start = time.perf_counter()
            traced = read_trace(client, since, until, readers)
            seconds[readers] = time.perf_counter() - start
            assert len(traced.jobs) == TASKS, len(traced.jobs)
            assert not traced.without_arrival and not traced.unread_experiments
        master.slow(0)
    ratio = seconds[1] / seconds[READERS]
    print(
        f"  {TASKS} tasks, {ANSWER_DELAY * 1000:.0f} ms an answer: one at a time "
        f"{seconds[1]:.2f} s, {READERS} at a time {seconds[READERS]:.2f} s "
        f"({ratio:.1f} times as fast)"
    )
    return {
        "tasks": TASKS,
        "answer_delay_s": ANSWER_DELAY,
        "readers": READERS,
        "one_at_a_time_s": round(seconds[1], 2),
        "readers_at_a_time_s": round(seconds[READERS], 2),
        "ratio": round(ratio, 2),
        "targets": {"ratio_target": TARGET_RATIO, "ratio_met": ratio >= TARGET_RATIO},
    }


if __name__ == "__main__":
    run()
