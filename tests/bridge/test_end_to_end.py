"""End to end on AWS: the local Determined master, ``dynagent bridge``, an SQS FIFO queue
on the local AWS, the reconcile and sweep Lambdas' code, and EC2, on one virtual clock.

The agents the master schedules on are the instances the function launched (see
``cluster.py``); a task killed because its instance went away fails the test.

Each test runs with its pool alone, and again beside two neighbours on the same master,
bridge, queue and functions: ``v100`` drained, running a trial, and ``t4`` without drain
at its ``min_instances`` of 1. Neither may change what happens in the pool under test,
nor lose its own agents or tasks.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from dynagent.core.snapshot import Snapshot
from dynagent.testing.aws.local_aws import LocalAws
from dynagent.testing.determined.master import LocalDetermined

from ..aws.helpers import config, image_id, pool_document
from .aws_side import AwsSide
from .cluster import STEP, Cluster, Recorder, VirtualClock, admin_disable

IDLE = timedelta(minutes=5)


NEIGHBOURS: dict[str, dict[str, Any]] = {
    "v100": {"drain_idle_agents": True, "max_idle_agent_period": "5m"},
    "t4": {"min_instances": 1, "max_idle_agent_period": "5m"},
}


@pytest.fixture(params=[False, True], ids=["one pool", "three pools"])
def make_cluster(
    request: pytest.FixtureRequest, aws: LocalAws, ec2: Any, master: LocalDetermined
) -> Any:
    def make(**provider: Any) -> Cluster:
        fields = {"drain_idle_agents": True, "max_idle_agent_period": "5m", **provider}
        pools = [pool_document(image_id(ec2), **fields)]
        if request.param:
            pools += [
                pool_document(image_id(ec2), name, **extra) for name, extra in NEIGHBOURS.items()
            ]
        cfg = config(*pools)
        clock, log = VirtualClock(), Recorder()
        cluster = Cluster(master, AwsSide(aws, cfg, clock, log), cfg, clock, log)
        if request.param:
            cluster.submit("v100-trial", 8, pool="v100")
        return cluster

    return make


def finish(cluster: Cluster) -> None:
    """Nothing lost, nothing killed; the neighbours, if any, where they should be: the
    v100 trial running on the one agent launched for it, t4 at its one agent, and
    neither pool terminating anything."""
    cluster.check_no_snapshot_lost()
    assert cluster.killed() == []
    if not cluster.neighbour_tasks:
        return
    (trial,) = cluster.neighbour_tasks
    cluster.run_until(
        lambda: cluster.state(trial) == "RUNNING" and len(cluster.neighbour_agents("t4")) == 1,
        "the neighbours: v100's trial running, t4 at min_instances",
    )
    assert set(cluster.master.placement(trial)) == cluster.neighbour_agents("v100")
    assert cluster.terminations("v100") == cluster.terminations("t4") == []
    assert cluster.killed() == []
    cluster.check_no_snapshot_lost()


def test_tasks_scale_the_pool_up_and_drained_agents_down(make_cluster: Any) -> None:
    cluster: Cluster = make_cluster(min_instances=1)
    cluster.run_until(lambda: len(cluster.agents) == 1, "min_instances: one agent")
    first = set(cluster.agents)

    trials = [cluster.submit(f"trial-{n}", 8) for n in range(3)]
    cluster.run_until(lambda: len(cluster.running()) == 3, "three 8-slot trials running")
    assert len(cluster.agents) == 3 and first <= cluster.agents  # two more were launched
    assert len(cluster.born) == 3

    for trial in trials:
        cluster.master.finish(trial)
    idle_at = cluster.clock.now
    cluster.run_until(lambda: len(cluster.agents) == 1, "back to min_instances")
    # Not before the idle period: the bridge drains first, then the function terminates.
    assert cluster.clock.now - idle_at >= IDLE
    drained = [
        a.id for s in cluster.sink.sent for a in s.agents if a.draining and a.used_slots == 0
    ]
    terminated = cluster.terminations()
    assert len(terminated) == 2
    for instance_id, reason in terminated:
        assert instance_id in drained
        assert reason.startswith("drained by the master and empty")
    disables = [c for c in cluster.master.calls() if c.path.endswith("/disable")]
    assert len(disables) == 2 and all(c.path.split("/")[-2] in drained for c in disables)
    # It stays there, and nothing ran anywhere it was killed.
    cluster.run(timedelta(minutes=10))
    assert len(cluster.agents) == 1 and cluster.killed() == []
    finish(cluster)


def test_a_master_outage_publishes_nothing_and_loses_nothing(make_cluster: Any) -> None:
    cluster: Cluster = make_cluster()
    trials = [cluster.submit(f"trial-{n}", 8) for n in range(2)]
    cluster.run_until(lambda: len(cluster.running()) == 2, "two trials running")
    busy = cluster.busy_agents()
    assert len(busy) == 2

    cluster.master.down()
    sent, sweeps = len(cluster.sink.sent), len(cluster.outcomes())
    cluster.master.finish(trials[0])  # one agent goes idle while nobody can tell
    cluster.run(timedelta(minutes=5))
    assert len(cluster.sink.sent) == sent  # the bridge published nothing
    assert len(cluster.outcomes()) > sweeps  # the sweep ran, every minute
    assert cluster.terminations() == [] and cluster.agents == busy
    assert cluster.killed() == []

    cluster.master.up()
    cluster.step()
    (after,) = ours(cluster.sink.sent[sent:], cluster)
    assert after.seq in cluster.applied_seqs()
    assert [(a.id, a.used_slots) for a in after.agents if a.used_slots] == [
        (next(iter(cluster.master.placement(trials[1]))), 8)
    ]
    # The idle period starts when the bridge can see it: the agent goes after it.
    cluster.run_until(lambda: len(cluster.agents) == 1, "the idle agent drained and gone")
    assert cluster.state(trials[1]) == "RUNNING" and cluster.killed() == []
    finish(cluster)


def test_a_zero_slot_command_on_an_empty_pool_launches_one_instance(make_cluster: Any) -> None:
    cluster: Cluster = make_cluster()
    command = cluster.submit("notebook", 0, "COMMAND")
    cluster.run_until(lambda: cluster.state(command) == "RUNNING", "the command running")
    assert len(cluster.born) == 1
    assert list(cluster.master.placement(command)) == list(cluster.born)
    cluster.run(timedelta(minutes=10))  # it runs there; nothing more, nothing less
    assert len(cluster.born) == 1 and cluster.agents == set(cluster.born)
    assert cluster.state(command) == "RUNNING" and cluster.killed() == []
    finish(cluster)


@pytest.mark.parametrize("drain", [False, True], ids=["no drain", "drain"])
def test_a_task_the_admins_disabled_agent_has_room_for_gets_a_new_instance(
    make_cluster: Any, drain: bool
) -> None:
    """An admin disabled (with drain) the agent running a 4-slot trial: its 4 free slots
    take nothing new. Counted as room, the second trial would wait for ever."""
    cluster: Cluster = make_cluster(drain_idle_agents=drain)
    first = cluster.submit("trial-1", 4)
    cluster.run_until(lambda: cluster.state(first) == "RUNNING", "the first trial running")
    (agent,) = cluster.agents
    admin_disable(cluster.master, agent, drain=True)
    second = cluster.submit("trial-2", 4)
    cluster.run_until(lambda: cluster.state(second) == "RUNNING", "the second trial running")
    assert len(cluster.born) == 2 and agent not in cluster.master.placement(second)
    assert cluster.master.agent_state(agent) == (False, True)  # still the admin's
    assert cluster.state(first) == "RUNNING" and cluster.terminations() == []
    finish(cluster)


def drained_and_published(cluster: Cluster) -> str:
    """Step until a bridge pass drains an idle agent and publishes it draining; stop
    there, before the function sees that snapshot. The drained agent's id."""
    for _ in range(100):
        cluster.clock.now += STEP
        cluster.sync_agents()
        cluster.master.schedule()
        for snapshot in ours(cluster.bridge_pass(), cluster):
            drained = [a.id for a in snapshot.agents if a.draining]
            if drained:
                assert cluster.master.agent_state(drained[0]) == (False, True)
                return drained[0]
        cluster.deliver()
        cluster.sweep()
    raise AssertionError("no agent drained")


