"""Fixtures for the agent machine tests; ``machines.py`` says when they skip."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from dynagent.testing.determined.master import LocalDetermined
from dynagent.testing.machines.agent_machine import AgentMachine

from .machines import require_machines


@pytest.fixture(scope="session")
def machines_available() -> None:
    """Skip (or fail, when required) unless agent machines can run here."""
    require_machines()


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
