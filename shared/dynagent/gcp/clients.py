"""Google clients as the functions use them, built on first use (they import slowly)."""

from __future__ import annotations

import os
from functools import cache
from typing import Any

# Points the Compute client at a local fake (tests, the demo); unset in production.
COMPUTE_ENDPOINT_ENV = "DYNAGENT_COMPUTE_ENDPOINT"


@cache
def instances_client() -> Any:
    from google.cloud import compute_v1

    return compute_v1.InstancesClient(**_endpoint_options())


@cache
def zone_operations_client() -> Any:
    from google.cloud import compute_v1

    return compute_v1.ZoneOperationsClient(**_endpoint_options())


@cache
def images_client() -> Any:
    from google.cloud import compute_v1

    return compute_v1.ImagesClient(**_endpoint_options())


@cache
def reservations_client() -> Any:
    from google.cloud import compute_v1

    return compute_v1.ReservationsClient(**_endpoint_options())


def _endpoint_options() -> dict[str, Any]:
    endpoint = os.environ.get(COMPUTE_ENDPOINT_ENV)
    if not endpoint:
        return {}
    from google.api_core.client_options import ClientOptions
    from google.auth.credentials import AnonymousCredentials

    return {
        "transport": "rest",
        "client_options": ClientOptions(api_endpoint=endpoint),
        "credentials": AnonymousCredentials(),  # type: ignore[no-untyped-call]
    }
