"""Every ``det`` command the README and docs show, run with Determined's own CLI against
the local master configured as the docs say (``dynagent master-config`` of the example
pools): a command a reader copies works, and one Determined's CLI lacks fails here."""

from __future__ import annotations

import shlex
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from dynagent.files.master_config import master_config
from dynagent.testing.determined.master import LocalDetermined

pytest.importorskip("determined", reason="Determined's CLI: run in .venv-det")

ROOT = Path(__file__).resolve().parents[2]
RunDet = Callable[..., subprocess.CompletedProcess[str]]
# Commands that follow the task's logs until it ends: the test starts them detached.
FOLLOWS_LOGS = (("cmd", "run"), ("notebook", "start"), ("shell", "start"))


def shown_det_commands() -> list[tuple[str, str]]:
    """(page, command line) for each line of a code block that runs ``det``."""
    found = []
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        in_code = False
        for line in page.read_text().splitlines():
            if line.strip().startswith("```"):
                in_code = not in_code
                continue
            command = line.strip().removeprefix("$ ").split("  #")[0].strip()
            if in_code and command.startswith("det "):
                found.append((page.name, command))
    return found


def test_the_docs_show_det_commands() -> None:
    assert shown_det_commands()  # the walk found them


@pytest.mark.parametrize(("page", "line"), shown_det_commands())
def test_a_det_command_the_docs_show_runs(
    page: str, line: str, master: LocalDetermined, det: RunDet, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_REGION", "us-east-1")
    master.configure(master_config(ROOT / "infra" / "aws" / "dynagent.example.yaml"))
    args = shlex.split(line)[1:]
    if tuple(args[:2]) in FOLLOWS_LOGS:
        args.insert(2, "--detach")
    ran = det(*args)
    assert ran.returncode == 0, f"{page}: {line}: {ran.stderr}"
