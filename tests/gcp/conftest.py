"""GCP fixtures: one local Compute Engine (a fake API on 127.0.0.1) for the whole session.

Starting the server once keeps the GCP tests fast; ``compute`` wipes its state and knobs
before each test, so tests never see each other's instances, operations or recorded
calls. The server listens on loopback only and is stopped (port closed, thread joined)
by the fixture that started it. Nothing here touches ``os.environ``: the clients are
pointed at the server through their ``client_options``.

The Google client libraries are imported only when a GCP fixture is first used.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import pytest

from . import emulators

if TYPE_CHECKING:
    from dynagent.testing.gcp.compute import LocalCompute
    from dynagent.testing.gcp.pubsub import PubSubEmulator


@pytest.fixture(scope="session")
def local_compute() -> Iterator[LocalCompute]:
    from dynagent.testing.gcp.compute import LocalCompute

    with LocalCompute() as server:
        yield server


@pytest.fixture
def compute(local_compute: LocalCompute) -> LocalCompute:
    """The session's local Compute, wiped clean: no state, default knobs, no calls recorded."""
    local_compute.reset()
    local_compute.clear_calls()
    return local_compute


@pytest.fixture
def instances_client(compute: LocalCompute) -> Iterator[Any]:
    """A real ``compute_v1.InstancesClient`` (REST) on the local Compute; its operations'
    ``result()`` polls the local Compute too."""
    client = compute.instances_client()
    yield client
    client.transport.close()
    client.transport._zone_operations_client.transport.close()


@pytest.fixture
def operations_client(compute: LocalCompute) -> Iterator[Any]:
    """A real ``compute_v1.ZoneOperationsClient`` (REST) on the local Compute."""
    client = compute.zone_operations_client()
    yield client
    client.transport.close()


# The Pub/Sub emulator: one for the session, started by the first test that asks for it.


@pytest.fixture(scope="session")
def pubsub_emulator(pytestconfig: pytest.Config) -> PubSubEmulator:
    return emulators.session_pubsub_emulator(pytestconfig)


@pytest.fixture
def names() -> Callable[[str], str]:
    """Unique resource names, so tests sharing the session's emulator never collide."""
    suffix = uuid.uuid4().hex[:8]
    return lambda name: f"{name}-{suffix}"


@pytest.fixture
def publisher(pubsub_emulator: PubSubEmulator) -> Any:
    from google.cloud import pubsub_v1

    # Ordering, as dynagent's publisher does: one pool's snapshots stay in order.
    options = pubsub_v1.types.PublisherOptions(enable_message_ordering=True)
    return pubsub_emulator.publisher(publisher_options=options)


@pytest.fixture
def subscriber(pubsub_emulator: PubSubEmulator) -> Any:
    return pubsub_emulator.subscriber()
