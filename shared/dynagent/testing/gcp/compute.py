"""A local Compute Engine for the demo and the tests: the real client, a fake server on loopback.

``LocalCompute`` serves the slice of the Compute Engine API v1 that dynagent uses, over
HTTP on 127.0.0.1 (an OS-chosen port), so the real ``google-cloud-compute`` client with
its REST transport talks to it exactly as it talks to compute.googleapis.com: same
paths, same JSON, same error shapes, hence the same ``google.api_core.exceptions``.

What it serves, with the real API's semantics:

* ``instances.list`` with ``filter`` (``labels.KEY = "VALUE"``, unquoted values, ``!=``,
  ``FIELD:*``, ``AND`` and parenthesised terms, which mean AND), ``maxResults`` (default
  and maximum 500) and ``pageToken``/``nextPageToken``. A filter it does not model (OR,
  NOT, regular expressions, wildcards, ``<``...) is refused with HTTP 400, never ignored:
  a silently unfiltered list would make a test lie.
* ``instances.aggregatedList`` (``projects/P/aggregated/instances``): the same filters,
  ``maxResults`` and page tokens over every zone's instances at once (ordered by zone,
  then name), ``items`` keyed ``zones/Z``. As the API does, every page has every zone:
  one with no results on the page has, instead of ``instances``, a ``NO_RESULTS_ON_PAGE``
  warning (``There are no results for scope 'zones/Z' on this page.``, ``data`` scope).
  The zones are the fake's default zone, every zone a request or a capacity limit named
  since reset(), and every zone with instances (the API lists all of the project's).
  ``returnPartialSuccess`` is accepted (the fake has no unreachable zone), though the
  shipped discovery document and client 1.57 no longer list it; ``includeAllScopes=true``
  and ``serviceProjectNumber`` are refused as not modelled.
* Any ``REGION-x`` zone (``us-central1-a``, ``northamerica-northeast1-c``...); a region or
  a malformed name is 400 ``Invalid value for field 'zone': 'Z'. Unknown zone.``
  Instances come back with full ``zone`` and ``machineType`` URLs and
  ``scheduling.provisioningModel`` SPOT or STANDARD (a legacy ``preemptible`` VM keeps
  STANDARD with ``preemptible: true``).
* ``instances.get``, ``insert``, ``bulkInsert``, ``delete`` and ``setLabels``; every
  mutation returns a zonal Operation, and ``zoneOperations.get``/``wait`` poll it.
  ``requestId`` (a UUID, as the API demands) makes a retried mutation return the first
  operation and do nothing else. Names already taken are 409 ``alreadyExists``, missing
  instances 404 ``notFound``, a stale ``labelFingerprint`` 412 ``conditionNotMet``.
* Strictness: every request body is checked recursively against its schema in the
  compute.v1 discovery document that google-api-python-client ships (unknown fields,
  types, enums), and every query parameter against the method's. On top, the value
  rules that matter to a GPU autoscaler: RFC 1035 names, label syntax and count, zonal
  machine/accelerator type URLs, a boot disk, metadata sizes, and the scheduling rules
  the API enforces for Spot and GPU VMs. A typo in our request fails here, not in prod.

Read-only resources a project offers besides VMs (images, machine and accelerator types,
region and project quotas, networks and subnetworks) are served from ``catalog``, which
tests fill: catalog.py says how, and where it is simpler than Compute Engine.

Knobs the API has no call for: make the next inserts' operations fail (QUOTA_EXCEEDED,
ZONE_RESOURCE_POOL_EXHAUSTED, ...; a failed insert leaves no instance), hold operations
RUNNING for a number of polls (with a failing insert: an insert that fails late), set an
instance's status or creation time, preempt a Spot VM (``preempt``: deleted or TERMINATED
by its termination action, as the API shows it), and refuse every Nth
call with 429 or 503 (``fail_calls``). It records the calls it serves, as (HTTP method,
API method) pairs, the instances inserts created, and the offerings capacity refused.

Capacity: ``limit_capacity(machine_type, zone, provisioning, count)`` lets at most
``count`` more VMs of that offering (None matches any zone or model; a legacy
preemptible VM counts as SPOT) be created. Past it an insert still returns an
Operation, which ends DONE with no instance left and, by ``kind``:

* ``stockout`` (default): ``ZONE_RESOURCE_POOL_EXHAUSTED``, ``httpErrorStatusCode`` 503,
  ``The zone 'projects/P/zones/Z' does not have enough resources available to fulfill
  the request.  Try a different zone, or try again later.``
* ``stockout_with_details``: ``ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS``, 503, ``... to
  fulfill the request.  '(resource type:compute)'.`` with ``errorDetails`` (help link,
  localizedMessage, errorInfo reason ``stockout`` with vmType and zone).
* ``quota``: ``QUOTA_EXCEEDED``, 403, ``Quota 'NVIDIA_A100_GPUS' exceeded.  Limit: 0.0 in
  region R.`` (the regional GPU quota the VM draws on, PREEMPTIBLE_... for Spot, or the
  ``quota`` given), with a ``quotaInfo`` error detail.

A bulkInsert creates as many as fit if that is at least its ``minCount`` (its operation
then succeeds, ``instancesBulkInsertOperationMetadata.perLocationStatus`` counting
created and failed VMs), else none, its errors being ``VM_MIN_COUNT_NOT_REACHED``
(``Requested minimum count of N VMs could not be created.``) then the capacity error;
its status code is the capacity error's. Capacity is counted per creation (deleting a
VM gives none back) and only a request that succeeds takes any.

How the real client behaves against it (google-cloud-compute 1.57, api-core 2.44):

* ``ClientOptions(api_endpoint="http://127.0.0.1:PORT")`` is enough for plain HTTP: the
  REST transport keeps a scheme given in the host and only adds ``https://`` otherwise.
* ``InstancesClient.insert()`` returns an ``ExtendedOperation`` whose ``result()`` polls
  ``zoneOperations.get`` (not ``wait``), but through a ZoneOperationsClient the transport
  builds with the credentials alone: it ignores ``client_options`` and would poll
  compute.googleapis.com. ``instances_client()`` hands the transport a correctly pointed
  one; code of ours that waits on operations must do the same or poll a
  ZoneOperationsClient of its own. An operation that is DONE in the first response is
  never polled, which hides the problem unless operations are held RUNNING.
* A DONE operation with an error makes ``result()`` raise the exception for its
  ``httpErrorStatusCode`` (503 ServiceUnavailable for a stockout, 403 Forbidden for a
  quota), whose ``errors`` are the operation's ``error.errors`` (``code``, ``message``,
  ``error_details``) and whose ``message`` is ``httpErrorMessage`` (``SERVICE
  UNAVAILABLE``). ``insert()`` itself does not raise.
* ``aggregated_list()``'s pager yields (scope, InstancesScopedList) pairs, page by page;
  within a page the proto map does not keep the server's order.
"""

from __future__ import annotations

import base64
import binascii
import copy
import dataclasses
import functools
import hashlib
import http
import ipaddress
import itertools
import json
import re
import secrets
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta, timezone
from importlib import resources
from typing import TYPE_CHECKING, Any, Final, NamedTuple, Self

from werkzeug.exceptions import HTTPException
from werkzeug.routing import Map, Rule
from werkzeug.wrappers import Request, Response

from dynagent.testing.gcp.catalog import METHODS as CATALOG_METHODS
from dynagent.testing.gcp.catalog import ROUTES as CATALOG_ROUTES
from dynagent.testing.gcp.catalog import Catalog, Forbidden, Missing
from dynagent.testing.loopback import LOOPBACK, CallLog, LoopbackServer, Service

if TYPE_CHECKING:
    from _typeshed.wsgi import StartResponse, WSGIEnvironment

DEFAULT_PROJECT: Final = "local-project"
DEFAULT_ZONE: Final = "us-central1-a"
# The real API writes links under this root whatever endpoint was called; so do we.
API_ROOT: Final = "https://www.googleapis.com/compute/v1/"

MAX_RESULTS: Final = 500
MAX_LABELS: Final = 64
MAX_METADATA_VALUE_BYTES: Final = 256 * 1024
MAX_METADATA_TOTAL_BYTES: Final = 512 * 1024

_PATH_PREFIX: Final = "/compute/v1/projects/<project>/zones/<zone>"
# The real API stamps times in US Pacific time, with an offset: parsers must not assume Z.
_API_TZ: Final = timezone(timedelta(hours=-7))

_NAME = re.compile(r"[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?")
_NAME_RULE: Final = "Must be a match of regex '(?:[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?)'"
# ASCII only: the API also allows international lowercase letters, dynagent never uses them.
_LABEL_KEY = re.compile(r"[a-z][a-z0-9_-]{0,62}")
_LABEL_VALUE = re.compile(r"[a-z0-9_-]{0,63}")
_METADATA_KEY = re.compile(r"[a-zA-Z0-9_-]{1,128}")
_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", re.IGNORECASE)
_ZERO_UUID: Final = "00000000-0000-0000-0000-000000000000"
# REGION-x: any region (us-central1, northamerica-northeast1, ...) and any zone letter(s).
_ZONE = re.compile(r"(?P<region>[a-z]+-[a-z]+[0-9]+)-[a-z][a-z0-9]*")
_ZONAL_REF = re.compile(
    r"(?:https://(?:www|compute)\.googleapis\.com/compute/v1/)?"
    r"(?:projects/(?P<project>[^/]+)/)?zones/(?P<zone>[^/]+)/(?P<collection>\w+)/(?P<name>[^/]+)"
)
# Machine families whose GPUs come with the machine type, not guestAccelerators.
_GPU_FAMILIES: Final = ("a2-", "a3-", "a4-", "g2-", "g4-")

