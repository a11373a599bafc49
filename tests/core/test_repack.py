"""Re-packing in the same pass when the chosen shape has no capacity anywhere: one
reconcile launches the next-cheapest cover, calls each refused offering once, remembers
the refusals, and a replay launches nothing more.

The cloud is a Provider in memory: offerings with a capacity each, launches through
``launch_with_fallback`` as every adapter's, a launch key used before is a replay."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from dynagent.core.fleet import Fleet, Instance, InstanceState
from dynagent.core.offerings import Offering
from dynagent.core.plan import Adoption, Cancellation, MarkWrite, Plan, Termination
from dynagent.report.pass_metrics import pass_points
from dynagent.run import repack
from dynagent.run.fallback import NO_CAPACITY, Attempt, CapacityMemory, launch_with_fallback
from dynagent.run.launch_errors import LaunchErrorMemory
from dynagent.run.provider import LaunchResult
from dynagent.run.reconcile import Outcome, reconcile
from tests.builders import NOW, pool, snapshot, task

SUBNETS = ["subnet-a", "subnet-b"]


def shaped_pool(*instance_types: str, **prices: float) -> Any:
    """Types in two subnets; the 8-GPU type cheaper than two 4-GPU ones, so that two
    4-slot tasks go on one 8-GPU machine first."""
    table = {"p3.16xlarge": 20.0, "p3.8xlarge": 11.0, **prices}
    return pool(
        instance_type="p3.16xlarge",
        offerings={
            "instance_types": list(instance_types),
            "subnet_ids": SUBNETS,
            "prices": {t: p for t, p in table.items() if t in instance_types},
            # Machines to spare beyond the cap at 8 per machine: smaller ones may launch.
            "max_slots": 20,
        },
        max_instances=10,
        launch_error_timeout="5m",
        launch_error_retries=1,
    )


def everywhere(instance_type: str) -> list[str]:
    return [f"{instance_type}@{subnet}/on-demand" for subnet in SUBNETS]


class Cloud:
    """One pool's instances; offerings have a capacity each (absent: plenty)."""

    def __init__(self, *out: str, capacity: dict[str, int] | None = None) -> None:
        self.capacity = {key: 0 for key in out} | (capacity or {})
        self.memory = CapacityMemory()
        self.instances: list[Instance] = []
        # (launch key, offering key, count) of every launch call.
        self.calls: list[tuple[str, str, int]] = []
        self.keys: dict[str, tuple[str, ...]] = {}

    def observe(self) -> Fleet:
        return Fleet(tuple(self.instances), unavailable=self.memory.unavailable(NOW))

    def launch(self, plan: Plan) -> LaunchResult:
        if plan.launch_key in self.keys:  # the token was used: nothing new starts
            return LaunchResult(self.keys[plan.launch_key], replayed=True)

        def call(offering: Offering, count: int) -> Attempt:
            self.calls.append((plan.launch_key, offering.key, count))
            free = self.capacity.get(offering.key, count)
            started = min(free, count)
            self.capacity[offering.key] = free - started
            ids = tuple(f"i-{len(self.instances) + n}" for n in range(started))
            self.instances += [
                Instance(
                    i,
                    InstanceState.STARTING,
                    NOW,
                    instance_type=offering.instance_type,
                    zone=offering.zone,
                )
                for i in ids
            ]
            return Attempt(started=ids, out_of_capacity=started < count)

        result = launch_with_fallback(plan.launches, call, self.memory, NOW)
        self.keys[plan.launch_key] = result.started
        return result

    def terminate(self, terminations: tuple[Termination, ...]) -> None:
        gone = {t.instance_id for t in terminations}
        self.instances = [i for i in self.instances if i.id not in gone]

    def cancel(self, cancellations: tuple[Cancellation, ...]) -> None: ...

    def adopt(self, adoptions: tuple[Adoption, ...]) -> None: ...

    def write_marks(self, marks: tuple[MarkWrite, ...]) -> None: ...

    def types(self) -> Counter[str]:
        return Counter(i.instance_type for i in self.instances)

    def offerings_called(self) -> Counter[str]:
        return Counter(key for _, key, _ in self.calls)


TWO_FOURS = [task("a", 4), task("b", 4)]


def test_a_shape_out_everywhere_is_repacked_onto_the_next_cover_in_the_same_pass() -> None:
    gpus = shaped_pool("p3.8xlarge", "p3.16xlarge")
    cloud = Cloud(*everywhere("p3.16xlarge"))
    outcome = reconcile(gpus, cloud, snapshot(pending=TWO_FOURS), NOW)

    assert outcome.plan is not None
    assert [launch.tasks for launch in outcome.plan.launches] == [("a", "b")]  # one 8-GPU
    assert cloud.types() == {"p3.8xlarge": 2}
    assert cloud.calls == [
        ("gpu:7", "p3.16xlarge@subnet-a/on-demand", 1),
        ("gpu:7", "p3.16xlarge@subnet-b/on-demand", 1),
        ("gpu:7:repack1", "p3.8xlarge@subnet-a/on-demand", 2),
    ]
    assert cloud.memory.unavailable(NOW) == set(everywhere("p3.16xlarge"))
    assert outcome.launch is not None and outcome.launch.error is None
    assert len(outcome.launch.started) == 2
    assert outcome.launch.unavailable == tuple(everywhere("p3.16xlarge"))
    (round_,) = outcome.repacks
    assert round_.refused == tuple(everywhere("p3.16xlarge"))
    assert [launch.tasks for launch in round_.plan.launches] == [("a",), ("b",)]
    assert round_.plan.changes_nothing is False and round_.plan.terminations == ()


