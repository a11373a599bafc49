"""The deployed functions: their service account may do what they do to Compute Engine
in each pool's project, and act as the agents' service accounts; their topics exist.

``testIamPermissions`` answers for whoever calls it, so the permissions are tested as
the functions' account itself: the caller acts as it (IAM Credentials), which takes
roles/iam.serviceAccountTokenCreator on it; without that they cannot be checked.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from google.api_core import exceptions as google_errors
from google.auth.exceptions import RefreshError

from dynagent.cli.doctor.findings import Finding, fail, ok, unknown
from dynagent.core.config import Pool

from . import shape
from .apis import GcpApis

# What the functions call and what instances.insert checks for the fields they set:
# infra/gcp/deploy.sh's BASE_PERMISSIONS, which it grants (role NAME_compute).
PERMISSIONS = (
    "compute.instances.list",
    "compute.instances.get",
    "compute.instances.create",
    "compute.instances.delete",
    "compute.instances.stop",
    "compute.instances.start",
    "compute.instances.setLabels",
    "compute.instances.setMetadata",
    "compute.disks.create",
    "compute.images.useReadOnly",
    "compute.images.get",
    "compute.subnetworks.use",
    "compute.zoneOperations.get",
)
ACT_AS = "iam.serviceAccounts.actAs"
# The deployment's topics (deploy.sh): snapshots in, the sweep's schedule, set-aside
# messages, and the drain notices the bridge reads.
TOPICS = ("snapshots", "sweep", "dead-letters", "drain-notices")


def function_account(project: str, name: str) -> str:
    """deploy.sh's account for both functions: NAME-fn@PROJECT.iam.gserviceaccount.com."""
    return f"{name}-fn@{project}.iam.gserviceaccount.com"


def needed(pools: Sequence[Pool]) -> tuple[str, ...]:
    """The permissions these pools need, as deploy.sh's role_permissions adds them."""
    extra = []
    providers = [shape.provider(p) for p in pools]
    if any(p.service_account.email for p in providers):
        extra.append("compute.instances.setServiceAccount")
    if any(p.network_tags for p in providers):
        extra.append("compute.instances.setTags")
    if any(p.network_interface.external_ip for p in providers):
        extra.append("compute.subnetworks.useExternalIp")
    if any(p.reservations for p in providers):
        extra.append("compute.reservations.get")
    return (*PERMISSIONS, *extra)


def _tested(session: Any, url: str, permissions: Sequence[str]) -> set[str]:
    answer = session.post(url, json={"permissions": list(permissions)})
    if answer.status_code != 200:
        raise google_errors.from_http_response(answer)  # type: ignore[no-untyped-call]
    return set(answer.json().get("permissions", []))


def permissions(pools: Sequence[Pool], apis: GcpApis, account: str) -> list[Finding]:
    """One finding per pool project."""
    with apis.session_as(account) as session:
        findings = []
        for project in sorted({shape.provider(p).project for p in pools}):
            mine = [p for p in pools if shape.provider(p).project == project]
            what = f"functions' account {account}: Compute Engine permissions in {project}"
            try:
                finding = _project_permissions(apis, session, project, needed(mine), what)
            except RefreshError as error:
                return [_cannot_act("gcp.permissions", account, what, error)]
            findings.append(finding)
        return findings


def _project_permissions(
    apis: GcpApis, session: Any, project: str, wanted: Sequence[str], what: str
) -> Finding:
    url = apis.url("cloudresourcemanager", f"/v1/projects/{project}:testIamPermissions")
    held = _tested(session, url, wanted)
    missing = [p for p in wanted if p not in held]
    if missing:
        return fail(
            "gcp.permissions",
            what,
            "lacks " + ", ".join(missing),
            f"run infra/gcp/deploy.sh again with this config: it grants them in {project} "
            "(the custom role NAME_compute)",
        )
    return ok("gcp.permissions", what, f"all {len(wanted)} it uses")


def act_as(pools: Sequence[Pool], apis: GcpApis, account: str) -> list[Finding]:
    """A pool whose VMs run as a service account: the functions must act as it."""
    agents = sorted({e for p in pools if (e := shape.provider(p).service_account.email)})
    if not agents:
        return []
    with apis.session_as(account) as session:
        findings = []
        for agent in agents:
            what = f"functions' account {account} may act as the agents' {agent}"
            url = apis.url("iam", f"/v1/projects/-/serviceAccounts/{agent}:testIamPermissions")
            try:
                held = _tested(session, url, [ACT_AS])
            except RefreshError as error:
                return [_cannot_act("gcp.act_as", account, what, error)]
            findings.append(_act_as(account, agent, what, ACT_AS in held))
        return findings


def _act_as(account: str, agent: str, what: str, held: bool) -> Finding:
    if held:
        return ok("gcp.act_as", what)
    return fail(
        "gcp.act_as",
        what,
        f"no {ACT_AS}: every launch of a VM running as {agent} is refused",
        f"gcloud iam service-accounts add-iam-policy-binding {agent} "
        f"--member=serviceAccount:{account} --role=roles/iam.serviceAccountUser",
    )


def _cannot_act(check: str, account: str, what: str, error: RefreshError) -> Finding:
    return unknown(
        check,
        what,
        f"cannot act as {account} to test it: {error.args[0] if error.args else error}",
        f"grant yourself roles/iam.serviceAccountTokenCreator on {account} (gcloud iam "
        f"service-accounts add-iam-policy-binding {account} --member=user:YOU "
        "--role=roles/iam.serviceAccountTokenCreator)",
    )


def topics(apis: GcpApis, project: str, name: str) -> list[Finding]:
    findings = []
    for topic in TOPICS:
        path = f"projects/{project}/topics/{name}-{topic}"
        what = f"topic {path}"
        try:
            apis.topics().get_topic(topic=path)
        except google_errors.NotFound:
            findings.append(
                fail(
                    "gcp.topic",
                    what,
                    "no such topic",
                    f"deploy: infra/gcp/deploy.sh --project {project} --name {name}",
                )
            )
            continue
        findings.append(ok("gcp.topic", what))
    return findings
