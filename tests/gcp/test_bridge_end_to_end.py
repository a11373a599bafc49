"""End to end on GCP: the local Determined master, ``dynagent bridge``, the Pub/Sub
emulator (ordering key = pool), the reconcile and sweep functions' code fed as Eventarc
would, and the local Compute Engine, on one virtual clock. Agent id = instance name."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from dynagent.core.config import Config
from dynagent.core.snapshot import Snapshot
from dynagent.gcp.functions import GcpFunctions
from dynagent.gcp.labels import POOL_LABEL
from dynagent.gcp.pubsub import PubSubPublisher
from dynagent.testing.determined.master import LocalDetermined
from dynagent.testing.gcp.compute import LocalCompute
from dynagent.testing.gcp.pubsub import PubSubEmulator
from dynagent.testing.gcp.pubsub_events import deliver_pulled

from ..bridge.cluster import Cluster, Recorder, VirtualClock
from .helpers import config, gcp_pool_document

ALIVE = ("PROVISIONING", "STAGING", "RUNNING")


class GcpSide:
    def __init__(
        self,
        compute: LocalCompute,
        pubsub: PubSubEmulator,
        publisher: Any,
        subscriber: Any,
        names: Any,
        cfg: Config,
        clock: VirtualClock,
        logger: Recorder,
    ) -> None:
        self.compute, self.subscriber, self.logger = compute, subscriber, logger
        self.pools = set(cfg.pools)
        self.topic = pubsub.topic_path(names("e2e-snapshots"))
        self.subscription = pubsub.subscription_path(names("e2e-reconcile"))
        publisher.create_topic(name=self.topic)
        subscriber.create_subscription(
            request={
                "name": self.subscription,
                "topic": self.topic,
                "enable_message_ordering": True,
            }
        )
        dead_letters = pubsub.topic_path(names("e2e-dead-letters"))
        publisher.create_topic(name=dead_letters)
        self.publisher = PubSubPublisher(self.topic, publisher)
        # A pull on an empty subscription waits out its timeout: pull what was sent.
        self.outstanding = 0
        instances, operations = compute.instances_client(), compute.zone_operations_client()
        self.functions = GcpFunctions(
            cfg,
            instances=lambda: instances,
            operations=lambda: operations,
            publisher=publisher,
            dead_letter_topic=dead_letters,
            clock=clock,
            sleep=lambda seconds: None,
            logger=logger,
        )

    def publish(self, snapshot: Snapshot) -> object:
        message_id = self.publisher.publish(snapshot)
        self.outstanding += 1
        return message_id

    def deliver(self) -> None:
        reconcile = self.functions.reconcile_event
        while self.outstanding > 0:
            self.outstanding -= deliver_pulled(
                self.subscriber, self.subscription, self.topic, reconcile
            )

    def sweep(self) -> None:
        self.functions.sweep()

    def alive(self) -> dict[str, str]:
        return {
            vm["name"]: pool
            for vm in self.compute.instances()
            if (pool := vm.get("labels", {}).get(POOL_LABEL)) in self.pools
            and vm["status"] in ALIVE
        }

    def set_launch_time(self, instance_id: str, when: datetime) -> None:
        self.compute.set_creation_time(instance_id, when)

    def dead_letters(self) -> int:
        return sum("dead-letter topic" in message for _, message, _ in self.logger.lines)


def test_tasks_scale_a_gcp_pool_up_and_drained_agents_down(
    master: LocalDetermined,
    compute: LocalCompute,
    pubsub_emulator: PubSubEmulator,
    publisher: Any,
    subscriber: Any,
    names: Any,
) -> None:
    cfg = config(gcp_pool_document(drain_idle_agents=True, max_idle_agent_period="5m"))
    clock, log = VirtualClock(), Recorder()
    side = GcpSide(compute, pubsub_emulator, publisher, subscriber, names, cfg, clock, log)
    cluster = Cluster(master, side, cfg, clock, log)

    trials = [cluster.submit(f"trial-{n}", 4) for n in range(2)]
    command = cluster.submit("notebook", 0, "COMMAND")
    cluster.run_until(lambda: len(cluster.running()) == 3, "two 4-slot trials and a command")
    assert len(cluster.born) == 2 and cluster.agents == set(cluster.born)
    assert all(name.startswith("det-agent-t4-") for name in cluster.agents)

    for trial in trials:
        cluster.master.finish(trial)
    keeper = next(iter(cluster.master.placement(command)))
    idle_at = cluster.clock.now
    cluster.run_until(lambda: len(cluster.agents) == 1, "the idle VM drained and deleted")
    assert cluster.clock.now - idle_at >= timedelta(minutes=5)
    ((deleted, reason),) = cluster.terminations()
    assert deleted != keeper and reason.startswith("drained by the master and empty")
    assert cluster.agents == {keeper}  # the command's agent is not idle: it stays

    cluster.master.finish(command)
    cluster.run_until(lambda: not cluster.agents, "down to min_instances (0)")
    cluster.run(timedelta(minutes=2))
    assert cluster.killed() == [] and side.alive() == {}
    cluster.check_no_snapshot_lost()
