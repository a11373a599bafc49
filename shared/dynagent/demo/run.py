"""``dynagent demo``: a scripted day of a master, against a local cloud, on a virtual clock.

Everything between the master and the instances is the real thing: the publisher sends
snapshots to the queue (SQS FIFO on AWS, Pub/Sub on GCP), the functions' own code
consumes them and launches, labels and deletes instances through the cloud's client
library, and the sweep reaps them. Only the clock is virtual, so a day plays in under a
minute; the demo moves the fake cloud's launch times along with it.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any, TextIO

from dynagent.core.durations import format_duration
from dynagent.demo.master import Master, Task
from dynagent.demo.pools import demo_config
from dynagent.demo.rig import FleetRow, Rig

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
    # A message body this scene puts on the queue besides the master's snapshots.
    corrupt: bytes = b""


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
    Scene(timedelta(minutes=20), "a corrupt message reaches the queue (dead letters take it)",
          lambda master: None, corrupt=b'{"type": "pool.snapshot", "version": 9}'),
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
    """The story: a master's day, told against a rig's local cloud."""

    def __init__(self, rig: Rig, timeline: Timeline, clock: VirtualClock) -> None:
        self.rig = rig
        self.timeline = timeline
        self.clock = clock
        self.pool = rig.pool
        self.master = Master(self.pool.name)
        self.born: dict[str, datetime] = {}  # instance id -> virtual launch time
        self.gone: dict[str, datetime] = {}  # instance id -> when the cloud showed it ended
        self.gpu_seconds = 0.0  # what the tasks ran, for the bill
        self._broken_said = False
        # The last the cloud showed of each instance: deleted VMs vanish from GCP's list.
        self.seen: dict[str, FleetRow] = {}

    @property
    def now(self) -> datetime:
        return self.clock.now

    def run(self, until: timedelta = END) -> None:
        """Play the day from where it stands to ``until`` after START (a test stops midway
        to look at the pool, then may go on)."""
        if not hasattr(self, "_scenes"):
            self._scenes = list(SCRIPT)
            self._next_sweep = self._heartbeat = START
        scenes = self._scenes
        next_sweep, heartbeat = self._next_sweep, self._heartbeat
        while self.now <= START + until:
            while scenes and START + scenes[0].at <= self.now:
                self._play(scenes.pop(0))
            self._follow_cloud()
            changed = self._master_step()
            if self.master.online and (changed or self.now >= heartbeat):
                self.rig.publish(self.master.snapshot(self.now))
                heartbeat = self.now + TICK
            self.rig.deliver()
            self._follow_cloud()
            if self.now >= next_sweep:
                self.timeline.actor = "sweep"
                self.rig.sweep()
                self.timeline.actor = "reconcile"
                next_sweep = self.now + SWEEP_EVERY
            self.clock.now += TICK
        self._next_sweep, self._heartbeat = next_sweep, heartbeat

    def _play(self, scene: Scene) -> None:
        self.timeline.say("master", scene.text)
        scene.act(self.master)
        if scene.corrupt:
            self.rig.publish_corrupt(scene.corrupt)

    def _master_step(self) -> bool:
        """Finish and place tasks; True when the pool's state changed."""
        changed = False
        for task in self.master.finish_due(self.now):
            self.timeline.say("master", f"{task.name} finished")
            self.gpu_seconds += task.slots * task.duration.total_seconds()
            changed = True
        for task in self.master.schedule(self.now):
            agents = ", ".join(task.placement)
            self.timeline.say("master", f"{task.name} started on {agents}")
            changed = True
        return changed

    def _follow_cloud(self) -> None:
        """The cloud side of the story: boots, registrations, and agents that went away."""
        rows = self.rig.fleet()
        listed = {row.id for row in rows}
        for instance_id, last in list(self.seen.items()):
            if instance_id not in listed and last.alive:
                rows.append(replace(last, state="deleted", alive=False))
        for row in rows:
            self.seen[row.id] = row
            if row.id not in self.born and row.alive:
                self.born[row.id] = self.now
                # The fake cloud keeps real time; give it the virtual launch time.
                self.rig.set_launch_time(row.id, self.now)
            if not row.alive:
                self.gone.setdefault(row.id, self.now)
            if not row.alive and row.id in self.master.agents:
                self.master.disconnect(row.id)
                self.timeline.say("agent", f"{row.id} disconnected ({row.state.lower()})")
            if row.alive and self._boots_now(row.id):
                self.master.connect(row.id, self.pool.provider.slots_per_instance)
                self.timeline.say("agent", f"{row.id} registered")

    def _boots_now(self, instance_id: str) -> bool:
        if instance_id in self.master.agents or self.now - self.born[instance_id] < BOOT_TIME:
            return False
        order = sorted(self.born, key=lambda i: (self.born[i], i))
        if order.index(instance_id) + 1 != BROKEN_INSTANCE:
            return True
        if not self._broken_said:
            self._broken_said = True
            self.timeline.say(
                "agent", f"{instance_id} does not register: the broken boot, on purpose"
            )
        return False

    def summary(self) -> list[str]:
        """The pool, as the admin wrote it, before the day starts."""
        provider = self.pool.provider
        offering = provider.catalog().offerings[0]
        return [
            f"pool {self.pool.name}: {provider.shape} ({provider.slots_per_instance} GPUs, "
            f"${offering.price:.2f}/h {offering.purchase.value}), 0 to "
            f"{provider.max_instances} machines",
            f"  an idle agent goes after {format_duration(provider.max_idle_agent_period)}, a "
            f"machine whose agent never registers after "
            f"{format_duration(provider.max_agent_starting_period)}",
            f"  the day's machine number {BROKEN_INSTANCE} is broken on purpose: its agent "
            "never registers, and the reconcile must reap it",
        ]

    def bill(self) -> list[str]:
        """What the day's machines cost, against the GPU time the tasks used."""
        provider = self.pool.provider
        price = provider.catalog().offerings[0].price
        seconds = sum((self.gone.get(i, self.now) - born).total_seconds()
                      for i, born in self.born.items())  # fmt: skip
        billed_gpu = seconds * provider.slots_per_instance
        used = self.gpu_seconds / billed_gpu if billed_gpu else 0.0
        return [
            f"Bill: {seconds / 3600:.1f} machine-hours at ${price:.2f}/h = "
            f"${seconds / 3600 * price:,.2f} (list price); the tasks ran "
            f"{self.gpu_seconds / 3600:.1f} of the {billed_gpu / 3600:.1f} GPU-hours billed "
            f"({used:.0%})",
        ]

    def fleet_table(self) -> list[str]:
        """Every instance the demo's pool ever had, with its marks as the console shows."""
        rows = [("instance", "state", "launch key", "registered", "idle since", "terminated by")]
        for row in self.seen.values():
            ended = self.timeline.terminated.get(row.id, "-")
            rows.append((row.id, row.state, row.launch_key, row.registered, row.idle_since, ended))
        widths = [max(len(row[col]) for row in rows) for col in range(len(rows[0]))]
        return [
            "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
            for row in rows
        ]