JsonObject = dict[str, Any]


def _utcnow() -> datetime:
    return datetime.now(UTC)


def _timestamp(when: datetime) -> str:
    """RFC 3339 with milliseconds and an offset, as the API writes them."""
    return when.astimezone(_API_TZ).isoformat(timespec="milliseconds")


# --------------------------------------------------------------------------------------
# Errors, in the API's JSON shape
# --------------------------------------------------------------------------------------

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


def _invalid(field_name: str, value: object, why: str) -> ApiError:
    """Compute's own wording for a bad value, which names the field."""
    shown = "" if value is None else value
    return ApiError(400, "invalid", f"Invalid value for field '{field_name}': '{shown}'. {why}")


def _not_found(resource: str) -> ApiError:
    return ApiError(404, "notFound", f"The resource '{resource}' was not found")


def _already_exists(resource: str) -> ApiError:
    return ApiError(409, "alreadyExists", f"The resource '{resource}' already exists")


def _unsupported(what: str) -> ApiError:
    """The request may be valid for the real API but this fake does not model it: say so
    rather than answer as if it did."""
    return ApiError(400, "badRequest", f"{what} is not supported by the local Compute fake")


# --------------------------------------------------------------------------------------
# The discovery document: which fields and parameters exist
# --------------------------------------------------------------------------------------


@functools.cache
def _discovery() -> JsonObject:
    """compute.v1 as google-api-python-client ships it (5 MB: loaded once, on first use)."""
    try:
        documents = resources.files("googleapiclient.discovery_cache") / "documents"
    except ModuleNotFoundError as missing:
        raise RuntimeError(
            "LocalCompute needs google-api-python-client for the compute.v1 discovery document"
        ) from missing
    document: JsonObject = json.loads((documents / "compute.v1.json").read_text("utf-8"))
    return document


def _schemas() -> Mapping[str, JsonObject]:
    schemas: Mapping[str, JsonObject] = _discovery()["schemas"]
    return schemas


def _method_spec(api_method: str) -> JsonObject:
    """The discovery entry of e.g. ``instances.insert``."""
    resource, method = api_method.split(".")
    spec: JsonObject = _discovery()["resources"][resource]["methods"][method]
    return spec


def _resolve(schema: Mapping[str, Any]) -> Mapping[str, Any]:
    ref = schema.get("$ref")
    return _schemas()[ref] if ref else schema


def check_body(schema_name: str, body: object, where: str = "resource") -> None:
    """Raise ApiError(400) naming the first field ``body`` has that the schema lacks, or
    whose value has the wrong JSON type or is not one of the schema's enum values."""
    _check_value(_schemas()[schema_name], body, where)


def _check_value(schema: Mapping[str, Any], value: object, where: str) -> None:
    if value is None:  # JSON null means "unset" to the API's parser
        return
    schema = _resolve(schema)
    kind = schema.get("type")
    if kind == "object":
        _check_object(schema, value, where)
    elif kind == "array":
        if not isinstance(value, list):
            raise _invalid(where, json.dumps(value), "Expected an array.")
        for index, item in enumerate(value):
            _check_value(schema.get("items", {}), item, f"{where}[{index}]")
    else:
        _check_scalar(schema, value, where)


def _check_object(schema: Mapping[str, Any], value: object, where: str) -> None:
    if not isinstance(value, dict):
        raise _invalid(where, json.dumps(value), "Expected an object.")
    properties: Mapping[str, Any] | None = schema.get("properties")
    extra: Mapping[str, Any] | None = schema.get("additionalProperties")
    for key, item in value.items():
        if properties is not None and key in properties:
            _check_value(properties[key], item, f"{where}.{key}")
        elif extra is not None:
            _check_value(extra, item, f"{where}['{key}']")
        elif properties is not None:
            raise ApiError(
                400,
                "invalid",
                f"Invalid JSON payload received. Unknown name \"{key}\" at '{where}': "
                "Cannot find field.",
            )


def _check_scalar(schema: Mapping[str, Any], value: object, where: str) -> None:
    kind, fmt = schema.get("type"), schema.get("format")
    if kind == "string" and fmt in ("int64", "uint64"):
        ok = isinstance(value, int | str) and re.fullmatch(r"-?\d+", str(value)) is not None
    elif kind == "string" and fmt == "byte":
        ok = isinstance(value, str) and _is_base64(value)
    elif kind == "string":
        ok = isinstance(value, str)
    elif kind == "integer":  # the API's JSON parser takes "5" for an int32 as well as 5
        ok = not isinstance(value, bool) and re.fullmatch(r"-?\d+", str(value)) is not None
    elif kind == "number":
        ok = isinstance(value, int | float) and not isinstance(value, bool)
    elif kind == "boolean":
        ok = isinstance(value, bool)
    else:
        ok = True  # "any"
    if not ok:
        raise _invalid(where, json.dumps(value), f"Expected a {kind} ({fmt or 'plain'}).")
    allowed: list[str] | None = schema.get("enum")
    if allowed is not None and value not in allowed:
        raise _invalid(where, value, f"Must be one of {allowed}.")


def _is_base64(text: str) -> bool:
    try:
        base64.b64decode(text, validate=True)
    except binascii.Error:
        return False
    return True


# Query parameters the API takes that the shipped discovery document (revision 20261106)
# and google-cloud-compute 1.57 no longer list, though the aggregatedList description
# still recommends returnPartialSuccess=true and older clients send it.
_EXTRA_QUERY: Final = {
    "instances.list": {"returnPartialSuccess"},
    "instances.aggregatedList": {"returnPartialSuccess"},
}


def _check_query(api_method: str, query: Mapping[str, str]) -> None:
    """Unknown query parameters are refused, as the API does, instead of ignored."""
    spec = _method_spec(api_method)["parameters"]
    known = (
        {k for k, v in spec.items() if v["location"] == "query"}
        | set(_discovery()["parameters"])
        | _EXTRA_QUERY.get(api_method, set())
    )
    for name in query:
        if name not in known:
            raise ApiError(
                400,
                "invalid",
                f'Invalid JSON payload received. Unknown name "{name}": Cannot bind query '
                f"parameter. Field '{name}' could not be found in request message.",
            )


# --------------------------------------------------------------------------------------
# Value rules the API enforces beyond the schema
# --------------------------------------------------------------------------------------


def _check_name(name: object, field_name: str) -> str:
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise _invalid(field_name, name, _NAME_RULE)
    return name


def _check_labels(labels: Mapping[str, object], field_name: str) -> None:
    if len(labels) > MAX_LABELS:
        raise _invalid(field_name, "", f"At most {MAX_LABELS} labels are allowed.")
    for key, value in labels.items():
        if not _LABEL_KEY.fullmatch(key):
            raise _invalid(
                field_name,
                "",
                f"Label key '{key}' violates format constraints. The key must start with a "
                "lowercase character, can only contain lowercase letters, numeric characters, "
                "underscores and dashes. The key can be at most 63 characters long.",
            )
        if not isinstance(value, str) or not _LABEL_VALUE.fullmatch(value):
            raise _invalid(
                field_name,
                "",
                f"Label value '{value}' violates format constraints. The value can only contain "
                "lowercase letters, numeric characters, underscores and dashes. The value can "
                "be at most 63 characters long.",
            )


def _request_id(query: Mapping[str, str]) -> str | None:
    request_id = query.get("requestId")
    if request_id is None:
        return None
    if not _UUID.fullmatch(request_id) or request_id == _ZERO_UUID:
        raise _invalid("requestId", request_id, "The request ID must be a valid non-zero UUID.")
    return request_id.lower()


def _zonal_ref(value: object, collection: str, project: str, zone: str, field_name: str) -> str:
    """A full or partial URL of a zonal resource (``zones/Z/machineTypes/T``) in the
    request's zone, as the full URL the API returns."""
    match = _ZONAL_REF.fullmatch(value) if isinstance(value, str) else None
    if match is None or match["collection"] != collection:
        raise _invalid(
            field_name, value, f"Expected a URL of the form zones/ZONE/{collection}/NAME."
        )
    if match["zone"] != zone:
        raise _invalid(field_name, value, f"The {collection} must be in zone '{zone}'.")
    owner = match["project"] or project
    return f"{API_ROOT}projects/{owner}/zones/{zone}/{collection}/{match['name']}"


def _check_disks(disks: list[JsonObject]) -> None:
    if not disks:
        raise _invalid("resource.disks", "", "At least one disk, the boot disk, is required.")
    boot = disks[0]
    params = boot.get("initializeParams") or {}
    if not (boot.get("source") or params.get("sourceImage") or params.get("sourceSnapshot")):
        raise _invalid(
            "resource.disks[0]",
            "",
            "The boot disk needs a source or initializeParams.sourceImage/sourceSnapshot.",
        )
    if any(disk.get("boot") for disk in disks[1:]):
        raise _invalid("resource.disks", "", "Only the first disk can be the boot disk.")


