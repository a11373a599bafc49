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
from dynagent.bridge.loop import Bridge
from dynagent.core.config import Config, config_from_document
from dynagent.core.decide import decide
from dynagent.core.snapshot import Snapshot
from dynagent.testing.determined.master import DEFAULT_PASSWORD, LocalDetermined
from dynagent.testing.determined.scaled_pools import add_scaled_pools
from tests.builders import agent_instance, ago, fleet

from .cluster import admin_disable

START = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)
POOL = "a100"
# The pools beside the one under test in the three-pool runs: one drained, one not and
# at its min_instances. Each has a busy agent; v100 an idle one too, which it drains.
NEIGHBOURS: dict[str, dict[str, Any]] = {
    "v100": {"drain_idle_agents": True},
    "t4": {"drain_idle_agents": False, "min_instances": 1},
}
NEIGHBOUR_AGENTS = {"v100": ("v-1", "v-2"), "t4": ("t-1",)}


def provider_fields(drain: bool = False, **provider: Any) -> dict[str, Any]:
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
    return fields


def pools_config(pools: dict[str, dict[str, Any]]) -> Config:
    return config_from_document(
        {
            "resource_pools": [
                {"pool_name": name, "provider": provider_fields(**fields)}
                for name, fields in pools.items()
            ]
        }
    )


@dataclass(frozen=True)
class Layout:
    """The pools a test runs with: ``a100``, the pool under test, alone or with the
    NEIGHBOURS, which must change nothing of what the bridge does for it."""

    neighbours: bool

    @property
    def names(self) -> list[str]:
        return [POOL, *NEIGHBOURS] if self.neighbours else [POOL]

    def config(self, drain: bool = False, **provider: Any) -> Config:
        pools = {POOL: {"drain": drain, **provider}}
        if self.neighbours:
            pools |= NEIGHBOURS
        return pools_config(pools)

    def cluster(self, master: LocalDetermined) -> None:
        """Two idle 8-slot agents in a100, i-1 and i-2; the neighbours' agents, the
        first of each busy with an 8-slot trial."""
        add_scaled_pools(master, self.config())
        master.add_agent("i-1", POOL, 8)
        master.add_agent("i-2", POOL, 8)
        if not self.neighbours:
            return
        for name, agents in NEIGHBOUR_AGENTS.items():
            for agent_id in agents:
                master.add_agent(agent_id, name, 8)
            master.submit(f"{name}-trial", 8, name)
        master.schedule()

    def ours(self, snapshots: list[Snapshot]) -> Snapshot:
        """a100's snapshot among a pass's; every pool published once."""
        assert sorted(s.pool for s in snapshots) == sorted(self.names)
        return next(s for s in snapshots if s.pool == POOL)


@pytest.fixture(params=[False, True], ids=["one pool", "three pools"])
def layout(request: pytest.FixtureRequest) -> Layout:
    return Layout(neighbours=request.param)


def pool_config(drain: bool = False, **provider: Any) -> Config:
    return pools_config({POOL: {"drain": drain, **provider}})


def disables(master: LocalDetermined, agents: tuple[str, ...] = ("i-1", "i-2")) -> list[str]:
    """The agents of a100 (by default) the master was asked to disable, in order."""
    paths = [c.path for c in master.calls() if c.path.endswith("/disable")]
    return [p.split("/")[-2] for p in paths if p.split("/")[-2] in agents]


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


def test_a_pass_publishes_what_the_master_shows(master: LocalDetermined, layout: Layout) -> None:
    layout.cluster(master)
    master.submit("trial-1", 8, POOL)
    master.submit("cmd-1", 0, POOL, "COMMAND")
    master.schedule()  # trial-1 on one agent, cmd-1 (no slot) on the other or the same
    master.submit("trial-2", 16, POOL)
    bridge, sink = bridge_for(master, layout.config())

    snapshot = layout.ours(bridge.run_once())
    assert sorted(s.pool for s in sink.snapshots) == sorted(layout.names)
    assert [(t.slots) for t in snapshot.pending] == [16]
    agents = {a.id: (a.slots, a.used_slots, a.tasks, a.draining) for a in snapshot.agents}
    assert set(agents) == {"i-1", "i-2"}
    busy = {a for a, (_, used, _, _) in agents.items() if used}
    assert len(busy) == 1 and agents[busy.pop()][:2] == (8, 8)
    assert sum(tasks for _, _, tasks, _ in agents.values()) == 2  # the command shows too


