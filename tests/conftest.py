"""Shared fixtures: one local AWS (moto's server on 127.0.0.1) for the whole session.

Starting the server once keeps the AWS tests fast; ``aws`` resets its state before each
test, so tests never see each other's instances, queues or recorded calls. The server
listens on loopback only and is stopped (port closed, thread joined) by the fixture that
started it. Nothing here touches ``os.environ``: a test that needs the variables takes
them from ``aws.env()`` through ``monkeypatch``, which restores them.

moto is imported only when an AWS fixture is first used, so the core tests don't pay for it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from dynagent.testing.aws.local_aws import LocalAws
    from dynagent.testing.determined.master import LocalDetermined


@pytest.fixture(scope="session")
def local_aws() -> Iterator[LocalAws]:
    from dynagent.testing.aws.local_aws import LocalAws

    with LocalAws() as server:
        yield server


@pytest.fixture
def aws(local_aws: LocalAws) -> LocalAws:
    """The session's local AWS, wiped clean: no state, default knobs, no calls recorded."""
    local_aws.reset()
    local_aws.clear_calls()
    return local_aws


@pytest.fixture
def ec2(aws: LocalAws) -> Any:
    return aws.client("ec2")


@pytest.fixture
def sqs(aws: LocalAws) -> Any:
    return aws.client("sqs")


# The local Determined master: for the bridge's tests and the ones that hold it to
# Determined's own client (tests/determined).


@pytest.fixture(scope="session")
def local_master() -> Iterator[LocalDetermined]:
    from dynagent.testing.determined.master import LocalDetermined

    with LocalDetermined() as server:
        yield server


@pytest.fixture
def master(local_master: LocalDetermined) -> LocalDetermined:
    """The session's master, reset: the ``default`` pool, users admin and determined,
    knobs off, no calls recorded; up again if the last test left it down."""
    local_master.up()
    local_master.reset()
    local_master.clear_calls()
    return local_master
