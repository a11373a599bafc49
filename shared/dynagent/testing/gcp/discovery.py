"""The compute.v1 discovery document: which fields and parameters exist.

Every request body the local Compute takes is checked recursively against its schema in
the document that google-api-python-client ships (unknown fields, types, enums), and
every query parameter against the method's, so a typo in our request fails here, not in
prod.
"""

from __future__ import annotations

import base64
import binascii
import functools
import json
import re
from collections.abc import Mapping
from importlib import resources
from typing import Any, Final

from dynagent.testing.gcp.errors import ApiError, JsonObject, invalid


@functools.cache
def discovery_document() -> JsonObject:
    """compute.v1 as google-api-python-client ships it (5 MB: loaded once, on first use)."""
    try:
        documents = resources.files("googleapiclient.discovery_cache") / "documents"
    except ModuleNotFoundError as missing:
        raise RuntimeError(
            "LocalCompute needs google-api-python-client for the compute.v1 discovery document"
        ) from missing
    document: JsonObject = json.loads((documents / "compute.v1.json").read_text("utf-8"))
    return document


def schemas() -> Mapping[str, JsonObject]:
    found: Mapping[str, JsonObject] = discovery_document()["schemas"]
    return found


def method_spec(api_method: str) -> JsonObject:
    """The discovery entry of e.g. ``instances.insert``."""
    resource, method = api_method.split(".")
    spec: JsonObject = discovery_document()["resources"][resource]["methods"][method]
    return spec


def resolve(schema: Mapping[str, Any]) -> Mapping[str, Any]:
    ref = schema.get("$ref")
    return schemas()[ref] if ref else schema


def check_body(schema_name: str, body: object, where: str = "resource") -> None:
    """Raise ApiError(400) naming the first field ``body`` has that the schema lacks, or
    whose value has the wrong JSON type or is not one of the schema's enum values."""
    _check_value(schemas()[schema_name], body, where)


def _check_value(schema: Mapping[str, Any], value: object, where: str) -> None:
    if value is None:  # JSON null means "unset" to the API's parser
        return
    schema = resolve(schema)
    kind = schema.get("type")
    if kind == "object":
        _check_object(schema, value, where)
    elif kind == "array":
        if not isinstance(value, list):
            raise invalid(where, json.dumps(value), "Expected an array.")
        for index, item in enumerate(value):
            _check_value(schema.get("items", {}), item, f"{where}[{index}]")
    else:
        _check_scalar(schema, value, where)


def _check_object(schema: Mapping[str, Any], value: object, where: str) -> None:
    if not isinstance(value, dict):
        raise invalid(where, json.dumps(value), "Expected an object.")
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
        raise invalid(where, json.dumps(value), f"Expected a {kind} ({fmt or 'plain'}).")
    allowed: list[str] | None = schema.get("enum")
    if allowed is not None and value not in allowed:
        raise invalid(where, value, f"Must be one of {allowed}.")


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


def check_query(api_method: str, query: Mapping[str, str]) -> None:
    """Unknown query parameters are refused, as the API does, instead of ignored."""
    spec = method_spec(api_method)["parameters"]
    known = (
        {k for k, v in spec.items() if v["location"] == "query"}
        | set(discovery_document()["parameters"])
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