def test_a_pending_task_says_its_priority_and_whether_it_stays_on_one_agent(
    master: LocalDetermined, layout: Layout
) -> None:
    """Submitted through the master's admission, as det does: a command stays on one
    agent, a trial may span agents; each with the priority the job queue gives it."""
    layout.cluster(master)
    command = master.launch("COMMAND", 8, POOL, priority=10).allocation_id
    trial = master.launch("TRIAL", 16, POOL).allocation_id
    notebook = master.launch("NOTEBOOK", 1, POOL, priority=50).allocation_id
    busy = master.launch("TRIAL", 8, POOL).allocation_id
    bridge, _ = bridge_for(master, layout.config())
    master.schedule()  # the command and the 8-slot trial take i-1 and i-2

    snapshot = layout.ours(bridge.run_once())
    assert master.task_state(command) == master.task_state(busy) == "RUNNING"
    assert {(t.task, t.slots, t.priority, t.single_agent) for t in snapshot.pending} == {
        (trial, 16, 42, False),
        (notebook, 1, 50, True),
    }
    assert snapshot.fitting_policy == "best"  # Determined's default, as the master lists it


def test_queued_jobs_past_the_first_page_are_all_read(
    master: LocalDetermined, layout: Layout
) -> None:
    layout.cluster(master)
    for n in range(130):
        master.submit(f"trial-{n}", 8, POOL)
    bridge, _ = bridge_for(master, layout.config())
    snapshot = layout.ours(bridge.run_once())
    assert len(snapshot.pending) == 130
    queries = [dict(c.query) for c in master.calls() if "job-queues-v2" in c.path]
    assert [q.get("offset") for q in queries if q.get("resourcePool") == POOL] == ["0", "100"]


def test_nothing_changed_publishes_nothing_until_the_heartbeat(
    master: LocalDetermined, layout: Layout
) -> None:
    layout.cluster(master)
    bridge, _ = bridge_for(master, layout.config())
    clock = bridge.clock
    assert isinstance(clock, Clock)
    first = layout.ours(bridge.run_once())
    clock.now += timedelta(seconds=10)
    assert bridge.run_once() == []
    master.submit("trial", 8, POOL)
    clock.now += timedelta(seconds=1)
    (changed,) = bridge.run_once()  # the neighbours did not change
    clock.now += timedelta(seconds=30)
    beat = layout.ours(bridge.run_once())
    assert first.seq < changed.seq < beat.seq and changed.pool == POOL
    # A restarted bridge goes on from a higher seq: it comes from the clock.
    restarted, _ = bridge_for(master, layout.config())
    restarted.clock = lambda: beat.time + timedelta(milliseconds=1)
    assert min(s.seq for s in restarted.run_once()) > beat.seq


@pytest.mark.parametrize("fault", ["down", "502", "500", "half page"])
def test_a_master_not_read_whole_publishes_nothing(
    master: LocalDetermined, layout: Layout, fault: str
) -> None:
    layout.cluster(master)
    for n in range(120):
        master.submit(f"trial-{n}", 8, POOL)
    bridge, _ = bridge_for(master, layout.config())
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
    assert len(layout.ours(bridge.run_once()).pending) == 120
    assert sum("unavailable" in line for line in log.lines) == 1
    assert any("answering again" in line for line in log.lines)


def test_an_expired_session_logs_in_again(master: LocalDetermined, layout: Layout) -> None:
    layout.cluster(master)
    bridge, _ = bridge_for(master, layout.config())
    bridge.run_once()
    master.expire_tokens()
    master.clear_calls()
    bridge.clock = lambda: START + timedelta(minutes=1)
    layout.ours(bridge.run_once())
    paths = [(c.path, c.status) for c in master.calls()]
    assert paths[:3] == [
        ("/api/v1/resource-pools", 401),
        ("/api/v1/auth/login", 200),
        ("/api/v1/resource-pools", 200),
    ]


def advance(bridge: Bridge, minutes: float) -> None:
    clock = bridge.clock
    assert isinstance(clock, Clock)
    clock.now += timedelta(minutes=minutes)


def one_agent_drained(master: LocalDetermined, layout: Layout) -> tuple[Bridge, Snapshot]:
    """A trial on one of the pool's two agents; the other idle 6 minutes: drained by the
    bridge's pass, whose snapshot of the pool is returned."""
    layout.cluster(master)
    master.submit("trial", 8, POOL)
    master.schedule()
    bridge, _ = bridge_for(master, layout.config(drain=True))
    bridge.run_once()  # i-2 idle from now
    advance(bridge, 6)
    return bridge, layout.ours(bridge.run_once())


