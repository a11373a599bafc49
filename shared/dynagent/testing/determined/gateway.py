"""The HTTP edge of a Determined master as its grpc-gateway (v1) and ``grpcutil`` make it
(see master.py's docstring): JSON timestamps, errors with their gRPC code and HTTP status,
query parameters and request bodies read into a request, and pagination."""

from __future__ import annotations

import builtins
import json
import re
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any, Final

from werkzeug.wrappers import Request, Response

from dynagent.testing.determined.durations import parse_go_duration

JsonObject = dict[str, Any]


def timestamp(when: datetime) -> str:
    """A protobuf Timestamp in JSON: UTC, ``Z``, 0, 3, 6 or 9 fractional digits."""
    when = when.astimezone(UTC)
    text = when.strftime("%Y-%m-%dT%H:%M:%S")
    micros = when.microsecond
    if micros:
        text += f".{micros // 1000:03d}" if micros % 1000 == 0 else f".{micros:06d}"
    return text + "Z"


# --------------------------------------------------------------------------------------
# Errors, as grpcutil.errorHandler writes them
# --------------------------------------------------------------------------------------

# gRPC code -> (name as codes.Code.String() spells it, HTTP status per grpc-gateway v1).
_CODES: Final = {
    2: ("Unknown", 500),
    3: ("InvalidArgument", 400),
    5: ("NotFound", 404),
    7: ("PermissionDenied", 403),
    9: ("FailedPrecondition", 400),
    12: ("Unimplemented", 501),
    13: ("Internal", 500),
    14: ("Unavailable", 503),
    16: ("Unauthenticated", 401),
}
HTTP_TO_CODE: Final = {500: 13, 501: 12, 503: 14, 400: 3, 401: 16, 403: 7, 404: 5}


class ApiError(Exception):
    """An error answer: a gRPC status code and its message."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        if code not in _CODES:
            raise ValueError(f"gRPC code {code} is not modelled")
        self.code = code
        self.message = message

    @property
    def http_status(self) -> int:
        return _CODES[self.code][1]

    def body(self) -> JsonObject:
        return {"error": {"code": self.code, "reason": _CODES[self.code][0], "error": self.message}}


def not_found(kind: str, name: str) -> ApiError:
    return ApiError(5, f"{kind} '{name}' not found")


def json_response(body: JsonObject) -> Response:
    return Response(json.dumps(body), status=200, content_type="application/json")


def error_response(error: ApiError) -> Response:
    return Response(
        json.dumps(error.body()) + "\n",
        status=error.http_status,
        content_type="application/json",
    )


# --------------------------------------------------------------------------------------
# Request parsing, as grpc-gateway v1 does it
# --------------------------------------------------------------------------------------

_TRUE: Final = frozenset({"1", "t", "T", "TRUE", "true", "True"})
_FALSE: Final = frozenset({"0", "f", "F", "FALSE", "false", "False"})
ORDER_BY: Final = ("ORDER_BY_UNSPECIFIED", "ORDER_BY_ASC", "ORDER_BY_DESC")
AGENT_SORT_BY: Final = ("SORT_BY_UNSPECIFIED", "SORT_BY_ID", "SORT_BY_TIME")
JOB_STATES: Final = (
    "STATE_UNSPECIFIED",
    "STATE_QUEUED",
    "STATE_SCHEDULED",
    "STATE_SCHEDULED_BACKFILLED",
)


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


class QueryParams:
    """A request's query parameters, read as the gateway reads them into the proto."""

    def __init__(self, request: Request) -> None:
        self._values: dict[str, list[str]] = {}
        for key, values in request.args.lists():
            self._values.setdefault(_camel(key), []).extend(values)

    def _one(self, name: str) -> str | None:
        values = self._values.get(name)
        if not values:
            return None
        if len(values) > 1:
            raise ApiError(3, f"too many values for field {name!r}: {', '.join(values)}")
        return values[0]

    def int32(self, name: str) -> int:
        raw = self._one(name)
        return 0 if raw is None else self._int32(raw)

    def int32s(self, name: str) -> list[int]:
        """A repeated int32, each value read as int32() reads one."""
        return [self._int32(raw) for raw in self._values.get(name, [])]

    @staticmethod
    def _int32(raw: str) -> int:
        if not re.fullmatch(r"[+-]?\d+", raw) or not -(2**31) <= int(raw) < 2**31:
            raise ApiError(3, f'strconv.ParseInt: parsing "{raw}": invalid syntax')
        return int(raw)

    def bool(self, name: str) -> bool:
        raw = self._one(name)
        if raw is None:
            return False
        if raw in _TRUE:
            return True
        if raw in _FALSE:
            return False
        raise ApiError(3, f'strconv.ParseBool: parsing "{raw}": invalid syntax')

    def optional_bool(self, name: str) -> builtins.bool | None:
        """A google.protobuf.BoolValue: None when the parameter is absent."""
        return None if self._one(name) is None else self.bool(name)

    def string(self, name: str) -> str:
        return self._one(name) or ""

    def strings(self, name: str) -> list[str]:
        return list(self._values.get(name, []))

    def timestamp(self, name: str) -> datetime | None:
        """A google.protobuf.Timestamp as runtime.Timestamp reads it (jsonpb: RFC 3339 with
        a zone); None when absent."""
        raw = self._one(name)
        if raw is None:
            return None
        text = raw[:-1] + "+00:00" if raw.endswith(("Z", "z")) else raw
        try:
            when = datetime.fromisoformat(text) if "T" in text.upper() else None
        except ValueError:
            when = None
        if when is None or when.tzinfo is None:
            raise ApiError(3, f'bad Timestamp: parsing time "{raw}" as RFC 3339')
        return when.astimezone(UTC)

    def enum(self, name: str, names: tuple[str, ...]) -> str:
        raw = self._one(name)
        return names[0] if raw is None else self._enum_value(raw, names)

    def enums(self, name: str, names: tuple[str, ...]) -> list[str]:
        return [self._enum_value(raw, names) for raw in self._values.get(name, [])]

    @staticmethod
    def _enum_value(raw: str, names: tuple[str, ...]) -> str:
        if raw and raw in names:
            return raw
        # "" marks a number the enum skips (GetExperimentsRequest.SortBy has no 3 or 7).
        if raw.isdigit() and int(raw) < len(names) and names[int(raw)]:
            return names[int(raw)]
        raise ApiError(3, f"{raw} is not valid")


