"""The local clouds a scenario runs on, each started on first use.

Under pytest they are the session's fixtures (started once, stopped by the fixture that
started them); under ``python -m tests.reliability`` this module starts them and
``close`` stops what it started.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import ExitStack
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from dynagent.testing.aws.local_aws import LocalAws
    from dynagent.testing.gcp.compute import LocalCompute
    from dynagent.testing.gcp.pubsub import PubSubEmulator


class Clouds:
    def __init__(
        self,
        aws: Callable[[], LocalAws] | None = None,
        compute: Callable[[], LocalCompute] | None = None,
        pubsub: Callable[[], PubSubEmulator] | None = None,
    ) -> None:
        self._given: dict[str, Callable[[], Any] | None] = {
            "aws": aws,
            "compute": compute,
            "pubsub": pubsub,
        }
        self._started: dict[str, Any] = {}
        self._stack = ExitStack()

    def aws(self) -> LocalAws:
        """The local AWS, wiped clean (no state, default knobs, no calls recorded)."""
        aws: LocalAws = self._get("aws")
        aws.reset()
        aws.clear_calls()
        return aws

    def compute(self) -> LocalCompute:
        compute: LocalCompute = self._get("compute")
        compute.reset()
        return compute

    def pubsub(self) -> PubSubEmulator:
        emulator: PubSubEmulator = self._get("pubsub")
        return emulator

    def _get(self, name: str) -> Any:
        if name not in self._started:
            given = self._given[name]
            self._started[name] = given() if given else self._stack.enter_context(_start(name))
        return self._started[name]

    def close(self) -> None:
        self._stack.close()

    def __enter__(self) -> Clouds:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


def _start(name: str) -> Any:
    if name == "aws":
        from dynagent.testing.aws.local_aws import LocalAws

        return LocalAws()
    if name == "compute":
        from dynagent.testing.gcp.compute import LocalCompute

        return LocalCompute()
    from dynagent.testing.gcp.pubsub import PubSubEmulator

    return PubSubEmulator()
