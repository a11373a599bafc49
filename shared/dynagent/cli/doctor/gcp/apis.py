"""The Google APIs the GCP checks call: as the caller, or as a service account.

Compute Engine and Pub/Sub through their client libraries; IAM, IAM Credentials and
Resource Manager, which dynagent has no client library for, over REST with google-auth's
``AuthorizedSession``. An endpoint given replaces Google's host (a local server in tests).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

SCOPES = ("https://www.googleapis.com/auth/cloud-platform",)
_HOSTS = {
    "iam": "https://iam.googleapis.com",
    "iamcredentials": "https://iamcredentials.googleapis.com",
    "cloudresourcemanager": "https://cloudresourcemanager.googleapis.com",
}


@dataclass
class GcpApis:
    credentials: Any  # the caller's google.auth credentials
    compute_endpoint: str | None = None
    pubsub_endpoint: str | None = None
    # One base URL standing for IAM, IAM Credentials and Resource Manager.
    iam_endpoint: str | None = None
    _clients: dict[str, Any] = field(default_factory=dict)

    def compute(self, client_class: str) -> Any:
        """A compute_v1 client (``ImagesClient``, ...), made once."""
        if client_class not in self._clients:
            from google.cloud import compute_v1

            options: dict[str, Any] = {"credentials": self.credentials}
            if self.compute_endpoint:
                from google.api_core.client_options import ClientOptions

                options.update(
                    transport="rest",
                    client_options=ClientOptions(api_endpoint=self.compute_endpoint),
                )
            self._clients[client_class] = getattr(compute_v1, client_class)(**options)
        return self._clients[client_class]

    def topics(self) -> Any:
        """A Pub/Sub PublisherClient, made once."""
        if "topics" not in self._clients:
            from google.cloud import pubsub_v1  # type: ignore[attr-defined]

            options: dict[str, Any] = {"credentials": self.credentials}
            if self.pubsub_endpoint:
                from google.api_core.client_options import ClientOptions

                options.update(
                    transport="rest",
                    client_options=ClientOptions(api_endpoint=self.pubsub_endpoint),
                )
            self._clients["topics"] = pubsub_v1.PublisherClient(**options)
        return self._clients["topics"]

    def url(self, api: str, path: str) -> str:
        return (self.iam_endpoint or _HOSTS[api]) + path

    def session_as(self, email: str) -> Any:
        """An ``AuthorizedSession`` acting as service account ``email``: its first request
        raises google.auth's RefreshError if the caller may not (Token Creator)."""
        from google.auth import impersonated_credentials
        from google.auth.transport.requests import AuthorizedSession

        acting = impersonated_credentials.Credentials(  # type: ignore[no-untyped-call]
            source_credentials=self.credentials,
            target_principal=email,
            target_scopes=list(SCOPES),
            lifetime=600,
            iam_endpoint_override=self.url(
                "iamcredentials", f"/v1/projects/-/serviceAccounts/{email}:generateAccessToken"
            ),
        )
        return AuthorizedSession(acting)  # type: ignore[no-untyped-call]


def message(error: Any) -> str:
    """A Google API error's own message, without the method and URL api-core puts first."""
    details = error.errors[0] if getattr(error, "errors", None) else None
    said = details.get("message") if isinstance(details, dict) else None
    return str(said or error.message)
