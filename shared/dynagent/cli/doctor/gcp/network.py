"""A GCP pool's network: the network exists, and its subnetwork, if named, is in the
pool's region and on that network."""

from __future__ import annotations

import re

from google.api_core import exceptions as google_errors

from dynagent.cli.doctor.findings import Finding, fail, ok
from dynagent.core.config import Pool

from . import shape
from .apis import GcpApis

_NETWORK = re.compile(
    r"(?:.*/)?(?:projects/(?P<project>[^/]+)/)?(?:global/networks/)?(?P<name>[^/]+)"
)
_SUBNETWORK = re.compile(
    r"(?:.*/)?(?:projects/(?P<project>[^/]+)/)?regions/(?P<region>[^/]+)/subnetworks/(?P<name>[^/]+)"
)


def network(pool: Pool, apis: GcpApis) -> Finding:
    p = shape.provider(pool)
    interface = p.network_interface
    what = f"{shape.label(pool)}: network {interface.network}" + (
        f", subnetwork {interface.subnetwork}" if interface.subnetwork else ""
    )
    net = _NETWORK.fullmatch(shape.relative(interface.network))
    if net is None:
        fix = "write global/networks/NAME (or projects/P/global/networks/NAME)"
        return fail("gcp.network", what, "not a network path", fix)
    project = net["project"] or p.project
    try:
        found = apis.compute("NetworksClient").get(project=project, network=net["name"])
    except google_errors.NotFound:
        return fail(
            "gcp.network",
            what,
            f"project {project} has no network {net['name']}",
            "name an existing network (gcloud compute networks list) in network_interface",
        )
    if not interface.subnetwork:
        if found.auto_create_subnetworks:
            return ok("gcp.network", what, "auto mode: a subnetwork in every region")
        return fail(
            "gcp.network",
            what,
            f"{net['name']} is a custom-mode network: a VM needs a subnetwork of it",
            f"set network_interface.subnetwork to regions/{shape.region(pool)}/subnetworks/NAME",
        )
    return _subnetwork(pool, apis, what, project, net["name"])


def _subnetwork(pool: Pool, apis: GcpApis, what: str, project: str, network_name: str) -> Finding:
    p = shape.provider(pool)
    region = shape.region(pool)
    sub = _SUBNETWORK.fullmatch(shape.relative(p.network_interface.subnetwork))
    fix = f"name a subnetwork of {network_name} in {region} (gcloud compute networks subnets list)"
    if sub is None:
        return fail("gcp.network", what, "not a subnetwork path (regions/R/subnetworks/S)", fix)
    if sub["region"] != region:
        return fail(
            "gcp.network", what, f"the subnetwork is in {sub['region']}, the pool in {region}", fix
        )
    try:
        found = apis.compute("SubnetworksClient").get(
            project=sub["project"] or project, region=region, subnetwork=sub["name"]
        )
    except google_errors.NotFound:
        return fail("gcp.network", what, f"{region} has no subnetwork {sub['name']}", fix)
    on = found.network.rsplit("/", 1)[-1]
    if on != network_name:
        return fail(
            "gcp.network", what, f"the subnetwork is on network {on}, not {network_name}", fix
        )
    return ok("gcp.network", what, f"{found.ip_cidr_range} in {region}")
