"""Fixtures for the boot tests: the local clouds the launch paths need, the Pub/Sub
emulator, and agent machines where they can run (skipped with the reason elsewhere; a
failure with ``DYNAGENT_REQUIRE_EMULATORS=1``, as in CI)."""

from __future__ import annotations

from ..gcp.conftest import compute, local_compute, names, publisher, pubsub_emulator, subscriber
from ..machines.conftest import machines_available

__all__ = [
    "compute", "local_compute", "machines_available", "names", "publisher", "pubsub_emulator",
    "subscriber",
]  # fmt: skip
