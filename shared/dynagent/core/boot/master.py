"""The master's address an agent dials, read from a pool's ``master_url``.

Determined reads ``master_url`` on the master's own host (provconfig ``Config``
``InitMasterAddress``): the scheme defaults to http and the port to 8080, and a host
of ``local-ipv4``, ``public-ipv4``, ``local-hostname`` or ``public-hostname`` (EC2), or
``internal-ip`` or ``external-ip`` (GCE), or none at all, names the master's own address,
read from its host's metadata. dynagent's functions do not run on the master's host:
``dynagent bridge`` does, and publishes those addresses in each snapshot
(``master_addresses``), so an alias resolves to what the master's host said.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

DEFAULT_PORT = 8080
# The aliases each cloud's metadata answers, and which one an empty host means there.
EC2_ALIASES = ("local-ipv4", "public-ipv4", "local-hostname", "public-hostname")
GCE_ALIASES = ("internal-ip", "external-ip")
ALIASES = frozenset((*EC2_ALIASES, *GCE_ALIASES))
_PRIVATE_ALIASES = ("local-ipv4", "internal-ip")


class MasterUrlError(ValueError):
    """The master's address cannot be known here; the message says what to write."""


@dataclass(frozen=True)
class MasterAddress:
    """Where the agent dials: ``host`` may still be an alias (or empty) until resolved."""

    scheme: str
    host: str
    port: int

    @property
    def tls(self) -> bool:
        return self.scheme == "https"

    @property
    def needs_resolving(self) -> bool:
        return self.host == "" or self.host in ALIASES

    def resolved(self, addresses: Mapping[str, str] | None) -> MasterAddress:
        """This address with an alias replaced by the master host's own, as published by
        the bridge; MasterUrlError when nobody published it."""
        if not self.needs_resolving:
            return self
        known = addresses or {}
        names = (self.host,) if self.host else _PRIVATE_ALIASES
        for name in names:
            if known.get(name):
                return MasterAddress(self.scheme, known[name], self.port)
        said = f"names {self.host!r}" if self.host else "has no host"
        raise MasterUrlError(
            f"master_url {said}: the master's own address, which Determined reads from the "
            "master host's metadata. Run `dynagent bridge --master-host ec2` (or gce) on "
            "the master's host so snapshots carry it, or write the address agents reach the "
            f"master at, like http://10.0.0.5:{self.port}"
        )


def master_address(master_url: str) -> MasterAddress:
    """Scheme, host and port from ``scheme://host[:port]``, with Determined's defaults."""
    text = master_url.strip()
    parts = urlsplit(text if "://" in text or not text else f"http://{text}")
    try:
        port = parts.port
    except ValueError:
        raise MasterUrlError(f"master_url {master_url!r}: the port is not a number") from None
    return MasterAddress(parts.scheme or "http", parts.hostname or "", port or DEFAULT_PORT)
