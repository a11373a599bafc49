"""Upgrade day and broken GPUs on the local AWS, through the reconcile function as Lambda
runs it: an idle min_instances agent of the old agent image is replaced, the new
machine first; a busy one is never terminated, gets a drain notice on the drain-notice
queue, and goes on the first pass after the bridge reports it drained and empty; a
p3.8xlarge agent registered with 3 slots is replaced. A duplicate delivery launches
nothing more."""

from __future__ import annotations

import logging
from typing import Any

from dynagent.aws import tags
from dynagent.aws.functions import AwsFunctions
from dynagent.bridge.drain_notices import SqsDrainNotices
from dynagent.cli.status_command import AwsSource, statuses
from dynagent.core.boot.drift import read_boot_tag
from dynagent.core.snapshot import Agent
from dynagent.report.status import render
from dynagent.testing.aws.event_source import LambdaContext
from dynagent.testing.aws.local_aws import LocalAws

from ..builders import snapshot as any_snapshot
from .helpers import (
    config,
    fifo_queue,
    image_id,
    managed_instances,
    now,
    pool_document,
    published_event,
    tags_of,
)

OLD_AGENT = "determinedai/determined-agent:0.38.0"
NEW_AGENT = "determinedai/determined-agent:0.39.0"


class Functions:
    """The reconcile function over the pool a100 as an admin's config says it, the
    config changed between passes as on upgrade day; snapshots in seq order."""

    def __init__(self, ec2: Any, sqs: Any, **provider: Any) -> None:
        self.ec2, self.sqs, self.provider = ec2, sqs, provider
        self.queue = fifo_queue(sqs, "snapshots.fifo")
        self.notices = sqs.create_queue(QueueName="drain-notices")["QueueUrl"]
        self.seq = 0
        self.event: dict[str, Any] = {}
        self.functions = self.configured(**provider)

    def configured(self, **provider: Any) -> AwsFunctions:
        self.provider |= provider
        document = pool_document(image_id(self.ec2), **self.provider)
        self.functions = AwsFunctions(
            config(document),
            ec2_for_region=lambda _: self.ec2,
            sqs=self.sqs,
            drain_notice_queue_url=self.notices,
            sleep=lambda _: None,
        )
        return self.functions

    def send(self, *agents: Agent | tuple[str, int, int], pending: Any = ()) -> None:
        """One snapshot through the function; ``again`` delivers it a second time."""
        self.seq += 1
        shot = any_snapshot(
            pool_name="a100", seq=self.seq, time=now(), agents=agents, pending=pending
        )
        self.event = published_event(self.sqs, self.queue, shot)
        self.again()

    def again(self) -> None:
        result = self.functions.reconcile_batch(self.event, LambdaContext())
        assert result == {"batchItemFailures": []}

    def drain_notices(self) -> list[str]:
        """The agents the functions told the bridge to drain since the last call, read as
        the bridge reads them."""
        reader = SqsDrainNotices(self.sqs, self.notices, logging.getLogger("test"))
        return [notice.agent_id for _, notice in reader.receive()]


def ids(ec2: Any) -> set[str]:
    return {str(i["InstanceId"]) for i in managed_instances(ec2)}


def agent_image_tag(ec2: Any, instance_id: str) -> tuple[str, str]:
    (found,) = [i for i in managed_instances(ec2) if i["InstanceId"] == instance_id]
    return read_boot_tag(tags_of(found)[tags.BOOT_CONFIG_TAG])