def json_body(request: Request) -> JsonObject:
    """A JSON request body; empty is all defaults. Field names camel or snake."""
    raw = request.get_data()
    if not raw.strip():
        return {}
    try:
        decoded = json.loads(raw)
    except ValueError as exc:
        raise ApiError(3, f"invalid JSON body: {exc}") from None
    if decoded is None:
        return {}
    if not isinstance(decoded, dict):
        raise ApiError(3, "json: cannot unmarshal non-object into the request message")
    return {_camel(key): value for key, value in decoded.items()}


def body_field(body: Mapping[str, Any], name: str, kind: type, default: Any) -> Any:
    value = body.get(name)
    if value is None:
        return default
    if kind is int and isinstance(value, str) and re.fullmatch(r"-?\d+", value):
        return int(value)  # jsonpb takes int32 as a number or a string
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise ApiError(3, f"bad value for field {name!r}: {json.dumps(value)}")
    return value


def paginate(items: list[Any], offset: int, limit: int) -> tuple[list[Any], JsonObject]:
    """api.Paginate: limit 0 means all, a negative offset counts from the end."""
    total = len(items)
    start = total + offset if offset < 0 else offset
    end = start + limit
    if limit == 0 or end > total:
        end = total
    if not 0 <= start <= total or end < start:
        raise ApiError(3, "offset out of bounds")
    return _page(items, offset, limit, start, end)


def page_info(items: list[Any], offset: int, limit: int) -> tuple[list[Any], JsonObject]:
    """The database's paging (util.sql page_info, and api_experiment.go
    runPagedBunExperimentsQuery, which repeats it): limit 0 means 100, -1 all, -2 none; an
    offset past either end gives an empty page, never an error."""
    total = len(items)
    start = total + offset if offset < 0 else offset
    if offset > total or offset < -total:
        start = total
    if limit == -2:
        end = start
    elif limit == -1:
        end = total
    elif limit == 0:
        end = min(start + 100, total)
    else:
        end = min(start + limit, total)
    return _page(items, offset, limit, start, end)


def _page(
    items: list[Any], offset: int, limit: int, start: int, end: int
) -> tuple[list[Any], JsonObject]:
    """The page, and the Pagination message that says which it is."""
    pagination = {
        "offset": offset,
        "limit": limit,
        "startIndex": start,
        "endIndex": end,
        "total": len(items),
    }
    return items[start:end], pagination


def go_duration(text: str) -> timedelta:
    """A Go duration string (``720h``, ``1h30m``) as time.ParseDuration reads it."""
    return timedelta(microseconds=parse_go_duration(text) / 1000)
