"""Zonal operations: how a mutation is reported, held RUNNING, and ends, well or in error."""

from __future__ import annotations

import copy
import http
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from dynagent.testing.gcp.errors import JsonObject
from dynagent.testing.gcp.instance_shapes import timestamp, utcnow

DEFAULT_FAILURE_STATUS: Final = {
    "QUOTA_EXCEEDED": 403,
    "ZONE_RESOURCE_POOL_EXHAUSTED": 503,
    "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS": 503,
}


@dataclass(frozen=True)
class Failure:
    """How an operation ends in error: ``error.errors`` and ``httpErrorStatusCode``.

    The error proper is ``code``/``message`` (with ``details``, the API's
    ``errorDetails``); ``leading`` errors come before it, as a bulkInsert's
    ``VM_MIN_COUNT_NOT_REACHED`` comes before the stockout that caused it."""

    code: str
    message: str
    http_status: int
    details: tuple[JsonObject, ...] = ()
    leading: tuple[JsonObject, ...] = ()

    def errors(self) -> list[JsonObject]:
        main: JsonObject = {"code": self.code, "message": self.message}
        if self.details:
            main["errorDetails"] = copy.deepcopy(list(self.details))
        return [*copy.deepcopy(list(self.leading)), main]


def default_failure_message(code: str, project: str, zone: str) -> str:
    where = f"The zone 'projects/{project}/zones/{zone}'"
    if code == "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS":
        return (
            f"{where} does not have enough resources available to fulfill the request.  "
            "'(resource type:compute)'."
        )
    if code.startswith("ZONE_RESOURCE_POOL_EXHAUSTED"):
        return (
            f"{where} does not have enough resources "
            "available to fulfill the request.  Try a different zone, or try again later."
        )
    if code == "QUOTA_EXCEEDED":
        return f"Quota 'GPUS_ALL_REGIONS' exceeded.  Limit: 0.0 globally in project {project}."
    return code


@dataclass
class Operation:
    """A started operation: the resource responses show, and what lands when it is DONE."""

    resource: JsonObject
    polls_left: int  # RUNNING for this many more get/wait calls
    on_done: Callable[[], None]  # the effect that lands when the operation completes
    failure: Failure | None

    @property
    def done(self) -> bool:
        return bool(self.resource["status"] == "DONE")

    def complete(self) -> None:
        if self.done:
            return
        self.on_done()
        self.resource.update(status="DONE", progress=100, endTime=timestamp(utcnow()))
        for status in (
            self.resource.get("instancesBulkInsertOperationMetadata", {})
            .get("perLocationStatus", {})
            .values()
        ):
            status["status"] = "DONE"
        if self.failure is not None:
            self.resource["error"] = {"errors": self.failure.errors()}
            self.resource["httpErrorStatusCode"] = self.failure.http_status
            self.resource["httpErrorMessage"] = http.HTTPStatus(
                self.failure.http_status
            ).phrase.upper()


def operation_name() -> str:
    """Shaped like the API's: operation-<millis>-<hex>-<hex>-<hex>."""
    millis = int(time.time() * 1000)
    parts = (secrets.token_hex(7)[:13], secrets.token_hex(4), secrets.token_hex(4))
    return f"operation-{millis}-{'-'.join(parts)}"
