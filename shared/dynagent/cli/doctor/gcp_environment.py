"""The GCP checks with the caller's application default credentials, and the endpoints
the functions honour in local runs (``DYNAGENT_COMPUTE_ENDPOINT``,
``DYNAGENT_PUBSUB_ENDPOINT``) plus ``DYNAGENT_GCP_IAM_ENDPOINT`` for IAM."""

from __future__ import annotations

import os
from collections.abc import Sequence

from dynagent.core.config import Pool
from dynagent.gcp.clients import COMPUTE_ENDPOINT_ENV
from dynagent.gcp.status import PUBSUB_ENDPOINT_ENV

from .findings import Finding
from .gcp import GcpApis, check
from .gcp.apis import SCOPES

IAM_ENDPOINT_ENV = "DYNAGENT_GCP_IAM_ENDPOINT"


def check_gcp(pools: Sequence[Pool], project: str | None, name: str) -> list[Finding]:
    import google.auth

    credentials, _ = google.auth.default(scopes=list(SCOPES))
    apis = GcpApis(
        credentials,
        compute_endpoint=os.environ.get(COMPUTE_ENDPOINT_ENV) or None,
        pubsub_endpoint=os.environ.get(PUBSUB_ENDPOINT_ENV) or None,
        iam_endpoint=os.environ.get(IAM_ENDPOINT_ENV) or None,
    )
    return check(pools, apis, project, name)
