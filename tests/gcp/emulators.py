"""Test helpers for the Pub/Sub emulator: skip where it cannot run, or fail where it must.

A laptop without the gcloud SDK, its Pub/Sub emulator component or Java skips the
emulator tests, with the reason shown. CI sets ``DYNAGENT_REQUIRE_EMULATORS=1``
(``.ci/run``): there a missing emulator fails those tests instead, so they never go
quietly unrun.

One emulator serves the whole session, however many test modules ask for it: a test
module defines its fixture as

    @pytest.fixture(scope="session")
    def pubsub_emulator(pytestconfig: pytest.Config) -> PubSubEmulator:
        return emulators.session_pubsub_emulator(pytestconfig)

and the emulator is stopped (its process group ended) when the session ends.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import pytest

from dynagent.testing.gcp import pubsub
from dynagent.testing.gcp.pubsub import PubSubEmulator

REQUIRE_ENV = "DYNAGENT_REQUIRE_EMULATORS"

_EMULATOR = pytest.StashKey[PubSubEmulator]()
_START_ERROR = pytest.StashKey[str]()


def emulators_required(env: Mapping[str, str] = os.environ) -> bool:
    return env.get(REQUIRE_ENV, "").strip() == "1"


def require(availability: tuple[bool, str], env: Mapping[str, str] = os.environ) -> None:
    """Return if the emulator is available; otherwise skip the test, or fail it when the
    environment requires emulators. The reason is shown either way."""
    ok, reason = availability
    if ok:
        return
    if emulators_required(env):
        pytest.fail(f"{reason} ({REQUIRE_ENV}=1: the emulator tests must run here)", pytrace=False)
    pytest.skip(reason)


def require_pubsub_emulator() -> None:
    require(pubsub.available())


def session_pubsub_emulator(config: pytest.Config) -> PubSubEmulator:
    """The session's one emulator, started on first use and stopped when the session ends.

    A start that failed is not retried by every later test: they fail with its error.
    """
    require_pubsub_emulator()
    error = config.stash.get(_START_ERROR, None)
    if error is not None:
        pytest.fail(error, pytrace=False)
    emulator = config.stash.get(_EMULATOR, None)
    if emulator is None:
        emulator = PubSubEmulator()
        try:
            emulator.start()
        except Exception as exc:
            config.stash[_START_ERROR] = f"the Pub/Sub emulator did not start: {exc}"
            raise
        config.stash[_EMULATOR] = emulator
        config.add_cleanup(emulator.stop)
    return emulator


def push_subscription(
    emulator: PubSubEmulator, subscriber: Any, topic: str, endpoint: str, name: str
) -> None:
    """A push subscription on ``topic`` to ``endpoint``, in order per ordering key, as
    Eventarc's trigger pushes to a Cloud Function."""
    subscriber.create_subscription(
        request={
            "name": emulator.subscription_path(name),
            "topic": topic,
            "push_config": {"push_endpoint": endpoint},
            "enable_message_ordering": True,
        }
    )
