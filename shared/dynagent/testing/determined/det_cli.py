"""Determined's own ``det`` CLI against the local master, as a user's shell runs it.

``DetCli`` runs ``det -m URL ARGS...`` in a subprocess with a HOME of its own (so
consecutive runs share the CLI's token cache, and it never leaves the test), as admin
or another user. The builders give the arguments of the submissions an admin checks a
pool with: a notebook, a command, a shell (each detached, so the CLI neither tails logs
nor connects) and an experiment (a script entrypoint, one trial, a model directory).
The CLI lives in ``.venv-det`` (it pins requests<2.32, which the project's environment
does not take): ``DET`` is where ``make test`` puts it.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Final

from dynagent.testing.determined.master import DEFAULT_PASSWORD

DET: Final = Path(__file__).resolve().parents[4] / ".venv-det" / "bin" / "det"


class DetCli:
    def __init__(self, det: Path, master_url: str, home: Path, user: str = "admin") -> None:
        home.mkdir(parents=True, exist_ok=True)
        self._det = det
        self._master = master_url
        self._user = user
        self._env = {
            "PATH": os.environ.get("PATH", ""),
            "HOME": str(home),
            "XDG_CONFIG_HOME": str(home / ".config"),
            "DET_PASS": DEFAULT_PASSWORD,
            "PYTHONWARNINGS": "ignore",
            "NO_COLOR": "1",
        }

    def __call__(self, *args: str, user: str | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(self._det), "-m", self._master, *args],
            env={**self._env, "DET_USER": user or self._user},
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )


def in_pool(pool: str, *config: str) -> list[str]:
    return ["--config", f"resources.resource_pool={pool}", *(f"--config={c}" for c in config)]


def notebook(pool: str) -> list[str]:
    return ["notebook", "start", "--detach", *in_pool(pool)]


def command(pool: str, slots: int | None = None) -> list[str]:
    extra = [] if slots is None else [f"resources.slots={slots}"]
    return ["cmd", "run", "--detach", *in_pool(pool, *extra), "python3", "-c", "pass"]


def shell(pool: str) -> list[str]:
    return ["shell", "start", "--detach", *in_pool(pool)]


def experiment(directory: Path, slots: int, pool: str) -> list[str]:
    """A minimal experiment of one trial of ``slots``: its config and model directory are
    written under ``directory``."""
    model = directory / f"model-{pool}-{slots}"
    model.mkdir(parents=True)
    (model / "train.py").write_text("print('training')\n")
    config = model.with_suffix(".yaml")
    config.write_text(
        f"name: tiny-{slots}\n"
        "entrypoint: python3 train.py\n"
        "searcher: {name: single, metric: loss, max_length: 1}\n"
        f"resources: {{slots_per_trial: {slots}, resource_pool: {pool}}}\n"
    )
    return ["experiment", "create", str(config), str(model)]
