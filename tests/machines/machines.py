"""Whether agent machines can run here: skip where they cannot, or fail where they must.

A machine needs root, dockerd and a static busybox (Debian's ``docker.io`` and
``busybox-static``; ``make unit`` installs them when it runs as root). Where they are
missing the machine tests skip with the reason; with ``DYNAGENT_REQUIRE_EMULATORS=1``
(``.ci/run``) they fail instead, so they never go quietly unrun. Any test module that
boots machines calls ``require_machines()`` (the ``machines_available`` fixture does).
"""

from __future__ import annotations

import os

import pytest

from dynagent.testing.machines import agent_machine

REQUIRE_ENV = "DYNAGENT_REQUIRE_EMULATORS"


def require_machines() -> None:
    """Return if machines can run; otherwise skip the test, or fail it when required."""
    ok, reason = agent_machine.available()
    if ok:
        return
    if os.environ.get(REQUIRE_ENV, "").strip() == "1":
        pytest.fail(f"{reason} ({REQUIRE_ENV}=1: the machine tests must run here)", pytrace=False)
    pytest.skip(reason)
