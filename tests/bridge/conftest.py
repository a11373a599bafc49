"""The local Determined master (dynagent.testing.determined) for the bridge's tests: one
server for the session on 127.0.0.1, reset per test, stopped by the fixture."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from dynagent.testing.determined import LocalDetermined


@pytest.fixture(scope="session")
def local_master() -> Iterator[LocalDetermined]:
    with LocalDetermined() as server:
        yield server


@pytest.fixture
def master(local_master: LocalDetermined) -> LocalDetermined:
    local_master.reset()
    local_master.clear_calls()
    return local_master
