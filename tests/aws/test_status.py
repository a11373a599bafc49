"""``dynagent status`` on AWS: the demo's day stopped midway, read back through boto3."""

from __future__ import annotations

import io
import json
import logging
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from dynagent.aws import clients, tags
from dynagent.aws.functions import AwsFunctions
from dynagent.aws.status import STATUS_TAG, QueueTagStore, summary_from_tags
from dynagent.cli.main import main
from dynagent.cli.status_command import AwsSource, statuses, write
from dynagent.core.config import Config
from dynagent.core.fleet import Mark
from dynagent.demo.aws_rig import AwsRig
from dynagent.demo.pools import demo_config
from dynagent.demo.run import START, Demo, Timeline, VirtualClock
from dynagent.testing.aws.local_aws import LocalAws

MIDDAY = timedelta(minutes=9)


class _Day:
    def __init__(self, aws: LocalAws) -> None:
        self.clock = VirtualClock()
        self.timeline = Timeline(io.StringIO(), lambda: self.clock.now, quiet=True)
        self.config: Config = demo_config("aws", IMAGE_ID=aws.image_id())
        self.rig = AwsRig(aws, self.config, lambda: self.clock.now, self.timeline)
        self.demo = Demo(self.rig, self.timeline, self.clock)

    def status(self) -> dict[str, Any]:
        source = AwsSource(
            self.config, lambda region: self.rig.ec2, self.rig.sqs, self.rig.queue_url
        )
        (view,) = statuses(
            self.config, list(self.config.pools.values()), {"aws": source}, self.clock.now
        )
        return view


@pytest.fixture
def midday(aws: LocalAws) -> _Day:
    """Two busy agents, one idle, one that never registers; trial-2 and trial-odd
    pending; trial-2's first launch refused by EC2 (it launched again 30 s later)."""
    day = _Day(aws)
    day.demo.run(until=timedelta(minutes=4, seconds=30))
    # VcpuLimitExceeded is a 400: boto3 does not retry it, the adapter reports it.
    aws.fail_next_launch("p3.8xlarge", "VcpuLimitExceeded")
    day.demo.run(until=MIDDAY)
    return day


def test_status_shows_the_pool_midday(midday: _Day) -> None:
    view = midday.status()
    now = midday.clock.now

    assert view["counts"] == {"unregistered": 1, "busy": 2, "idle": 1}
    assert view["live"] == 4 and view["max_instances"] == 4 and view["at_max"] is True
    states = [(item["state"], item["age_s"]) for item in view["instances"]]
    # Launched at 08:00 (two) and at 08:05:30, after the refused launch at 08:05 (two).
    first, second = (now - START).seconds, (now - START - timedelta(minutes=5, seconds=30)).seconds
    assert sorted(states) == sorted(
        [("busy", first), ("busy", first), ("unregistered", second), ("idle", second)]
    )
    (idle,) = [item for item in view["instances"] if item["state"] == "idle"]
    assert idle["idle_s"] == 60  # registered (and idle) at 08:08:30, three minutes in

    last = view["last_snapshot"]
    # trial-2 (8 slots, two whole agents) and trial-odd (6, never schedulable).
    assert (last["pending"], last["pending_slots"]) == (2, 14)
    assert (last["agents"], last["busy"], last["idle"], last["draining"]) == (3, 2, 1, 0)
    assert last["launch_error"].startswith("VcpuLimitExceeded")
    assert last["launch_error_at"] == "2026-11-23T08:05:00Z"
    assert last["stale"] is False
    # Without a snapshot the next pass would do nothing yet: the unregistered one is
    # within max_agent_starting_period, the idle one within max_idle_agent_period.
    assert view["plan"]["actions"] == []

    text = io.StringIO()
    write([view], as_json=False, out=text)
    lines = text.getvalue().splitlines()
    assert lines[0] == (
        "pool gpu-a (aws) at 2026-11-23T08:09:30Z: 4 of max 4 instances (at max); "
        "1 unregistered, 2 busy, 1 idle"
    )
    assert lines[1].split() == ["instance", "state", "type", "age", "idle", "registered"]
    assert any(line.split()[1:5] == ["idle", "p3.8xlarge", "4m", "1m"] for line in lines)
    assert "  spot requests: none" in lines
    assert any(
        "2 pending tasks (14 slots), 3 agents (2 busy, 1 idle, 0 draining)" in line
        for line in lines
    )
    assert "  last launch error at 2026-11-23T08:05:00Z: VcpuLimitExceeded" in text.getvalue()
    assert lines[-2:] == ["  next pass, with no snapshot (as the next sweep):", "    nothing to do"]


