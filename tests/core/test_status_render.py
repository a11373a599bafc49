"""`dynagent status` on a terminal and in a pipe: the same facts, styled only for a person."""

from __future__ import annotations

import re

from dynagent.report.status import pool_status, render
from tests.builders import NOW, agent_instance, ago, fleet, pool, starting

ANSI = re.compile(r"\x1b\[[0-9;]*m")


def status() -> dict[str, object]:
    cloud = fleet(
        agent_instance("i-busy"), agent_instance("i-idle", idle_since=ago(3)), starting("i-new")
    )
    return pool_status(pool(max_instances=3), cloud, None, NOW)


def test_a_pipe_gets_plain_aligned_text() -> None:
    lines = render(status())
    assert not any(ANSI.search(line) or "│" in line for line in lines)
    assert "3 of max 3 instances (at max)" in lines[0]


def test_an_empty_pool_says_so_in_words() -> None:
    line = render(pool_status(pool(max_instances=8), fleet(), None, NOW))[0]
    assert line.endswith(": no instances (max 8)")


def test_a_terminal_gets_boxes_and_colour_with_the_same_words() -> None:
    plain, styled = render(status()), render(status(), styled=True)
    table = [line for line in styled if "│" in line or "─" in line]
    # Every row of the box is as wide as the others, once the colour codes are off.
    assert len({len(ANSI.sub("", line)) for line in table}) == 1
    assert "\x1b[32m" in "".join(styled)  # busy in green
    assert "\x1b[33m" in "".join(styled)  # idle in yellow
    words = lambda lines: sorted(re.findall(r"[\w.:-]+", ANSI.sub("", " ".join(lines))))  # noqa: E731
    assert words(plain) == words(styled)


def test_paused_launches_show_until_when() -> None:
    from dataclasses import replace
    from datetime import timedelta

    from dynagent.report.status import Summary

    summary = Summary(
        seq=4, time=ago(1), pending=1, pending_slots=8, agents=0, busy=0, idle=0, draining=0,
        launch_error="VcpuLimitExceeded: no", launch_error_at=ago(2),
        launches_paused_until=NOW + timedelta(minutes=8),
    )  # fmt: skip
    lines = render(pool_status(pool(), fleet(), summary, NOW))
    assert any("launches paused until 2024-05-01T12:08:30Z" in line for line in lines)
    over = replace(summary, launches_paused_until=ago(1))
    assert not any("paused" in line for line in render(pool_status(pool(), fleet(), over, NOW)))


def test_a_summary_not_looked_for_is_not_said_to_be_missing() -> None:
    unread = render(pool_status(pool(), fleet(), None, NOW, unread="give --queue URL"))
    assert "  last snapshot: not read (give --queue URL)" in unread
    looked = render(pool_status(pool(), fleet(), None, NOW))
    assert "  last snapshot: none recorded" in looked


def test_a_pool_with_offerings_shows_its_cap_in_slots() -> None:
    from dataclasses import replace

    offerings = {"instance_types": ["g5.xlarge", "g5.12xlarge", "g5.48xlarge"]}
    mixed = pool(instance_type="g5.48xlarge", offerings=offerings, max_instances=2)
    cloud = fleet(
        replace(agent_instance("i-big"), instance_type="g5.48xlarge"),
        replace(agent_instance("i-four"), instance_type="g5.12xlarge"),
        replace(agent_instance("i-one"), instance_type="g5.xlarge"),
    )
    # Three machines over max_instances (2), which counts GPUs here: 13 of 16.
    (line,) = render(pool_status(mixed, cloud, None, NOW))[:1]
    assert "3 instances, 13 of max 16 slots; 3 busy" in line and "(at max)" not in line
    full = fleet(*cloud.instances, replace(starting("i-new"), instance_type="g5.12xlarge"))
    assert (
        "4 instances, 17 of max 16 slots (at max)" in render(pool_status(mixed, full, None, NOW))[0]
    )