@dataclass
class VirtualClock:
    now: datetime = START


def run_demo(quiet: bool = False, out: TextIO = sys.stdout, cloud: str = "aws") -> int:
    clock = VirtualClock()
    timeline = Timeline(out, lambda: clock.now, quiet)
    with _rig(cloud, clock, timeline) as rig:
        print(rig.description, file=out)
        print(f"virtual clock from {START:%Y-%m-%d %H:%M} UTC, one tick = {TICK}", file=out)
        demo = Demo(rig, timeline, clock)
        for line in demo.summary():
            print(line, file=out)
        demo.run()
        print("\nFleet at the end (every instance the pool had, as the cloud shows it):", file=out)
        for line in demo.fleet_table():
            print(f"  {line}", file=out)
        print(
            "  (launch key: the snapshot a launch answered, pool:seq; each launch's token "
            "derives from it, so a snapshot delivered twice launches nothing twice)",
            file=out,
        )
        print(f"\n{demo.bill()[0]}", file=out)
        for reason in rig.dead_letters():
            print(f"\nDead letters: 1 message: {reason}", file=out)
    print(f"\nlocal {cloud.upper()} stopped.", file=out)
    return 0


@contextmanager
def _rig(cloud: str, clock: VirtualClock, timeline: Timeline) -> Iterator[Rig]:
    """Start the local cloud, and stop everything it started however the demo ends."""
    if cloud == "aws":
        from dynagent.demo.aws_rig import AwsRig
        from dynagent.testing.aws.local_aws import LocalAws

        with LocalAws() as aws:
            config = demo_config("aws", IMAGE_ID=aws.image_id())
            yield AwsRig(aws, config, lambda: clock.now, timeline)
    elif cloud == "gcp":
        from dynagent.demo.gcp_rig import gcp_rig

        with gcp_rig(lambda: clock.now, timeline) as rig:
            yield rig
    else:
        raise ValueError(f"no demo for cloud {cloud!r} (aws or gcp)")