def test_an_idle_agent_is_drained_then_reported_and_enabled_for_new_work(
    master: LocalDetermined, layout: Layout
) -> None:
    bridge, snapshot = one_agent_drained(master, layout)
    drained = [a.id for a in snapshot.agents if a.draining]
    assert len(drained) == 1 and master.agent_state(drained[0]) == (False, True)
    assert disables(master) == drained
    # The bridge's own drain is not an admin's: the agent is for pending tasks again.
    assert all(a.enabled for a in snapshot.agents)
    assert snapshot.retires is True and not any(a.retired for a in snapshot.agents)

    # New work: the drained agent is enabled again in the same pass, before any
    # snapshot shows the task: drained, not retired, no function terminates it.
    master.submit("trial-2", 8, POOL)
    advance(bridge, 0.1)
    snapshot = next(s for s in bridge.run_once() if s.pool == POOL)
    assert master.agent_state(drained[0]) == (True, False)
    assert not any(a.draining for a in snapshot.agents)
    assert all(a.enabled for a in snapshot.agents)
    assert [t.slots for t in snapshot.pending] == [8]
    master.schedule()


def test_a_drained_agent_nothing_wants_is_retired_for_good(
    master: LocalDetermined, layout: Layout
) -> None:
    bridge, snapshot = one_agent_drained(master, layout)
    (agent,) = [a.id for a in snapshot.agents if a.draining]
    advance(bridge, 0.25)  # drained and idle 15 s: not yet (nothing changed, nothing sent)
    assert not any(a.retired for s in bridge.run_once() for a in s.agents)
    advance(bridge, 0.5)  # 45 s: retired
    snapshot = next(s for s in bridge.run_once() if s.pool == POOL)
    assert [a.id for a in snapshot.agents if a.retired] == [agent]
    assert [a.enabled for a in snapshot.agents if a.id == agent] == [False]  # no room
    # A task now does not bring it back: the functions may be terminating it.
    master.submit("trial-2", 8, POOL)
    advance(bridge, 0.1)
    snapshot = next(s for s in bridge.run_once() if s.pool == POOL)
    assert master.agent_state(agent) == (False, True)
    assert [a.id for a in snapshot.agents if a.retired] == [agent]


def test_no_drain_below_min_instances_or_without_the_option(
    master: LocalDetermined, layout: Layout
) -> None:
    layout.cluster(master)
    for config in (layout.config(), layout.config(drain=True, min_instances=2)):
        bridge, _ = bridge_for(master, config)
        bridge.run_once()
        advance(bridge, 30)
        bridge.run_once()
    assert disables(master) == []
    if layout.neighbours:
        # v100 drains its idle agent (the second bridge, a restart, claims it again);
        # t4, at min_instances and not drained, does not.
        assert disables(master, ("v-1", "v-2", "t-1")) == ["v-2", "v-2"]


def test_a_reconnecting_agent_is_never_reported_draining(
    master: LocalDetermined, layout: Layout
) -> None:
    layout.cluster(master)
    master.reconnecting("i-2")
    bridge, _ = bridge_for(master, layout.config(drain=True, min_instances=1))
    snapshot = layout.ours(bridge.run_once())
    # Listed draining by the master, but this bridge did not drain it: it tries to, the
    # master refuses (HTTP 500), and the snapshot does not call it draining. The master
    # places nothing on it meanwhile: its slots are no room.
    agents = {a.id: (a.draining, a.enabled) for a in snapshot.agents}
    assert agents == {"i-1": (False, True), "i-2": (False, False)}
    assert any("could not drain agent i-2" in line for line in bridge.logger.lines)  # type: ignore[attr-defined]
    master.reconnecting("i-2", False)
    advance(bridge, 6)
    bridge.run_once()
    advance(bridge, 6)
    snapshot = next(s for s in bridge.run_once() if s.pool == POOL)
    assert [a.id for a in snapshot.agents if a.draining] == ["i-1"]  # the longest idle


