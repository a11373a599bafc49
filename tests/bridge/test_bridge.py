"""The bridge against a local Determined master over HTTP: what it reads, what it
publishes, and how it drains."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from dynagent.bridge.client import Credentials, MasterClient
from dynagent.bridge.loop import Bridge, BridgeRefused
from dynagent.config import Config, config_from_document
from dynagent.snapshot import Snapshot
from dynagent.testing.determined import DEFAULT_PASSWORD, LocalDetermined

START = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)


def pool_config(drain: bool = False, **provider: Any) -> Config:
    fields: dict[str, Any] = {
        "type": "aws",
        "region": "us-west-2",
        "image_id": "ami-12345678",
        "instance_type": "p4d.24xlarge",
        "max_instances": 8,
        "master_url": "http://10.0.0.5:8080",
        "drain_idle_agents": drain,
        "max_idle_agent_period": "5m",
    }
    fields.update(provider)
    return config_from_document({"resource_pools": [{"pool_name": "a100", "provider": fields}]})


@dataclass
class Collected:
    snapshots: list[Snapshot] = field(default_factory=list)

    def publish(self, snapshot: Snapshot) -> str:
        self.snapshots.append(snapshot)
        return snapshot.dedup_id


class Clock:
    def __init__(self) -> None:
        self.now = START

    def __call__(self) -> datetime:
        return self.now


class Log:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def info(self, message: str, extra: Any = None) -> None:
        self.lines.append(f"info {message}")

    def warning(self, message: str, extra: Any = None) -> None:
        self.lines.append(f"warning {message} {extra or ''}")


def bridge_for(master: LocalDetermined, config: Config, **kw: Any) -> tuple[Bridge, Collected]:
    sink = Collected()
    client = MasterClient(master.url, Credentials("admin", DEFAULT_PASSWORD))
    return Bridge(config, client, sink, clock=Clock(), logger=Log(), **kw), sink


def cluster(master: LocalDetermined) -> None:
    master.add_pool("a100", "STATIC")
    master.add_agent("i-1", "a100", 8)
    master.add_agent("i-2", "a100", 8)


def test_a_pass_publishes_what_the_master_shows(master: LocalDetermined) -> None:
    cluster(master)
    master.submit("trial-1", 8, "a100")
    master.submit("cmd-1", 0, "a100", "COMMAND")
    master.schedule()  # trial-1 on one agent, cmd-1 (no slot) on the other or the same
    master.submit("trial-2", 16, "a100")
    bridge, sink = bridge_for(master, pool_config())

    (snapshot,) = bridge.run_once()
    assert sink.snapshots == [snapshot] and snapshot.pool == "a100"
    assert [(t.slots) for t in snapshot.pending] == [16]
    agents = {a.id: (a.slots, a.used_slots, a.tasks, a.draining) for a in snapshot.agents}
    busy = {a for a, (_, used, _, _) in agents.items() if used}
    assert len(busy) == 1 and agents[busy.pop()][:2] == (8, 8)
    assert sum(tasks for _, _, tasks, _ in agents.values()) == 2  # the command shows too


def test_queued_jobs_past_the_first_page_are_all_read(master: LocalDetermined) -> None:
    cluster(master)
    for n in range(130):
        master.submit(f"trial-{n}", 8, "a100")
    bridge, _ = bridge_for(master, pool_config())
    (snapshot,) = bridge.run_once()
    assert len(snapshot.pending) == 130
    offsets = [dict(c.query).get("offset") for c in master.calls() if "job-queues-v2" in c.path]
    assert offsets == ["0", "100"]


def test_nothing_changed_publishes_nothing_until_the_heartbeat(master: LocalDetermined) -> None:
    cluster(master)
    bridge, _ = bridge_for(master, pool_config())
    clock = bridge.clock
    assert isinstance(clock, Clock)
    first = bridge.run_once()
    clock.now += timedelta(seconds=10)
    assert bridge.run_once() == []
    master.submit("trial", 8, "a100")
    clock.now += timedelta(seconds=1)
    (changed,) = bridge.run_once()
    clock.now += timedelta(seconds=30)
    (beat,) = bridge.run_once()
    assert first[0].seq < changed.seq < beat.seq
    # A restarted bridge goes on from a higher seq: it comes from the clock.
    restarted, _ = bridge_for(master, pool_config())
    restarted.clock = lambda: beat.time + timedelta(milliseconds=1)
    assert restarted.run_once()[0].seq > beat.seq


@pytest.mark.parametrize("fault", ["down", "502", "500", "half page"])
def test_a_master_not_read_whole_publishes_nothing(master: LocalDetermined, fault: str) -> None:
    cluster(master)
    for n in range(120):
        master.submit(f"trial-{n}", 8, "a100")
    bridge, _ = bridge_for(master, pool_config())
    if fault == "down":
        master.down()
    elif fault == "502":
        master.down("502")
    elif fault == "500":
        master.fail_next(1, 500, path="/api/v1/tasks")
    else:
        master.half_page(1)
    assert bridge.run_once() == []
    if fault in ("down", "502"):  # still down: still nothing, and no second log line
        assert bridge.run_once() == []
    log = bridge.logger
    assert isinstance(log, Log)
    master.up()
    assert len(bridge.run_once()) == 1
    assert sum("unavailable" in line for line in log.lines) == 1
    assert any("answering again" in line for line in log.lines)


def test_an_expired_session_logs_in_again(master: LocalDetermined) -> None:
    cluster(master)
    bridge, _ = bridge_for(master, pool_config())
    bridge.run_once()
    master.expire_tokens()
    master.clear_calls()
    bridge.clock = lambda: START + timedelta(minutes=1)
    assert len(bridge.run_once()) == 1
    paths = [(c.path, c.status) for c in master.calls()]
    assert paths[:3] == [
        ("/api/v1/resource-pools", 401),
        ("/api/v1/auth/login", 200),
        ("/api/v1/resource-pools", 200),
    ]


def test_a_pool_determined_provisions_is_refused(master: LocalDetermined) -> None:
    master.add_pool("a100", "AWS", slots_per_agent=8)
    bridge, sink = bridge_for(master, pool_config())
    with pytest.raises(BridgeRefused, match="provisioned by the master itself"):
        bridge.run_once()
    assert sink.snapshots == []


def advance(bridge: Bridge, minutes: float) -> None:
    clock = bridge.clock
    assert isinstance(clock, Clock)
    clock.now += timedelta(minutes=minutes)


def test_an_idle_agent_is_drained_then_reported_and_enabled_for_new_work(
    master: LocalDetermined,
) -> None:
    cluster(master)
    master.submit("trial", 8, "a100")
    master.schedule()
    bridge, _ = bridge_for(master, pool_config(drain=True))
    bridge.run_once()  # i-2 idle from now
    advance(bridge, 6)
    (snapshot,) = bridge.run_once()
    drained = [a.id for a in snapshot.agents if a.draining]
    assert len(drained) == 1 and master.agent_state(drained[0]) == (False, True)
    disables = [c for c in master.calls() if c.path.endswith("/disable")]
    assert len(disables) == 1

    # New work: the drained agent is enabled again, before any snapshot shows the task
    # without it; an agent already reported draining only once no function can act on
    # that report any more (the end-to-end test found a task killed otherwise).
    master.submit("trial-2", 8, "a100")
    advance(bridge, 0.1)
    (snapshot,) = bridge.run_once()
    assert master.agent_state(drained[0]) == (False, True)  # still drained in the master
    assert not any(a.draining for a in snapshot.agents)  # the report withdrawn at once
    assert [t.slots for t in snapshot.pending] == [8]
    advance(bridge, 0.5)
    bridge.run_once()
    assert master.agent_state(drained[0]) == (False, True)
    advance(bridge, 0.5)  # 66 s after the draining report
    bridge.run_once()
    assert master.agent_state(drained[0]) == (True, False)
    master.schedule()


def test_no_drain_below_min_instances_or_without_the_option(master: LocalDetermined) -> None:
    cluster(master)
    for config in (pool_config(), pool_config(drain=True, min_instances=2)):
        bridge, _ = bridge_for(master, config)
        bridge.run_once()
        advance(bridge, 30)
        bridge.run_once()
    assert not [c for c in master.calls() if c.path.endswith("/disable")]


def test_a_reconnecting_agent_is_never_reported_draining(master: LocalDetermined) -> None:
    cluster(master)
    master.reconnecting("i-2")
    bridge, _ = bridge_for(master, pool_config(drain=True, min_instances=1))
    (snapshot,) = bridge.run_once()
    # Listed draining by the master, but this bridge did not drain it: it tries to, the
    # master refuses (HTTP 500), and the snapshot does not call it draining.
    assert {a.id: a.draining for a in snapshot.agents} == {"i-1": False, "i-2": False}
    assert any("could not drain agent i-2" in line for line in bridge.logger.lines)  # type: ignore[attr-defined]
    master.reconnecting("i-2", False)
    advance(bridge, 6)
    bridge.run_once()
    advance(bridge, 6)
    (snapshot,) = bridge.run_once()
    assert [a.id for a in snapshot.agents if a.draining] == ["i-1"]  # the longest idle


def test_print_once_from_the_command_line(master: LocalDetermined, tmp_path: Path) -> None:
    cluster(master)
    master.submit("trial", 8, "a100")
    config = tmp_path / "pools.yaml"
    config.write_text(
        "resource_pools:\n  - pool_name: a100\n    provider: {type: aws, region: us-west-2, "
        "image_id: ami-12345678, instance_type: p4d.24xlarge, master_url: http://x:8080}\n"
    )
    token = tmp_path / "token"
    token.write_text(master.login("admin") + "\n")
    command = [sys.executable, "-m", "dynagent.cli", "bridge", "--master", master.url]
    done = subprocess.run(
        [*command, "--config", str(config), "--print", "--once", "--token-file", str(token)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    (line,) = done.stdout.splitlines()
    assert json.loads(line)["pending"][0]["slots"] == 8
    assert master.login("admin") not in done.stderr  # no token in the log
    master.down()
    failed = subprocess.run(
        [*command, "--config", str(config), "--print", "--once", "--token-file", str(token)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert failed.returncode == 1 and failed.stdout == ""
    assert "nothing published" in failed.stderr


def test_a_master_before_0_23_1_is_read_through_the_first_job_queue_api(
    master: LocalDetermined,
) -> None:
    cluster(master)
    for n in range(105):
        master.submit(f"trial-{n}", 8, "a100")
    master.release("0.23.0")  # no job-queues-v2 yet: 501 Not Implemented
    bridge, _ = bridge_for(master, pool_config())
    (snapshot,) = bridge.run_once()
    assert len(snapshot.pending) == 105
    queues = [(c.path, dict(c.query).get("offset"), c.status) for c in master.calls()]
    queues = [q for q in queues if "job-queues" in q[0]]
    assert queues == [
        ("/api/v1/job-queues-v2", "0", 501),
        ("/api/v1/job-queues", "0", 200),
        ("/api/v1/job-queues", "100", 200),
    ]
