"""Upgrade day end to end on AWS: the local Determined master, ``dynagent bridge``
reading the functions' drain notices, the reconcile Lambda's code and EC2, on one
virtual clock.

The pool's agent image moves to a new version while a trial runs on an agent of the
old one. The functions tell the bridge to drain that agent; the master places no new
task there (a new trial gets a machine of the new image), the old trial runs to its
end, and the agent's machine is terminated on the first pass after it is empty, long
before its idle period. Nothing is killed.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from dynagent.core.boot.drift import read_boot_tag
from dynagent.testing.aws.local_aws import LocalAws
from dynagent.testing.determined.master import LocalDetermined

from ..aws.helpers import config, image_id, managed_instances, pool_document, tags_of
from .aws_side import told_to_drain

OLD_AGENT = "determinedai/determined-agent:0.38.0"
NEW_AGENT = "determinedai/determined-agent:0.39.0"


def boot_of(ec2: Any, instance_id: str) -> str:
    (found,) = [m for m in managed_instances(ec2) if m["InstanceId"] == instance_id]
    return read_boot_tag(tags_of(found)["dynagent:boot-config"])[0]


def test_a_busy_agent_of_the_old_image_finishes_its_trial_takes_nothing_new_and_goes(
    aws: LocalAws, ec2: Any, master: LocalDetermined
) -> None:
    period = {"max_idle_agent_period": "1h", "agent_docker_image": OLD_AGENT}
    cfg = config(pool_document(image_id(ec2), **period))
    cluster, side = told_to_drain(aws, master, cfg)
    clock = cluster.clock

    first = cluster.submit("exp-1", 8)
    cluster.run_until(lambda: cluster.state(first) == "RUNNING", "exp-1 running")
    (old,) = cluster.agents
    old_boot = boot_of(ec2, old)

    # Upgrade day: the functions deploy the pool's new agent image.
    upgraded = config(pool_document(image_id(ec2), **(period | {"agent_docker_image": NEW_AGENT})))
    side.functions.config = upgraded.for_cloud("aws")
    cluster.run_until(
        lambda: master.agent_state(old) == (False, True),
        "the bridge drained the agent of the old image",
        limit=timedelta(minutes=2),
    )
    second = cluster.submit("exp-2", 8)
    cluster.run_until(lambda: cluster.state(second) == "RUNNING", "exp-2 running")
    (placed,) = master.placement(second)
    assert placed != old and boot_of(ec2, placed) != old_boot
    assert cluster.state(first) == "RUNNING"  # the old one's trial runs on
    assert old in cluster.cloud.alive()

    master.finish(first)
    ended = clock.now
    cluster.run_until(lambda: old not in cluster.cloud.alive(), "the old agent terminated")
    assert clock.now - ended < timedelta(minutes=2)  # not its idle period of an hour
    (reason,) = [r for i, r in cluster.terminations() if i == old]
    assert reason.startswith("drifted: agent image, config or environment changed")
    assert cluster.state(second) == "RUNNING"
    assert cluster.killed() == []
    cluster.check_no_snapshot_lost()
