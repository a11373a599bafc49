"""Reserved capacity on the local Compute, through reconcile passes: VMs go into the
pool's reservation by reservationAffinity until it is full, the rest are created
without any reservation; idle VMs in it stay while others go; another pool's open
reservation is left alone."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from dynagent.core.fleet import Mark
from dynagent.core.plan import MarkWrite
from dynagent.gcp.functions import GcpFunctions
from dynagent.gcp.reservations import ReservationCache
from dynagent.testing.gcp.compute import LocalCompute
from dynagent.testing.gcp.pubsub_events import message_event

from .helpers import ZONE, config, gcp_pool_document, now, snapshot
from .test_warm_pool import Passes as WarmPasses

T4 = [("nvidia-tesla-t4", 4)]
TOPIC, SUBSCRIPTION = "projects/p/topics/snapshots", "projects/p/subscriptions/s"


class Passes(WarmPasses):
    """Reconcile passes of pool t4 (``test_warm_pool``'s), reading reservations too, with
    one warm function's cache of them."""

    def __init__(self, compute: LocalCompute, **provider: Any) -> None:
        super().__init__(compute, **provider)
        self.cache = ReservationCache()

    def provider_options(self) -> dict[str, Any]:
        return {
            "reservations": self.compute.reservations_client(),
            "reservation_cache": self.cache,
        }


def affinities(compute: LocalCompute) -> list[str]:
    """Each live VM's affinity, as its type and the reservation it names."""
    found = []
    for vm in compute.instances():
        if vm["status"] in ("STOPPING", "TERMINATED"):
            continue
        named = vm.get("reservationAffinity", {})
        found.append(f"{named.get('consumeReservationType')}:{','.join(named.get('values', []))}")
    return sorted(found)


def test_vms_fill_the_reservation_then_are_created_outside_any(compute: LocalCompute) -> None:
    compute.create_reservation("t4-reserved", ZONE, "n1-standard-32", 2, accelerators=T4)
    passes = Passes(compute, reservations=["t4-reserved"])

    outcome = passes(pending=[(f"exp-{n}", 4) for n in range(3)])

    assert outcome.launch is not None and outcome.launch.error is None
    assert affinities(compute) == [
        "NO_RESERVATION:",
        "SPECIFIC_RESERVATION:t4-reserved",
        "SPECIFIC_RESERVATION:t4-reserved",
    ]
    held = compute.reservation("t4-reserved")
    assert held["specificReservation"]["inUseCount"] in ("2", 2)
    # The same snapshot again launches nothing: the VMs count, in the reservation too.
    again = passes(pending=[(f"exp-{n}", 4) for n in range(3)])
    assert again.plan is not None and again.plan.launches == ()


def test_a_reservation_another_deployment_filled_meanwhile_falls_back_in_the_same_pass(
    compute: LocalCompute,
) -> None:
    compute.create_reservation("t4-reserved", ZONE, "n1-standard-32", 2, accelerators=T4)
    passes = Passes(compute, reservations=["t4-reserved"])
    passes.provider().observe()  # read with two places free, trusted for a minute
    # Another deployment's pool takes one of them meanwhile.
    theirs = Passes(
        compute, reservations=["t4-reserved"], label_value="someone-else", name_prefix="other-"
    )
    theirs(pending=[("theirs", 4)])

    outcome = passes(pending=[("exp-1", 4), ("exp-2", 4)])

    assert outcome.launch is not None and outcome.launch.error is None
    ours = [vm for vm in compute.instances() if vm["name"].startswith("det-agent-")]
    kinds = sorted(vm["reservationAffinity"]["consumeReservationType"] for vm in ours)
    assert kinds == ["NO_RESERVATION", "SPECIFIC_RESERVATION"]
    assert compute.reservation("t4-reserved")["specificReservation"]["inUseCount"] in ("2", 2)


def test_idle_vms_in_the_reservation_stay_and_the_others_go(compute: LocalCompute) -> None:
    compute.create_reservation("t4-reserved", ZONE, "n1-standard-32", 1, accelerators=T4)
    passes = Passes(compute, reservations=["t4-reserved"])
    passes(pending=[("exp-1", 4), ("exp-2", 4)])
    names = {
        vm["reservationAffinity"]["consumeReservationType"]: vm["name"]
        for vm in compute.instances()
    }
    agents = [(name, 4, 0) for name in names.values()]
    passes(agents=agents)
    provider = passes.provider()
    provider.observe()
    since = now() - timedelta(minutes=30)
    provider.write_marks(
        (MarkWrite(Mark.IDLE_SINCE, since, tuple(names.values()), "aged by the test"),)
    )

    passes(agents=agents)

    left = {vm["name"] for vm in compute.instances() if vm["status"] == "RUNNING"}
    assert left == {names["SPECIFIC_RESERVATION"]}


def test_a_vm_outside_reservations_leaves_another_pool_s_open_one_alone(
    compute: LocalCompute,
) -> None:
    compute.create_reservation(
        "open-t4", ZONE, "n1-standard-32", 2, accelerators=T4, specific=False
    )
    passes = Passes(compute)

    passes(pending=[("exp-1", 4)])

    assert affinities(compute) == ["NO_RESERVATION:"]
    assert compute.reservation("open-t4")["specificReservation"]["inUseCount"] in ("0", 0)


class Lines:
    """A logger that keeps its warnings."""

    def __init__(self) -> None:
        self.warnings: list[str] = []

    def warning(self, message: str, *args: Any, **kwargs: Any) -> None:
        self.warnings.append(message)

    def __getattr__(self, name: str) -> Any:
        return lambda *args, **kwargs: None


def test_without_a_drain_notice_topic_the_functions_say_the_bridge_is_not_told(
    compute: LocalCompute,
) -> None:
    # Deleted in 45 minutes: its VMs count as going from 40 minutes before, and the
    # bridge is told from 10 minutes before that, on the drain-notice topic; with none
    # (test_drain_notices.py has one), the functions say so.
    ends = datetime.now(UTC) + timedelta(minutes=45)
    compute.create_reservation("t4-reserved", ZONE, "n1-standard-32", 2, accelerators=T4, end=ends)
    lines = Lines()
    functions = GcpFunctions(
        config(gcp_pool_document(reservations=["t4-reserved"])),
        instances=compute.instances_client,
        operations=compute.zone_operations_client,
        reservations=compute.reservations_client,
        sleep=lambda _: None,
        logger=lines,
    )
    first = snapshot(1, pool="t4", pending=[("x", 4)]).to_json().encode()
    functions.reconcile_event(
        message_event(first, "projects/p/topics/s", "projects/p/subscriptions/s")
    )
    (vm,) = [v for v in compute.instances() if v["status"] != "TERMINATED"]
    assert vm["reservationAffinity"]["values"] == ["t4-reserved"]

    second = snapshot(2, pool="t4", agents=[(vm["name"], 4, 4)]).to_json().encode()
    functions.reconcile_event(
        message_event(second, "projects/p/topics/s", "projects/p/subscriptions/s")
    )

    told = "no DYNAGENT_DRAIN_NOTICE_TOPIC set: the bridge is not told to drain 1 agents"
    assert any(told in line and "t4-reserved" in line for line in lines.warnings)
