"""The GCP checks: each pool's image, machines, quotas and network, then the deployed
functions' service account and topics. Read-only."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from google.api_core import exceptions as google_errors
from google.auth.exceptions import RefreshError, TransportError
from requests.exceptions import ConnectionError

from dynagent.cli.doctor.findings import Finding, unknown
from dynagent.core.config import Pool

from . import access, machines, network, quotas, reservations, shape
from .apis import GcpApis, message

__all__ = ["GcpApis", "check"]


def check(pools: Sequence[Pool], apis: GcpApis, project: str | None, name: str) -> list[Finding]:
    findings = [finding for pool in pools for finding in _pool(pool, apis)]
    if project is None:
        return [
            *findings,
            unknown(
                "gcp.deployment",
                "the functions' service account and topics",
                "not checked",
                "give the deployment's project (and --name if not dynagent): --project P",
            ),
        ]
    account = access.function_account(project, name)
    what = f"functions' account {account}"
    return [
        *findings,
        *guarded("gcp.permissions", what, lambda: access.permissions(pools, apis, account)),
        *guarded("gcp.act_as", what, lambda: access.act_as(pools, apis, account)),
        *guarded("gcp.topic", f"topics of {name}", lambda: access.topics(apis, project, name)),
    ]


def _pool(pool: Pool, apis: GcpApis) -> list[Finding]:
    label = shape.label(pool)
    return [
        *guarded("gcp.image", f"{label}: boot image", lambda: [machines.image(pool, apis)]),
        *guarded(
            "gcp.machine_type", f"{label}: machines", lambda: machines.machine_types(pool, apis)
        ),
        *guarded("gcp.quota", f"{label}: GPU quotas", lambda: quotas.gpu_quotas(pool, apis)),
        *guarded("gcp.network", f"{label}: network", lambda: [network.network(pool, apis)]),
        *guarded(
            "gcp.reservation",
            f"{label}: reservations",
            lambda: reservations.reservations(pool, apis),
        ),
    ]


def guarded(check: str, what: str, run: Callable[[], list[Finding]]) -> list[Finding]:
    """The check's findings, or one unknown finding when Google would not answer it."""
    try:
        return run()
    except google_errors.GoogleAPICallError as error:
        fix = "let whoever runs doctor read it" if error.code == 403 else ""
        return [unknown(check, what, f"{error.code}: {message(error)}", fix)]
    except (RefreshError, TransportError, ConnectionError, google_errors.RetryError):
        raise  # the caller's credentials or network: nothing else can be checked either
    except Exception as error:  # a bug of ours: one line, never a traceback
        return [unknown(check, what, f"doctor could not check this: {error!r}", "report it")]
