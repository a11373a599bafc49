"""The demo: a scripted day of a master against a local AWS (``dynagent demo``)."""

from __future__ import annotations


def run_demo(quiet: bool = False) -> int:
    # Imported here: the demo needs moto, which only the demo and tests install.
    from dynagent.demo.run import run_demo as run

    return run(quiet=quiet)
