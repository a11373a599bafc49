"""Fixtures for the agent machine tests: skip where machines cannot run, or fail in CI.

A machine needs root, dockerd and busybox (Debian's ``docker.io`` and ``busybox-static``;
``make unit`` installs them when it runs as root). Where they are missing the machine
tests skip with the reason; with ``DYNAGENT_REQUIRE_EMULATORS=1`` (``.ci/run``) they fail
instead, so they never go quietly unrun.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from dynagent.testing import agent_machine
from dynagent.testing.agent_machine import AgentMachine
from dynagent.testing.determined import LocalDetermined

REQUIRE_ENV = "DYNAGENT_REQUIRE_EMULATORS"


@pytest.fixture(scope="session")
def machines_available() -> None:
    """Skip (or fail, when required) unless agent machines can run here."""
    ok, reason = agent_machine.available()
    if ok:
        return
    if os.environ.get(REQUIRE_ENV, "").strip() == "1":
        pytest.fail(f"{reason} ({REQUIRE_ENV}=1: the machine tests must run here)", pytrace=False)
    pytest.skip(reason)


@pytest.fixture
def aws_machine(machines_available: None, master: LocalDetermined) -> Iterator[AgentMachine]:
    """An EC2 instance ``i-0123456789abcdef0`` with 4 GPUs, its agents reaching ``master``."""
    with AgentMachine("aws", "i-0123456789abcdef0", gpus=4, master=master) as machine:
        yield machine


@pytest.fixture
def gcp_machine(machines_available: None, master: LocalDetermined) -> Iterator[AgentMachine]:
    """A GCE instance ``det-agent-pool-7-0`` with 2 GPUs, its agents reaching ``master``."""
    with AgentMachine("gcp", "det-agent-pool-7-0", gpus=2, master=master) as machine:
        yield machine
