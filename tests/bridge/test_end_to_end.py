"""End to end on AWS: the local Determined master, ``dynagent bridge``, an SQS FIFO queue
on the local AWS, the reconcile and sweep Lambdas' code, and EC2, on one virtual clock.

The agents the master schedules on are the instances the function launched (see
``cluster.py``); a task killed because its instance went away fails the test.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from dynagent.testing.aws import LocalAws
from dynagent.testing.determined import LocalDetermined

from ..aws.helpers import config, image_id, pool_document
from .aws_side import AwsSide
from .cluster import Cluster, Recorder, VirtualClock

IDLE = timedelta(minutes=5)


@pytest.fixture
def make_cluster(aws: LocalAws, ec2: Any, master: LocalDetermined) -> Any:
    def make(**provider: Any) -> Cluster:
        fields = {"drain_idle_agents": True, "max_idle_agent_period": "5m", **provider}
        cfg = config(pool_document(image_id(ec2), **fields))
        clock, log = VirtualClock(), Recorder()
        return Cluster(master, AwsSide(aws, cfg, clock, log), cfg, clock, log)

    return make


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
    assert len(disables) == 2
    # It stays there, and nothing ran anywhere it was killed.
    cluster.run(timedelta(minutes=10))
    assert len(cluster.agents) == 1 and cluster.killed() == []
    cluster.check_no_snapshot_lost()


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
    (after,) = cluster.sink.sent[sent:]
    assert after.seq in cluster.applied_seqs()
    assert [(a.id, a.used_slots) for a in after.agents if a.used_slots] == [
        (next(iter(cluster.master.placement(trials[1]))), 8)
    ]
    # The idle period starts when the bridge can see it: the agent goes after it.
    cluster.run_until(lambda: len(cluster.agents) == 1, "the idle agent drained and gone")
    assert cluster.state(trials[1]) == "RUNNING" and cluster.killed() == []
    cluster.check_no_snapshot_lost()


def test_a_zero_slot_command_on_an_empty_pool_launches_one_instance(make_cluster: Any) -> None:
    cluster: Cluster = make_cluster()
    command = cluster.submit("notebook", 0, "COMMAND")
    cluster.run_until(lambda: cluster.state(command) == "RUNNING", "the command running")
    assert len(cluster.born) == 1
    assert list(cluster.master.placement(command)) == list(cluster.born)
    cluster.run(timedelta(minutes=10))  # it runs there; nothing more, nothing less
    assert len(cluster.born) == 1 and cluster.agents == set(cluster.born)
    assert cluster.state(command) == "RUNNING" and cluster.killed() == []
    cluster.check_no_snapshot_lost()
