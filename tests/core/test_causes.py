"""Every launch and termination says which rule made it, in a word metrics can count by."""

from __future__ import annotations

from dynagent.core.decide import decide
from dynagent.core.fleet import InstanceState
from dynagent.core.plan import LAUNCH_CAUSES, TERMINATION_CAUSES
from tests.builders import (
    NOW,
    agent_instance,
    ago,
    fleet,
    idle,
    instance,
    pool,
    snapshot,
    task,
)


def test_each_termination_rule_names_its_cause() -> None:
    cloud = fleet(
        agent_instance("idle", idle_since=ago(30)),
        instance("never", launched=ago(30)),
        agent_instance("gone", disconnected_since=ago(15)),
        instance("stopped", state=InstanceState.STOPPED),
    )
    plan = decide(pool(), cloud, snapshot(agents=[idle("idle")]), NOW)
    causes = {t.instance_id: t.cause for t in plan.terminations}
    assert causes == {
        "idle": "idle",
        "never": "never_registered",
        "gone": "disconnected",
        "stopped": "stopped",
    }
    assert set(causes.values()) <= set(TERMINATION_CAUSES)


def test_each_launch_rule_names_its_cause() -> None:
    plan = decide(pool(min_instances=2), fleet(), snapshot(pending=[task("t", 4)]), NOW)
    assert [launch.cause for launch in plan.launches] == ["demand", "min_instances"]
    zero = decide(pool(), fleet(), snapshot(pending=[task("cmd", 0)]), NOW)
    assert [launch.cause for launch in zero.launches] == ["zero_slot"]
    assert {"demand", "min_instances", "zero_slot"} <= set(LAUNCH_CAUSES)