def _check_accelerators(body: JsonObject, project: str, zone: str) -> None:
    for index, accelerator in enumerate(body.get("guestAccelerators") or []):
        where = f"resource.guestAccelerators[{index}]"
        _zonal_ref(accelerator.get("acceleratorType"), "acceleratorTypes", project, zone, where)
        if int(accelerator.get("acceleratorCount") or 0) < 1:
            count = accelerator.get("acceleratorCount")
            raise _invalid(f"{where}.acceleratorCount", count, "Must be at least 1.")


def _is_spot(scheduling: Mapping[str, Any]) -> bool:
    return scheduling.get("provisioningModel") == "SPOT" or scheduling.get("preemptible") is True


def _has_gpus(body: JsonObject) -> bool:
    machine_type = str(body.get("machineType", "")).rsplit("/", 1)[-1]
    return bool(body.get("guestAccelerators")) or machine_type.startswith(_GPU_FAMILIES)


def _check_scheduling(body: JsonObject) -> None:
    """Spot/preemptible VMs cannot restart automatically or live-migrate, nor can GPU VMs
    live-migrate: the API refuses such requests, so must we."""
    scheduling: JsonObject = body.get("scheduling") or {}
    field_name = "resource.scheduling"
    maintenance = scheduling.get("onHostMaintenance")
    if _is_spot(scheduling):
        if scheduling.get("automaticRestart") is True:
            raise _invalid(
                f"{field_name}.automaticRestart",
                "true",
                "Spot VMs cannot be restarted automatically.",
            )
        if maintenance == "MIGRATE":
            raise _invalid(
                f"{field_name}.onHostMaintenance",
                maintenance,
                "Scheduling must have preemptible be false when OnHostMaintenance isn't TERMINATE.",
            )
    elif _has_gpus(body) and (maintenance or "MIGRATE") == "MIGRATE":
        raise _invalid(
            f"{field_name}.onHostMaintenance",
            maintenance or "MIGRATE",
            "Instances with guest accelerators do not support live migration.",
        )


def _check_metadata(metadata: JsonObject | None) -> None:
    seen: set[str] = set()
    total = 0
    for index, item in enumerate((metadata or {}).get("items") or []):
        where = f"resource.metadata.items[{index}]"
        key, value = str(item.get("key", "")), str(item.get("value") or "")
        if not _METADATA_KEY.fullmatch(key):
            raise _invalid(f"{where}.key", key, "Must be a match of regex '[a-zA-Z0-9-_]{1,128}'.")
        if key in seen:
            raise _invalid(f"{where}.key", key, "Duplicate metadata key.")
        seen.add(key)
        size = len(value.encode("utf-8"))
        if size > MAX_METADATA_VALUE_BYTES:
            raise _invalid(f"{where}.value", "...", f"Value is {size} bytes, over 256 KB.")
        total += len(key) + size
    if total > MAX_METADATA_TOTAL_BYTES:
        raise _invalid("resource.metadata", "...", f"Metadata is {total} bytes, over 512 KB.")


def check_new_instance(body: JsonObject, project: str, zone: str) -> None:
    """The rules a valid Instance body must meet on insert, beyond its schema."""
    _check_name(body.get("name"), "resource.name")
    _zonal_ref(body.get("machineType"), "machineTypes", project, zone, "resource.machineType")
    _check_labels(body.get("labels") or {}, "resource.labels")
    _check_disks(body.get("disks") or [])
    _check_accelerators(body, project, zone)
    _check_scheduling(body)
    _check_metadata(body.get("metadata"))


# --------------------------------------------------------------------------------------
# List filters: the AIP-160 subset we model
# --------------------------------------------------------------------------------------

_FILTER_TOKEN = re.compile(
    r"""\s*(?:
        (?P<paren>[()])
      | (?P<op>!=|<=|>=|!~|=|:|<|>|~)
      | (?P<quoted>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*')
      | (?P<word>[^\s()=!:<>~"']+)
    )""",
    re.VERBOSE,
)
_FIELD_PATH = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*(?:\.[A-Za-z0-9_-]+)*")


class _Token(NamedTuple):
    kind: str  # paren, op, quoted, word
    text: str


@dataclass(frozen=True)
class Comparison:
    """``field op value`` with op ``=``, ``!=`` or ``:*`` (the field is set)."""

    path: tuple[str, ...]
    op: str
    value: str

    def matches(self, instance: Mapping[str, Any]) -> bool:
        present, actual = _field_value(instance, self.path)
        if self.op == ":*":
            return present
        equal = present and actual == self.value
        return equal if self.op == "=" else not equal


def _field_value(instance: Mapping[str, Any], path: tuple[str, ...]) -> tuple[bool, str]:
    node: object = instance
    for part in path:
        if not isinstance(node, Mapping) or part not in node:
            return False, ""
        node = node[part]
    if isinstance(node, bool):
        return True, "true" if node else "false"
    return True, str(node)


def _filter_error(text: str, why: str) -> ApiError:
    return _invalid("filter", text, f"Invalid list filter expression: {why}.")


def _tokens(text: str) -> list[_Token]:
    tokens: list[_Token] = []
    position = 0
    while text[position:].strip():
        match = _FILTER_TOKEN.match(text, position)
        if match is None or match.lastgroup is None:
            raise _filter_error(text, f"unexpected character at offset {position}")
        tokens.append(_Token(match.lastgroup, match[match.lastgroup]))
        position = match.end()
    return tokens


class _FilterParser:
    """``term (AND? term)*`` where a term is ``( ... )`` or ``field op value``: every term
    must hold. OR, NOT, regular expressions and the like are refused, not guessed at."""

    def __init__(self, text: str) -> None:
        self._text = text
        self._tokens = _tokens(text)
        self._at = 0

    def parse(self) -> list[Comparison]:
        terms = self._sequence(inside_parens=False)
        if self._at < len(self._tokens):
            raise _filter_error(self._text, "unbalanced ')'")
        return terms

    def _peek(self) -> _Token | None:
        return self._tokens[self._at] if self._at < len(self._tokens) else None

    def _take(self) -> _Token:
        token = self._peek()
        if token is None:
            raise _filter_error(self._text, "the expression ends too early")
        self._at += 1
        return token

    def _sequence(self, *, inside_parens: bool) -> list[Comparison]:
        terms: list[Comparison] = []
        while (token := self._peek()) is not None and token != _Token("paren", ")"):
            if token.kind == "word" and token.text in ("OR", "NOT"):  # keywords are uppercase
                raise _unsupported(f"{token.text} in a list filter")
            if token.kind == "word" and token.text == "AND":
                self._take()
                if not terms or self._peek() in (None, _Token("paren", ")")):
                    raise _filter_error(self._text, "AND needs a term on each side")
                continue
            terms.extend(self._term())
        if not terms:
            raise _filter_error(self._text, "empty expression")
        if inside_parens and self._take() != _Token("paren", ")"):
            raise _filter_error(self._text, "missing ')'")
        return terms

    def _term(self) -> list[Comparison]:
        if self._peek() == _Token("paren", "("):
            self._take()
            return self._sequence(inside_parens=True)
        return [self._comparison()]

    def _comparison(self) -> Comparison:
        field_token = self._take()
        if field_token.kind != "word" or not _FIELD_PATH.fullmatch(field_token.text):
            raise _filter_error(self._text, f"expected a field name, got {field_token.text!r}")
        path = tuple(field_token.text.split("."))
        _check_filter_field(path)
        op = self._take()
        if op.kind == "word" and op.text in ("eq", "ne"):
            raise _unsupported("A regular-expression filter (eq/ne)")
        if op.kind != "op":
            raise _filter_error(self._text, f"expected an operator after {field_token.text!r}")
        value = self._take()
        return self._compare(path, op.text, value)

    def _compare(self, path: tuple[str, ...], op: str, value: _Token) -> Comparison:
        if op == ":" and value == _Token("word", "*"):
            return Comparison(path, ":*", "")
        if op not in ("=", "!="):
            raise _unsupported(f"The filter operator {op!r}")
        if value.kind not in ("word", "quoted"):
            raise _filter_error(self._text, f"expected a value after {op!r}")
        text = _unquote(value.text) if value.kind == "quoted" else value.text
        if "*" in text:
            raise _unsupported("A wildcard in a filter value")
        return Comparison(path, op, text)


def _unquote(quoted: str) -> str:
    return re.sub(r"\\(.)", r"\1", quoted[1:-1])


def _check_filter_field(path: tuple[str, ...]) -> None:
    """The path must name a scalar of Instance (``labels.KEY`` names a label value)."""
    schema: Mapping[str, Any] = _schemas()["Instance"]
    for index, part in enumerate(path):
        if schema.get("type") == "array":
            raise _unsupported(f"Filtering inside the repeated field {'.'.join(path[:index])!r}")
        properties = schema.get("properties") or {}
        extra = schema.get("additionalProperties")
        if part in properties:
            schema = _resolve(properties[part])
        elif extra is not None and index > 0:
            schema = _resolve(extra)
        else:
            raise _invalid("filter", ".".join(path), f"Invalid field name '{part}'.")
    if schema.get("type") in ("object", "array"):
        raise _unsupported(f"Filtering on the non-scalar field {'.'.join(path)!r}")


def parse_filter(text: str) -> list[Comparison]:
    """The comparisons that must all hold (none for an empty filter)."""
    return _FilterParser(text).parse() if text.strip() else []


