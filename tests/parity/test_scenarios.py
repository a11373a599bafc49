"""The rules over the wire, one scenario table, run on both clouds.

Each scenario prepares a fleet through the real adapter, runs one reconcile (with a
snapshot) or sweep (without), at a chosen time after the setup, and checks what was
launched and what is left. The clock is the only thing moved: the cloud's launch times
and marks are real.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from dynagent.core.fleet import Mark
from dynagent.core.snapshot import Snapshot
from dynagent.run.reconcile import reconcile

from ..aws.helpers import snapshot
from .clouds import AwsCloud, Cloud, GcpCloud, launch, mark

MINUTE = timedelta(minutes=1)


@dataclass
class Setup:
    """What a scenario's preparation made, by role."""

    cloud: Cloud
    ids: dict[str, list[str]] = field(default_factory=dict)


@dataclass(frozen=True)
class Scenario:
    name: str
    # Instances to launch before the pass, by role, and what to do to them.
    prepare: Callable[[Setup, Any, datetime], None]
    # The snapshot the pass gets (None: a sweep), given the setup.
    snapshot: Callable[[Setup, datetime], Snapshot | None]
    after: timedelta  # how long after the setup the pass runs
    launched: int  # instances the pass must launch
    gone: Callable[[Setup], set[str]]  # instances the pass must terminate
    pool: dict[str, Any] = field(default_factory=dict)


def _launch(role: str, count: int) -> Callable[[Setup, Any, datetime], None]:
    def prepare(setup: Setup, provider: Any, at: datetime) -> None:
        setup.ids[role] = launch(provider, provider.pool, count, f"p:{role}", at)

    return prepare


def _then(*steps: Callable[[Setup, Any, datetime], None]) -> Callable[[Setup, Any, datetime], None]:
    def prepare(setup: Setup, provider: Any, at: datetime) -> None:
        for step in steps:
            step(setup, provider, at)

    return prepare


def _marked(role: str, what: Mark, ago: timedelta) -> Callable[[Setup, Any, datetime], None]:
    return lambda setup, provider, at: mark(provider, setup.ids[role], what, at - ago)


def _stopped(role: str) -> Callable[[Setup, Any, datetime], None]:
    def prepare(setup: Setup, provider: Any, at: datetime) -> None:
        for instance_id in setup.ids[role]:
            setup.cloud.stop(instance_id)

    return prepare


def _lookalike(setup: Setup, provider: Any, at: datetime) -> None:
    setup.ids["theirs"] = [setup.cloud.lookalike()]
    setup.cloud.stop(setup.ids["theirs"][0])


def _agents(*roles: str, used: int = 0) -> Callable[[Setup, datetime], Snapshot]:
    def make(setup: Setup, at: datetime) -> Snapshot:
        slots = setup.cloud.slots
        agents = [(i, slots, used) for role in roles for i in setup.ids[role]]
        return snapshot(9, pool="p", agents=agents, time=at)

    return make


def _pending(*slots: int) -> Callable[[Setup, datetime], Snapshot]:
    def make(setup: Setup, at: datetime) -> Snapshot:
        tasks = [(f"t{n}", s * setup.cloud.slots // 8 or 1) for n, s in enumerate(slots)]
        return snapshot(9, pool="p", pending=tasks, time=at)

    return make


def _nothing(setup: Setup) -> set[str]:
    return set()


def _all(*roles: str) -> Callable[[Setup], set[str]]:
    return lambda setup: {i for role in roles for i in setup.ids[role]}


def _no_snapshot(setup: Setup, at: datetime) -> None:
    return None


SCENARIOS = [
    Scenario("pending tasks launch packed instances", lambda s, p, a: None,
             _pending(8, 8, 2, 2), MINUTE, launched=3, gone=_nothing),
    Scenario("starting instances absorb pending work", _launch("starting", 2),
             _pending(8, 8), MINUTE, launched=0, gone=_nothing),
    Scenario("a stopped or preempted instance is terminated", _then(_launch("x", 2), _stopped("x")),
             _no_snapshot, MINUTE, launched=0, gone=_all("x")),
    Scenario("never registered past the starting period", _launch("x", 1),
             _no_snapshot, 21 * MINUTE, launched=0, gone=_all("x")),
    Scenario("still within the starting period", _launch("x", 1),
             _no_snapshot, 19 * MINUTE, launched=0, gone=_nothing),
    Scenario("the sweep reaps an agent idle past the period",
             _then(_launch("idle", 1), _marked("idle", Mark.REGISTERED, 30 * MINUTE),
                   _marked("idle", Mark.IDLE_SINCE, 21 * MINUTE)),
             _no_snapshot, MINUTE, launched=0, gone=_all("idle")),
    Scenario("idle reaping keeps min_instances",
             _then(_launch("idle", 2), _marked("idle", Mark.REGISTERED, 30 * MINUTE),
                   _marked("idle", Mark.IDLE_SINCE, 21 * MINUTE)),
             _no_snapshot, MINUTE, launched=0, gone=_nothing,
             pool={"min_instances": 2}),
    Scenario("a busy agent is kept", _then(_launch("busy", 1),
             _marked("busy", Mark.REGISTERED, 30 * MINUTE)),
             _agents("busy", used=1), 40 * MINUTE, launched=0, gone=_nothing),
    Scenario("a registered agent missing past the period is reaped",
             _then(_launch("lost", 1), _marked("lost", Mark.REGISTERED, 60 * MINUTE),
                   _marked("lost", Mark.DISCONNECTED_SINCE, 11 * MINUTE)),
             _no_snapshot, MINUTE, launched=0, gone=_all("lost")),
    Scenario("the sweep keeps min_instances", lambda s, p, a: None,
             _no_snapshot, MINUTE, launched=2, gone=_nothing, pool={"min_instances": 2}),
    Scenario("over max_instances the newest go", _launch("x", 3),
             _no_snapshot, MINUTE, launched=0, gone=_all("x"),
             pool={"max_instances": 0}),
    Scenario("an instance without the managed pair is never touched", _lookalike,
             _no_snapshot, 60 * MINUTE, launched=0, gone=_nothing, pool={"max_instances": 0}),
]  # fmt: skip


@pytest.fixture(params=["aws", "gcp"])
def cloud(request: pytest.FixtureRequest) -> Cloud:
    if request.param == "aws":
        return AwsCloud(request.getfixturevalue("aws"))
    return GcpCloud(request.getfixturevalue("compute"))


@pytest.mark.parametrize("scenario", SCENARIOS, ids=[s.name for s in SCENARIOS])
def test_scenario(cloud: Cloud, scenario: Scenario) -> None:
    pool = cloud.pool(**scenario.pool).pool("p")
    provider = cloud.provider(pool)
    start = datetime.now(UTC).replace(microsecond=0)
    setup = Setup(cloud)
    scenario.prepare(setup, provider, start)
    before = cloud.present()

    when = start + scenario.after
    outcome = reconcile(pool, cloud.provider(pool), scenario.snapshot(setup, when), when)

    assert outcome.launch is None or outcome.launch.error is None
    launched = len(outcome.launch.started) if outcome.launch else 0
    assert launched == scenario.launched, outcome.plan.describe() if outcome.plan else None
    gone = scenario.gone(setup)
    assert before - cloud.present() == gone
    if "theirs" in setup.ids:
        assert outcome.plan is not None and outcome.plan.changes_nothing
