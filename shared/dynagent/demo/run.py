"""``dynagent demo``: a scripted day of a master, against a local AWS, on a virtual clock.

Everything between the master and EC2 is the real thing: the publisher sends snapshots
to an SQS FIFO queue, a local event source mapping hands Lambda-shaped batches to the
reconcile function's code, which launches and tags instances through boto3, and the
sweep reaps them. Only the clock is virtual, so a day plays in under a minute; the
demo moves the fake cloud's launch times along with it.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from importlib import resources
from typing import Any, TextIO

from dynagent.aws.functions import AwsFunctions
from dynagent.aws.sqs import SqsPublisher
from dynagent.aws.tags import LAUNCH_KEY_TAG, MARK_TAGS, POOL_TAG
from dynagent.config import Config, parse_config
from dynagent.demo.master import Master, Task
from dynagent.fleet import Mark
from dynagent.local.aws import LocalAws
from dynagent.local.event_source import deliver_once

TICK = timedelta(seconds=30)
SWEEP_EVERY = timedelta(minutes=1)
BOOT_TIME = timedelta(minutes=3)  # launch to agent registered
START = datetime(2026, 11, 23, 8, 0, tzinfo=UTC)
# The third instance the demo sees never registers: a bad boot the reconcile must reap.
BROKEN_INSTANCE = 3


@dataclass(frozen=True)
class Scene:
    at: timedelta
    text: str
    act: Callable[[Master], object]


def _task(name: str, slots: int, minutes: int) -> Callable[[Master], object]:
    return lambda master: master.submit(Task(name, slots, timedelta(minutes=minutes)))


SCRIPT = (
    Scene(timedelta(0), "trial-1 queued: 4 GPUs for 40m", _task("trial-1", 4, 40)),
    Scene(timedelta(0), "notebook-1 queued: 1 GPU for 15m", _task("notebook-1", 1, 15)),
    Scene(timedelta(minutes=5), "trial-2 queued: 8 GPUs (two whole agents) for 30m",
          _task("trial-2", 8, 30)),
    Scene(timedelta(minutes=6), "trial-odd queued: 6 GPUs, which no fleet of 4-GPU agents fits",
          _task("trial-odd", 6, 10)),
    Scene(timedelta(minutes=12), "trial-odd cancelled by its owner",
          lambda master: master.cancel("trial-odd")),
    Scene(timedelta(minutes=20), "a master publishes a corrupt message (the DLQ takes it)",
          lambda master: None),
    Scene(timedelta(minutes=95), "trial-3 queued after a quiet spell: 4 GPUs for 20m",
          _task("trial-3", 4, 20)),
    Scene(timedelta(minutes=125), "the master goes down for maintenance: no more snapshots",
          lambda master: setattr(master, "online", False)),
)  # fmt: skip
END = timedelta(hours=2, minutes=15)


class Timeline:
    """Prints what happens, one line per event, with the virtual time."""

    def __init__(self, out: TextIO, clock: Callable[[], datetime], quiet: bool) -> None:
        self.out, self.clock, self.quiet = out, clock, quiet
        self.actor = "reconcile"
        # Unschedulable and waiting notes repeat on every pass: print them when they change.
        self._notes: set[str] = set()
        self.terminated: dict[str, str] = {}  # instance id -> who terminated it, and why

    def say(self, who: str, text: str) -> None:
        if not self.quiet:
            print(f"{self.clock():%H:%M:%S}  {who:<9} {text}", file=self.out)

    # The logger interface AwsFunctions uses: each action of each pass is one line.
    def info(self, message: str, extra: dict[str, Any] | None = None) -> None:
        self._report(message, extra or {})

    def warning(self, message: str, extra: dict[str, Any] | None = None) -> None:
        self._report(message, extra or {})

    def error(self, message: str, extra: dict[str, Any] | None = None) -> None:
        self._report(message, extra or {})

    def _report(self, message: str, extra: dict[str, Any]) -> None:
        if "reason" in extra:  # a message set aside
            self.say(self.actor, f"{message}: {extra['reason']}")
        if "launch_error" in extra:
            self.say(self.actor, f"launch refused: {extra['launch_error']}")
        actions = extra.get("actions")
        if not actions:
            return
        notes = {line for line in actions if line.startswith(("unschedulable", "waiting"))}
        for line in actions:
            if line.startswith("terminate "):
                instance_id, reason = line.removeprefix("terminate ").split(": ", 1)
                self.terminated[instance_id] = f"{self.actor}: {reason}"
            if line.startswith(("set ", "clear ")) or line in self._notes:
                continue  # marks show in the final table; notes only when new
            self.say(self.actor, line)
        if self.actor == "reconcile":
            self._notes = notes


class Demo:
    def __init__(self, aws: LocalAws, out: TextIO, quiet: bool) -> None:
        self.aws = aws
        self.now = START
        self.timeline = Timeline(out, lambda: self.now, quiet)
        self.ec2 = aws.client("ec2")
        self.sqs = aws.client("sqs")
        self.queue_url, self.dead_letter_url = self._queues()
        self.config = _demo_config(aws.image_id())
        self.pool = next(iter(self.config.pools.values()))
        self.master = Master(self.pool.name)
        self.publisher = SqsPublisher(self.queue_url, self.sqs)
        self.functions = AwsFunctions(
            self.config,
            ec2_for_region=lambda region: self.ec2,
            sqs=self.sqs,
            dead_letter_url=self.dead_letter_url,
            clock=lambda: self.now,
            sleep=lambda seconds: None,
            logger=self.timeline,
        )
        self.born: dict[str, datetime] = {}  # instance id -> virtual launch time
        self.last_published: tuple[object, ...] | None = None

    def _queues(self) -> tuple[str, str]:
        fifo = {"FifoQueue": "true", "ContentBasedDeduplication": "false"}
        dead = self.sqs.create_queue(QueueName="dynagent-dlq.fifo", Attributes=fifo)["QueueUrl"]
        queue = self.sqs.create_queue(QueueName="dynagent-snapshots.fifo", Attributes=fifo)
        return queue["QueueUrl"], dead

    def run(self) -> None:
        scenes = list(SCRIPT)
        next_sweep = START
        heartbeat = START
        while self.now <= START + END:
            while scenes and START + scenes[0].at <= self.now:
                scene = scenes.pop(0)
                self.timeline.say("master", scene.text)
                scene.act(self.master)
                if "corrupt" in scene.text:
                    self._publish_corrupt()
            self._follow_cloud()
            changed = self._master_step()
            if self.master.online and (changed or self.now >= heartbeat):
                self._publish()
                heartbeat = self.now + TICK
            self._deliver()
            self._follow_cloud()
            if self.now >= next_sweep:
                self.timeline.actor = "sweep"
                self.functions.sweep()
                self.timeline.actor = "reconcile"
                next_sweep = self.now + SWEEP_EVERY
            self.now += TICK

    def _master_step(self) -> bool:
        """Finish and place tasks; True when the pool's state changed."""
        changed = False
        for task in self.master.finish_due(self.now):
            self.timeline.say("master", f"{task.name} finished")
            changed = True
        for task in self.master.schedule(self.now):
            agents = ", ".join(task.placement)
            self.timeline.say("master", f"{task.name} started on {agents}")
            changed = True
        return changed

    def _publish(self) -> None:
        snapshot = self.master.snapshot(self.now)
        self.publisher.publish(snapshot)

    def _publish_corrupt(self) -> None:
        self.sqs.send_message(
            QueueUrl=self.queue_url,
            MessageBody='{"type": "pool.snapshot", "version": 9}',
            MessageGroupId=self.pool.name,
            MessageDeduplicationId="corrupt-1",
        )

    def _deliver(self) -> None:
        while deliver_once(self.sqs, self.queue_url, self.functions.reconcile_batch, "us-west-2")[
            0
        ]:
            pass

    def _follow_cloud(self) -> None:
        """The cloud side of the story: boots, registrations, and agents that went away."""
        for instance_id, state in self._instances():
            if instance_id not in self.born and state in ("pending", "running"):
                self.born[instance_id] = self.now
                # The fake cloud keeps real time; give it the virtual launch time.
                self.aws.set_launch_time(instance_id, self.now)
            alive = state in ("pending", "running")
            if not alive and instance_id in self.master.agents:
                self.master.disconnect(instance_id)
                self.timeline.say("agent", f"{instance_id} disconnected ({state})")
            booted = self.now - self.born.get(instance_id, self.now) >= BOOT_TIME
            if (
                alive
                and booted
                and instance_id not in self.master.agents
                and self._healthy(instance_id)
            ):
                self.master.connect(instance_id, self.pool.provider.slots_per_instance)
                self.timeline.say("agent", f"{instance_id} registered")

    def _healthy(self, instance_id: str) -> bool:
        order = sorted(self.born, key=lambda i: (self.born[i], i))
        return order.index(instance_id) + 1 != BROKEN_INSTANCE

    def _instances(self) -> list[tuple[str, str]]:
        response = self.ec2.describe_instances(
            Filters=[{"Name": f"tag:{POOL_TAG}", "Values": [self.pool.name]}]
        )
        return [
            (i["InstanceId"], i["State"]["Name"])
            for r in response["Reservations"]
            for i in r["Instances"]
        ]

    def fleet_table(self) -> list[str]:
        """Every instance the demo's pool ever had, with its tags as the console shows."""
        response = self.ec2.describe_instances(
            Filters=[{"Name": f"tag:{POOL_TAG}", "Values": [self.pool.name]}]
        )
        rows = [("instance", "state", "launch key", "registered", "idle since", "terminated by")]
        for reservation in response["Reservations"]:
            for item in reservation["Instances"]:
                tags = {t["Key"]: t["Value"] for t in item.get("Tags", [])}
                rows.append(
                    (
                        item["InstanceId"],
                        item["State"]["Name"],
                        tags.get(LAUNCH_KEY_TAG, "-"),
                        tags.get(MARK_TAGS[Mark.REGISTERED], "-"),
                        tags.get(MARK_TAGS[Mark.IDLE_SINCE], "-"),
                        self.timeline.terminated.get(item["InstanceId"], "-"),
                    )
                )
        widths = [max(len(row[col]) for row in rows) for col in range(len(rows[0]))]
        return [
            "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)) for row in rows
        ]

    def dead_letters(self) -> list[str]:
        response = self.sqs.receive_message(
            QueueUrl=self.dead_letter_url, MaxNumberOfMessages=10, MessageAttributeNames=["All"]
        )
        return [
            m["MessageAttributes"]["dynagent-reason"]["StringValue"]
            for m in response.get("Messages", [])
        ]


def _demo_config(image: str) -> Config:
    text = resources.files("dynagent.demo").joinpath("pool.yaml").read_text()
    return parse_config(text.replace("IMAGE_ID", image), source="demo pool.yaml")


def run_demo(quiet: bool = False, out: TextIO = sys.stdout) -> int:
    with LocalAws() as aws:
        print(f"local AWS (moto) on {aws.endpoint_url}", file=out)
        print(f"virtual clock from {START:%Y-%m-%d %H:%M} UTC, one tick = {TICK}", file=out)
        demo = Demo(aws, out, quiet)
        demo.run()
        print("\nFleet at the end (every instance the pool had, as EC2 shows it):", file=out)
        for line in demo.fleet_table():
            print(f"  {line}", file=out)
        for reason in demo.dead_letters():
            print(f"\nDead-letter queue: 1 message: {reason}", file=out)
    print("\nlocal AWS stopped.", file=out)
    return 0