def _max_results(raw: str | None) -> int:
    if raw is None:
        return MAX_RESULTS
    if not raw.isdigit():
        raise _invalid("maxResults", raw, "Must be an integer.")
    if int(raw) > MAX_RESULTS:
        raise _invalid("maxResults", raw, f"Must be less than or equal to {MAX_RESULTS}")
    return int(raw) or MAX_RESULTS  # 0, like leaving it out, means the default


def _page_token(after: str, filter_text: str) -> str:
    """Opaque to clients; a cursor (the last name served), so deletions between pages
    neither skip nor repeat instances."""
    return base64.urlsafe_b64encode(json.dumps([after, filter_text]).encode()).decode()


def _page_after(token: str | None, filter_text: str) -> str:
    if not token:
        return ""
    try:
        after, token_filter = json.loads(base64.urlsafe_b64decode(token.encode()))
    except (ValueError, binascii.Error):
        raise _invalid("pageToken", token, "Invalid page token.") from None
    if token_filter != filter_text or not isinstance(after, str):
        raise _invalid("pageToken", token, "The page token belongs to another list request.")
    return after


# --------------------------------------------------------------------------------------
# Resources as the API returns them
# --------------------------------------------------------------------------------------


def _zone_url(project: str, zone: str) -> str:
    return f"{API_ROOT}projects/{project}/zones/{zone}"


def _instance_path(project: str, zone: str, name: str) -> str:
    return f"projects/{project}/zones/{zone}/instances/{name}"


def _global_url(value: str, project: str) -> str:
    """``global/networks/default`` or ``projects/P/...`` as a full URL."""
    if value.startswith("https://"):
        return value
    return (
        f"{API_ROOT}{value}"
        if value.startswith("projects/")
        else f"{API_ROOT}projects/{project}/{value}"
    )


def _fingerprint(value: object) -> str:
    """8 bytes, base64, like the API's fingerprints; opaque to clients."""
    digest = hashlib.sha256(json.dumps(value, sort_keys=True).encode()).digest()
    return base64.b64encode(digest[:8]).decode()


def _attached_disk(disk: JsonObject, index: int, zone_url: str, instance: str) -> JsonObject:
    params: JsonObject = disk.get("initializeParams") or {}
    # initializeParams is input only: the API never returns it.
    out = {key: value for key, value in disk.items() if key != "initializeParams"}
    disk_name = params.get("diskName") or (instance if index == 0 else f"{instance}-{index}")
    out.setdefault("source", f"{zone_url}/disks/{disk_name}")
    out.setdefault("deviceName", f"persistent-disk-{index}")
    out.setdefault("diskSizeGb", str(params.get("diskSizeGb", "10")))
    out.setdefault("type", "PERSISTENT")
    out.setdefault("mode", "READ_WRITE")
    out.setdefault("interface", "SCSI")
    out.setdefault("autoDelete", False)
    out.update(kind="compute#attachedDisk", index=index, boot=index == 0)
    return out


def _scheduling(scheduling: JsonObject) -> JsonObject:
    """The defaults the API fills in; Spot VMs default to no restart, TERMINATE, STOP."""
    out = dict(scheduling)
    spot = _is_spot(scheduling)
    out.setdefault("provisioningModel", "STANDARD")
    out.setdefault("preemptible", spot)
    out.setdefault("automaticRestart", not spot)
    out.setdefault("onHostMaintenance", "TERMINATE" if spot else "MIGRATE")
    if out["provisioningModel"] == "SPOT":
        out.setdefault("instanceTerminationAction", "STOP")
    return out


def _metadata(metadata: JsonObject | None) -> JsonObject:
    items = list((metadata or {}).get("items") or [])
    out: JsonObject = {"kind": "compute#metadata", "fingerprint": _fingerprint(items)}
    if items:
        out["items"] = items
    return out


def _tags(tags: JsonObject | None) -> JsonObject:
    items = list((tags or {}).get("items") or [])
    out: JsonObject = {"fingerprint": _fingerprint(items)}
    if items:
        out["items"] = items
    return out


def _label_fingerprint(instance_id: str, labels: Mapping[str, str], version: int) -> str:
    # The API's fingerprint "changes after every request to modify or update labels",
    # even one that sets the same labels: hence the version.
    return _fingerprint([instance_id, dict(labels), version])


# --------------------------------------------------------------------------------------
# Operations
# --------------------------------------------------------------------------------------

