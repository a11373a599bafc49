"""Worst fit, end to end on AWS: the local Determined master scheduling with the pool's
``fitting_policy: worst``, ``dynagent bridge`` draining through the master's API, the
snapshot on the SQS FIFO queue, and the reconcile Lambda's code terminating on EC2.

Worst fit puts each new task on the emptiest agent, so four 1-slot commands hold four
8-slot agents busy and none ever goes idle. The bridge keeps the fullest agents until
their free slots hold one machine, drains the others while their tasks run, and the
function terminates each drained agent once its last task ends.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from dynagent.core.config import config_from_document
from dynagent.core.snapshot import parse_snapshot
from dynagent.testing.aws.local_aws import LocalAws
from dynagent.testing.determined.master import LocalDetermined

from ..aws.helpers import image_id, pool_document
from .aws_side import AwsSide
from .cluster import STEP, Cluster, Recorder, VirtualClock


def worst_fit_cluster(aws: LocalAws, ec2: Any, master: LocalDetermined) -> Cluster:
    """One pool of 8-slot p4d machines with drain; the master's pool schedules with worst
    fit, as ``dynagent master-config`` writes the pool file's ``scheduler`` for it."""
    entry = pool_document(image_id(ec2), drain_idle_agents=True, max_idle_agent_period="5m")
    entry["scheduler"] = {"fitting_policy": "worst"}
    document = {"resource_pools": [entry]}
    cfg = config_from_document(document)
    clock, log = VirtualClock(), Recorder()
    side = AwsSide(aws, cfg, clock, log)
    return Cluster(master, side, cfg, clock, log, document=document)


def agent_writes(cluster: Cluster) -> list[str]:
    """The enables and disables the master was sent since its calls were cleared."""
    return [c.path for c in cluster.master.calls() if c.path.endswith(("/enable", "/disable"))]


def spread_and_drained(cluster: Cluster) -> tuple[list[str], list[str], dict[str, str]]:
    """Four 8-slot trials on four agents end, and four 1-slot commands arrive before the
    next scheduler tick: worst fit gives each its own agent, where best fit would put
    all four on one. Then the bridge's pass: the fullest agents (all alike, 7 free: the
    lowest ids) are kept until their free slots hold one 8-slot machine; the other two
    are drained through the master's API and keep their commands. The kept agents, the
    drained ones, and each command's agent; the pass's snapshot is still queued."""
    trials = [cluster.submit(f"trial-{n}", 8) for n in range(4)]
    cluster.run_until(lambda: len(cluster.running()) == 4, "four 8-slot trials running")
    assert len(cluster.agents) == 4
    for trial in trials:
        cluster.master.finish(trial)
    commands = [cluster.submit(f"cmd-{n}", 1, "COMMAND") for n in range(4)]
    cluster.clock.now += STEP
    cluster.sync_agents()
    cluster.master.schedule()
    on = {command: next(iter(cluster.master.placement(command))) for command in commands}
    assert sorted(on.values()) == sorted(cluster.agents)

    agents = sorted(cluster.agents)
    kept, drained = agents[:2], agents[2:]
    cluster.master.clear_calls()
    cluster.bridge_pass()
    assert agent_writes(cluster) == [f"/api/v1/agents/{a}/disable" for a in drained]
    assert [cluster.master.agent_state(a) for a in agents] == [(True, False)] * 2 + [
        (False, True)
    ] * 2
    assert all(cluster.state(c) == "RUNNING" for c in commands)
    return kept, drained, on


def test_worst_fit_surplus_is_drained_through_the_master_and_terminated_when_empty(
    aws: LocalAws, ec2: Any, master: LocalDetermined
) -> None:
    cluster = worst_fit_cluster(aws, ec2, master)
    side = cluster.cloud
    assert isinstance(side, AwsSide)
    kept, drained, on = spread_and_drained(cluster)
    commands = list(on)

    # The snapshot on the queue, read as the function reads it: the two drained agents
    # draining and still busy, the kept ones not; the master's worst fit.
    (message,) = side.receive()
    published = parse_snapshot(message["Body"])
    assert published.fitting_policy == "worst"
    assert {a.id: (a.draining, a.used_slots, a.tasks) for a in published.agents} == {
        **{a: (False, 1, 1) for a in kept},
        **{a: (True, 1, 1) for a in drained},
    }
    side.hand_over([message])  # busy while draining: the function terminates nothing
    assert cluster.terminations() == [] and set(side.alive()) == {*kept, *drained}

    # A new command goes to a kept agent: the drained ones take nothing new.
    late = cluster.submit("cmd-late", 1, "COMMAND")
    cluster.step()
    assert list(cluster.master.placement(late)) == [kept[0]]

    # The first drained agent's command ends: the function terminates it, empty.
    first = next(c for c in commands if on[c] == drained[0])
    cluster.master.finish(first)
    cluster.run_until(lambda: drained[0] not in side.alive(), "the first drained agent gone")
    (terminated,) = cluster.terminations()
    assert terminated[0] == drained[0]
    assert terminated[1].startswith("drained by the master and empty")
    assert set(side.alive()) == {*kept, drained[1]}  # the other drained one is still busy

    second = next(c for c in commands if on[c] == drained[1])
    cluster.master.finish(second)
    cluster.run_until(lambda: drained[1] not in side.alive(), "the second drained agent gone")
    assert [t[0] for t in cluster.terminations()] == drained

    # The kept agents stay, enabled, running their commands: nothing more is drained.
    cluster.run(timedelta(minutes=10))
    assert set(side.alive()) == set(kept) == cluster.agents
    assert [cluster.master.agent_state(a) for a in kept] == [(True, False)] * 2
    assert agent_writes(cluster) == [f"/api/v1/agents/{a}/disable" for a in drained]
    assert cluster.killed() == [] and cluster.state(late) == "RUNNING"
    cluster.check_no_snapshot_lost()


def test_a_task_no_drained_agent_can_hold_gets_a_new_machine_not_them_back(
    aws: LocalAws, ec2: Any, master: LocalDetermined
) -> None:
    """An 8-slot trial arrives while the two drained agents run a command each (7 free).

    Found writing these tests: the bridge enabled drained agents, the most free first,
    until the pending tasks fit, whether or not they could hold any: both came back for
    a trial neither could take and were drained again once the new machine ran it
    (enabled meanwhile, worst fit would give them new work first). A drained agent is
    now enabled only when it lets a pending task fit that would otherwise wait.
    """
    cluster = worst_fit_cluster(aws, ec2, master)
    kept, drained, on = spread_and_drained(cluster)
    trial = cluster.submit("trial-late", 8)
    cluster.run_until(lambda: cluster.state(trial) == "RUNNING", "the late trial running")
    (new,) = set(cluster.born) - {*kept, *drained}
    assert list(cluster.master.placement(trial)) == [new]
    # The drained agents stayed drained: no enable, no second drain.
    assert agent_writes(cluster) == [f"/api/v1/agents/{a}/disable" for a in drained]
    for command in on:
        cluster.master.finish(command)
    cluster.run_until(lambda: not set(drained) & cluster.agents, "the drained agents gone")
    assert [t[0] for t in cluster.terminations()] == drained
    assert cluster.killed() == []
    cluster.check_no_snapshot_lost()
