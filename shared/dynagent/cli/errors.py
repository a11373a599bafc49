"""What ``dynagent`` prints instead of a traceback: an error a user can fix, in a line or two.

Each message names what was wrong (the file, field, queue, topic or endpoint) and what
to do about it. An error this module does not know is a bug, and keeps its traceback.

The clouds' SDKs are never imported here: an SDK that is not loaded cannot have raised,
so its error classes are looked up in ``sys.modules`` (a bridge host may have boto3 and
no Google clients, or the reverse).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

# How the command exits: input it was given is wrong (a file, a field, an option), or
# the cloud could not be reached or refused.
EXIT_USAGE = 2
EXIT_FAILURE = 1

AWS_CREDENTIALS_HELP = (
    "set AWS_PROFILE, or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (`aws configure` "
    "writes a profile); on EC2, give the instance a role"
)
GOOGLE_CREDENTIALS_HELP = (
    "run `gcloud auth application-default login`, or set GOOGLE_APPLICATION_CREDENTIALS "
    "to a service account key file"
)
_QUEUE_MISSING = ("AWS.SimpleQueueService.NonExistentQueue", "QueueDoesNotExist")
_AWS_BAD_CREDENTIALS = (
    "AuthFailure", "InvalidClientTokenId", "UnrecognizedClientException",
    "SignatureDoesNotMatch", "ExpiredToken", "ExpiredTokenException", "InvalidAccessKeyId",
)  # fmt: skip
_AWS_NOT_ALLOWED = ("AccessDenied", "AccessDeniedException", "UnauthorizedOperation")


class CommandError(Exception):
    """A failure already put in words for the user: its message is what they read."""


def explain(error: BaseException) -> tuple[str, int] | None:
    """The message and exit code for an error a user can fix; None for anything else."""
    cloud = cloud_error(error)
    if cloud is not None:
        return cloud, EXIT_FAILURE
    if isinstance(error, CommandError):
        return str(error), EXIT_FAILURE
    if isinstance(error, KeyError):  # its str() would quote the message
        return str(error.args[0]), EXIT_USAGE
    if isinstance(error, OSError) and error.filename is not None:
        return f"{error.filename}: {error.strerror or error}", EXIT_USAGE
    if isinstance(error, ValueError):  # ConfigError, InvalidSnapshot, a bad option value
        return str(error), EXIT_USAGE
    return None


@contextmanager
def reaching(what: str) -> Iterator[None]:
    """Turn a cloud's error inside into a CommandError that starts with ``what``: the
    queue, topic or pool the command was reaching."""
    try:
        yield
    except Exception as error:
        message = cloud_error(error)
        if message is None:
            raise
        raise CommandError(f"{what}: {message}") from None


def cloud_error(error: BaseException) -> str | None:
    """What an AWS or Google Cloud SDK error means to the user, or None."""
    return _aws(error) or _google_auth(error) or _google_api(error) or _unreachable(error)


def _aws(error: BaseException) -> str | None:
    botocore = sys.modules.get("botocore.exceptions")
    if botocore is None:
        return None
    if isinstance(error, botocore.NoCredentialsError):
        return f"no AWS credentials found: {AWS_CREDENTIALS_HELP}"
    unusable = (
        botocore.PartialCredentialsError,
        botocore.CredentialRetrievalError,
        botocore.ProfileNotFound,
    )
    if isinstance(error, unusable):
        return f"AWS credentials could not be used ({error}): {AWS_CREDENTIALS_HELP}"
    if isinstance(error, botocore.NoRegionError):
        return "no AWS region: give --region, or set AWS_DEFAULT_REGION"
    if isinstance(error, botocore.ConnectionError | botocore.HTTPClientError):
        endpoint = getattr(error, "kwargs", {}).get("endpoint_url", "the AWS endpoint")
        return (
            f"cannot reach {endpoint}: check the network, the region, and AWS_ENDPOINT_URL "
            "if it is set"
        )
    if isinstance(error, botocore.ClientError):
        return _aws_refusal(error)
    return None


def _aws_refusal(error: Any) -> str:
    details = error.response.get("Error", {})
    code, said = details.get("Code", "?"), details.get("Message") or ""
    if code in _QUEUE_MISSING:
        return (
            "no such queue: check the URL (the stack's SnapshotQueueUrl output) and that "
            "the credentials are for its account"
        )
    if code in _AWS_BAD_CREDENTIALS:
        return f"AWS refused the credentials ({code}: {said}): {AWS_CREDENTIALS_HELP}"
    if code in _AWS_NOT_ALLOWED:
        return (
            f"not allowed to {error.operation_name} ({code}): the credentials' IAM policy "
            "must allow it"
        )
    return f"{error.operation_name} failed: {code}: {said}"


def _google_auth(error: BaseException) -> str | None:
    auth = sys.modules.get("google.auth.exceptions")
    if auth is None:
        return None
    if isinstance(error, auth.DefaultCredentialsError):
        return f"no Google Cloud credentials found: {GOOGLE_CREDENTIALS_HELP}"
    if isinstance(error, auth.RefreshError | auth.TransportError):
        return f"Google Cloud credentials could not be used ({error}): {GOOGLE_CREDENTIALS_HELP}"
    return None


def _google_api(error: BaseException) -> str | None:
    api = sys.modules.get("google.api_core.exceptions")
    if api is None:
        return None
    said = getattr(error, "message", None) or str(error)
    if isinstance(error, api.NotFound):
        return f"does not exist ({said}): check its name and project"
    if isinstance(error, api.Unauthenticated):
        return f"Google Cloud refused the credentials ({said}): {GOOGLE_CREDENTIALS_HELP}"
    if isinstance(error, api.PermissionDenied | api.Forbidden):
        return f"permission denied ({said}): the account needs a role that allows it"
    if isinstance(error, api.ServiceUnavailable | api.DeadlineExceeded | api.RetryError):
        return f"cannot reach Google Cloud ({said}): check the network"
    if isinstance(error, api.GoogleAPICallError):
        return f"Google Cloud refused: {error.code} {said}"
    return None


def _unreachable(error: BaseException) -> str | None:
    """A connection the Google clients' REST transport (requests) could not make."""
    requests = sys.modules.get("requests.exceptions")
    if requests is None or not isinstance(error, requests.ConnectionError):
        return None
    request = getattr(error, "request", None)
    url = getattr(request, "url", None) or "the endpoint"
    host = url.split("/")[2] if "://" in url else url
    return f"cannot reach {host}: check the network, and its endpoint setting if one is set"
