"""Where machines cannot run, the tests say why: skipped, or failed when CI requires them."""

from __future__ import annotations

import shutil

import pytest

from dynagent.testing.machines import agent_machine

from .machines import REQUIRE_ENV, require_machines


def test_without_root_machines_are_unavailable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(agent_machine.os, "geteuid", lambda: 1000)
    assert agent_machine.available() == (
        False,
        "agent machines need root (namespaces, mounts and dockerd)",
    )


def test_a_missing_engine_names_the_package(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(agent_machine.os, "geteuid", lambda: 0)
    real_which = shutil.which
    monkeypatch.setattr(
        agent_machine.shutil, "which", lambda tool: None if tool == "dockerd" else real_which(tool)
    )
    ok, reason = agent_machine.available()
    assert not ok
    assert "apt-get install docker.io" in reason


def test_required_machines_fail_rather_than_skip(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(agent_machine, "available", lambda: (False, "no dockerd"))
    monkeypatch.delenv(REQUIRE_ENV, raising=False)
    with pytest.raises(pytest.skip.Exception, match="no dockerd"):
        require_machines()
    monkeypatch.setenv(REQUIRE_ENV, "1")
    with pytest.raises(pytest.fail.Exception, match="must run here"):
        require_machines()
