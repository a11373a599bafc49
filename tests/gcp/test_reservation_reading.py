"""Compute Engine reservations as the decision reads them, and the affinity each VM of
the pool is created with."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

from google.cloud import compute_v1

from dynagent.core.fleet import ReservationKind
from dynagent.gcp.reservations import affinity, reservation_from, reservation_of, where

NOW = datetime(2026, 11, 26, 12, 0, tzinfo=UTC)


def reservation(**overrides: Any) -> Any:
    """As reservations.get answers for 4 a3-highgpu-8g in us-central1-a, 1 in use."""
    fields: dict[str, Any] = {
        "name": "a3-reserved",
        "zone": "https://www.googleapis.com/compute/v1/projects/p/zones/us-central1-a",
        "status": "READY",
        "specificReservationRequired": True,
        "specificReservation": {
            "count": "4",
            "inUseCount": "1",
            "instanceProperties": {"machineType": "a3-highgpu-8g"},
        },
    }
    fields.update(overrides)
    return compute_v1.Reservation.from_json(json.dumps(fields))


def test_a_specific_reservation_with_its_free_places() -> None:
    r = reservation_from("a3-reserved", "us-central1-a", reservation(), (1, 2))

    assert (r.id, r.kind, r.instance_type, r.zone, r.total, r.available) == (
        "a3-reserved",
        ReservationKind.TARGETED,
        "a3-highgpu-8g",
        "us-central1-a",
        4,
        2,
    )
    assert r.ends_at is None and not r.ends_hard


def test_one_any_vm_may_use_is_open_and_one_not_ready_takes_no_launch() -> None:
    assert (
        reservation_from("r", "z", reservation(specificReservationRequired=False), (0, 0)).kind
        is ReservationKind.OPEN
    )
    assert reservation_from("r", "z", reservation(status="UPDATING"), (0, 0)).available == 0


def test_a_delete_time_is_a_hard_end() -> None:
    end = NOW + timedelta(days=2)
    r = reservation_from("r", "z", reservation(deleteAtTime=end.isoformat()), (0, 0))
    assert r.ends_at == end and r.ends_hard
    assert r.ending(end - timedelta(minutes=30), timedelta(minutes=40))


def test_a_shared_reservation_is_looked_up_in_its_own_project() -> None:
    assert where("projects/host/reservations/a3", "mine") == ("host", "a3")
    assert where("a3", "mine") == ("mine", "a3")


def test_the_affinity_names_the_reservation_or_none_and_reads_back() -> None:
    named = affinity("projects/host/reservations/a3")
    assert named == {
        "consumeReservationType": "SPECIFIC_RESERVATION",
        "key": "compute.googleapis.com/reservation-name",
        "values": ["projects/host/reservations/a3"],
    }
    assert affinity("") == {"consumeReservationType": "NO_RESERVATION"}
    vm = compute_v1.Instance.from_json(json.dumps({"name": "vm", "reservationAffinity": named}))
    assert reservation_of(vm) == "projects/host/reservations/a3"
    plain = compute_v1.Instance.from_json(json.dumps({"reservationAffinity": affinity("")}))
    assert reservation_of(plain) == ""