@pytest.mark.parametrize("drain", [False, True], ids=["no drain", "drain"])
@pytest.mark.parametrize("admin_drain", [False, True], ids=["disabled", "disabled with drain"])
def test_an_agent_an_admin_disabled_is_published_not_enabled(
    master: LocalDetermined, layout: Layout, drain: bool, admin_drain: bool
) -> None:
    """Published ``enabled: false`` and not ``draining`` (the bridge did not drain it):
    the functions count none of its free slots, and launch for the task the master
    will not place there; termination stays the pool's rule."""
    layout.cluster(master)
    trial = master.submit("trial-1", 4, POOL).task_id
    master.schedule()
    (busy,) = master.placement(trial)
    idle = ({"i-1", "i-2"} - {busy}).pop()
    admin_disable(master, busy, drain=True)  # keeps its trial, 4 free slots
    admin_disable(master, idle, drain=admin_drain)
    master.submit("trial-2", 4, POOL)
    bridge, _ = bridge_for(master, layout.config(drain=drain))
    snapshot = layout.ours(bridge.run_once())
    agents = {a.id: (a.enabled, a.draining, a.used_slots) for a in snapshot.agents}
    if drain and admin_drain:
        # Idle and listed draining: claimed as the bridge's own drain and retired at once
        # (docs/bridge.md: a bridge before this one may have reported it so): never
        # enabled again, no room, and the functions may terminate it.
        assert agents == {busy: (False, False, 4), idle: (False, True, 0)}
        assert [a.id for a in snapshot.agents if a.retired] == [idle]
    else:
        assert agents == {busy: (False, False, 4), idle: (False, False, 0)}
    assert [t.slots for t in snapshot.pending] == [4]
    config = layout.config(drain=drain).pool(POOL)
    instances = fleet(agent_instance(busy), agent_instance(idle, idle_since=ago(hours=1)))
    plan = decide(config, instances, snapshot, snapshot.time)
    assert [launch.tasks for launch in plan.launches] == [(snapshot.pending[0].task,)]
    # Without drain the idle period terminates it as any agent; with drain it stays,
    # unless the bridge retired it (an agent it claimed).
    assert [t.instance_id for t in plan.terminations] == (
        [] if drain and not admin_drain else [idle]
    )


def test_the_snapshot_that_ends_an_idle_period_goes_out_on_time(master: LocalDetermined) -> None:
    """The functions terminate an agent at the first snapshot more than
    max_idle_agent_period after the one that first showed it idle, as Determined does. A
    change between shifts the heartbeats off that moment; the bridge publishes at its
    first pass after the period runs out all the same (it used to wait for the
    heartbeat, up to 30 s more)."""
    config = pool_config()
    add_scaled_pools(master, config)
    master.add_agent("i-1", POOL, 8)
    trial = master.submit("trial", 8, POOL).task_id
    master.schedule()
    bridge, _ = bridge_for(master, config)
    bridge.run_once()
    advance(bridge, 10 / 60)
    master.finish(trial)
    (idle,) = bridge.run_once()  # i-1 idle from here
    published = []
    while bridge.clock() - idle.time < timedelta(minutes=5, seconds=25):
        advance(bridge, 5 / 60)  # a pass every 5 s, as run_forever's
        if bridge.clock() - idle.time == timedelta(seconds=20):
            master.add_agent("i-2", POOL, 8)  # a change: heartbeats at +50 s, +80 s, ...
        published += bridge.run_once()
    seconds = [int((s.time - idle.time).total_seconds()) for s in published]
    assert seconds == [20, *range(50, 300, 30), 305, 325]
    ended = published[seconds.index(305)]
    instances = fleet(
        agent_instance("i-1", idle_since=idle.time),
        agent_instance("i-2", idle_since=idle.time + timedelta(seconds=20)),
    )
    plan = decide(config.pool(POOL), instances, ended, ended.time)
    assert [t.instance_id for t in plan.terminations] == ["i-1"]


def test_three_drained_pools_each_drain_their_idle_agents_in_time(
    master: LocalDetermined,
) -> None:
    """Found against the local master: one idle-since memory for all pools, each
    pool's pass forgetting the others' agents, drained no agent at all but the last
    pool's. Each idle agent is drained within two passes of its idle period."""
    periods = {"a100": "5m", "v100": "3m", "t4": "7m"}
    config = pools_config(
        {name: {"drain": True, "max_idle_agent_period": p} for name, p in periods.items()}
    )
    agents = [f"{name}-{n}" for name in periods for n in (1, 2, 3)]
    trials = []
    add_scaled_pools(master, config)
    for name in periods:
        for n in (1, 2, 3):
            master.add_agent(f"{name}-{n}", name, 8)
        trials.append(master.submit(f"{name}-trial", 8, name).task_id)
    master.schedule()
    bridge, _ = bridge_for(master, config)
    pass_every = timedelta(seconds=5)
    idle_from = START
    drained_at: dict[str, datetime] = {}
    while len(drained_at) < 6 and bridge.clock() - START < timedelta(minutes=10):
        bridge.run_once()
        for agent in (a for a in agents if a not in drained_at):
            if master.agent_state(agent) == (False, True):
                drained_at[agent] = bridge.clock()
        advance(bridge, pass_every.total_seconds() / 60)
    busy = {a for trial in trials for a in master.placement(trial)}
    assert len(busy) == 3 and set(drained_at) == set(agents) - busy
    for agent, at in drained_at.items():
        period = _go(periods[agent.rsplit("-", 1)[0]])
        assert period <= at - idle_from <= period + pass_every, agent


