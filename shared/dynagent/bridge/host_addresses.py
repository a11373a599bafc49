"""The master host's own addresses, read from its cloud's metadata service.

Determined resolves ``master_url`` aliases (``local-ipv4``... ``internal-ip``...) on the
master's host (provconfig ``Config.InitMasterAddress``). The bridge runs there, so it
reads the same metadata once at start and publishes the addresses in every snapshot
(``master_addresses``); the functions then give agents the master's real address.

Endpoints follow the clouds' SDKs: ``AWS_EC2_METADATA_SERVICE_ENDPOINT`` (botocore) and
``GCE_METADATA_HOST`` (google-auth), so a test points them at a stand-in on loopback.
"""

from __future__ import annotations

import os
import urllib.error
import urllib.request
from collections.abc import Mapping
from typing import Literal

from dynagent.core.boot.master import EC2_ALIASES

HostCloud = Literal["ec2", "gce"]
TIMEOUT = 3.0
_GCE_PATHS = {
    "internal-ip": "instance/network-interfaces/0/ip",
    "external-ip": "instance/network-interfaces/0/access-configs/0/external-ip",
}


class MetadataUnavailable(RuntimeError):
    """The metadata service did not answer: the bridge is not on that cloud's host."""


def master_host_addresses(cloud: HostCloud, env: Mapping[str, str] = os.environ) -> dict[str, str]:
    """Every alias the host's metadata answers, by alias; those it lacks are left out
    (a host without a public address has no ``public-ipv4``)."""
    if cloud == "ec2":
        return _ec2(env.get("AWS_EC2_METADATA_SERVICE_ENDPOINT", "http://169.254.169.254"))
    return _gce(env.get("GCE_METADATA_HOST", "metadata.google.internal"))


def _ec2(endpoint: str) -> dict[str, str]:
    base = endpoint.rstrip("/")
    token_request = urllib.request.Request(
        f"{base}/latest/api/token",
        method="PUT",
        headers={"X-aws-ec2-metadata-token-ttl-seconds": "60"},
    )
    token = _read(token_request, f"the EC2 metadata service at {base}")
    found = {}
    for alias in EC2_ALIASES:
        request = urllib.request.Request(
            f"{base}/latest/meta-data/{alias}", headers={"X-aws-ec2-metadata-token": token}
        )
        value = _read(request, f"the EC2 metadata service at {base}", missing_ok=True)
        if value:
            found[alias] = value
    return found


def _gce(host: str) -> dict[str, str]:
    found = {}
    for alias, path in _GCE_PATHS.items():
        request = urllib.request.Request(
            f"http://{host}/computeMetadata/v1/{path}", headers={"Metadata-Flavor": "Google"}
        )
        value = _read(request, f"the GCE metadata server at {host}", missing_ok=True)
        if value:
            found[alias] = value
    return found


def _read(request: urllib.request.Request, what: str, missing_ok: bool = False) -> str:
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT) as response:
            return str(response.read().decode().strip())
    except urllib.error.HTTPError as error:
        if missing_ok and error.code == 404:
            return ""
        raise MetadataUnavailable(f"{what} answered HTTP {error.code}") from None
    except (urllib.error.URLError, OSError) as error:
        reason = getattr(error, "reason", error)
        raise MetadataUnavailable(
            f"{what} did not answer ({reason}): run the bridge on the master's host, "
            "or write the master's address in master_url"
        ) from None
