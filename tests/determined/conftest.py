"""Fixtures for the local Determined master: one server for the session, wiped per test.

The server listens on 127.0.0.1 only and the session fixture that starts it stops it
(port closed, thread joined). ``det`` runs Determined's own CLI in a subprocess with a
temporary HOME and XDG_CONFIG_HOME, so its token cache never leaves the test.

Determined's client lives in .venv-det (`make test` runs this folder there): it pins
requests<2.32, which the project's own environment does not take. The modules that use it
skip without it; the rest (the master config and admission rules) run in both.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from dynagent.testing.determined.det_cli import DetCli
from dynagent.testing.determined.master import DEFAULT_PASSWORD

if TYPE_CHECKING:
    from dynagent.testing.determined.master import LocalDetermined

ADMIN = ("admin", DEFAULT_PASSWORD)
DET = Path(sys.executable).with_name("det")

RunDet = Callable[..., subprocess.CompletedProcess[str]]


@pytest.fixture
def session(master: LocalDetermined) -> Any:
    """A real ``determined.common.api.Session``, logged in as admin through the API
    (salted, hashed password), without retries so injected errors show at once."""
    pytest.importorskip("determined", reason="Determined's client: run in .venv-det")
    from determined.common import api
    from determined.common.api import authentication

    logged_in = authentication.login(master.url, *ADMIN)
    return api.Session(master.url, logged_in.username, logged_in.token, None, max_retries=0)


@pytest.fixture
def det(master: LocalDetermined, tmp_path: Path) -> RunDet:
    """Run ``det -m URL ARGS...`` against the master as admin (or ``user=``, with
    DEFAULT_PASSWORD); one HOME per test, so consecutive runs share the CLI's token cache
    as a user's shell would."""
    return DetCli(DET, master.url, tmp_path / "home", user=ADMIN[0])
