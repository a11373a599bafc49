"""Local stand-ins for the cloud, for the demo and the tests: nothing here runs in the cloud.

The Lambda and Cloud Functions builds leave this package out (infra/aws/build.py,
infra/gcp/deploy.sh), and no module that does run there imports it
(tests/test_layout.py). Import-light on purpose: ``dynagent.testing.aws.local_aws`` pulls in moto,
boto3 and werkzeug, so ``LocalAws`` is loaded only when someone asks for it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from dynagent.testing.aws.local_aws import LocalAws

__all__ = ["LocalAws"]


def __getattr__(name: str) -> Any:
    if name == "LocalAws":
        from dynagent.testing.aws.local_aws import LocalAws

        return LocalAws
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
