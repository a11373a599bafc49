"""Local stand-ins for the cloud, for the demo and the tests.

Import-light on purpose: ``dynagent.local.aws`` pulls in moto, boto3 and werkzeug, so
``LocalAws`` is loaded only when someone asks for it (the Lambda image never does).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from dynagent.local.aws import LocalAws

__all__ = ["LocalAws"]


def __getattr__(name: str) -> Any:
    if name == "LocalAws":
        from dynagent.local.aws import LocalAws

        return LocalAws
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
