"""A Capacity Block's end, end to end on AWS: the local Determined master, ``dynagent
bridge`` reading the functions' drain notices, the reconcile Lambda's code, and the
local AWS's capacity reservations, on one virtual clock.

The functions see the block's end coming and tell the bridge which agents to drain and
from when (``core.drain_notices``); the bridge disables them through the master at
that time, so the master places no new task there, and the task that runs there keeps
running. New work gets a machine outside the block.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from dynagent.bridge.drain_notices import SqsDrainNotices
from dynagent.core.drain_notices import notice_message
from dynagent.core.plan import DrainNotice
from dynagent.testing.aws.local_aws import LocalAws
from dynagent.testing.determined.master import LocalDetermined

from ..aws.helpers import config, image_id, managed_instances, pool_document
from .aws_side import told_to_drain
from .cluster import Recorder

LEAD = timedelta(minutes=40)


def block_of(ec2: Any, instance_id: str) -> str | None:
    (found,) = [m for m in managed_instances(ec2) if m["InstanceId"] == instance_id]
    return found.get("CapacityReservationId")


def test_a_capacity_block_s_agents_are_drained_at_the_lead_and_new_work_goes_elsewhere(
    aws: LocalAws, ec2: Any, master: LocalDetermined
) -> None:
    now = datetime.now(UTC)
    block = aws.create_capacity_block(
        "p4d.24xlarge", f"{aws.region}a", 2, now - timedelta(hours=1), now + timedelta(days=2)
    )
    cfg = config(pool_document(image_id(ec2), reservations=[block], max_idle_agent_period="5m"))
    cluster, _ = told_to_drain(aws, master, cfg)
    clock = cluster.clock

    first = cluster.submit("exp-1", 8)
    cluster.run_until(lambda: cluster.state(first) == "RUNNING", "exp-1 running")
    (agent,) = cluster.agents
    assert block_of(ec2, agent) == block

    # The block's end comes near: 50 minutes away, so its agents drain in 10.
    ends = clock.now + timedelta(minutes=50)
    aws.set_capacity_reservation_end(block, ends)
    cluster.run_until(
        lambda: master.agent_state(agent) == (False, True),
        "the bridge drained the block's agent",
        limit=timedelta(minutes=15),
    )
    assert clock.now >= ends - LEAD  # not before the lead
    assert clock.now <= ends - LEAD + timedelta(minutes=1)  # and within a bridge pass
    drained = [m for _, m, e in cluster.bridge_log.lines if m.startswith(f"drained agent {agent}")]
    assert drained and block in drained[0]

    second = cluster.submit("exp-2", 8)
    cluster.run_until(lambda: cluster.state(second) == "RUNNING", "exp-2 running")
    (placed,) = master.placement(second)
    assert placed != agent and block_of(ec2, placed) is None
    # The block's own task runs on until the cloud takes the machine back.
    assert cluster.state(first) == "RUNNING"
    assert master.agent_state(agent) == (False, True)  # never enabled again
    cluster.check_no_snapshot_lost()
    assert cluster.killed() == []


def test_notices_are_read_once_and_a_bad_one_is_dropped_with_a_log_line(
    aws: LocalAws, sqs: Any
) -> None:
    url = sqs.create_queue(QueueName="drain-notices")["QueueUrl"]
    at = datetime(2026, 11, 26, 22, 0, tzinfo=UTC)
    sqs.send_message(QueueUrl=url, MessageBody="not a notice")
    sqs.send_message(
        QueueUrl=url,
        MessageBody=notice_message("a100", [DrainNotice("i-0a", at, "cr-1 ends")], at),
    )
    log = Recorder()

    received = SqsDrainNotices(sqs, url, log).receive()

    assert received == [("a100", DrainNotice("i-0a", at, "cr-1 ends"))]
    assert [level for level, message, _ in log.lines if "not a drain notice" in message] == [
        "error"
    ]
    assert SqsDrainNotices(sqs, url, log).receive() == []  # deleted once read