def bridge_tick(cluster: Cluster) -> list[Snapshot]:
    """The clock moves, agents come and go, the master schedules, the bridge passes;
    the queue is not delivered. The pass's snapshots of the pool under test."""
    cluster.clock.now += STEP
    cluster.sync_agents()
    cluster.master.schedule()
    return ours(cluster.bridge_pass(), cluster)


def ours(snapshots: list[Snapshot], cluster: Cluster) -> list[Snapshot]:
    return [s for s in snapshots if s.pool == cluster.pool.name]


def trial_ended_and_agent_drained(make_cluster: Any) -> tuple[Cluster, str, AwsSide]:
    """A trial ran and ended; its agent idle, drained and published draining, before
    the function sees that snapshot. The cluster, the agent and the AWS side."""
    cluster: Cluster = make_cluster()
    trial = cluster.submit("trial-1", 8)
    cluster.run_until(lambda: cluster.state(trial) == "RUNNING", "the first trial running")
    cluster.master.finish(trial)
    agent = drained_and_published(cluster)
    side = cluster.cloud
    assert isinstance(side, AwsSide)
    return cluster, agent, side


# Every interleaving in the pool alone; beside the neighbours, the one that once killed.
@pytest.mark.parametrize(
    ("make_cluster", "order"),
    [(False, "function first"), (False, "bridge first"), (False, "stale"),
     (False, "retried"), (True, "stale")],
    indirect=["make_cluster"],
    ids=["function first", "bridge first", "stale", "retried", "three pools-stale"],
)  # fmt: skip
def test_a_task_submitted_while_an_agent_is_drained_runs_on_it_within_one_pass(
    make_cluster: Any, order: str
) -> None:
    """The bridge drained an idle agent and published it draining; a task arrives. However
    the function's passes interleave with the bridge's, the task runs on that agent
    within one bridge pass, nothing is launched for it, and nothing is killed.

    History: with the bridge enabling the agent in its next pass, a draining snapshot
    the function applied after that (``stale``: its batch taken before, acted on after;
    ``retried``: redelivered after a failure) terminated the agent under the task the
    master had placed on it. A draining report then became a lease, and the bridge
    waited 60 s before enabling the agent: the task waited a minute for an agent that was
    up. Now a drained agent is terminated only once reported retired, which the bridge
    never takes back, so it enables a drained one at once.
    """
    cluster, agent, side = trial_ended_and_agent_drained(make_cluster)

    held = side.receive() if order in ("stale", "retried") else []  # a Lambda took it
    if order == "function first":
        cluster.deliver()  # drained, not retired: the function leaves it
        assert agent in side.alive()
    late = cluster.submit("trial-2", 8)
    (snapshot,) = bridge_tick(cluster)  # one bridge pass
    assert cluster.master.agent_state(agent) == (True, False)  # enabled at once
    assert not any(a.retired for a in snapshot.agents)
    cluster.master.schedule()
    assert list(cluster.master.placement(late)) == [agent]
    if order == "stale":
        side.hand_over(held)  # the draining report, applied after the enable
    if order == "retried":
        cluster.clock.now += timedelta(minutes=5)
        side.hand_over(held)  # redelivered much later
    assert agent in side.alive()
    cluster.deliver()
    assert len(cluster.born) == 1  # nothing launched: the agent is for the task
    cluster.run(timedelta(minutes=2))
    assert cluster.state(late) == "RUNNING" and cluster.killed() == []
    finish(cluster)


@pytest.mark.parametrize("make_cluster", [False], indirect=True, ids=["one pool"])
def test_a_retired_agent_is_terminated_and_a_later_task_gets_a_new_one(
    make_cluster: Any,
) -> None:
    """Drained and idle for RETIRE_AFTER with no task wanting it, the agent is reported
    retired and terminated; a task after that gets a machine of its own."""
    cluster, agent, side = trial_ended_and_agent_drained(make_cluster)
    retired = False
    for _ in range(100):
        retired = retired or any(
            a.id == agent and a.retired for s in bridge_tick(cluster) for a in s.agents
        )
        cluster.deliver()
        if retired:
            break
    assert retired and agent not in side.alive()
    late = cluster.submit("trial-2", 8)
    cluster.run_until(lambda: cluster.state(late) == "RUNNING", "the late trial running")
    assert agent not in cluster.master.placement(late)
    assert len(cluster.born) == 2 and cluster.killed() == []
    finish(cluster)
