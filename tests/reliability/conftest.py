"""The suite's clouds under pytest: the session's local AWS, Compute and Pub/Sub emulator."""

from __future__ import annotations

from typing import Any

import pytest

from tests.gcp.conftest import local_compute, pubsub_emulator  # noqa: F401 (fixtures)
from tests.reliability.clouds import Clouds


@pytest.fixture
def clouds(request: pytest.FixtureRequest) -> Clouds:
    def fixture(name: str) -> Any:
        return lambda: request.getfixturevalue(name)

    return Clouds(
        aws=fixture("local_aws"),
        compute=fixture("local_compute"),
        pubsub=fixture("pubsub_emulator"),
    )