def _go(text: str) -> timedelta:
    return timedelta(minutes=int(text.removesuffix("m")))


@pytest.mark.parametrize("layout", [Layout(False), Layout(True)], ids=["one pool", "three pools"])
def test_print_once_from_the_command_line(
    master: LocalDetermined, tmp_path: Path, layout: Layout
) -> None:
    layout.cluster(master)
    master.submit("trial", 8, POOL)
    config = tmp_path / "pools.yaml"
    lines = ["resource_pools:"]
    for name in layout.names:
        lines += [
            f"  - pool_name: {name}",
            "    provider: {type: aws, region: us-west-2, image_id: ami-12345678, "
            "instance_type: p4d.24xlarge, master_url: http://x:8080}",
        ]
    config.write_text("\n".join(lines) + "\n")
    token = tmp_path / "token"
    token.write_text(master.login("admin") + "\n")
    command = [sys.executable, "-m", "dynagent.cli.main", "bridge", "--master", master.url]
    done = subprocess.run(
        [*command, "--config", str(config), "--print", "--once", "--token-file", str(token)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    printed = {(s := json.loads(line))["pool"]: s for line in done.stdout.splitlines()}
    assert sorted(printed) == sorted(layout.names)
    assert printed[POOL]["pending"][0]["slots"] == 8
    assert master.login("admin") not in done.stderr  # no token in the log
    master.down()
    failed = subprocess.run(
        [*command, "--config", str(config), "--print", "--once", "--token-file", str(token)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert failed.returncode == 1 and failed.stdout == ""
    (said,) = [line for line in failed.stderr.splitlines() if line.startswith("dynagent")]
    assert f"the master at {master.url} could not be read" in said
    assert "nothing published" in said


def test_a_master_before_0_23_1_is_read_through_the_first_job_queue_api(
    master: LocalDetermined, layout: Layout
) -> None:
    layout.cluster(master)
    for n in range(105):
        master.submit(f"trial-{n}", 8, POOL)
    master.release("0.23.0")  # no job-queues-v2 yet: 501 Not Implemented
    bridge, _ = bridge_for(master, layout.config())
    snapshot = layout.ours(bridge.run_once())
    assert len(snapshot.pending) == 105
    queues = [(c.path, dict(c.query), c.status) for c in master.calls()]
    ours = [(p, q.get("offset"), s) for p, q, s in queues if q.get("resourcePool") == POOL]
    assert ours == [
        ("/api/v1/job-queues-v2", "0", 501),
        ("/api/v1/job-queues", "0", 200),
        ("/api/v1/job-queues", "100", 200),
    ]


def test_a_pool_with_auto_headroom_is_told_the_tasks_that_came(
    master: LocalDetermined, layout: Layout
) -> None:
    layout.cluster(master)
    bridge, _ = bridge_for(master, layout.config(warm_headroom_slots="auto"))
    clock = bridge.clock
    assert isinstance(clock, Clock)
    first = bridge.run_once()
    assert layout.ours(first).arrivals == ()
    # Only the pool that sizes its headroom from them is told: the others' messages stay.
    assert all(s.arrivals is None for s in first if s.pool != POOL)
    master.submit("trial-1", 1, POOL)
    master.submit("trial-2", 1, POOL)
    master.schedule()  # one runs on i-1 already, the other too: placed, still arrived
    clock.now += timedelta(seconds=5)
    (arrived,) = bridge.run_once()  # the neighbours did not change
    assert [(a.age, a.slots, a.count) for a in arrived.arrivals or ()] == [(0, 1, 2)]
    clock.now += timedelta(seconds=30)
    beat = layout.ours(bridge.run_once())
    assert [(a.age, a.count) for a in beat.arrivals or ()] == [(30, 2)]