def test_a_replay_of_the_snapshot_launches_nothing_more() -> None:
    gpus = shaped_pool("p3.8xlarge", "p3.16xlarge")
    cloud = Cloud(*everywhere("p3.16xlarge"))
    reconcile(gpus, cloud, snapshot(pending=TWO_FOURS), NOW)
    calls = list(cloud.calls)

    again = reconcile(gpus, cloud, snapshot(pending=TWO_FOURS), NOW)
    assert again.plan is not None and again.plan.launches == ()  # the two are starting
    assert again.repacks == () and cloud.calls == calls
    assert cloud.types() == {"p3.8xlarge": 2}


def test_rounds_go_on_while_some_cover_is_left_each_refused_offering_called_once() -> None:
    gpus = shaped_pool("p3.2xlarge", "p3.8xlarge", "p3.16xlarge")
    cloud = Cloud(*everywhere("p3.16xlarge"), *everywhere("p3.8xlarge"))
    ones = [task(f"t{i}", 1) for i in range(8)]
    outcome = reconcile(gpus, cloud, snapshot(pending=ones), NOW)

    assert cloud.types() == {"p3.2xlarge": 8}
    assert [r.refused for r in outcome.repacks] == [
        tuple(everywhere("p3.16xlarge")),
        tuple(everywhere("p3.8xlarge")),
    ]
    refused = everywhere("p3.16xlarge") + everywhere("p3.8xlarge")
    assert all(cloud.offerings_called()[key] == 1 for key in refused)
    assert [key for key, _, _ in cloud.calls] == [
        "gpu:7", "gpu:7", "gpu:7:repack1", "gpu:7:repack1", "gpu:7:repack2",
    ]  # fmt: skip
    assert outcome.launch is not None and outcome.launch.error is None


def test_the_rounds_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(repack, "MAX_ROUNDS", 1)
    gpus = shaped_pool("p3.2xlarge", "p3.8xlarge", "p3.16xlarge")
    cloud = Cloud(*everywhere("p3.16xlarge"), *everywhere("p3.8xlarge"))
    outcome = reconcile(gpus, cloud, snapshot(pending=[task(f"t{i}", 1) for i in range(8)]), NOW)

    assert len(outcome.repacks) == 1 and cloud.types() == {}
    assert outcome.launch is not None and outcome.launch.error is not None
    assert outcome.launch.error.startswith(NO_CAPACITY)


def test_with_nothing_left_to_try_the_tasks_wait_and_the_refusal_stands() -> None:
    gpus = shaped_pool("p3.8xlarge", "p3.16xlarge")
    cloud = Cloud(capacity={"p3.8xlarge@subnet-a/on-demand": 1, "p3.8xlarge@subnet-b/on-demand": 0})
    cloud.capacity |= {key: 0 for key in everywhere("p3.16xlarge")}
    memory = LaunchErrorMemory()
    outcome = reconcile(gpus, cloud, snapshot(pending=TWO_FOURS), NOW, launch_errors=memory)

    assert cloud.types() == {"p3.8xlarge": 1}  # one of the two found capacity
    assert set(cloud.offerings_called().values()) == {1}  # four offerings, once each
    assert len(outcome.repacks) == 1  # a third decision had nothing left to launch
    assert outcome.launch is not None and outcome.launch.error is not None
    assert outcome.launch.error.startswith(f"{NO_CAPACITY} 1 machine(s)")
    assert memory.pools["gpu"].error == outcome.launch.error


def test_a_refusal_for_another_reason_is_not_repacked() -> None:
    gpus = shaped_pool("p3.8xlarge", "p3.16xlarge")

    class Refusing(Cloud):
        def launch(self, plan: Plan) -> LaunchResult:
            self.calls.append((plan.launch_key, "", len(plan.launches)))
            return LaunchResult(error="InvalidParameterValue: bad image")

    cloud = Refusing()
    outcome = reconcile(gpus, cloud, snapshot(pending=TWO_FOURS), NOW)
    assert outcome.repacks == () and len(cloud.calls) == 1


def test_the_report_and_the_metrics_say_what_was_repacked() -> None:
    gpus = shaped_pool("p3.8xlarge", "p3.16xlarge")
    cloud = Cloud(*everywhere("p3.16xlarge"))
    outcome = reconcile(gpus, cloud, snapshot(pending=TWO_FOURS), NOW)

    report = outcome.report()
    assert report["launched"] == ["i-0", "i-1"] and "launch_error" not in report
    (repacked,) = report["repacked"]
    assert repacked["refused"] == everywhere("p3.16xlarge")
    assert repacked["launched"] == ["i-0", "i-1"]
    assert [line.split(":")[0] for line in repacked["actions"]] == [
        "launch 1 p3.8xlarge on-demand in subnet-a ($11.00/h)"
    ] * 2
    assert metric(outcome, gpus, "Launches") == {"demand": 2}
    assert metric(outcome, gpus, "LaunchErrors") == {"capacity": 2}


def metric(outcome: Outcome, gpus: Any, name: str) -> dict[str, float]:
    return {p.dimensions[0][1]: p.value for p in pass_points(outcome, gpus, NOW) if p.name == name}