def test_status_lists_a_stopped_machine_with_how_long_and_what_its_disk_costs(
    midday: _Day,
) -> None:
    # The idle machine, stopped two minutes ago as a pass of a warm pool stops one: its
    # agent's marks cleared, the time of the stop recorded.
    ec2, now = midday.rig.ec2, midday.clock.now
    (idle,) = [item["id"] for item in midday.status()["instances"] if item["state"] == "idle"]
    ec2.stop_instances(InstanceIds=[idle])
    ec2.delete_tags(
        Resources=[idle],
        Tags=[{"Key": tags.MARK_TAGS[m]} for m in (Mark.REGISTERED, Mark.IDLE_SINCE)],
    )
    stopped_at = tags.format_time(now - timedelta(minutes=2))
    ec2.create_tags(Resources=[idle], Tags=[{"Key": "dynagent:stopped-at", "Value": stopped_at}])

    view = midday.status()
    assert view["counts"] == {"unregistered": 1, "busy": 2, "stopped": 1}
    assert view["live"] == 3 and view["at_max"] is False
    (row,) = [item for item in view["instances"] if item["id"] == idle]
    assert (row["state"], row["type"], row["stopped_s"]) == ("stopped", "p3.8xlarge", 120)
    assert all(item["stopped_s"] is None for item in view["instances"] if item["id"] != idle)
    disk = midday.config.pools["gpu-a"].provider.stopped_disk_per_hour
    assert view["stopped"] == {"machines": 1, "disk_per_hour": round(disk, 4)}

    text = io.StringIO()
    write([view], as_json=False, out=text)
    lines = text.getvalue().splitlines()
    assert lines[0] == (
        "pool gpu-a (aws) at 2026-11-23T08:09:30Z: 3 of max 4 instances; "
        f"1 unregistered, 2 busy, 1 stopped; 1 stopped machine, disk ${disk:.3f}/h"
    )
    header = ["instance", "state", "type", "age", "idle", "stopped", "registered"]
    assert lines[1].split() == header
    (line,) = [line for line in lines if line.startswith(f"  {idle} ")]
    assert line.split() == [idle, "stopped", "p3.8xlarge", "4m", "-", "2m", "-"]


def test_status_previews_the_sweep_later_in_the_day(midday: _Day) -> None:
    # Played to 08:14:30; at 08:16, with no pass in between, the instance launched at
    # 08:05:30 that never registered is past max_agent_starting_period (10m).
    midday.demo.run(until=timedelta(minutes=14, seconds=30))
    midday.clock.now = START + timedelta(minutes=16)
    view = midday.status()
    (stuck,) = [i["id"] for i in view["instances"] if i["state"] == "unregistered"]
    assert any(
        line.startswith(f"terminate {stuck}: launched 10m30s ago and never registered")
        for line in view["plan"]["actions"]
    )


def test_status_through_the_cli_as_json(
    midday: _Day,
    aws: LocalAws,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    for name, value in aws.env().items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("DYNAGENT_SNAPSHOT_QUEUE_URL", midday.rig.queue_url)
    clients.ec2_client.cache_clear()
    clients.sqs_client.cache_clear()
    config = tmp_path / "pools.yaml"
    text = (Path(__file__).parents[2] / "shared/dynagent/demo/pool.yaml").read_text()
    config.write_text(text.replace("IMAGE_ID", aws.image_id()))

    assert main(["status", "--config", str(config), "--json"]) == 0
    (view,) = json.loads(capsys.readouterr().out)
    # The real clock: counts and the record are as the function left them, ages vary.
    assert view["pool"] == "gpu-a" and view["at_max"] is True
    assert view["counts"] == {"unregistered": 1, "busy": 2, "idle": 1}
    assert view["last_snapshot"]["pending"] == 2
    assert view["last_snapshot"]["launch_error"].startswith("VcpuLimitExceeded")

    assert main(["status", "--config", str(config), "--pool", "gpu-a"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("pool gpu-a (aws) at ")
    assert "last launch error at 2026-11-23T08:05:00Z: VcpuLimitExceeded" in out


def test_one_tag_write_per_change_and_none_when_nothing_changed(aws: LocalAws) -> None:
    day = _Day(aws)
    day.demo.run(until=timedelta(minutes=4))
    aws.clear_calls()
    # 08:04 to 08:05: heartbeats of an unchanged pool, then trial-2 queued at 08:05.
    day.demo.run(until=timedelta(minutes=5))
    tag_writes = [call for call in aws.calls("sqs") if call == "TagQueue"]
    assert len(tag_writes) == 1
    tags = QueueTagStore(day.rig.sqs, day.rig.queue_url).read()
    summary = summary_from_tags("gpu-a", tags)
    assert (
        summary is not None
        and summary.pending == 1
        and summary.time == day.clock.now - timedelta(seconds=30)
    )


def test_a_failure_to_record_is_logged_and_the_reconcile_goes_on(
    aws: LocalAws, caplog: pytest.LogCaptureFixture
) -> None:
    day = _Day(aws)
    # The functions are told of a snapshot queue that does not exist: TagQueue fails.
    logger = logging.getLogger("status-test")
    day.rig.functions = AwsFunctions(
        day.config,
        ec2_for_region=lambda region: day.rig.ec2,
        sqs=day.rig.sqs,
        snapshot_queue_url=day.rig.queue_url + "-gone",
        clock=lambda: day.clock.now,
        sleep=lambda seconds: None,
        logger=logger,
    )
    with caplog.at_level(logging.WARNING, "status-test"):
        day.demo.run(until=timedelta(0))
    assert any(
        r.message.startswith("could not record the pool's status summary") for r in caplog.records
    )
    launched = [row for row in day.rig.fleet() if row.alive]
    assert len(launched) == 2  # trial-1 and notebook-1 launched all the same
    assert STATUS_TAG + "gpu-a" not in QueueTagStore(day.rig.sqs, day.rig.queue_url).read()
