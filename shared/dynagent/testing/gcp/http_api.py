"""The local Compute's HTTP side: routes, request parsing and checks, JSON responses.

A WSGI app: it routes a request to its API method (the discovery document's name, which
the query and body checks use), records the call, parses and checks the request, then
lets the fake answer, in the API's JSON and error shapes.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, Final, NamedTuple

from werkzeug.exceptions import HTTPException
from werkzeug.routing import Map, Rule
from werkzeug.wrappers import Request, Response

from dynagent.testing.gcp.catalog import ROUTES as CATALOG_ROUTES
from dynagent.testing.gcp.discovery import check_body, check_query, method_spec
from dynagent.testing.gcp.errors import ApiError, JsonObject
from dynagent.testing.gcp.fake_compute import ApiRequest, FakeCompute
from dynagent.testing.gcp.value_rules import check_zone
from dynagent.testing.loopback import CallLog

if TYPE_CHECKING:
    from _typeshed.wsgi import StartResponse, WSGIEnvironment

_PATH_PREFIX: Final = "/compute/v1/projects/<project>/zones/<zone>"


# Endpoints are the discovery document's method names, which the query and body checks use.
_ROUTES: Final = Map(
    [
        Rule(f"{_PATH_PREFIX}/instances", methods=["GET"], endpoint="instances.list"),
        Rule(
            "/compute/v1/projects/<project>/aggregated/instances",
            methods=["GET"],
            endpoint="instances.aggregatedList",
        ),
        Rule(f"{_PATH_PREFIX}/instances", methods=["POST"], endpoint="instances.insert"),
        Rule(
            f"{_PATH_PREFIX}/instances/bulkInsert",
            methods=["POST"],
            endpoint="instances.bulkInsert",
        ),
        Rule(f"{_PATH_PREFIX}/instances/<instance>", methods=["GET"], endpoint="instances.get"),
        Rule(
            f"{_PATH_PREFIX}/instances/<instance>", methods=["DELETE"], endpoint="instances.delete"
        ),
        Rule(
            f"{_PATH_PREFIX}/instances/<instance>/setLabels",
            methods=["POST"],
            endpoint="instances.setLabels",
        ),
        Rule(
            f"{_PATH_PREFIX}/instances/<instance>/stop", methods=["POST"], endpoint="instances.stop"
        ),
        Rule(
            f"{_PATH_PREFIX}/instances/<instance>/start",
            methods=["POST"],
            endpoint="instances.start",
        ),
        Rule(
            f"{_PATH_PREFIX}/operations/<operation>", methods=["GET"], endpoint="zoneOperations.get"
        ),
        Rule(
            f"{_PATH_PREFIX}/operations/<operation>/wait",
            methods=["POST"],
            endpoint="zoneOperations.wait",
        ),
        Rule(f"{_PATH_PREFIX}/reservations", methods=["GET"], endpoint="reservations.list"),
        Rule(
            f"{_PATH_PREFIX}/reservations/<reservation>",
            methods=["GET"],
            endpoint="reservations.get",
        ),
        Rule(
            "/compute/v1/projects/<project>/aggregated/reservations",
            methods=["GET"],
            endpoint="reservations.aggregatedList",
        ),
        *(
            Rule(f"/compute/v1/{path}", methods=["GET"], endpoint=method)
            for path, method in CATALOG_ROUTES
        ),
    ],
    strict_slashes=False,
    merge_slashes=False,
)


class ApiCall(NamedTuple):
    """One request served: the HTTP method and the API method (``instances.insert``), or
    ``unknown`` for a path the fake does not serve."""

    method: str
    operation: str


def _json_response(code: int, payload: JsonObject) -> Response:
    return Response(
        json.dumps(payload), status=code, content_type="application/json; charset=UTF-8"
    )


def _read_body(api_method: str, request: Request) -> Any:
    """The JSON body, checked against the method's request schema (None if it has none)."""
    schema = method_spec(api_method).get("request")
    if schema is None:
        return None
    raw = request.get_data()
    if not raw.strip():
        raise ApiError(400, "required", "Required field 'resource' not specified")
    try:
        body = json.loads(raw)
    except ValueError as bad:
        raise ApiError(400, "parseError", f"Invalid JSON payload received. {bad}") from None
    check_body(schema["$ref"], body)
    return body


def _parse(api_method: str, args: Mapping[str, Any], request: Request) -> ApiRequest:
    query = {key: request.args[key] for key in request.args}
    check_query(api_method, query)
    body = _read_body(api_method, request)
    path = {key: str(value) for key, value in args.items() if key not in ("project", "zone")}
    zone = check_zone(str(args["zone"])) if "zone" in args else ""
    return ApiRequest(str(args["project"]), zone, path, query, body)


class ComputeApp:
    """The WSGI app: route, record, parse and check, then let the fake answer."""

    def __init__(self, compute: FakeCompute, log: CallLog[ApiCall]) -> None:
        self._compute = compute
        self._log = log

    def __call__(self, environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        return self._respond(Request(environ))(environ, start_response)

    def _respond(self, request: Request) -> Response:
        try:
            api_method, args = _ROUTES.bind("localhost").match(request.path, method=request.method)
        except HTTPException as unrouted:
            self._log.record(ApiCall(request.method, "unknown"))
            code = unrouted.code or 404
            message = f"{request.method} {request.path} is not served by the local Compute fake"
            return _json_response(code, ApiError(code, "notFound", message).body())
        self._log.record(ApiCall(request.method, str(api_method)))
        with self._compute.lock:
            fault = self._compute.call_fault(str(api_method))
        if fault is not None:
            return _json_response(fault.code, fault.body())
        try:
            parsed = _parse(str(api_method), args, request)
            with self._compute.lock:
                payload = self._compute.handle(str(api_method), parsed)
        except ApiError as refused:
            return _json_response(refused.code, refused.body())
        except Exception as bug:  # a fault of the fake: answer in the API's shape, loudly
            fault = ApiError(500, "backendError", f"local Compute fake: {bug!r}")
            return _json_response(500, fault.body())
        return _json_response(200, payload)
