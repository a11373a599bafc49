"""The demo: a scripted day of a master against a local cloud (``dynagent demo``)."""

from __future__ import annotations


def run_demo(quiet: bool = False, cloud: str = "aws") -> int:
    # Imported here: the demo needs moto or the GCP emulators, which only the demo and
    # the tests install.
    from dynagent.demo.run import run_demo as run

    return run(quiet=quiet, cloud=cloud)
