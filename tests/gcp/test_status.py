"""``dynagent status`` on GCP: the demo's day stopped midway, on the Compute fake, the
Pub/Sub emulator, and the local topics API that holds the summaries in topic labels."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from dynagent.cli.main import main
from dynagent.cli.status_command import GcpSource, statuses, write
from dynagent.demo.gcp_rig import GcpRig, gcp_rig
from dynagent.demo.run import Demo, Timeline, VirtualClock
from dynagent.gcp import clients
from dynagent.testing.gcp import pubsub

from . import emulators


class _Day:
    def __init__(self, rig: GcpRig, clock: VirtualClock, timeline: Timeline) -> None:
        self.rig, self.clock = rig, clock
        self.demo = Demo(rig, timeline, clock)
        self.config = rig.functions.config

    def status(self) -> dict[str, Any]:
        source = GcpSource(
            self.config,
            self.rig.compute.instances_client(),
            self.rig.compute.zone_operations_client(),
            self.rig.topics,
            self.rig.topic,
        )
        pools = list(self.config.pools.values())
        (view,) = statuses(self.config, pools, {"gcp": source}, self.clock.now)
        return view


@pytest.fixture
def midday() -> Iterator[_Day]:
    """As on AWS: two busy agents, one idle, one that never registers, trial-2 and
    trial-odd pending; trial-2's first inserts ended in a stockout at 08:05."""
    emulators.require(pubsub.available())
    clock = VirtualClock()
    timeline = Timeline(io.StringIO(), lambda: clock.now, quiet=True)
    with gcp_rig(lambda: clock.now, timeline) as rig:
        day = _Day(rig, clock, timeline)
        day.demo.run(until=timedelta(minutes=4, seconds=30))
        rig.compute.fail_next_inserts(2)
        day.demo.run(until=timedelta(minutes=9))
        yield day


def test_status_shows_the_pool_midday(
    midday: _Day,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    view = midday.status()
    assert view["cloud"] == "gcp"
    assert view["counts"] == {"unregistered": 1, "busy": 2, "idle": 1}
    assert view["at_max"] is True and view["live"] == 4
    ages = sorted(item["age_s"] for item in view["instances"])
    assert ages == [240, 240, 570, 570]  # 08:00 and 08:05:30, seen at 08:09:30
    last = view["last_snapshot"]
    assert (last["pending"], last["pending_slots"], last["agents"]) == (2, 14, 3)
    assert (last["busy"], last["idle"], last["draining"]) == (2, 1, 0)
    # Labels keep the error's code, not its sentence.
    assert last["launch_error"] == "ZONE_RESOURCE_POOL_EXHAUSTED"
    assert last["launch_error_at"] == "2026-11-23T08:05:00Z"
    assert view["plan"]["actions"] == []

    text = io.StringIO()
    write([view], as_json=False, out=text)
    assert text.getvalue().startswith(
        "pool gpu-t4 (gcp) at 2026-11-23T08:09:30Z: 4 of max 4 instances (at max); "
        "1 unregistered, 2 busy, 1 idle\n"
    )
    assert "last launch error at 2026-11-23T08:05:00Z: ZONE_RESOURCE_POOL_EXHAUSTED" in (
        text.getvalue()
    )

    # The command, with the environment pointing at the local clouds.
    monkeypatch.setenv(clients.COMPUTE_ENDPOINT_ENV, midday.rig.compute.endpoint)
    monkeypatch.setenv("DYNAGENT_PUBSUB_ENDPOINT", midday.rig.topics_endpoint)
    monkeypatch.setenv("DYNAGENT_SNAPSHOT_TOPIC", midday.rig.topic)
    clients.instances_client.cache_clear()
    clients.zone_operations_client.cache_clear()
    config = tmp_path / "pools.yaml"
    text_config = (Path(__file__).parents[2] / "shared/dynagent/demo/pool-gcp.yaml").read_text()
    config.write_text(text_config.replace("PROJECT", midday.rig.compute.project))
    try:
        assert main(["status", "--config", str(config), "--json"]) == 0
    finally:
        clients.instances_client.cache_clear()
        clients.zone_operations_client.cache_clear()
    (cli_view,) = json.loads(capsys.readouterr().out)
    assert cli_view["counts"] == view["counts"] and cli_view["at_max"] is True
    assert cli_view["last_snapshot"]["seq"] == last["seq"]
    assert cli_view["last_snapshot"]["launch_error"] == "ZONE_RESOURCE_POOL_EXHAUSTED"


def test_status_lists_a_stopped_vm_with_how_long_and_what_its_disk_costs(midday: _Day) -> None:
    from dynagent.core.fleet import Mark
    from dynagent.core.plan import MarkWrite
    from dynagent.gcp.compute import GceProvider

    now, compute = midday.clock.now, midday.rig.compute
    (idle,) = [i for i in midday.status()["instances"] if i["state"] == "idle"]
    # Stopped 90 seconds ago, as a pass of a warm pool stops one: TERMINATED, its agent's
    # marks cleared and the stop's time labelled, through the real compute client.
    compute.set_status(idle["id"], "TERMINATED")
    pool = midday.config.pools["gpu-t4"]
    GceProvider(
        pool, compute.instances_client(), compute.zone_operations_client(), clock=lambda: now
    ).write_marks(
        (
            MarkWrite(Mark.STOPPED_AT, now - timedelta(seconds=90), (idle["id"],), "stopped"),
            MarkWrite(Mark.REGISTERED, None, (idle["id"],), "stopped"),
            MarkWrite(Mark.IDLE_SINCE, None, (idle["id"],), "stopped"),
        )
    )

    view = midday.status()
    assert view["counts"] == {"unregistered": 1, "busy": 2, "stopped": 1}
    (row,) = [i for i in view["instances"] if i["id"] == idle["id"]]
    assert (row["state"], row["type"], row["stopped_s"]) == ("stopped", idle["type"], 90)
    disk = pool.provider.stopped_disk_per_hour
    assert disk > 0 and view["stopped"] == {"machines": 1, "disk_per_hour": round(disk, 4)}

    text = io.StringIO()
    write([view], as_json=False, out=text)
    lines = text.getvalue().splitlines()
    assert lines[0] == (
        "pool gpu-t4 (gcp) at 2026-11-23T08:09:30Z: 3 of max 4 instances; "
        f"1 unregistered, 2 busy, 1 stopped; 1 stopped machine, disk ${disk:.3f}/h"
    )
    assert lines[1].split() == [
        "instance", "state", "type", "age", "idle", "stopped", "registered",
    ]  # fmt: skip
    (line,) = [line for line in lines if line.startswith(f"  {idle['id']} ")]
    assert line.split()[1:7] == ["stopped", idle["type"], "4m", "-", "1m30s", "-"]


def test_a_launch_pause_survives_the_topic_labels_round_trip() -> None:
    from datetime import UTC, datetime

    from dynagent.gcp.status import status_labels, summary_from_labels
    from dynagent.report.status import Summary

    at = datetime(2026, 11, 23, 8, 0, tzinfo=UTC)
    summary = Summary(
        seq=41, time=at, pending=2, pending_slots=8, agents=3, busy=1, idle=1, draining=0,
        launches_paused_until=at + timedelta(minutes=10),
    )  # fmt: skip
    labels = status_labels("t4", summary)
    assert all(len(value) <= 63 for value in labels.values())
    assert summary_from_labels("t4", labels) == summary
    unpaused = Summary(**{**summary.__dict__, "launches_paused_until": None})
    assert summary_from_labels("t4", status_labels("t4", unpaused)) == unpaused