_DEFAULT_FAILURE_STATUS: Final = {
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


def _default_failure_message(code: str, project: str, zone: str) -> str:
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


# --------------------------------------------------------------------------------------
# Capacity: how many more VMs of an offering the cloud will create
# --------------------------------------------------------------------------------------

CAPACITY_KINDS: Final = {
    "stockout": "ZONE_RESOURCE_POOL_EXHAUSTED",
    "stockout_with_details": "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS",
    "quota": "QUOTA_EXCEEDED",
}
PROVISIONING_MODELS: Final = ("SPOT", "STANDARD")

# The GPUs that come with a machine type, as the accelerator type that names them.
_FAMILY_GPUS: Final = (
    ("a2-ultragpu-", "nvidia-a100-80gb"),
    ("a2-", "nvidia-tesla-a100"),
    ("a3-megagpu-", "nvidia-h100-mega-80gb"),
    ("a3-", "nvidia-h100-80gb"),
    ("g2-", "nvidia-l4"),
)
# Accelerator types whose regional quota name does not follow NVIDIA_<TYPE>_GPUS.
_QUOTA_NAMES: Final = {
    "nvidia-h100-80gb": "NVIDIA_H100_GPUS",
    "nvidia-h100-mega-80gb": "NVIDIA_H100_MEGA_GPUS",
}


class Offering(NamedTuple):
    """What capacity is counted by: machine type name, zone, SPOT or STANDARD."""

    machine_type: str
    zone: str
    provisioning: str


def offering_of(body: Mapping[str, Any], zone: str) -> Offering:
    """The offering an Instance body asks for; a legacy preemptible VM counts as SPOT."""
    machine_type = str(body.get("machineType", "")).rsplit("/", 1)[-1]
    spot = _is_spot(body.get("scheduling") or {})
    return Offering(machine_type, zone, "SPOT" if spot else "STANDARD")


@dataclass
class CapacityLimit:
    """At most ``remaining`` more VMs matching (machine type, zone, provisioning model;
    None is any) can be created; past that, inserts fail with ``kind``'s error."""

    machine_type: str
    zone: str | None
    provisioning: str | None
    remaining: int
    kind: str
    declared: int
    quota: str | None = None
    message: str | None = None

    def matches(self, offering: Offering) -> bool:
        return (
            self.machine_type == offering.machine_type
            and self.zone in (None, offering.zone)
            and self.provisioning in (None, offering.provisioning)
        )

    def failure(self, project: str, body: Mapping[str, Any], offering: Offering) -> Failure:
        """The error an insert the limit refuses ends with, worded as the API words it."""
        code = CAPACITY_KINDS[self.kind]
        zone = offering.zone
        if self.kind == "quota":
            region = region_of(zone)
            name = self.quota or _quota_name(body, offering)
            text = self.message or (
                f"Quota '{name}' exceeded.  Limit: {float(self.declared)} in region {region}."
            )
            quota_info = {
                "metricName": f"compute.googleapis.com/{name.lower()}",
                "limitName": f"{name.replace('_', '-')}-per-project-region",
                "dimensions": {"region": region},
                "limit": float(self.declared),
            }
            return Failure(code, text, 403, ({"quotaInfo": quota_info},))
        text = self.message or _default_failure_message(code, project, zone)
        if self.kind == "stockout":
            return Failure(code, text, 503)
        unavailable = (
            f"A {offering.machine_type} VM instance is currently unavailable in the {zone} "
            "zone. Try requesting the VM in another zone. For more information, view the "
            "troubleshooting documentation."
        )
        details: tuple[JsonObject, ...] = (
            {
                "help": {
                    "links": [
                        {
                            "description": "Troubleshooting documentation",
                            "url": "https://cloud.google.com/compute/docs/resource-error",
                        }
                    ]
                }
            },
            {"localizedMessage": {"locale": "en-US", "message": unavailable}},
            {
                "errorInfo": {
                    "domain": "compute.googleapis.com",
                    "reason": "stockout",
                    "metadatas": {
                        "attachment": "",
                        "vmType": offering.machine_type,
                        "zone": zone,
                        "zonesAvailable": "",
                    },
                }
            },
        )
        return Failure(code, text, 503, details)


def _quota_name(body: Mapping[str, Any], offering: Offering) -> str:
    """The regional quota a GPU VM draws on, e.g. NVIDIA_T4_GPUS or, for Spot,
    PREEMPTIBLE_NVIDIA_T4_GPUS; CPUS for a VM without GPUs."""
    accelerators = body.get("guestAccelerators") or []
    gpu = str(accelerators[0].get("acceleratorType", "")).rsplit("/", 1)[-1] if accelerators else ""
    for prefix, family_gpu in _FAMILY_GPUS:
        if not gpu and offering.machine_type.startswith(prefix):
            gpu = family_gpu
    if gpu:
        short = gpu.removeprefix("nvidia-tesla-").removeprefix("nvidia-")
        name = _QUOTA_NAMES.get(gpu, f"NVIDIA_{short.upper().replace('-', '_')}_GPUS")
    else:
        name = "CPUS"
    return f"PREEMPTIBLE_{name}" if offering.provisioning == "SPOT" else name


# What the API's front end answers when it refuses a call before doing anything.
_CALL_FAULTS: Final = {
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
        reason, message = _CALL_FAULTS[self.status]
        return ApiError(self.status, reason, message)


@dataclass
class _Operation:
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
        self.resource.update(status="DONE", progress=100, endTime=_timestamp(_utcnow()))
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


def _operation_name() -> str:
    """Shaped like the API's: operation-<millis>-<hex>-<hex>-<hex>."""
    millis = int(time.time() * 1000)
    parts = (secrets.token_hex(7)[:13], secrets.token_hex(4), secrets.token_hex(4))
    return f"operation-{millis}-{'-'.join(parts)}"


# --------------------------------------------------------------------------------------
# The fake cloud: state and API methods, no HTTP
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ApiRequest:
    """One API call, parsed: path parameters, query and JSON body."""

    project: str
    zone: str
    path: Mapping[str, str]
    query: Mapping[str, str]
    body: Any


@dataclass
class _State:
    instances: dict[tuple[str, str, str], JsonObject] = field(default_factory=dict)
    label_versions: dict[str, int] = field(default_factory=dict)  # instance id -> version
    operations: dict[str, _Operation] = field(default_factory=dict)
    request_ids: dict[tuple[str, str], str] = field(default_factory=dict)  # -> operation
    failures: deque[Failure] = field(default_factory=deque)
    hold_polls: int = 0
    limits: list[CapacityLimit] = field(default_factory=list)
    zones: set[str] = field(default_factory=set)  # addressed since reset: aggregated scopes
    call_faults: list[CallFault] = field(default_factory=list)
    faults_served: int = 0
    created: list[str] = field(default_factory=list)  # names, in the order inserts landed
    refused: list[Offering] = field(default_factory=list)  # capacity refusals, in order
    # Images, machine and accelerator types, quotas, networks: catalog.py.
    catalog: Catalog = field(default_factory=Catalog)


class _Admission(NamedTuple):
    """How many of an insert's instances get capacity, and the error if too few do."""

    fit: int
    failure: Failure | None


class FakeCompute:
    """The fake Compute Engine. Every method expects ``lock`` to be held."""

    def __init__(self, zone: str = DEFAULT_ZONE) -> None:
        self.lock = threading.RLock()
        self.state = _State()
        self.home_zone = zone  # always a scope of aggregatedList
        self._ids = itertools.count(7_100_000_000_000_000_001)  # 19 digits, like real ids
        self._addresses = itertools.count()

    def handle(self, api_method: str, request: ApiRequest) -> JsonObject:
        handlers: Mapping[str, Callable[[ApiRequest], JsonObject]] = {
            "instances.list": self.list_instances,
            "instances.aggregatedList": self.aggregated_list,
            "instances.get": self.get_instance,
            "instances.insert": self.insert_instance,
            "instances.bulkInsert": self.bulk_insert,
            "instances.delete": self.delete_instance,
            "instances.setLabels": self.set_labels,
            "zoneOperations.get": self.poll_operation,
            "zoneOperations.wait": self.poll_operation,
        }
        if request.zone:
            self.state.zones.add(request.zone)
        if api_method in CATALOG_METHODS:
            return self.read_catalog(api_method, request)
        return handlers[api_method](request)

    def read_catalog(self, api_method: str, request: ApiRequest) -> JsonObject:
        try:
            return self.state.catalog.read(
                api_method, request.project, request.zone, dict(request.path)
            )
        except Missing as missing:
            raise ApiError(404, "notFound", str(missing)) from None
        except Forbidden as forbidden:
            raise ApiError(403, "forbidden", str(forbidden)) from None

    def new_id(self) -> str:
        return str(next(self._ids))

    def call_fault(self, api_method: str) -> ApiError | None:
        """The error a fail_calls() knob answers this call with, if any (first knob wins;
        every knob matching the method counts the call)."""
        refused = None
        for fault in self.state.call_faults:
            if fault.applies(api_method) and refused is None:
                refused = fault.error()
        if refused is not None:
            self.state.faults_served += 1
        return refused

    # -- reads --------------------------------------------------------------------------

    def list_instances(self, request: ApiRequest) -> JsonObject:
        query = request.query
        limit = _max_results(query.get("maxResults"))
        if query.get("orderBy", "name") != "name":
            raise _unsupported(f"orderBy={query['orderBy']!r}")
        filter_text = query.get("filter", "")
        terms = parse_filter(filter_text)
        after = _page_after(query.get("pageToken"), filter_text)
        matching = [
            instance
            for instance in self.in_zone(request.project, request.zone)
            if instance["name"] > after and all(term.matches(instance) for term in terms)
        ]
        collection = f"projects/{request.project}/zones/{request.zone}/instances"
        page: JsonObject = {"kind": "compute#instanceList", "id": collection}
        page["selfLink"] = f"{API_ROOT}{collection}"
        if matching:  # like the API, an empty page has no "items" at all
            page["items"] = copy.deepcopy(matching[:limit])
        if len(matching) > limit:
            page["nextPageToken"] = _page_token(matching[limit - 1]["name"], filter_text)
        return page

    def in_zone(self, project: str, zone: str) -> list[JsonObject]:
        """The zone's instances in name order, the API's default."""
        found = self.state.instances
        return [found[key] for key in sorted(found) if key[:2] == (project, zone)]

    def aggregated_list(self, request: ApiRequest) -> JsonObject:
        """Every zone's instances in one paged list: ``items`` maps ``zones/Z`` to the
        zone's instances on this page or, for a zone with none, the API's warning."""
        query = request.query
        limit = _max_results(query.get("maxResults"))
        if query.get("orderBy", "name") != "name":
            raise _unsupported(f"orderBy={query['orderBy']!r}")
        for flag in ("includeAllScopes", "returnPartialSuccess"):
            if query.get(flag, "false") not in ("true", "false"):
                raise _invalid(flag, query[flag], "Expected a boolean.")
        if query.get("includeAllScopes") == "true":
            raise _unsupported("includeAllScopes=true (regional and global scopes)")
        if "serviceProjectNumber" in query:
            raise _unsupported("serviceProjectNumber")
        filter_text = query.get("filter", "")
        terms = parse_filter(filter_text)
        after = _page_after(query.get("pageToken"), filter_text)
        cursor = tuple(after.split("/", 1)) if after else ("", "")
        found = self.state.instances
        matching = [
            found[key]
            for key in sorted(found)
            if key[0] == request.project
            and key[1:] > cursor
            and all(term.matches(found[key]) for term in terms)
        ]
        page_items = matching[:limit]
        by_zone: dict[str, list[JsonObject]] = {}
        for instance in page_items:
            by_zone.setdefault(instance["zone"].rsplit("/", 1)[-1], []).append(instance)
        scopes = self.state.zones | {self.home_zone}
        scopes |= {key[1] for key in found if key[0] == request.project}
        items: JsonObject = {}
        for zone in sorted(scopes):
            scope = f"zones/{zone}"
            if zone in by_zone:
                items[scope] = {"instances": copy.deepcopy(by_zone[zone])}
            else:
                items[scope] = {"warning": _no_results_warning(scope)}
        collection = f"projects/{request.project}/aggregated/instances"
        page: JsonObject = {"kind": "compute#instanceAggregatedList", "id": collection}
        page["items"] = items
        page["selfLink"] = f"{API_ROOT}{collection}"
        if len(matching) > limit:
            last = page_items[-1]
            last_zone = last["zone"].rsplit("/", 1)[-1]
            page["nextPageToken"] = _page_token(f"{last_zone}/{last['name']}", filter_text)
        return page

    def get_instance(self, request: ApiRequest) -> JsonObject:
        return copy.deepcopy(self.find(request.project, request.zone, request.path["instance"]))

    def find(self, project: str, zone: str, name: str) -> JsonObject:
        instance = self.state.instances.get((project, zone, name))
        if instance is None:
            raise _not_found(_instance_path(project, zone, name))
        return instance

    # -- mutations ----------------------------------------------------------------------

    def insert_instance(self, request: ApiRequest) -> JsonObject:
        for source in ("sourceInstanceTemplate", "sourceMachineImage"):
            if source in request.query:
                raise _unsupported(f"instances.insert with {source}")
        request_id = _request_id(request.query)
        replay = self._replay(request.project, request_id)
        if replay is not None:
            return replay
        body: JsonObject = request.body
        check_new_instance(body, request.project, request.zone)
        self._check_free(request.project, request.zone, [body])
        failure = self._next_failure()
        if failure is None:
            failure = self._admit(request.project, request.zone, [body], min_count=1).failure
        instance = self._create(request.project, request.zone, [body])[0]
        settle = self._settle(request, [instance], failure)
        return self._mutation(request, "insert", instance, request_id, settle, failure)

    def bulk_insert(self, request: ApiRequest) -> JsonObject:
        request_id = _request_id(request.query)
        replay = self._replay(request.project, request_id)
        if replay is not None:
            return replay
        body: JsonObject = request.body
        if body.get("sourceInstanceTemplate"):
            raise _unsupported("instances.bulkInsert with sourceInstanceTemplate")
        count, min_count = _bulk_count(body)
        template = _instance_from_properties(body.get("instanceProperties"), request.zone)
        names = self._bulk_names(body, count, request.project, request.zone)
        bodies = [{**template, "name": name} for name in names]
        for each in bodies:
            check_new_instance(each, request.project, request.zone)
        self._check_free(request.project, request.zone, bodies)
        failure = self._next_failure()
        fit = count
        if failure is None:  # a queued failure fails the whole request, as before
            fit, failure = self._admit(request.project, request.zone, bodies, min_count)
        # Those that got capacity start; on failure they are rolled back (deleted).
        created = self._create(request.project, request.zone, bodies[:fit])
        target = {"selfLink": f"{_zone_url(request.project, request.zone)}/instances"}
        settle = self._settle(request, created, failure)
        status = {
            "status": "CREATING",
            "targetVmCount": count,
            "createdVmCount": fit,
            "failedToCreateVmCount": count - fit,
            "deletedVmCount": fit if failure is not None else 0,
        }
        metadata = {"perLocationStatus": {f"zones/{request.zone}": status}}
        return self._mutation(request, "bulkInsert", target, request_id, settle, failure, metadata)

    def delete_instance(self, request: ApiRequest) -> JsonObject:
        request_id = _request_id(request.query)
        replay = self._replay(request.project, request_id)
        if replay is not None:
            return replay
        instance = self.find(request.project, request.zone, request.path["instance"])
        instance["status"] = "STOPPING"
        key = (request.project, request.zone, instance["name"])

        def remove() -> None:
            if self.state.instances.get(key) is instance:  # not already replaced or gone
                del self.state.instances[key]

        return self._mutation(request, "delete", instance, request_id, remove)

    def set_labels(self, request: ApiRequest) -> JsonObject:
        request_id = _request_id(request.query)
        replay = self._replay(request.project, request_id)
        if replay is not None:
            return replay
        instance = self.find(request.project, request.zone, request.path["instance"])
        body: JsonObject = request.body
        labels: dict[str, str] = dict(body.get("labels") or {})
        _check_labels(labels, "labels")
        if body.get("labelFingerprint") != instance["labelFingerprint"]:
            raise ApiError(
                412,
                "conditionNotMet",
                "Labels fingerprint either invalid or resource labels have changed",
            )
        return self._mutation(
            request, "setLabels", instance, request_id, lambda: self._relabel(instance, labels)
        )

    def _relabel(self, instance: JsonObject, labels: dict[str, str]) -> None:
        version = self.state.label_versions.get(instance["id"], 0) + 1
        self.state.label_versions[instance["id"]] = version
        instance["labels"] = labels
        instance["labelFingerprint"] = _label_fingerprint(instance["id"], labels, version)
        instance["fingerprint"] = _fingerprint([instance["id"], "instance", version])
        if not labels:
            del instance["labels"]  # the API leaves out an empty map

    # -- how inserts land -----------------------------------------------------------------

    def _check_free(self, project: str, zone: str, bodies: list[JsonObject]) -> None:
        """409 if any name is taken: then nothing is created."""
        for body in bodies:
            key = (project, zone, body["name"])
            if key in self.state.instances:
                raise _already_exists(_instance_path(*key))

    def _admit(
        self, project: str, zone: str, bodies: list[JsonObject], min_count: int
    ) -> _Admission:
        """Take capacity for as many of ``bodies`` (one offering) as the limits allow. If
        fewer than ``min_count`` fit, take none and return the error of the first limit
        that falls short; a bulkInsert's error then leads with VM_MIN_COUNT_NOT_REACHED."""
        offering = offering_of(bodies[0], zone)
        matching = [limit for limit in self.state.limits if limit.matches(offering)]
        fit = min([len(bodies), *(limit.remaining for limit in matching)])
        if fit >= min_count:
            for limit in matching:
                limit.remaining -= fit
            return _Admission(fit, None)
        short = next(limit for limit in matching if limit.remaining < min_count)
        self.state.refused.append(offering)
        failure = short.failure(project, bodies[0], offering)
        if len(bodies) > 1 or min_count > 1:
            leading = {
                "code": "VM_MIN_COUNT_NOT_REACHED",
                "message": f"Requested minimum count of {min_count} VMs could not be created.",
            }
            failure = dataclasses.replace(failure, leading=(leading,))
        return _Admission(fit, failure)

    def _create(self, project: str, zone: str, bodies: list[JsonObject]) -> list[JsonObject]:
        """Store PROVISIONING instances, or create none if any name is taken."""
        self._check_free(project, zone, bodies)
        created = [self._materialise(project, zone, body) for body in bodies]
        for instance in created:
            self.state.instances[(project, zone, instance["name"])] = instance
        return created

    def _materialise(self, project: str, zone: str, body: JsonObject) -> JsonObject:
        """The stored instance: what was sent plus the output fields the API adds."""
        instance_id, name, zone_url = self.new_id(), body["name"], _zone_url(project, zone)
        instance = copy.deepcopy(body)
        labels: dict[str, str] = dict(body.get("labels") or {})
        instance.update(
            kind="compute#instance",
            id=instance_id,
            creationTimestamp=_timestamp(_utcnow()),
            zone=zone_url,
            selfLink=f"{zone_url}/instances/{name}",
            status="PROVISIONING",
            machineType=_zonal_ref(body["machineType"], "machineTypes", project, zone, ""),
            labelFingerprint=_label_fingerprint(instance_id, labels, 0),
            fingerprint=_fingerprint([instance_id, "instance", 0]),
            metadata=_metadata(body.get("metadata")),
            tags=_tags(body.get("tags")),
            scheduling=_scheduling(body.get("scheduling") or {}),
            disks=[_attached_disk(d, i, zone_url, name) for i, d in enumerate(body["disks"])],
            networkInterfaces=[
                self._nic(nic, i, project)
                for i, nic in enumerate(body.get("networkInterfaces") or [])
            ],
            cpuPlatform="Unknown CPU Platform",
            canIpForward=body.get("canIpForward", False),
            deletionProtection=body.get("deletionProtection", False),
            startRestricted=False,
        )
        if not labels:
            instance.pop("labels", None)  # the API leaves out an empty map
        for accelerator in instance.get("guestAccelerators") or []:
            accelerator["acceleratorType"] = _zonal_ref(
                accelerator["acceleratorType"], "acceleratorTypes", project, zone, ""
            )
        return instance

    def _nic(self, nic: JsonObject, index: int, project: str) -> JsonObject:
        out = copy.deepcopy(nic)
        address = next(self._addresses)
        out.update(kind="compute#networkInterface", name=f"nic{index}")
        out["network"] = _global_url(nic.get("network", "global/networks/default"), project)
        if "subnetwork" in nic:
            out["subnetwork"] = _global_url(nic["subnetwork"], project)
        out.setdefault("networkIP", str(ipaddress.IPv4Address("10.128.0.2") + address))
        out.setdefault("stackType", "IPV4_ONLY")
        out["fingerprint"] = _fingerprint([out["networkIP"]])
        for access in out.get("accessConfigs") or []:
            access.update(kind="compute#accessConfig")
            access.setdefault("type", "ONE_TO_ONE_NAT")
            access.setdefault("name", "External NAT")
            access.setdefault("networkTier", "PREMIUM")
            access.setdefault("natIP", str(ipaddress.IPv4Address("34.16.0.1") + address))
        return out

    def _settle(
        self, request: ApiRequest, created: list[JsonObject], failure: Failure | None
    ) -> Callable[[], None]:
        """What an insert's completion does: start the instances or, if it failed, remove
        them, so a failed insert leaves nothing behind."""
        keys = [(request.project, request.zone, instance["name"]) for instance in created]

        def finish() -> None:
            for key, instance in zip(keys, created, strict=True):
                if self.state.instances.get(key) is not instance:
                    continue  # deleted (or replaced) meanwhile
                if failure is not None:
                    del self.state.instances[key]
                    continue
                self.state.created.append(instance["name"])
                if instance["status"] == "PROVISIONING":  # a test may have moved it on
                    instance.update(status="RUNNING", lastStartTimestamp=_timestamp(_utcnow()))

        return finish

    def _next_failure(self) -> Failure | None:
        return self.state.failures.popleft() if self.state.failures else None

    def _bulk_names(self, body: JsonObject, count: int, project: str, zone: str) -> list[str]:
        named = list(body.get("perInstanceProperties") or {})
        for name in named:
            _check_name(name, "resource.perInstanceProperties")
        if len(named) > count:
            raise _invalid("resource.count", count, "Fewer than the perInstanceProperties names.")
        pattern = body.get("namePattern")
        if len(named) < count and not pattern:
            raise _invalid("resource.namePattern", "", "Needed to name the instances to create.")
        # Generated numbers also continue after the names this request itself gives.
        taken = [instance["name"] for instance in self.in_zone(project, zone)] + named
        return named + _pattern_names(pattern or "", count - len(named), taken)

    # -- operations ---------------------------------------------------------------------

    def _replay(self, project: str, request_id: str | None) -> JsonObject | None:
        """The operation a request with this requestId already started, if any: the retry
        then does nothing else, whatever its body."""
        name = self.state.request_ids.get((project, request_id)) if request_id else None
        return copy.deepcopy(self.state.operations[name].resource) if name else None

    def _mutation(
        self,
        request: ApiRequest,
        operation_type: str,
        target: JsonObject,
        request_id: str | None,
        on_done: Callable[[], None],
        failure: Failure | None = None,
        bulk_metadata: JsonObject | None = None,
    ) -> JsonObject:
        """Start the operation that reports a mutation; it completes now unless held."""
        name, now = _operation_name(), _timestamp(_utcnow())
        zone_url = _zone_url(request.project, request.zone)
        resource: JsonObject = {
            "kind": "compute#operation",
            "id": self.new_id(),
            "name": name,
            "zone": zone_url,
            "operationType": operation_type,
            "targetLink": target["selfLink"],
            "status": "RUNNING",
            "user": "local-compute@localhost",
            "progress": 0,
            "insertTime": now,
            "startTime": now,
            "selfLink": f"{zone_url}/operations/{name}",
        }
        if "id" in target:
            resource["targetId"] = target["id"]
        if bulk_metadata is not None:
            resource["instancesBulkInsertOperationMetadata"] = bulk_metadata
        if request_id is not None:
            resource["clientOperationId"] = request_id
            self.state.request_ids[(request.project, request_id)] = name
        operation = _Operation(resource, self.state.hold_polls, on_done, failure)
        self.state.operations[name] = operation
        return self._after_poll(operation, counts=False)

    def _after_poll(self, operation: _Operation, *, counts: bool) -> JsonObject:
        """The operation as a response shows it. A held one uses up a poll (the response
        that started it is not a poll) and completes once it has none left."""
        if operation.polls_left > 0 and counts:
            operation.polls_left -= 1
        elif operation.polls_left == 0:
            operation.complete()
        return copy.deepcopy(operation.resource)

    def poll_operation(self, request: ApiRequest) -> JsonObject:
        """``get`` and ``wait`` alike: a held operation stays RUNNING for its polls (for
        ``wait``, as if its two-minute deadline passed), then completes."""
        name = request.path["operation"]
        operation = self.state.operations.get(name)
        if operation is None or operation.resource["zone"] != _zone_url(
            request.project, request.zone
        ):
            raise _not_found(f"projects/{request.project}/zones/{request.zone}/operations/{name}")
        return self._after_poll(operation, counts=True)


def _bulk_count(body: JsonObject) -> tuple[int, int]:
    """``count`` and ``minCount`` (which defaults to count)."""
    count = int(body.get("count") or 0)
    if count < 1:
        raise _invalid("resource.count", body.get("count"), "Must be at least 1.")
    min_count = int(body.get("minCount") or count)
    if not 1 <= min_count <= count:
        raise _invalid("resource.minCount", body.get("minCount"), "Must be between 1 and count.")
    return count, min_count


def _no_results_warning(scope: str) -> JsonObject:
    """What aggregatedList puts in place of a scope's list when it has none on the page."""
    return {
        "code": "NO_RESULTS_ON_PAGE",
        "message": f"There are no results for scope '{scope}' on this page.",
        "data": [{"key": "scope", "value": scope}],
    }


def _instance_from_properties(properties: JsonObject | None, zone: str) -> JsonObject:
    """bulkInsert's InstanceProperties as an Instance body (without a name)."""
    if not properties:
        raise _invalid("resource.instanceProperties", "", "Required.")
    instance_fields = _schemas()["Instance"]["properties"]
    body = {k: copy.deepcopy(v) for k, v in properties.items() if k in instance_fields}
    # Here the API takes bare type names, and fails on URLs (INTERNAL_ERROR, says the doc).
    machine_type = str(properties.get("machineType", ""))
    if not machine_type or "/" in machine_type:
        raise _invalid("resource.instanceProperties.machineType", machine_type, "Expected a name.")
    body["machineType"] = f"zones/{zone}/machineTypes/{machine_type}"
    for accelerator in body.get("guestAccelerators") or []:
        accelerator_type = str(accelerator.get("acceleratorType", ""))
        accelerator["acceleratorType"] = f"zones/{zone}/acceleratorTypes/{accelerator_type}"
    return body


def _pattern_names(pattern: str, count: int, taken: Iterable[str]) -> list[str]:
    """``inst-####``: numbers continue after the biggest one an existing name uses."""
    if count == 0:
        return []
    match = re.fullmatch(r"([^#]*)(#{1,18})([^#]*)", pattern)
    if match is None:
        raise _invalid("resource.namePattern", pattern, "Needs one run of 1 to 18 '#'.")
    prefix, hashes, suffix = match.groups()
    width = len(hashes)
    existing = re.compile(re.escape(prefix) + rf"(\d{{{width}}})" + re.escape(suffix))
    used = [int(m[1]) for name in taken if (m := existing.fullmatch(name))]
    start = max(used, default=0) + 1
    if start + count - 1 >= 10**width:
        raise _invalid("resource.namePattern", pattern, "Not enough numbers left.")
    return [f"{prefix}{number:0{width}d}{suffix}" for number in range(start, start + count)]


# --------------------------------------------------------------------------------------
# HTTP: routes, parsing, responses, the calls served
# --------------------------------------------------------------------------------------

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
            f"{_PATH_PREFIX}/operations/<operation>", methods=["GET"], endpoint="zoneOperations.get"
        ),
        Rule(
            f"{_PATH_PREFIX}/operations/<operation>/wait",
            methods=["POST"],
            endpoint="zoneOperations.wait",
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
    schema = _method_spec(api_method).get("request")
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
    _check_query(api_method, query)
    body = _read_body(api_method, request)
    path = {key: str(value) for key, value in args.items() if key not in ("project", "zone")}
    zone = _check_zone(str(args["zone"])) if "zone" in args else ""
    return ApiRequest(str(args["project"]), zone, path, query, body)


def _check_zone(zone: str) -> str:
    """Any ``REGION-x`` zone is served; a region or a typo is refused as the API does."""
    if not _ZONE.fullmatch(zone):
        raise _invalid("zone", zone, "Unknown zone.")
    return zone


def region_of(zone: str) -> str:
    """``us-central1`` for ``us-central1-a``."""
    match = _ZONE.fullmatch(zone)
    if match is None:
        raise ValueError(f"{zone!r} is not a zone name (REGION-x, e.g. us-central1-a)")
    return match["region"]


class _ComputeApp:
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


def poll_operations_with(instances_client: Any, zone_operations_client: Any) -> None:
    """Make the ExtendedOperations of ``instances_client`` poll through
    ``zone_operations_client``. The transport otherwise builds its own operations client
    from the credentials alone, ignoring ``client_options``, and polls
    compute.googleapis.com whatever endpoint the instances client uses."""
    services = getattr(instances_client.transport, "_extended_operations_services", None)
    if not isinstance(services, dict):
        raise RuntimeError(
            "google-cloud-compute changed how operations are polled: cannot point them at "
            "the local Compute"
        )
    services["zone_operations"] = zone_operations_client


# --------------------------------------------------------------------------------------
# LocalCompute
# --------------------------------------------------------------------------------------


class LocalCompute(Service):
    """The fake Compute Engine API on 127.0.0.1, an OS-chosen port.

    Use it as a context manager, or call start() and stop(). It sets nothing in
    ``os.environ``; ``instances_client()`` and ``zone_operations_client()`` build the real
    clients pointed at it. ``project`` and ``zone`` are the defaults of the helpers below;
    the API itself serves any project and zone. See the module docstring for what it
    models and how the client behaves against it.
    """

    def __init__(self, project: str = DEFAULT_PROJECT, zone: str = DEFAULT_ZONE) -> None:
        self._project = project
        self._zone = zone
        region_of(zone)  # a zone name, not a region
        self._compute = FakeCompute(zone)
        self._calls = CallLog[ApiCall]()
        self._server: LoopbackServer | None = None

    # -- life cycle -----------------------------------------------------------------

    def start(self) -> Self:
        if self._server is not None:
            raise RuntimeError("this LocalCompute is already running")
        _discovery()  # fail here, not on the first request, if the document is missing
        self._server = LoopbackServer(_ComputeApp(self._compute, self._calls), "local-compute")
        return self

    def stop(self) -> None:
        """Stop serving, close the listening socket, join the thread. Safe to repeat."""
        server, self._server = self._server, None
        if server is not None:
            server.close()

    @property
    def running(self) -> bool:
        return self._server is not None

    # -- where it is ----------------------------------------------------------------

    @property
    def project(self) -> str:
        return self._project

    @property
    def zone(self) -> str:
        return self._zone

    @property
    def address(self) -> tuple[str, int]:
        """The (host, port) the listening socket is bound to, as the OS reports it."""
        if self._server is None:
            raise RuntimeError("LocalCompute is not running")
        return self._server.address

    @property
    def port(self) -> int:
        return self.address[1]

    @property
    def endpoint(self) -> str:
        return f"http://{LOOPBACK}:{self.port}"

    # -- clients --------------------------------------------------------------------

    def client_options(self) -> Any:
        """``ClientOptions`` for any compute_v1 client: the REST transport keeps the
        ``http://`` of the endpoint (it adds ``https://`` only to a bare host)."""
        from google.api_core.client_options import ClientOptions

        return ClientOptions(api_endpoint=self.endpoint)

    def zone_operations_client(self) -> Any:
        """A real ``compute_v1.ZoneOperationsClient`` (REST, anonymous) on this server."""
        return self._client("ZoneOperationsClient")

    def instances_client(self) -> Any:
        """A real ``compute_v1.InstancesClient`` (REST, anonymous) on this server, whose
        operations' ``result()`` polls this server too (see poll_operations_with)."""
        client = self._client("InstancesClient")
        poll_operations_with(client, self.zone_operations_client())
        return client

    def _client(self, class_name: str) -> Any:
        from google.auth.credentials import AnonymousCredentials
        from google.cloud import compute_v1

        # No credentials to find or refresh: the fake checks none, and tests need no account.
        credentials = AnonymousCredentials()  # type: ignore[no-untyped-call]
        client_class = getattr(compute_v1, class_name)
        return client_class(
            transport="rest", client_options=self.client_options(), credentials=credentials
        )

    # -- state ----------------------------------------------------------------------

    def reset(self) -> None:
        """Forget every instance and operation, and turn the knobs back off."""
        with self._compute.lock:
            self._compute.state = _State()

    @property
    def catalog(self) -> Catalog:
        """Images, machine and accelerator types, quotas and networks, to arrange
        (catalog.py); reset() empties it."""
        return self._compute.state.catalog

    def instance(self, name: str, zone: str | None = None) -> JsonObject:
        """The instance as ``instances.get`` returns it (a copy); KeyError if there is none."""
        with self._compute.lock:
            return copy.deepcopy(self._stored(name, zone))

    def instances(self) -> list[JsonObject]:
        """Every instance, in every project and zone, ordered by project, zone and name."""
        with self._compute.lock:
            found = self._compute.state.instances
            return [copy.deepcopy(found[key]) for key in sorted(found)]

    def operation(self, name: str) -> JsonObject:
        """An operation as it stands, without counting as a poll; KeyError if unknown."""
        with self._compute.lock:
            return copy.deepcopy(self._compute.state.operations[name].resource)

    def set_status(self, name: str, status: str, zone: str | None = None) -> None:
        """Move an instance to any status the API has, e.g. TERMINATED for a preempted
        Spot VM, or STAGING for one still starting."""
        allowed: list[str] = _schemas()["Instance"]["properties"]["status"]["enum"]
        if status not in allowed:
            raise ValueError(f"{status!r} is not an instance status; one of {allowed}")
        with self._compute.lock:
            self._stored(name, zone)["status"] = status

    def preempt(self, name: str, zone: str | None = None) -> bool:
        """Compute Engine takes a Spot or preemptible VM's capacity back, as the API then
        shows it: with ``scheduling.instanceTerminationAction`` DELETE the VM is gone (True
        is returned); otherwise (STOP, the default) it is TERMINATED with a
        ``lastStopTimestamp`` of now. A standard VM is never preempted: ValueError."""
        with self._compute.lock:
            instance = self._stored(name, zone)
            scheduling = instance.get("scheduling") or {}
            if not _is_spot(scheduling):
                raise ValueError(f"{name} is neither Spot nor preemptible: it is never preempted")
            if scheduling.get("instanceTerminationAction") == "DELETE":
                del self._compute.state.instances[(self._project, zone or self._zone, name)]
                return True
            instance["status"] = "TERMINATED"
            instance["lastStopTimestamp"] = _timestamp(_utcnow())
            return False

    def set_creation_time(self, name: str, when: datetime, zone: str | None = None) -> None:
        """Age an instance: reconciles decide with an injected clock, so tests move the
        instance's ``creationTimestamp`` instead (``when`` timezone-aware)."""
        if when.tzinfo is None:
            raise ValueError("when must be timezone-aware")
        with self._compute.lock:
            self._stored(name, zone)["creationTimestamp"] = _timestamp(when)

    def _stored(self, name: str, zone: str | None) -> JsonObject:
        key = (self._project, zone or self._zone, name)
        instance = self._compute.state.instances.get(key)
        if instance is None:
            raise KeyError(f"no instance {_instance_path(*key)} in the local Compute")
        return instance

    # -- knobs ----------------------------------------------------------------------

    def fail_next_inserts(
        self,
        count: int = 1,
        code: str = "ZONE_RESOURCE_POOL_EXHAUSTED",
        message: str | None = None,
        http_status: int | None = None,
    ) -> None:
        """The operations of the next ``count`` inserts (a bulkInsert counts as one) end
        DONE with ``error.errors[0].code == code`` and create nothing. ``http_status``
        defaults to the API's: 503 for a stockout, 403 for a quota, 400 otherwise."""
        if count < 0:
            raise ValueError("count must be >= 0")
        status = http_status or _DEFAULT_FAILURE_STATUS.get(code, 400)
        text = message or _default_failure_message(code, self._project, self._zone)
        with self._compute.lock:
            self._compute.state.failures.extend([Failure(code, text, status)] * count)

    def limit_capacity(
        self,
        machine_type: str,
        zone: str | None = None,
        provisioning: str | None = None,
        count: int = 0,
        *,
        kind: str = "stockout",
        quota: str | None = None,
        message: str | None = None,
    ) -> None:
        """From now on at most ``count`` more VMs of ``machine_type`` (a bare name, e.g.
        ``a2-highgpu-1g``) in ``zone`` with ``provisioning`` model ``"SPOT"`` (a legacy
        preemptible VM counts as SPOT) or ``"STANDARD"`` can be created; None matches any.

        An insert past the limit still returns an operation, which ends DONE with the
        error of ``kind`` and leaves no instance: ``"stockout"`` is
        ZONE_RESOURCE_POOL_EXHAUSTED (503), ``"stockout_with_details"``
        ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS (503, with ``errorDetails``),
        ``"quota"`` QUOTA_EXCEEDED (403) naming ``quota`` (by default the regional GPU
        quota the VM draws on, e.g. NVIDIA_A100_GPUS). ``message`` overrides the wording.
        A bulkInsert creates as many as fit if that is at least its ``minCount``, else
        none. Capacity is counted per creation: deleting a VM does not give it back.
        Limits add up (an insert must fit them all) until clear_capacity_limits() or
        reset(); fail_next_inserts() failures come first and take no capacity."""
        if count < 0:
            raise ValueError("count must be >= 0")
        if kind not in CAPACITY_KINDS:
            raise ValueError(f"kind must be one of {sorted(CAPACITY_KINDS)}, not {kind!r}")
        if provisioning not in (None, *PROVISIONING_MODELS):
            raise ValueError(f"provisioning must be SPOT, STANDARD or None, not {provisioning!r}")
        if not machine_type or "/" in machine_type:
            raise ValueError(f"machine_type must be a bare name, not {machine_type!r}")
        if zone is not None:
            region_of(zone)
        limit = CapacityLimit(
            machine_type, zone, provisioning, count, kind, count, quota=quota, message=message
        )
        with self._compute.lock:
            self._compute.state.limits.append(limit)
            if zone is not None:
                self._compute.state.zones.add(zone)

    def fail_calls(
        self,
        status: int,
        every: int = 1,
        methods: Iterable[str] | None = None,
        count: int | None = None,
    ) -> None:
        """Refuse every ``every``-th call of ``methods`` (API methods such as
        ``instances.insert``; None is any) with HTTP ``status``: 429 ``rateLimitExceeded``
        (the project's API rate quota) or 503 ``backendError`` (the API's front end
        briefly down), ``count`` times (None: until reset()). A refused call does
        nothing, as the real front end's refusals do; ``faults_served()`` counts them.

        The API has no call for this; reliability tests need it because both answers
        come from the real API on any method, and the client retries only some of them
        (503 on reads), so the code above must cope with the rest."""
        if status not in _CALL_FAULTS:
            raise ValueError(f"status must be one of {sorted(_CALL_FAULTS)}, not {status}")
        if every < 1:
            raise ValueError("every must be >= 1")
        if count is not None and count < 0:
            raise ValueError("count must be >= 0 or None")
        chosen = None if methods is None else frozenset(methods)
        with self._compute.lock:
            self._compute.state.call_faults.append(CallFault(status, every, chosen, count))

    def faults_served(self) -> int:
        """How many calls fail_calls() knobs refused since reset()."""
        with self._compute.lock:
            return self._compute.state.faults_served

    def created(self) -> list[str]:
        """Names of the instances inserts created (their operation succeeded) since
        reset(), in order; one deleted before its insert completed is not counted. Tests
        count launches by it: the calls log also holds refused and replayed inserts."""
        with self._compute.lock:
            return list(self._compute.state.created)

    def capacity_refusals(self) -> list[Offering]:
        """The offering of each insert or bulkInsert a capacity limit refused since
        reset(), in order: a test counts the calls per offering by it."""
        with self._compute.lock:
            return list(self._compute.state.refused)

    def clear_capacity_limits(self) -> None:
        """Forget every capacity limit: VMs of any offering can be created again."""
        with self._compute.lock:
            self._compute.state.limits.clear()

    def hold_operations(self, polls: int) -> None:
        """Operations started from now on stay RUNNING (their effect not yet landed, a new
        instance PROVISIONING) for their next ``polls`` get/wait calls, then complete.
        0 turns it off; reset() too."""
        if polls < 0:
            raise ValueError("polls must be >= 0")
        with self._compute.lock:
            self._compute.state.hold_polls = polls

    def finish_operations(self) -> None:
        """Complete every operation still RUNNING, as the cloud would without being polled."""
        with self._compute.lock:
            for operation in self._compute.state.operations.values():
                operation.complete()

    # -- calls served -----------------------------------------------------------------

    def calls(self) -> list[ApiCall]:
        """(HTTP method, API method) of each request served since clear_calls(), in order."""
        return self._calls.snapshot()

    def call_names(self) -> list[str]:
        """Just the API methods, e.g. ``["instances.insert", "zoneOperations.get"]``."""
        return [call.operation for call in self._calls.snapshot()]

    def clear_calls(self) -> None:
        self._calls.clear()
