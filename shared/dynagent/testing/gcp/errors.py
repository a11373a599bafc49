"""The local Compute's errors, in the API's JSON shape, and the front end's refusals.

``ApiError`` is any error response (status, the legacy ``reason``, the message), worded
as Compute Engine words it; ``CallFault`` is a ``LocalCompute.fail_calls()`` knob: a call
the API's front end refuses (429, 503) before anything is done.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

# A JSON object, as the API takes and returns it.
JsonObject = dict[str, Any]


_STATUS_NAMES: Final = {
    400: "INVALID_ARGUMENT",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    405: "METHOD_NOT_ALLOWED",
    409: "ALREADY_EXISTS",
    412: "FAILED_PRECONDITION",
    429: "RESOURCE_EXHAUSTED",
    500: "INTERNAL",
    503: "UNAVAILABLE",
}


class ApiError(Exception):
    """An error response: HTTP status, the legacy ``reason`` and the message."""

    def __init__(self, code: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message

    def body(self) -> JsonObject:
        """``{"error": {...}}``; api-core reads ``message`` and ``errors`` from it."""
        return {
            "error": {
                "code": self.code,
                "message": self.message,
                "errors": [{"message": self.message, "domain": "global", "reason": self.reason}],
                "status": _STATUS_NAMES.get(self.code, "UNKNOWN"),
            }
        }


def invalid(field_name: str, value: object, why: str) -> ApiError:
    """Compute's own wording for a bad value, which names the field."""
    shown = "" if value is None else value
    return ApiError(400, "invalid", f"Invalid value for field '{field_name}': '{shown}'. {why}")


def not_found(resource: str) -> ApiError:
    return ApiError(404, "notFound", f"The resource '{resource}' was not found")


def not_ready(resource: str) -> ApiError:
    """A resource busy with another change, or in a state the call cannot act on."""
    return ApiError(400, "resourceNotReady", f"The resource '{resource}' is not ready")


def already_exists(resource: str) -> ApiError:
    return ApiError(409, "alreadyExists", f"The resource '{resource}' already exists")


def unsupported(what: str) -> ApiError:
    """The request may be valid for the real API but this fake does not model it: say so
    rather than answer as if it did."""
    return ApiError(400, "badRequest", f"{what} is not supported by the local Compute fake")


# What the API's front end answers when it refuses a call before doing anything.
CALL_FAULTS: Final = {
    429: ("rateLimitExceeded", "Rate Limit Exceeded"),
    503: ("backendError", "The service is currently unavailable."),
}


@dataclass
class CallFault:
    """Every ``every``-th call of ``methods`` (None: any) is refused with ``status``,
    ``remaining`` more times (None: for ever)."""

    status: int
    every: int
    methods: frozenset[str] | None
    remaining: int | None
    seen: int = 0

    def applies(self, api_method: str) -> bool:
        if self.methods is not None and api_method not in self.methods:
            return False
        if self.remaining == 0:
            return False
        self.seen += 1
        if self.seen % self.every:
            return False
        if self.remaining is not None:
            self.remaining -= 1
        return True

    def error(self) -> ApiError:
        reason, message = CALL_FAULTS[self.status]
        return ApiError(self.status, reason, message)