def test_an_idle_min_instances_agent_of_the_old_image_is_replaced_new_machine_first(
    aws: LocalAws, ec2: Any, sqs: Any
) -> None:
    cluster = Functions(ec2, sqs, min_instances=1, agent_docker_image=OLD_AGENT)
    cluster.send()
    (first,) = ids(ec2)
    cluster.send((first, 8, 0))
    # Upgrade day: the pool's agent image moves to the master's new version.
    cluster.configured(agent_docker_image=NEW_AGENT)
    cluster.send((first, 8, 0))
    (second,) = ids(ec2) - {first}
    assert first in ids(ec2)  # min_instances holds: the old one stays until then
    cluster.again()  # a duplicate delivery launches nothing more
    assert ids(ec2) == {first, second}
    old, new = agent_image_tag(ec2, first), agent_image_tag(ec2, second)
    assert old[0] != new[0] and old[1][:12] == new[1][:12] and old[1][12:16] != new[1][12:16]
    cluster.send((first, 8, 0))  # the new machine still boots: nothing yet
    assert ids(ec2) == {first, second}
    cluster.send((first, 8, 0), (second, 8, 0))
    assert ids(ec2) == {second}
    cluster.functions.sweep()
    assert ids(ec2) == {second}
    assert cluster.drain_notices() == []  # idle, nothing waiting: no drain was needed


def test_a_busy_agent_of_the_old_image_is_drained_and_goes_once_empty(
    aws: LocalAws, ec2: Any, sqs: Any
) -> None:
    cluster = Functions(ec2, sqs, agent_docker_image=OLD_AGENT, max_idle_agent_period="1h")
    cluster.send(pending=[("exp-1.trial-1", 8)])
    (agent,) = ids(ec2)
    cluster.send((agent, 8, 8))
    cluster.configured(agent_docker_image=NEW_AGENT)
    cluster.send((agent, 8, 8))
    assert ids(ec2) == {agent}
    assert cluster.drain_notices() == [agent]
    # The bridge drained it; its trial runs on, and the notice comes again each pass.
    drained = Agent(id=agent, slots=8, used_slots=8, enabled=False, draining=True, retired=True)
    cluster.send(drained)
    assert ids(ec2) == {agent} and cluster.drain_notices() == [agent]
    # Its trial ended: terminated on this pass, an hour before its idle period would.
    cluster.send(Agent(id=agent, slots=8, used_slots=0, enabled=False, draining=True, retired=True))
    assert ids(ec2) == set()


def test_a_p3_8xlarge_agent_registered_with_3_slots_is_replaced(
    aws: LocalAws, ec2: Any, sqs: Any
) -> None:
    cluster = Functions(ec2, sqs, instance_type="p3.8xlarge", min_instances=2)
    cluster.send()
    healthy, broken = sorted(ids(ec2))
    cluster.send((healthy, 4, 0), (broken, 3, 0))
    (replacement,) = ids(ec2) - {healthy, broken}
    cluster.send((healthy, 4, 0), (broken, 3, 0), (replacement, 4, 0))
    assert ids(ec2) == {healthy, replacement}


def test_status_says_which_agents_drifted_and_what_the_last_pass_replaces(
    aws: LocalAws, ec2: Any, sqs: Any
) -> None:
    cluster = Functions(ec2, sqs, agent_docker_image=OLD_AGENT, instance_type="p3.8xlarge")
    cluster.send(pending=[("exp-1.trial-1", 4), ("exp-1.trial-2", 4)])
    drifting, broken = sorted(ids(ec2))
    new = cluster.configured(agent_docker_image=NEW_AGENT)
    new.snapshot_queue_url = cluster.queue
    new.__post_init__()  # the summaries go to the snapshot queue's tags
    # The first agent is of the old image; the second is of it too, and lost a GPU.
    cluster.send((drifting, 4, 4), (broken, 3, 3))

    source = AwsSource(new.config, lambda _: ec2, sqs, cluster.queue)
    (view,) = statuses(new.config, list(new.config.pools.values()), {"aws": source}, now())
    drifts = {item["id"]: item["drifted"] for item in view["instances"]}
    assert drifts == {i: "agent image, config or environment" for i in (drifting, broken)}
    assert (view["last_snapshot"]["drifted"], view["last_snapshot"]["broken"]) == (1, 1)
    text = "\n".join(render(view))
    assert "replacing 1 of an old config and 1 broken" in text
    assert "old config" in text.splitlines()[1]
